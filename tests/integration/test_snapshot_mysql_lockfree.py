"""MySQL 9.7, an account without RELOAD (FLUSH TABLES WITH READ LOCK refused, as on a managed MySQL): the initial
snapshot streams from the binlog's end and reads the tables by the incremental method, and finishes on an idle
server. The stream resumes by GTID, so its position stays behind the transactions the server skipped: each
chunk's high watermark is reached by the executed GTID set read with it. Compared with the server's tables.
"""

from __future__ import annotations

import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import servers
from tests.support.daemon import DaemonProcess, base_overrides, read_changes

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def mysql() -> LocalServer:
    with servers.running_mysql() as server:
        yield server


def test_lock_free_snapshot_finishes_on_an_idle_server(mysql: LocalServer, tmp_path) -> None:
    db = f"lf_{uuid.uuid4().hex[:10]}"
    mysql.sql(f"CREATE DATABASE `{db}`")
    mysql.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    mysql.sql(f"CREATE TABLE `{db}`.u (a INT, b VARCHAR(8), PRIMARY KEY (a, b))")
    mysql.sql(f"INSERT INTO `{db}`.t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(230)))
    mysql.sql(f"INSERT INTO `{db}`.u VALUES " + ", ".join(f"({i % 9}, 'b{i}')" for i in range(70)))
    o = base_overrides(mysql, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=20,
                       filters__include_schemas=db)  # the suite's replication account: no RELOAD
    d = DaemonProcess(o)
    try:
        d.wait_for_line(r"FLUSH TABLES WITH READ LOCK|reading the \d+ tables by the incremental method", timeout=60)
        d.wait_for_line(r"incremental snapshot: done", timeout=60)  # nothing else is written meanwhile
        assert d.terminate() == 0, d.stderr
    finally:
        if d.running:
            d.kill()
    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == db]
    assert {c["op"] for c in changes} == {"read"}
    ids = [c["source"]["id"] for c in changes]
    assert len(ids) == len(set(ids)) == 300
    for table in ("t", "u"):
        want = sorted((int(a), b) for a, b in mysql.sql(f"SELECT * FROM `{db}`.{table}"))
        got = sorted(tuple(c["after"].values()) for c in changes if c["table"] == table)
        assert got == want, table
