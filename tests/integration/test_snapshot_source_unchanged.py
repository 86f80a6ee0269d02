"""A snapshot never writes to its source: on each real server, the binary log (every file's name and size, and
``@@gtid_binlog_pos`` on MariaDB or ``@@gtid_executed`` on MySQL) is the same before and after

- an initial snapshot (a table read in key ranges by several readers where the server's views need no lock),
  run by a daemon from start to streaming and stopped;
- an incremental snapshot (``[snapshot] signal_table``): the signal INSERT is the user's write, so the events
  after the position before it must be that one transaction, the GTID state one transaction further (the same
  for the initial snapshot that MySQL without RELOAD reads incrementally, with the user's INSERTs that move the
  stream meanwhile);

each with an account of SELECT, REPLICATION SLAVE, REPLICATION CLIENT and RELOAD, and with one without RELOAD
(the fixtures' replication account), with ``read_only`` ON and OFF.
"""

from __future__ import annotations

import json
import re
import threading
import uuid

import pytest

from tests.support.daemon import base_overrides, read_changes, running_daemon, wait_until

pytestmark = pytest.mark.server

ROWS = 6000
CHUNK = 20
READERS = 3


def _status(server) -> tuple[str, int]:
    """The binlog's end: ``SHOW MASTER STATUS`` (``SHOW BINARY LOG STATUS`` where that is gone)."""
    try:
        row = server.sql("SHOW MASTER STATUS")[0]
    except Exception:  # noqa: BLE001 (MySQL 8.4+ names it SHOW BINARY LOG STATUS)
        row = server.sql("SHOW BINARY LOG STATUS")[0]
    return str(row[0]), int(row[1])


def _gtids(server) -> str:
    name = "gtid_binlog_pos" if server.flavor == "mariadb" else "gtid_executed"
    return str(server.sql(f"SELECT @@global.{name}")[0][0] or "").replace("\n", "")


def binlog_state(server) -> dict:
    """What a write would change: every binlog file with its size, the end, and the GTID state."""
    return {"files": [(str(r[0]), int(r[1])) for r in server.sql("SHOW BINARY LOGS")], "end": _status(server),
            "gtids": _gtids(server)}


def events_after(server, at: tuple[str, int]) -> list[tuple[str, int, str, str]]:
    """(file, pos, type, info) of every event after ``at`` (a binlog end), in this file and the later ones."""
    names = [str(r[0]) for r in server.sql("SHOW BINARY LOGS")]
    out = []
    for name in names[names.index(at[0]):]:
        for row in server.sql(f"SHOW BINLOG EVENTS IN '{name}'"):
            if name != at[0] or int(row[1]) >= at[1]:
                out.append((name, int(row[1]), str(row[2]), str(row[5])))
    return out


@pytest.fixture(params=["reload", "no_reload"])
def account(request, mariadb):
    """(user, password) of a read-only account: SELECT, REPLICATION SLAVE, REPLICATION CLIENT, and RELOAD
    ("reload") or not (the fixtures' replication account)."""
    if request.param == "no_reload":
        yield mariadb.repl_user, mariadb.repl_password
        return
    user = f"ro_{uuid.uuid4().hex[:8]}"
    mariadb.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'ro-pass'")
    try:
        mariadb.sql(f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT, RELOAD ON *.* TO '{user}'@'%'")
        yield user, "ro-pass"
    finally:
        mariadb.sql(f"DROP USER IF EXISTS '{user}'@'%'")


@pytest.fixture(params=["read_only", "writable"])
def read_only(request, mariadb):
    """Whether the server runs with ``read_only=ON`` (set for the test, OFF after)."""
    on = request.param == "read_only"
    try:
        yield on
    finally:
        mariadb.sql("SET GLOBAL read_only = OFF")


def _db(server, kind: str) -> str:
    db = f"{kind}_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql("CREATE TABLE big (id INT NOT NULL PRIMARY KEY, v VARCHAR(20))", database=db)
    conn = server.connect(database=db)
    try:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO big VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, ROWS + 1)])
        conn.commit()
    finally:
        conn.close()
    server.sql("CREATE TABLE nokey (x INT, y VARCHAR(20))", database=db)
    server.sql("INSERT INTO nokey VALUES (1, 'a'), (2, 'b')", database=db)
    server.sql(f"ANALYZE TABLE `{db}`.big")   # the row estimate decides the key ranges
    return db


def _overrides(server, tmp_path, db: str, account: tuple[str, str], **extra) -> dict:
    out = base_overrides(server, tmp_path, snapshot__chunk_rows=CHUNK, snapshot__readers=READERS,
                         filters__include_schemas=db, **extra)
    out["source.user"], out["source.password"] = account
    return out


class _Trickle:
    """The user's own writes while a test runs: one INSERT into ``db.trickle`` every 50 ms (its own transaction) on
    its own connection (root: allowed under read_only), until :meth:`stop`, which returns how many committed."""

    def __init__(self, server, db: str):
        self.server, self.db, self.count = server, db, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = self.server.connect(database=self.db, autocommit=True)
        try:
            with conn.cursor() as cur:
                while not self._stop.wait(0.05):
                    cur.execute("INSERT INTO trickle VALUES ()")
                    self.count += 1
        finally:
            conn.close()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.count


def test_an_initial_snapshot_leaves_the_binlog_unchanged(mariadb, tmp_path, account, read_only):
    server = mariadb
    db = _db(server, "ro_init")
    server.sql("CREATE TABLE trickle (id INT AUTO_INCREMENT PRIMARY KEY)", database=db)
    try:
        if read_only:
            server.sql("SET GLOBAL read_only = ON")
        before = binlog_state(server)
        trickle = None
        with running_daemon(_overrides(server, tmp_path, db, account, snapshot__mode="initial")) as d:
            assert d.count("snapshot: done") == 1 or d.count("incremental method instead"), d.stderr
            if d.count("incremental method instead"):
                # no RELOAD on MySQL: the tables are read while streaming, each chunk written at a transaction
                # boundary of the stream: the user's writes make them
                trickle = _Trickle(server, db)
                d.wait_for_line("incremental snapshot: done", timeout=60)
        if trickle is None:
            after = binlog_state(server)
            assert after == before, f"the snapshot wrote to the source's binlog: {before} -> {after}; events " \
                f"{events_after(server, before['end'])}"
        else:
            writes = trickle.stop()
            _only_the_users(server, before, db, "trickle", writes)
        reads = [c for c in read_changes(tmp_path / "sink") if c["op"] == "read"]
        ids = [c["after"]["id"] for c in reads if c["table"] == "big"]
        assert sorted(ids) == list(range(1, ROWS + 1))
        if server.flavor == "mariadb":   # a view needs no lock there: key ranges, read at once by the readers
            assert ids != sorted(ids), "the table was not read in key ranges at once"
            assert len([c for c in reads if c["table"] == "nokey"]) == 2
    finally:
        server.sql("SET GLOBAL read_only = OFF")
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _only_the_users(server, before: dict, db: str, table: str, count: int) -> None:
    """Assert that the binlog after ``before`` (:func:`binlog_state`) holds exactly ``count`` transactions, each
    writing only ``db.table`` (the user's), and that the GTID state moved by exactly their GTIDs."""
    after = binlog_state(server)
    events = events_after(server, before["end"])
    gtids = [info for _f, _p, kind, info in events if kind.lower() == "gtid"]
    assert len(gtids) == count, f"{len(gtids)} transactions, {count} of the user's: {events}"
    tables = [info for _f, _p, kind, info in events if kind == "Table_map"]
    assert all(f"({db}.{table})" in t for t in tables), events
    queries = [info for _f, _p, kind, info in events if kind == "Query"]
    assert all(q.split()[0] in ("BEGIN", "COMMIT") for q in queries), events
    assert after["files"][:len(before["files"]) - 1] == before["files"][:-1], (before, after)
    if not gtids:
        assert after["gtids"] == before["gtids"], (before, after)
    elif server.flavor == "mariadb":
        assert after["gtids"] == re.search(r"GTID (\d+-\d+-\d+)", gtids[-1]).group(1), (before, after, events)
    else:
        logged = ",".join(re.search(r"GTID_NEXT\s*=\s*'([^']+)'", g).group(1) for g in gtids)
        moved = str(server.sql(f"SELECT GTID_SUBTRACT('{after['gtids']}', '{before['gtids']}')")[0][0])
        same = server.sql(f"SELECT GTID_SUBSET('{moved}', '{logged}') AND GTID_SUBSET('{logged}', '{moved}')")[0][0]
        assert int(same), (moved, logged, events)


def test_an_incremental_snapshot_leaves_the_binlog_unchanged(mariadb, tmp_path, account, read_only):
    server = mariadb
    db = _db(server, "ro_incr")
    server.sql("CREATE TABLE signals (id VARCHAR(64) NOT NULL PRIMARY KEY, type VARCHAR(32) NOT NULL, "
               "data VARCHAR(2048) NULL)", database=db)
    try:
        overrides = _overrides(server, tmp_path, db, account, snapshot__signal_table=f"{db}.signals",
                               filters__exclude_tables=f"{db}.signals")
        with running_daemon(overrides) as d:
            if read_only:
                server.sql("SET GLOBAL read_only = ON")
            before = binlog_state(server)
            data = json.dumps({"data-collections": [f"{db}.big", f"{db}.nokey"], "type": "incremental"})
            server.sql(f"INSERT INTO signals VALUES ('{uuid.uuid4().hex}', 'execute-snapshot', '{data}')",
                       database=db)
            d.wait_for_line("incremental snapshot: done", timeout=60)
            wait_until(lambda: len([c for c in read_changes(tmp_path / "sink", strict=False)
                                    if c["op"] == "read"]) >= ROWS, what="the chunks' rows in the sink")
        _only_the_users(server, before, db, "signals", 1)
        ids = sorted(c["after"]["id"] for c in read_changes(tmp_path / "sink") if c["op"] == "read"
                     and c["table"] == "big")
        assert ids == list(range(1, ROWS + 1))
    finally:
        server.sql("SET GLOBAL read_only = OFF")
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
