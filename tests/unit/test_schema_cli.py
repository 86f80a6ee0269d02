"""``binlogd dump`` following DDL and ``binlogd schema build`` on the real corpus; their bad-input errors.

The corpus files come from servers that log no column names (MySQL 5.5, Percona 5.7): every name printed
here comes from the DDL the file holds, or the seed. Expected values are the MANIFEST's and the statements'
own (a file's CREATE TABLE text), never binlogd's output.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from binlogd.cli import main
from binlogd.library.schema import read_history


def run_cli(*args: str) -> tuple[int, list[dict], str]:
    out, err = io.BytesIO(), io.StringIO()
    wrapper = io.TextIOWrapper(out, encoding="utf-8")
    with contextlib.redirect_stdout(wrapper), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as exc:   # argparse usage errors
            status = exc.code
    wrapper.flush()
    lines = out.getvalue().decode().splitlines()
    return status, [json.loads(line) for line in lines if line.startswith("{")], err.getvalue()


def rows_of(objects: list[dict], table: str) -> list[dict]:
    return [row for ev in objects if ev.get("table") == table and "rows" in ev for row in ev["rows"]]


def test_dump_names_a_percona_57_table_from_its_create_table(corpus):
    # MANIFEST: CREATE TABLE foo(id BIGINT AUTO_INCREMENT PRIMARY KEY, val_decimal DECIMAL(10, 5) NOT NULL,
    # comment VARCHAR(255) NOT NULL); its rows event holds (1, 0.1, <string>)
    status, objects, err = run_cli("dump", "--json", str(corpus / "rust-mysql-binlog/bin-log.000001"))
    assert status == 0, err
    rows = rows_of(objects, "foo")
    assert [list(r) for r in rows] == [["id", "val_decimal", "comment"]] * 2
    assert rows[0]["id"] == 1 and rows[0]["val_decimal"] == "0.10000" and isinstance(rows[0]["comment"], str)


def test_dump_names_every_row_of_the_sakila_load(corpus):
    """MySQL 5.5 logs no column names; the Sakila schema's DDL is in the file before its 1374 rows events."""
    status, objects, err = run_cli("dump", "--json", str(corpus / "mysql-binlog-connector-java/mysql-bin.sakila"))
    assert status == 0, err
    events = [ev for ev in objects if "rows" in ev]
    assert len(events) == 1374
    assert not [ev["table"] for ev in events for row in ev["rows"] if any(k.startswith("@") for k in row)]
    actor = rows_of(objects, "actor")
    assert actor and list(actor[0]) == ["actor_id", "first_name", "last_name", "last_update"]


SEED = """-- the table as it was before the file (SHOW CREATE TABLE output)
USE wanshao;
CREATE TABLE `wanshao_test` (
  `id` int(11) NOT NULL,
  `name` varchar(20) CHARACTER SET utf8 DEFAULT NULL,
  `age` int(11) DEFAULT NULL
) ENGINE=InnoDB;
"""


def test_schema_build_with_a_seed_names_a_table_created_before_the_file(corpus, tmp_path):
    path = str(corpus / "canal/tsdb/mysql-bin.000003")
    status, objects, _ = run_cli("dump", "--json", path)
    assert status == 0 and all(k.startswith("@") for r in rows_of(objects, "wanshao_test") for k in r)
    seed = tmp_path / "seed.sql"
    seed.write_text(SEED)
    history = tmp_path / "h.jsonl"
    status, _, err = run_cli("schema", "build", path, "--seed", str(seed), "--out", str(history))
    assert status == 0, err
    assert [(e.schema, e.table, e.source) for e in read_history(history)][0] == ("wanshao", "wanshao_test", "seed")
    status, objects, err = run_cli("dump", "--json", path, "--schema-history", str(history))
    rows = rows_of(objects, "wanshao_test")
    # the file's own ALTERs: add col1, add col2, drop col1, then add col1, add col3, drop col3
    assert list(rows[0]) == ["id", "name", "age", "col2"]
    assert list(rows[1]) == ["id", "name", "age", "col2", "col1"]
    assert all(not k.startswith("@") for r in rows for k in r)


def test_a_seed_that_does_not_fit_the_table_map_gives_positional_names(corpus, tmp_path):
    path = str(corpus / "canal/tsdb/mysql-bin.000003")
    seed = tmp_path / "seed.sql"
    seed.write_text(SEED.replace("varchar(20)", "varchar(10)"))   # 30 bytes in utf8; the TABLE_MAP says 60
    history = tmp_path / "h.jsonl"
    assert run_cli("schema", "build", path, "--seed", str(seed), "--out", str(history))[0] == 0
    _, objects, _ = run_cli("dump", "--json", path, "--schema-history", str(history))
    assert all(k.startswith("@") for r in rows_of(objects, "wanshao_test") for k in r)


@pytest.mark.parametrize("args, status, message", [
    (["schema", "build", "/nonexistent/mysql-bin.000001", "--out", "{tmp}/h"], 1, "/nonexistent/mysql-bin.000001"),
    (["schema", "build", "{corpus}/canal/tsdb/mysql-bin.000003", "--seed", "{tmp}/bad.sql", "--out", "{tmp}/h"],
     1, "seed statement not understood"),
    (["schema", "build", "{corpus}/rust_mysql_common/binlog_truncated_event.000001", "--out", "{tmp}/h"], 1,
     "binlog_truncated_event.000001"),
    (["schema", "build", "{corpus}/canal/tsdb/mysql-bin.000003"], 2, "--out"),
    (["dump", "{corpus}/canal/tsdb/mysql-bin.000003", "--schema-history", "{tmp}/missing.jsonl"], 1, "missing.jsonl"),
    (["dump", "{corpus}/canal/tsdb/mysql-bin.000003", "--schema-history", "{tmp}/bad.sql"], 1, "line 1"),
])
def test_bad_input_is_one_line_with_its_exit_code(corpus, tmp_path, args, status, message):
    (tmp_path / "bad.sql").write_text("CREATE TABLE t (a INT) WITH NONSENSE;\n")
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{corpus}", str(corpus)) for a in args]
    got, _, err = run_cli(*argv)
    lines = [line for line in err.splitlines() if line.strip() and "cannot parse DDL" not in line]
    assert got == status and message in err, err
    assert status == 2 or (len(lines) == 1 and lines[0].startswith("binlogd: ")), err
    assert not (tmp_path / "h").exists()
