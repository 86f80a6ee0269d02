"""The initial snapshot's read view on a server without ``Binlog_snapshot_position`` (Oracle MySQL):
``FLUSH TABLES WITH READ LOCK``, the transaction opened inside it, ``SHOW MASTER STATUS``, ``UNLOCK TABLES``
(:func:`binlogd.daemon.snapshot.open_view_locked`), run on the real MariaDB servers, which accept the same
statements (no Docker engine here for MySQL 8.4; tests/integration/test_daemon_mysql84.py runs it there).

- Under a stream of single-row INSERTs, the view holds exactly the rows of the INSERTs the server logged up
  to the position it returns (counted from the server's own ``SHOW BINLOG EVENTS``): opening the transaction
  outside the lock (Debezium's DBZ-9006 duplicates) shows as a difference.
- The lock is gone when it returns: writes go on while the view stays open.
- An account without RELOAD gets the one fatal, named error.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid

import pytest

from binlogd.daemon import _aiomysql
from binlogd.daemon.connection import SourceError
from binlogd.daemon.snapshot import open_view_locked

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


def test_locked_view_is_exactly_the_logged_prefix(mariadb):
    server, db = mariadb, f"ftwrl_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(10))", database=db)
    server.sql("FLUSH BINARY LOGS")
    writes = _Inserts(server, db).start()

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
