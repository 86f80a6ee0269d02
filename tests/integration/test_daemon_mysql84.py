"""MySQL 8.4 (``mysql84``: Docker via testcontainers, GTIDs on, FULL row metadata).

Skipped with the fixture's reason where no Docker engine answers. The daemon runs in-process (its own
event loop in a thread) against the container as ``repl``/``replpass`` with ``source.tls.mode =
required`` (8.4's caching_sha2_password needs TLS or RSA for the full authentication):

- a round trip of a few column types starting at ``current`` with GTID resume: the checkpoint says
  ``resume = gtid`` and its GTID set equals the server's ``gtid_executed``; stop, write while stopped,
  restart (COM_BINLOG_DUMP_GTID from the checkpoint), write again, stop: every change exactly once and
  the replay equals the table;
- the admin SQL is 8.4's: ``SHOW BINARY LOG STATUS`` (8.4 has no ``SHOW MASTER STATUS``).

Those tests rely on ``tls.mode = required`` meaning TLS; the last test checks that against the local
``mariadb`` (built without TLS, ``have_ssl = DISABLED``; skipped where it offers TLS): the daemon must
refuse to stream in plain text.

Only :mod:`tests.support.daemon` functions that take the server as an argument are used; the waits here read
``SHOW BINARY LOG STATUS`` themselves (``wait_caught_up`` uses ``SHOW MASTER STATUS``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.replication.connection import SourceConnection
from binlogd.daemon.service import EXIT_OK
from binlogd.protocol.gtid import MysqlGtidSet
from tests.support.daemon import (
    STREAMING,
    DaemonProcess,
    assert_sink_matches,
    base_overrides,
    read_changes,
    read_checkpoint,
    replay,
)
from tests.support.daemon import InProcessDaemon as InProcess

pytestmark = pytest.mark.server


@pytest.fixture
def recorded(monkeypatch):
    """Every admin statement and every dump start of the daemon's source connections."""
    log = {"sql": [], "dumps": []}
    query, start_dump = SourceConnection.query, SourceConnection.start_dump

    async def spy_query(self, sql):
        log["sql"].append(sql)
        return await query(self, sql)

    async def spy_start_dump(self, server_id, position, use_gtid, *args, **kwargs):
        log["dumps"].append((position, use_gtid))
        return await start_dump(self, server_id, position, use_gtid, *args, **kwargs)

    monkeypatch.setattr(SourceConnection, "query", spy_query)
    monkeypatch.setattr(SourceConnection, "start_dump", spy_start_dump)
    return log


def _config(server, workdir):
    overrides = base_overrides(server, workdir, **{"source.tls.mode": "required", "source.start": "current",
                                                   "source.connect_timeout": "20"})
    return load_config(None, env={}, overrides=overrides)


def _gtid_executed(server) -> MysqlGtidSet:
    return MysqlGtidSet.parse(str(server.sql("SELECT @@GLOBAL.gtid_executed")[0][0]).replace("\n", ""))


def _wait_caught_up(server, runner: InProcess, checkpoint, timeout: float = 30.0) -> dict:
    """Until the checkpoint's GTID set equals the server's gtid_executed and its file/pos is at or past
    the server's ``SHOW BINARY LOG STATUS``."""
    want = _gtid_executed(server)
    row = server.sql("SHOW BINARY LOG STATUS")[0]
    target = (_file_index(str(row[0])), int(row[1]))
    deadline = time.monotonic() + timeout
    while True:
        if not runner.thread.is_alive():
            raise AssertionError(f"daemon ended (rc={runner.rc}, error={runner.error!r}) before catching up")
        cp = read_checkpoint(checkpoint)
        if cp and cp["position"]["gtid_set"] and MysqlGtidSet.parse(cp["position"]["gtid_set"]) == want \
                and (_file_index(cp["position"]["file"]), int(cp["position"]["pos"])) >= target:
            return cp
        if time.monotonic() > deadline:
            raise AssertionError(f"checkpoint {cp and cp['position']} did not reach GTID set {want} at "
                                 f"{row[0]}:{row[1]} within {timeout}s")
        time.sleep(0.05)


def _file_index(name: str) -> int:
    return int(name.rsplit(".", 1)[-1]) if name.rsplit(".", 1)[-1].isdigit() else -1


DDL = """CREATE TABLE t (
  id INT NOT NULL PRIMARY KEY, i INT, iu INT UNSIGNED, biu BIGINT UNSIGNED, d DECIMAL(12,4),
  vc VARCHAR(40) CHARACTER SET utf8mb4, dt DATETIME(6), dd DATE, e ENUM('x','y','z'), st SET('a','b','c'),
  bl BLOB, dbl DOUBLE
) CHARACTER SET utf8mb4"""
COLS = ("id", "i", "iu", "biu", "d", "vc", "dt", "dd", "e", "st", "bl", "dbl")


def _row(k: int) -> tuple:
    return (k, -k * 1000, 4294967295 - k, 18446744073709551615 - k, f"{k}.{k % 10000:04d}", f"é😀{k}",
            f"2024-01-{1 + k % 28:02d} 12:34:56.{k:06d}", f"1999-12-{1 + k % 28:02d}", "xyz"[k % 3],
            ",".join("abc"[: k % 4]), bytes([k % 256, 0, 255]), k / 8)


class Writer:
    def __init__(self, server, db: str):
        self.server, self.db, self.k = server, db, 0
        self.ops: list[tuple[str, int]] = []

    def batch(self, n: int) -> None:
        conn = self.server.connect(database=self.db)
        try:
            cur = conn.cursor()
            for _ in range(n):
                self.k += 1
                k = self.k
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO t ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})", _row(k))
                self.ops.append(("insert", k))
                if k % 3 == 0:
                    cur.execute("UPDATE t SET vc = CONCAT(vc, '+'), st = 'c' WHERE id = %s", (k - 1,))
                    self.ops.append(("update", k - 1))
                if k % 5 == 0:
                    cur.execute("DELETE FROM t WHERE id = %s", (k - 4,))
                    self.ops.append(("delete", k - 4))
                cur.execute("COMMIT")
        finally:
            conn.close()


@pytest.fixture
def mysql_db(mysql84):
    name = f"t84_{uuid.uuid4().hex[:10]}"
    mysql84.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mysql84.sql(f"DROP DATABASE IF EXISTS `{name}`")


def test_mysql84_round_trip_gtid_resume_exactly_once(mysql84, mysql_db, tmp_path, recorded):
    server, db = mysql84, mysql_db
    checkpoint = tmp_path / "checkpoint.json"
    config = _config(server, tmp_path)
    writer = Writer(server, db)

    runner = InProcess(config).start()
    try:
        runner.wait_streaming()
        server.sql(DDL, database=db)
        writer.batch(10)
        cp = _wait_caught_up(server, runner, checkpoint)
        assert cp["source"].get("resume") == "gtid", f"start=current on gtid_mode=ON must resume by GTID: {cp}"
    finally:
        rc = runner.stop()
    assert rc == EXIT_OK
    assert recorded["dumps"] and recorded["dumps"][0][1] is True, recorded["dumps"]

    writer.batch(7)  # while stopped

    runner = InProcess(config).start()
    try:
        runner.wait_streaming()
        position, use_gtid = recorded["dumps"][-1]
        assert use_gtid is True and position.gtid_set, f"restart did not resume by GTID: {recorded['dumps'][-1]}"
        writer.batch(6)
        _wait_caught_up(server, runner, checkpoint)
    finally:
        rc = runner.stop()
    assert rc == EXIT_OK

    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == db and c["table"] == "t"]
    got = Counter((c["op"], (c["after"] or c["before"])["id"]) for c in changes)
    want = Counter(writer.ops)
    assert got == want, f"sink != writes: missing {sorted(want - got)[:10]}, extra {sorted(got - want)[:10]}"
    assert set(changes[0]["after"]) == set(COLS), changes[0]
    assert all(c["source"]["gtid"] for c in changes), "a change without its transaction's GTID"
    state = replay(changes)  # strict: a duplicated or lost transaction raises
    assert_sink_matches(server, db, ["t"], state)


def test_mysql84_uses_show_binary_log_status(mysql84, tmp_path, recorded):
    runner = InProcess(_config(mysql84, tmp_path)).start()
    try:
        runner.wait_streaming()
    finally:
        rc = runner.stop()
    assert rc == EXIT_OK
    statements = [s.strip().upper() for s in recorded["sql"]]
    assert "SHOW BINARY LOG STATUS" in statements, f"8.4's status statement was not used: {recorded['sql']}"
    assert not any("MASTER STATUS" in s for s in statements), f"SHOW MASTER STATUS sent to 8.4: {recorded['sql']}"


def test_tls_required_refuses_a_server_without_tls(mariadb, tmp_path):
    have_ssl = mariadb.sql("SHOW VARIABLES LIKE 'have_ssl'")
    if not have_ssl or str(have_ssl[0][1]).upper() == "YES":
        pytest.skip(f"the local server offers TLS (have_ssl = {have_ssl}): nothing to refuse")
    overrides = base_overrides(mariadb, tmp_path, **{"source.tls.mode": "required", "reconnect.max_attempts": "2"})
    d = DaemonProcess(overrides)
    try:
        deadline = time.monotonic() + 15
        while d.running and not d.count(STREAMING.pattern) and not d.count(r"(?i)\b(tls|ssl)\b") \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        d.kill()
    assert not d.count(STREAMING.pattern), (
        "source.tls.mode = required, but the daemon streamed in plain text from a server without TLS "
        f"(have_ssl = {have_ssl[0][1]}); stderr:\n{d.stderr}")
    assert d.count(r"(?i)\b(tls|ssl)\b"), f"no error naming TLS; stderr:\n{d.stderr}"
