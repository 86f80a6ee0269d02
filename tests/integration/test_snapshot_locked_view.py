"""The initial snapshot's read view on a server without ``Binlog_snapshot_position`` (Oracle MySQL):
``FLUSH TABLES WITH READ LOCK``, the transaction opened inside it, ``SHOW MASTER STATUS``, ``UNLOCK TABLES``
(:func:`binlogd.daemon.snapshot.views.open_view_locked`), run on the real MariaDB servers, which accept the same
statements (Oracle MySQL itself runs only where Docker does, through testcontainers).

- Under a stream of single-row INSERTs, the view holds exactly the rows of the INSERTs the server logged up
  to the position it returns (counted from the server's own ``SHOW BINLOG EVENTS``): opening the transaction
  outside the lock (Debezium's DBZ-9006 duplicates) shows as a difference.
- The lock is gone when it returns: writes go on while the view stays open.
- Views of several connections opened inside one lock (the key range readers' on MySQL) are all that prefix.
- An account without RELOAD gets the one fatal, named error; the initial snapshot then reads the tables by the
  incremental method while streaming, with no lock at all (a managed MySQL): under a write load, the sink
  replayed (reads as upserts, changes in order) equals each keyed table's SELECT, no key read twice, and the
  keyless table is named in the log as not read.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.replication import _aiomysql
from binlogd.daemon.replication.connection import SourceError
from binlogd.daemon.snapshot import readers
from binlogd.daemon.snapshot.views import open_view_locked
from tests.support.daemon import (
    InProcessDaemon,
    base_overrides,
    captured_log,
    read_changes,
    wait_caught_up,
    wait_until,
)
from tests.support.snapshots import WriteLoad, check_against_server, make_tables

pytestmark = pytest.mark.server


class _Inserts:
    """Single-row autocommit INSERTs into ``db.t`` on their own connection until stopped."""

    def __init__(self, server, db: str):
        self.server, self.db, self.done = server, db, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = self.server.connect(database=self.db)
        try:
            with conn.cursor() as cur:
                while not self._stop.is_set():
                    cur.execute("INSERT INTO t (v) VALUES ('x')")
                    self.done += 1
        finally:
            conn.close()

    def start(self) -> _Inserts:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _logged_inserts(server, db: str, file: str, end: int) -> int:
    """Rows-event INSERTs into ``db.t`` the server logged in ``file`` before ``end`` (SHOW BINLOG EVENTS)."""
    ids, count = set(), 0
    for _name, _pos, kind, _sid, end_pos, info in server.sql(f"SHOW BINLOG EVENTS IN '{file}'"):
        if end_pos > end:
            break
        if kind == "Table_map":
            m = re.match(r"table_id: (\d+) \(([^)]*)\)", info)
            if m and m.group(2) == f"{db}.t":
                ids.add(m.group(1))
        elif kind.startswith("Write_rows"):
            m = re.match(r"table_id: (\d+)", info)
            count += bool(m and m.group(1) in ids)
    return count


async def _connect(server, **kw):
    return await _aiomysql.connect(host=server.host, port=server.port, user=kw.get("user", server.user),
                                   password=kw.get("password", server.password), ssl=None, connect_timeout=5)


def _inserting(server) -> tuple[str, _Inserts]:
    """A new schema with a table ``t``, a fresh binlog file, and :class:`_Inserts` into it, started."""
    db = f"ftwrl_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(10))", database=db)
    server.sql("FLUSH BINARY LOGS")
    return db, _Inserts(server, db).start()


def test_locked_view_is_exactly_the_logged_prefix(mariadb):
    server = mariadb
    db, writes = _inserting(server)

    async def go():
        conn = await _connect(server)
        try:
            while writes.done < 200:  # the INSERTs are well under way
                await asyncio.sleep(0.01)
            position = await open_view_locked(conn)
            async with conn.cursor() as cur:
                await cur.execute(f"SELECT COUNT(*) FROM `{db}`.t")
                (seen,) = await cur.fetchone()
            before = writes.done
            await asyncio.sleep(0.5)
            moved = writes.done - before  # while the view is still open
            async with conn.cursor() as cur:
                await cur.execute(f"SELECT COUNT(*) FROM `{db}`.t")
                (again,) = await cur.fetchone()
            return position, seen, again, moved
        finally:
            conn.close()

    try:
        position, seen, again, moved = asyncio.run(go())
        writes.stop()
        assert moved > 0, "no INSERT committed while the view was open: the read lock was kept"
        assert again == seen, "the view moved"
        assert seen == _logged_inserts(server, db, position.file, position.pos), position
        assert writes.done > seen
    finally:
        writes.stop()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_views_opened_in_one_lock_are_one_logged_prefix(mariadb):
    """The key range readers' views on MySQL: three transactions opened inside one FTWRL all hold exactly the
    rows of the INSERTs logged up to the one position returned."""
    server = mariadb
    db, writes = _inserting(server)

    async def go():
        conns = [await _connect(server) for _ in range(3)]
        try:
            while writes.done < 200:
                await asyncio.sleep(0.01)
            position = await open_view_locked(conns[0], conns[1:])
            await asyncio.sleep(0.3)  # the INSERTs go on: each view stays where it opened
            seen = []
            for conn in conns:
                async with conn.cursor() as cur:
                    await cur.execute(f"SELECT COUNT(*) FROM `{db}`.t")
                    seen.append((await cur.fetchone())[0])
            return position, seen
        finally:
            for conn in conns:
                conn.close()

    try:
        position, seen = asyncio.run(go())
        writes.stop()
        assert seen == [_logged_inserts(server, db, position.file, position.pos)] * 3, (position, seen)
        assert writes.done > seen[0]
    finally:
        writes.stop()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_locked_view_without_reload_is_one_named_error(mariadb):
    server, user = mariadb, f"noreload_{uuid.uuid4().hex[:8]}"
    server.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    try:
        server.sql(f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'%'")

        async def go():
            conn = await _connect(server, user=user, password="pw")
            try:
                await open_view_locked(conn)
            finally:
                conn.close()

        with pytest.raises(SourceError) as err:
            asyncio.run(go())
        assert err.value.fatal
        assert "FLUSH TABLES WITH READ LOCK refused" in str(err.value) and "RELOAD" in str(err.value)
    finally:
        server.sql(f"DROP USER IF EXISTS '{user}'@'%'")


def test_no_lock_to_be_had_reads_the_tables_incrementally(mariadb_minimal, tmp_path, monkeypatch):
    """The server as Oracle MySQL shows itself to the snapshot (no ``Binlog_snapshot_position``: open_view goes
    straight to the locked view), and the replication account has no RELOAD, so the real server refuses FTWRL."""

    async def as_mysql(conn, flavor, gtids=None):
        return await open_view_locked(conn), "ftwrl"

    monkeypatch.setattr(readers, "open_view", as_mysql)
    server, db = mariadb_minimal, f"nolock_{uuid.uuid4().hex[:10]}"
    make_tables(server, db, 1500)
    load = None
    with captured_log(f"binlogd.test.{db}") as (log, lines):
        try:
            config = load_config(None, env={}, overrides=base_overrides(
                server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=40, filters__include_schemas=db))
            load = WriteLoad(server, db, 1500).start()
            runner = InProcessDaemon(config, log=log).start()
            try:
                wait_until(lambda: any("incremental snapshot: done" in line for line in lines), timeout=90,
                           what="incremental snapshot: done")
                assert load.stop() > 20, "the write load barely ran during the snapshot"
                wait_caught_up(server, tmp_path / "checkpoint.json")
            finally:
                assert runner.stop() == 0, "\n".join(lines)
            text = "\n".join(lines)
            refused = [line for line in lines if "FLUSH TABLES WITH READ LOCK refused" in line]
            assert len(refused) == 1 and "incremental method instead, with no lock" in refused[0], text
            assert f"{db}.nokey" in refused[0], refused[0]
            assert "snapshot: read view at" not in text, "a read view was opened with a lock"
            changes = read_changes(tmp_path / "sink")
            reads = [c for c in changes if c["op"] == "read"]
            assert reads and all(c["source"]["snapshot"] == "incremental" for c in reads)
            assert not [c for c in reads if c["table"] == "nokey"]
            counts = check_against_server(server, db, changes, tables=("big", "comp", "empty"))
            assert sum(1 for k in counts if k[0] == "big") >= 1000, len(counts)
        finally:
            if load is not None:
                load.done.set()
            server.sql(f"DROP DATABASE IF EXISTS `{db}`")
