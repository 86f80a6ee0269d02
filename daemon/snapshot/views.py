"""The snapshot's read views: a consistent snapshot and the binlog position it is consistent with.

- :func:`open_view`: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and, on MariaDB and Percona,
  ``Binlog_snapshot_file/position`` (no lock); on Oracle MySQL :func:`open_view_locked` (the transaction opened
  inside ``FLUSH TABLES WITH READ LOCK``, on several connections at once for the key range readers);
- :func:`consistent_snapshot`: the transaction and, where the server tells it, its binlog position (the
  incremental snapshot's low-level view too);
- :func:`binlog_end`: the server's binlog end (``SHOW MASTER STATUS``);
- :func:`release`: ``ROLLBACK TO SAVEPOINT`` after a chunk, the view kept (with binary logging on, which a source
  always has, the server keeps the chunk's metadata lock all the same: it ends with the view);
- :func:`end_view`: the view ended (``ROLLBACK``);
- :class:`Reader`: a connection and its view, as the initial snapshot reads with it.

Nothing here writes to the source's binary log. A view is a ``READ ONLY`` transaction (the server refuses any
write in it) and ends with ``ROLLBACK``, never ``COMMIT``: its ``SAVEPOINT`` sits in the transaction's binlog
cache, and a ``COMMIT`` logs it as a transaction of its own (MariaDB: a new GTID; with ``read_only=ON`` the
``COMMIT`` is refused). ``FLUSH TABLES WITH READ LOCK`` and ``UNLOCK TABLES`` are not logged.
"""

from __future__ import annotations

import dataclasses

from binlogd.daemon.replication.connection import SourceError, binlog_status_sql
from binlogd.protocol.position import Position

_SAVEPOINT = "binlogd_snapshot"
_START = "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT"


async def query(conn, sql: str, args=None) -> list[tuple]:
    """The rows of one statement on an aiomysql connection (none for a statement without a result)."""
    async with conn.cursor() as cur:
        await cur.execute(sql, args)
        return list(await cur.fetchall() or ())


def as_text(value) -> str:
    """A text value of a result row as str (the raw connection gives bytes or str)."""
    return value.decode() if isinstance(value, bytes) else str(value)


async def open_view(conn, flavor: str, gtids: dict | None = None) -> tuple[Position, str]:
    """Open a consistent read view on ``conn`` and return its binlog position and how it was taken.

    MariaDB and Percona: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` then ``Binlog_snapshot_file/position``
    (and ``BINLOG_GTID_POS`` of them on MariaDB, which reads the binlog up to there: ``gtids`` keeps what it
    gave for each (file, pos), so that views at the same position ask once): no lock. Else (MySQL): ``FLUSH
    TABLES WITH READ LOCK``, the transaction opened and ``SHOW MASTER STATUS`` read inside it, ``UNLOCK
    TABLES``. A savepoint is set, for :func:`release`.

    Returns:
        (position with its GTID set or list, ``"binlog_snapshot"`` or ``"ftwrl"``).
    Raises:
        LockRefused: FTWRL refused; SourceError: binary logging off.
        pymysql.err.Error, OSError: another query failed.
    """
    await query(conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    at = await consistent_snapshot(conn)
    if at is not None:
        file, pos = at
        gtid = (gtids or {}).get((file, pos), "")
        if flavor == "mariadb" and (file, pos) not in (gtids or {}):
            gtid = as_text((await query(conn, "SELECT BINLOG_GTID_POS(%s, %s)", (file, pos)))[0][0] or "")
            if gtids is not None:
                gtids[file, pos] = gtid
        await query(conn, f"SAVEPOINT {_SAVEPOINT}")
        return Position(file, pos, gtid_list=gtid), "binlog_snapshot"
    await end_view(conn)
    return await open_view_locked(conn), "ftwrl"


async def consistent_snapshot(conn) -> tuple[str, int] | None:
    """``START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT`` on ``conn`` (ended by :func:`end_view`); the binlog
    (file, pos) its view sees the log up to, where the server tells it (``Binlog_snapshot_file/position``:
    MariaDB, Percona), else None.

    Raises:
        pymysql.err.Error, OSError: a query failed.
    """
    await query(conn, _START)
    status = {as_text(k).lower(): as_text(v) for k, v in await query(conn, "SHOW STATUS LIKE 'binlog_snapshot%'")}
    if status.get("binlog_snapshot_file"):
        return status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
    return None


async def open_view_locked(conn, more=()) -> Position:
    """:func:`open_view` for a server without ``Binlog_snapshot_position`` (Oracle MySQL): ``FLUSH TABLES WITH
    READ LOCK``, the transaction opened and ``SHOW MASTER STATUS`` (or ``SHOW BINARY LOG STATUS``) read inside
    it, ``UNLOCK TABLES``, a savepoint set. With connections ``more``, each opens its transaction inside the same
    lock: every view is at that one position (mydumper's way). Returns the position, with the GTID set ``SHOW
    MASTER STATUS`` gives (MySQL's fifth column; none on MariaDB).

    Raises:
        LockRefused: FTWRL refused (no RELOAD privilege, a managed service).
        SourceError, pymysql.err.Error, OSError: as :func:`open_view`.
    """
    import pymysql

    for other in more:
        await query(other, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    try:
        await query(conn, "FLUSH TABLES WITH READ LOCK")
    except pymysql.err.MySQLError as exc:
        raise LockRefused("misconfigured", f"snapshot: FLUSH TABLES WITH READ LOCK refused ({exc.args[-1]})",
                          fatal=True) from None
    try:
        for c in (conn, *more):
            await query(c, _START)
        position = await binlog_end(conn)
    finally:
        await query(conn, "UNLOCK TABLES")
    for c in (conn, *more):
        await query(c, f"SAVEPOINT {_SAVEPOINT}")
    return position


async def binlog_end(conn) -> Position:
    """The server's binlog end: ``SHOW MASTER STATUS`` (``SHOW BINARY LOG STATUS`` on the versions that have it:
    :func:`~binlogd.daemon.replication.connection.binlog_status_sql`), with the GTID set of MySQL's fifth
    column (none on MariaDB).

    Raises:
        SourceError: (fatal) binary logging is off.
        pymysql.err.Error, OSError: the query failed.
    """
    rows = await query(conn, binlog_status_sql(conn.get_server_info()))
    if not rows:
        raise SourceError("misconfigured", "snapshot: the server has binary logging off", fatal=True)
    row = rows[0]
    gtid_set = as_text(row[4]).replace("\n", "") if len(row) > 4 and row[4] else ""
    return Position(as_text(row[0]), int(row[1]), gtid_set=gtid_set)


async def release(conn) -> None:
    """Roll back to the view's savepoint (the view stays). With binary logging on the server keeps the metadata
    locks of the tables read since: they end with the view."""
    await query(conn, f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")


async def end_view(conn) -> None:
    """End the view's transaction with ``ROLLBACK`` (a ``COMMIT`` would log its savepoint: see the module's
    docstring).

    Raises:
        pymysql.err.Error, OSError: the connection failed.
    """
    await query(conn, "ROLLBACK")


class LockRefused(SourceError):
    """The server has no ``Binlog_snapshot_position`` and refused ``FLUSH TABLES WITH READ LOCK``."""


@dataclasses.dataclass
class Reader:
    """A connection of the snapshot's and its consistent read view.

    Fields:
        conn: the aiomysql connection (raw values: :func:`binlogd.daemon.snapshot.tables.raw_connection`).
        view: the view's binlog position; ts: when it opened (unix seconds); how: ``"binlog_snapshot"`` (no
            lock) or ``"ftwrl"`` (:func:`open_view`).
    """

    conn: object
    view: Position | None = None
    ts: int = 0
    how: str = ""

    def source(self, server_id: int) -> dict:
        """The ``source`` of the rows read in this view (``row`` is added per row)."""
        view = self.view
        return {"server_id": server_id, "file": view.file, "pos": view.pos,
                "gtid": view.gtid_list or view.gtid_set or None, "snapshot": True}
