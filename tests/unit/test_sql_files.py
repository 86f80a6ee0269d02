"""``binlogd sql`` on the corpus, in process: ranges, GTIDs, filters, flashback order, file sequences, errors.

Positions and GTIDs are those of the corpus files (a header walk: ``binlogd dump``; MANIFEST.md lists
their events); values are those the MANIFEST's sources assert (vector.binlog's rows).
mysql-enum-string-set.000001 holds five GTID transactions of 93e95066-…:1-5: an ALTER USER (157), a
CREATE TABLE (493), then an INSERT (791, rows event at 1077), an UPDATE (1560) and a DELETE (2659) of
one row.
"""

from __future__ import annotations

import re

import pytest

from binlogd.cli import main

ENUM_SET = "rust_mysql_common/mysql-enum-string-set.000001"
UUID = "93e95066-a2f4-11ec-9b69-9657f0ae95e2"


def sql(capsysbinary, *args) -> tuple[int, str, str]:
    code = main(["sql", *map(str, args)])
    out, err = capsysbinary.readouterr()
    return code, out.decode("utf-8", "surrogateescape"), err.decode()


def groups(text: str) -> list[str]:
    """The position in the ``-- [flashback of ]FILE:POS …`` header of each transaction written."""
    return [m.group(1) for line in text.splitlines() if (m := re.match(r"-- (?:flashback of )?\S+:(\d+)", line))]


def test_transactions_with_their_gtids(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, "--keep-gtids", corpus / ENUM_SET)
    assert code == 0, err
    for n in range(1, 6):
        assert f"SET @@SESSION.GTID_NEXT='{UUID}:{n}';" in out
    assert out.count("SET @@SESSION.GTID_NEXT='AUTOMATIC';") == 5
    insert = out.split(f"GTID_NEXT='{UUID}:3';\n", 1)[1].split("SET @@SESSION.GTID_NEXT='AUTOMATIC';")[0]
    assert insert.startswith("BEGIN;\n") and insert.rstrip().endswith("COMMIT;")
    assert "INSERT INTO `mysql`.`t` (`f1`,`f2`,`f3`,`f4`,`f5`) VALUES (" in insert and ",'var1','one,three'," in insert


def test_mariadb_gtids_kept_as_session_variables(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, "--keep-gtids", corpus / "rust_mysql_common/mariadb-bin.000001")
    assert code == 0, err
    assert "SET @@session.gtid_domain_id=0, @@session.server_id=1, @@session.gtid_seq_no=1;\nBEGIN;" in out
    assert "@@session.gtid_seq_no=2;" in out


@pytest.mark.parametrize("gtids, expected", [(f"{UUID}:3-4", ["791", "1560"]), (f"{UUID}:1,{UUID}:5", ["157", "2659"]),
                                             ("0-1-1-100", [])])
def test_include_gtids(corpus, capsysbinary, gtids, expected):
    code, out, err = sql(capsysbinary, "--include-gtids", gtids, corpus / ENUM_SET)
    assert code == 0, err
    assert groups(out) == expected


def test_range_stopping_inside_a_transaction_leaves_it_out(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, "--start-position", 1077, "--stop-position", 2945, corpus / ENUM_SET)
    assert code == 0
    assert groups(out) == ["791", "1560"]
    assert f"{corpus / ENUM_SET}:791: the range starts inside this transaction (it ends at 1560); " \
           "moved to its start, 791" in err
    assert f"{corpus / ENUM_SET}:2659: the range stops inside this transaction (it ends at 3331); it is left out" in err


def test_flashback_is_newest_first_and_refuses_ddl(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, "--flashback", corpus / ENUM_SET)
    assert code == 1 and out == ""
    assert err.startswith(f"binlogd sql: {corpus / ENUM_SET}:236: QUERY: the statement \"ALTER USER 'root'@")
    assert err.endswith("cannot be inverted (DDL or statement-based change); nothing was written (--skip-unsafe "
                        "leaves such events out)\n") and err.count("\n") == 1
    code, out, err = sql(capsysbinary, "--flashback", "--start-position", 791, corpus / ENUM_SET)
    assert code == 0, err
    assert groups(out) == ["2659", "1560", "791"]
    statements = [line.split()[0] for line in out.splitlines() if line.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert statements == ["INSERT", "UPDATE", "DELETE"]
    assert "UPDATE `mysql`.`t` SET `f1`='0123456789" in out and "WHERE `f1`<=>'field1' COLLATE utf8mb4_bin" in out


def test_filters(corpus, capsysbinary):
    code, out, _ = sql(capsysbinary, "--table", "mysql.t", corpus / ENUM_SET)
    assert code == 0 and groups(out) == ["791", "1560", "2659"]
    code, out, _ = sql(capsysbinary, "--table", "mysql.other", corpus / ENUM_SET)
    assert code == 0 and groups(out) == []
    code, out, _ = sql(capsysbinary, "--database", "mysql", corpus / ENUM_SET)
    assert code == 0 and groups(out) == ["493", "791", "1560", "2659"]  # ALTER USER: no db


def test_vector_values_with_the_servers_constructor(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, corpus / "rust_mysql_common/vector.binlog")
    assert code == 0, err
    assert ("INSERT INTO `dtb`.`foo` (`id`,`vector_column`) VALUES (1,STRING_TO_VECTOR('[1.1,2.2,3.3]')),"
            "(2,STRING_TO_VECTOR('[1.0,-1.0,0.0]'));") in out


def test_partial_json_update_and_transaction_payload(corpus, capsysbinary):
    code, out, err = sql(capsysbinary, corpus / "rust_mysql_common/json.binlog.000001")
    assert code == 0, err
    assert "SET `json_col`=JSON_REPLACE(`json_col`, '$.age', CAST('26' AS JSON)),`name`='Joe',`age`=26 WHERE `id`=1;" \
        in out
    code, out, err = sql(capsysbinary, corpus / "mysql-binlog-connector-rust/mysql-bin.000057")
    assert code == 1  # the first payload's table was created in the file (named by its DDL), the second's was not
    assert "BEGIN;" in out and "INSERT INTO `a`.`b` (`id`) VALUES (1);\nCOMMIT;" in out
    assert err.endswith(":730: `a`.`test_table_3` has no column names in the binlog (it was written with "
                        "binlog_row_metadata other than FULL) and no schema history names them, so no SQL for its "
                        "rows can be sure to be right\n")


def test_file_sequences(corpus, capsysbinary):
    ybinlogp = corpus / "ybinlogp"
    code, out, err = sql(capsysbinary, ybinlogp / "mysql-bin.default-path", ybinlogp / "mysql-bin.delayed-event")
    assert code == 1 and groups(out) == []
    assert err == (f"binlogd sql: {ybinlogp / 'mysql-bin.default-path'} rotates to mysql-bin.000008, but the next "
                   f"file given is {ybinlogp / 'mysql-bin.delayed-event'}: mysql-bin.000008 is missing or the files "
                   "are out of order\n")
    stopped = corpus / "rust_mysql_common/binlog_transaction_with_GTID.000001"  # ends with STOP
    code, _, err = sql(capsysbinary, stopped, corpus / "rust_mysql_common/bug16266.000001")
    assert code == 1 and "ends without a ROTATE and bug16266.000001 is not its next number" in err


def test_bad_input_and_usage(corpus, capsysbinary, tmp_path):
    truncated = corpus / "rust_mysql_common/binlog_truncated_event.000001"
    code, _, err = sql(capsysbinary, truncated)
    assert code == 1 and err.startswith(f"binlogd sql: {truncated}: ") and "offset 4" in err
    code, _, err = sql(capsysbinary, tmp_path / "nope")
    assert code == 1 and err == f"binlogd sql: {tmp_path / 'nope'}: No such file or directory\n"
    code, _, err = sql(capsysbinary, "--flashback", "--keep-gtids", corpus / ENUM_SET)
    assert code == 2 and "--keep-gtids cannot be used with --flashback" in err
    code, _, err = sql(capsysbinary, "--skip-unsafe", corpus / ENUM_SET)
    assert code == 2 and "--skip-unsafe applies to --flashback only" in err
    for bad in (["--include-gtids", "1-2"], ["--table", "nodot"]):
        with pytest.raises(SystemExit) as exc:
            main(["sql", *bad, str(corpus / ENUM_SET)])
        assert exc.value.code == 2


_START = """import gc, sys
from binlogd.cli import main
sys.argv = ["binlogd", "sql", *sys.argv[1:]]
code = main()
print(code, "orjson" in sys.modules, gc.get_freeze_count() > 0, gc.isenabled(), file=sys.stderr)
"""


@pytest.mark.parametrize(("name", "orjson"), [(ENUM_SET, "False"), ("rust_mysql_common/json.binlog.000001", "True")])
def test_start_up_leaves_out_orjson_and_freezes_its_imports(corpus, name, orjson):
    """``binlogd sql`` imports orjson only for a value that needs it (a partial JSON update's, here); as the whole
    process, it freezes what its imports made (gc.freeze) and leaves the collector on."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _START, str(corpus / name)], capture_output=True, text=True, timeout=60)
    assert run.stderr.splitlines()[-1] == f"0 {orjson} True True", run.stderr
    assert "COMMIT;" in run.stdout
