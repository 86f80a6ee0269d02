"""The corpus's old statement-based binlogs (MySQL 5.0/5.1/5.7), replayed by ``binlogd sql`` into MariaDB.

Oracles, each independent of binlogd:
- ``ybinlogp/mysql-bin.*``: the SQL that produced them (``ybinlogp/oracle/gen_test_data.sql``, up to its
  first FLUSH LOGS), run on the same server: both give the same dump.
- ``ver_5_1_23.001`` (rows, statements, RAND, user variables, LAST_INSERT_ID, LOAD DATA): the MySQL test
  suite's result (``oracle/mysql-server_binlog_old_versions.result``, "version 5.1.23").
- the other statement files whose SQL MariaDB still accepts: ``mariadb-binlog FILE | mariadb`` on the
  same server gives the same dump. (bug27213339-bin.000001 is left out: its sql_mode ORACLE makes
  MariaDB parse stored programs as PL/SQL, which neither tool's output can satisfy.)
Files that cannot become SQL fail with one line naming the file and position.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support.flavour import skip_unless_flavour
from tests.support.sqlout import binlogd_sql, client, dump, target

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def dest(mariadb):
    # MySQL: the files' transactions are anonymous and mix MyISAM with InnoDB, which GTID mode refuses; LOAD DATA
    # LOCAL is off by default
    mysql = ("--gtid-mode=OFF", "--enforce-gtid-consistency=OFF", "--local-infile=ON") if mariadb.flavor == "mysql" else ()
    with target(mariadb, "--log-bin-trust-function-creators=1", *mysql) as server:
        yield server


def _reset(server, *databases: str) -> None:
    for db in ("test", "db1", "ybinlogp", "foobar", *databases):
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
    for table in ("t2", "t4", "t6"):  # binlog_transaction.000001 creates tables in `mysql`
        server.sql(f"DROP TABLE IF EXISTS mysql.{table}")
    server.sql("CREATE DATABASE test")  # the test suite's servers had it


@pytest.mark.parametrize("name", ["mysql-bin.default-path", "mysql-bin.delayed-event"])
def test_ybinlogp_files_replay_like_the_sql_that_made_them(corpus, dest, name):
    oracle = (corpus / "ybinlogp/oracle/gen_test_data.sql").read_text()
    first_part = oracle.split("FLUSH LOGS;")[0]
    _reset(dest)
    # The 5.0 server's character set, as its binlog records it (collation 8): CREATE DATABASE uses it.
    client(dest, b"SET NAMES latin1; SET collation_server = latin1_swedish_ci;\n" + first_part.encode())
    expected = dump(dest, "ybinlogp", "foobar")
    _reset(dest)
    run = binlogd_sql(corpus / "ybinlogp" / name)
    assert run.code == 0, run.stderr
    client(dest, run.sql)
    assert dump(dest, "ybinlogp", "foobar") == expected


def _result_section(text: str, title: str) -> dict[str, list[str]]:
    """The query outputs of one section of a mysql-test .result file: {query: [result lines]}."""
    section = text.split(f"==== {title} ====\n", 1)[1].split("\n====", 1)[0]
    out, query = {}, None
    for line in section.splitlines():
        if line.endswith(";") and not line.startswith("DROP"):
            query = line
            out[query] = []
        elif query is not None and not line.startswith("DROP"):
            out[query].append(line)
    return out


def _select(server, query: str) -> list[str]:
    proc = subprocess.run([shutil.which("mariadb") or "mysql", "-h", server.host, "-P", str(server.port), "-u",
                           server.user, "--batch", "test", "-e", query], capture_output=True, check=True, text=True)
    return proc.stdout.splitlines()


def test_5_1_23_replays_to_the_test_suites_result(corpus, dest, tmp_path):
    expected = _result_section((corpus / "rust_mysql_common/oracle/mysql-server_binlog_old_versions.result")
                               .read_text(), "Read modern binlog (version 5.1.23)")
    assert set(expected) == {"SELECT * FROM t1 ORDER BY a;", "SELECT * FROM t2 ORDER BY a;",
                             "SELECT COUNT(*) FROM t3;"}
    _reset(dest)
    run = binlogd_sql("--load-dir", tmp_path, corpus / "rust_mysql_common/ver_5_1_23.001")
    assert run.code == 0, run.stderr
    assert b"LOAD DATA LOCAL INFILE" in run.sql and b"@@RAND_SEED1" in run.sql
    client(dest, run.sql)
    for query, lines in expected.items():
        assert _select(dest, query) == lines, query


@pytest.mark.parametrize("name", ["binlog_transaction.000001", "bug16266.000001", "bug33029-slave-relay-bin.000001",
                                  "rpl_cross_version_default_utf8mb4_collation.000001"])
def test_statement_files_replay_as_mariadb_binlog_does(corpus, dest, name):
    skip_unless_flavour(dest, "mariadb", "the oracle here, mariadb-binlog's SQL (MariaDB's session variables),")
    path = corpus / "rust_mysql_common" / name
    peer = subprocess.run([shutil.which("mariadb-binlog") or "mysqlbinlog", str(path)], capture_output=True,
                          check=True, timeout=120)
    _reset(dest)
    peer_replay = client(dest, peer.stdout, check=False)
    expected = dump(dest, "test")
    _reset(dest)
    run = binlogd_sql(path)
    assert run.code == 0, run.stderr
    replay = client(dest, run.sql, check=False)
    if peer_replay.returncode:  # SQL this server no longer accepts (11.8's collations): the same error
        assert _server_error(replay.stderr) == _server_error(peer_replay.stderr) is not None
    else:
        assert replay.returncode == 0, replay.stderr
    assert dump(dest, "test") == expected


def _server_error(stderr: bytes) -> bytes | None:
    """The error number and the statement's first words (the message quotes values in the client's charset)."""
    m = re.search(rb"\n(\w+ \w+)[^\n]*\n-+\n\nERROR (\d+) ", stderr)
    return m and m.group(2) + b" in " + m.group(1)


@pytest.mark.parametrize("name, message", [
    ("rust_mysql_common/ver_5_1-wl2325_r.001", r":466: `test`\.`t1` has no column names in the binlog"),
    ("rust_mysql_common/corrupt-relay-bin.000624", r": QUERY: status variables needs 16949 bytes .*at offset 91204"),
    ("rust_mysql_common/bug40482-bin.000001", r":\d+: INCIDENT \(.*\): the primary lost changes"),
])
def test_files_that_cannot_become_sql_fail_naming_where(corpus, name, message):
    run = binlogd_sql(corpus / name)
    assert run.code == 1
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and re.search(re.escape(str(corpus / name)) + message, lines[0]), run.stderr
