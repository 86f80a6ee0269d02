"""The initial snapshot: the selected tables' rows, then the stream from the point they are consistent with.

ARCHITECTURE.md ("Snapshots: exactly once") has the argument; in short:

- the read view and its binlog position P1 come from ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and,
  on MariaDB/Percona, ``Binlog_snapshot_file/position`` (no lock); on MySQL from ``SHOW MASTER STATUS``
  read under ``FLUSH TABLES WITH READ LOCK``, the transaction opened inside the lock (:func:`open_view`);
- each table is read in primary-key chunks of ``[snapshot] chunk_rows``; each chunk's ``op: "read"`` events
  go to the sink and are committed like a transaction: the checkpoint's ``position`` is P1 and its
  ``snapshot`` object the progress (``tables``, ``done``, ``last`` key, ``rows`` of the current table,
  ``view``: the position of the view the rows are read in);
- after a crash the sink is back at the last chunk's commit; the snapshot goes on after the checkpointed key
  in a new view P2 >= P1, and the stream starts at P1 once the last table is done (reads are upserts).

:func:`run` is the daemon's one call: it runs or resumes a snapshot when one is due and returns the state
the session streams from.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from binlogd.protocol.position import Position

from .checkpoint import ResumeState
from .connection import SourceError, admin_connection
from .schemaqueries import SYSTEM_SCHEMAS
from .snapshotrows import describe, raw_connection, read_chunk
from .snapshotwire import ChunkReader

ER_TABLE_DEF_CHANGED = 1412
ER_NO_SUCH_TABLE = 1146
_DENIED = (1044, 1045, 1142, 1143, 1227)   # access denied to a database, table, column, or a privilege
_LOST = (2006, 2013, 2003, 2055)
_PROGRESS_SECONDS = 30.0                   # a progress line this often while one table is read
_SAVEPOINT = "binlogd_snapshot"


async def run(daemon, info, endpoint: str, resume: ResumeState) -> ResumeState:
    """Run the initial snapshot when one is due: none is checkpointed yet and ``[snapshot] mode = "initial"``,
    or the checkpoint has an unfinished one (``resume.snapshot``).

    Args:
        daemon: the :class:`~binlogd.daemon.service.Daemon` (cfg, sink, committer, metrics, log, schema,
            stopping, its current source).
        info: the session's :class:`~binlogd.daemon.connection.ServerInfo`.
        endpoint: the session's server, ``host:port``.
        resume: where the session would start without a snapshot.
    Returns:
        Where the session streams from: ``resume`` when no snapshot was due, else the snapshot's position P1
        (with the snapshot's state while it is unfinished, which only a stop leaves); when no lock is to be had
        (FTWRL refused), the binlog's end with an ``incremental`` state naming the tables to read instead.
    Raises:
        SourceError: the server refused (fatal: no privilege; FTWRL refused while resuming a snapshot begun
            with it) or the connection was lost.
        SinkError, CheckpointError: a chunk could not be committed (the session is retried from the last one).
    """
    if daemon.committer.durable is None:
        if daemon.cfg.snapshot.mode != "initial":
            return resume
        if not daemon.sink.wants_rows:
            daemon.log.warning("snapshot: the %s sink takes no rows: no snapshot is taken", daemon.cfg.sink.kind)
            return resume
    elif resume.snapshot is None:
        return resume
    snapshot = Snapshot(daemon, info, endpoint, resume)
    daemon.sink.bulk(True)
    try:
        await snapshot.run()
    finally:
        daemon.sink.bulk(False)
        await snapshot.close()
    if snapshot.instead is not None:
        p1, incremental = snapshot.instead
        by_gtid = resume.by_gtid or bool(info.gtid_mode and p1.gtid_set)
        return dataclasses.replace(resume, position=p1, by_gtid=by_gtid, incremental=incremental, skip_before=None)
    return dataclasses.replace(daemon.committer.durable, by_gtid=resume.by_gtid or daemon.committer.durable.by_gtid,
                               source=resume.source)


def _server_error(exc: BaseException, doing: str) -> SourceError:
    """A pymysql/OS error of the snapshot's connection as a SourceError (fatal when retrying cannot help)."""
    code = exc.args[0] if getattr(exc, "args", None) and isinstance(exc.args[0], int) else 0
    if code in _DENIED:
        return SourceError("misconfigured", f"snapshot: {doing}: {exc.args[-1]} (the user needs SELECT on the "
                           "tables it reads, and RELOAD on MySQL)", fatal=True)
    kind = "connection" if code in _LOST or isinstance(exc, OSError) or not code else "server"
    return SourceError(kind, f"snapshot: {doing}: {exc}")


async def _query(conn, sql: str, args=None) -> list[tuple]:
    async with conn.cursor() as cur:
        await cur.execute(sql, args)
        return list(await cur.fetchall() or ())


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def open_view(conn, flavor: str) -> tuple[Position, str]:
    """Open a consistent read view on ``conn`` and return its binlog position and how it was taken.

    MariaDB and Percona: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` then ``Binlog_snapshot_file/position``
    (and ``BINLOG_GTID_POS`` of them on MariaDB): no lock. Else (MySQL): ``FLUSH TABLES WITH READ LOCK``, the
    transaction opened and ``SHOW MASTER STATUS`` read inside it, ``UNLOCK TABLES``. A savepoint is set, so
    that :func:`release` can drop each chunk's metadata lock.

    Returns:
        (position with its GTID set or list, ``"binlog_snapshot"`` or ``"ftwrl"``).
    Raises:
        LockRefused: FTWRL refused; SourceError: binary logging off.
        pymysql.err.Error, OSError: another query failed.
    """
    await _query(conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    await _query(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
    status = {_str(k).lower(): _str(v) for k, v in await _query(conn, "SHOW STATUS LIKE 'binlog_snapshot%'")}
    if status.get("binlog_snapshot_file"):
        file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
        gtid = ""
        if flavor == "mariadb":
            gtid = _str((await _query(conn, "SELECT BINLOG_GTID_POS(%s, %s)", (file, pos)))[0][0] or "")
        await _query(conn, f"SAVEPOINT {_SAVEPOINT}")
        return Position(file, pos, gtid_list=gtid), "binlog_snapshot"
    await _query(conn, "ROLLBACK")
    return await open_view_locked(conn), "ftwrl"


async def open_view_locked(conn) -> Position:
    """:func:`open_view` for a server without ``Binlog_snapshot_position`` (Oracle MySQL): ``FLUSH TABLES WITH
    READ LOCK``, the transaction opened and ``SHOW MASTER STATUS`` (or ``SHOW BINARY LOG STATUS``) read inside
    it, ``UNLOCK TABLES``, a savepoint set. Returns the view's position, with the GTID set ``SHOW MASTER
    STATUS`` gives (MySQL's fifth column; none on MariaDB).

    Raises:
        LockRefused: FTWRL refused (no RELOAD privilege, a managed service).
        SourceError, pymysql.err.Error, OSError: as :func:`open_view`.
    """
    import pymysql

    try:
        await _query(conn, "FLUSH TABLES WITH READ LOCK")
    except pymysql.err.MySQLError as exc:
        raise LockRefused("misconfigured", f"snapshot: FLUSH TABLES WITH READ LOCK refused ({exc.args[-1]})",
                          fatal=True) from None
    try:
        await _query(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        position = await binlog_end(conn)
    finally:
        await _query(conn, "UNLOCK TABLES")
    await _query(conn, f"SAVEPOINT {_SAVEPOINT}")
    return position


async def binlog_end(conn) -> Position:
    """The server's binlog end: ``SHOW MASTER STATUS`` (``SHOW BINARY LOG STATUS`` where that is gone), with
    the GTID set of MySQL's fifth column (none on MariaDB).

    Raises:
        SourceError: (fatal) binary logging is off.
        pymysql.err.Error, OSError: the query failed.
    """
    import pymysql

    try:
        rows = await _query(conn, "SHOW MASTER STATUS")
    except pymysql.err.ProgrammingError:
        rows = await _query(conn, "SHOW BINARY LOG STATUS")
    if not rows:
        raise SourceError("misconfigured", "snapshot: the server has binary logging off", fatal=True)
    row = rows[0]
    gtid_set = _str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else ""
    return Position(_str(row[0]), int(row[1]), gtid_set=gtid_set)


async def release(conn) -> None:
    """Drop the metadata locks of the chunks read since the view opened (the view stays)."""
    await _query(conn, f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")


class Snapshot:
    """One run of the initial snapshot (a new one, or the rest of a checkpointed one).

    Args: as :func:`run`.
    Fields:
        state: the checkpoint's ``snapshot`` object: ``position`` (P1), ``tables`` ([schema, table] in read
            order), ``done`` (tables finished), ``last`` (the current table's last key read, or None), ``rows``
            (rows of the current table read), ``view`` (position of the current read view), ``started`` (unix
            time).
    """

    def __init__(self, daemon, info, endpoint: str, resume: ResumeState):
        self.daemon, self.info, self.endpoint, self.resume = daemon, info, endpoint, resume
        self.cfg = daemon.cfg.snapshot
        self.log: logging.Logger = daemon.log
        self.state: dict = dict(resume.snapshot or {})
        self.conn = None
        self.view: Position | None = None
        self.view_ts = 0
        self.by_gtid = resume.by_gtid
        self.fast = daemon.cfg.sink.format == "binlogd"  # rows off the wire, straight to JSON
        self.estimates: dict[tuple[str, str], int] = {}   # information_schema's row count of each table
        self.run_rows, self.run_began = 0, time.monotonic()  # rows read by this run, for the ETA
        self.instead: tuple[Position, dict] | None = None  # FTWRL refused: (P1, the incremental state) instead

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # ------------------------------------------------------------------ the run
    async def run(self) -> None:
        daemon = self.daemon
        daemon.metrics.snapshot_state(1)
        try:
            self.conn = await admin_connection(daemon._source)
            await raw_connection(self.conn)
            new = not self.state
            try:
                await self._open_view()
            except LockRefused as exc:
                if not new:
                    raise
                return await self._incremental_instead(str(exc))
            if new:
                await self._begin()
            else:
                daemon._started = True  # the checkpoint is durable: after an error the sink reopens at it
                await self._estimate()
                p1 = self.state["position"]
                self.log.info("snapshot: resuming at table %d of %d after key %s, in a new read view at %s:%d "
                              "(the stream starts at %s:%d, where the snapshot began)", self.state["done"] + 1,
                              len(self.state["tables"]), self.state.get("last"), self.view.file, self.view.pos,
                              p1["file"], p1["pos"])
            tables = self.state["tables"]
            try:
                while self.state["done"] < len(tables):
                    await self._table(*tables[self.state["done"]])
            except _Stop:
                self.log.info("snapshot: stopped in table %d of %d after key %s; it resumes there",
                              self.state["done"] + 1, len(tables), self.state["last"])
                await daemon.committer.settle()
                return
            await self._commit(None)
            await daemon.committer.settle()
            elapsed = time.time() - self.state.get("started", time.time())
            p1 = self.state["position"]
            self.log.info("snapshot: done, %d tables in %.1fs; streaming from %s:%d", len(tables), elapsed,
                          p1["file"], p1["pos"])
            daemon.metrics.snapshot_state(2)
            try:
                await _query(self.conn, "COMMIT")
            except Exception:  # noqa: BLE001 (the view is no longer needed; the connection closes anyway)
                pass
        except SourceError:
            raise
        except Exception as exc:
            if _is_server_error(exc):
                raise _server_error(exc, "reading the tables") from None
            raise

    async def _open_view(self) -> None:
        """A new consistent read view (the first is P1)."""
        self.view, how = await open_view(self.conn, self.info.flavor)
        self.view_ts = int(time.time())
        self.log.info("snapshot: read view at %s:%d%s (%s)", self.view.file, self.view.pos,
                      f", GTID {self.view.gtid_list or self.view.gtid_set}"
                      if self.view.gtid_list or self.view.gtid_set else "",
                      "no lock" if how == "binlog_snapshot" else "FLUSH TABLES WITH READ LOCK held while it opened")
        self.state["view"] = self.view.to_dict() | {"ts": self.view_ts}

    async def _begin(self) -> None:
        """A new snapshot at the view just opened: list the tables, seed the schema history at P1, and make the
        first commit (no rows yet), so the sink's cut-back on a restart covers every row written after it."""
        daemon, p1 = self.daemon, self.view
        names, keyless = await self._selected()
        ordered = [n for n in names if n in keyless] + [n for n in names if n not in keyless]
        self.by_gtid = bool(p1.gtid_list) if self.info.flavor == "mariadb" else bool(self.info.gtid_mode and
                                                                                      p1.gtid_set)
        self.state.update(position=p1.to_dict(), by_gtid=self.by_gtid, tables=[list(n) for n in ordered], done=0,
                          last=None, rows=0, started=time.time())
        if daemon.cfg.source.start_spec.kind != "current":
            self.log.warning("snapshot: source.start is not used: the stream starts where the snapshot is "
                             "consistent, %s:%d", p1.file, p1.pos)
        self.log.info("snapshot: %d tables at %s:%d (%d without a primary key, read first in one pass each: "
                      "they cannot be resumed by chunk)", len(ordered), p1.file, p1.pos, len(keyless))
        if daemon.schema is not None:  # the history seeded at P1, from the definitions as the view opened
            await daemon.schema.open(p1.file, p1.pos)
        await self._commit(self.state)
        await daemon.committer.settle()
        daemon._started = True  # a durable checkpoint exists: a new session resumes from it

    async def _incremental_instead(self, why: str) -> None:
        """No lock is to be had (FTWRL refused: a managed MySQL): stream from the binlog's end now (P1) and read
        the tables by the incremental method while streaming, with no lock at all (:attr:`instead`: P1 and the
        ``incremental`` state). Tables without a primary key cannot be read that way: named in the log."""
        p1 = await binlog_end(self.conn)
        names, keyless = await self._selected()
        keyed = [list(n) for n in names if n not in keyless]
        self.instead = p1, {"tables": keyed, "last": None, "rows": 0, "chunks": 0, "started": time.time()}
        self.log.warning("%s: reading the %d tables by the incremental method instead, with no lock, while streaming "
                         "from %s:%d%s", why, len(keyed), p1.file, p1.pos,
                         f"; {len(keyless)} without a primary key cannot be read that way and are not: "
                         + ", ".join(".".join(n) for n in sorted(keyless)) if keyless else "")

    async def _selected(self) -> tuple[list[tuple[str, str]], set[tuple[str, str]]]:
        """The tables ``[filters]`` selects, in name order, and those of them without a primary key."""
        names = [n for n in await self._estimate() if self.daemon.cfg.filters.table_selected(*n)]
        keyless = set()
        for name in names:
            info = await describe(self.conn, *name)
            if info is not None and not info.key:
                keyless.add(name)
        return names, keyless

    async def _estimate(self) -> list[tuple[str, str]]:
        """The base tables outside the system schemas, in name order; their row estimates go to
        :attr:`estimates` (for the ETA)."""
        skip = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
        rows = await _query(self.conn, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                            f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ({skip}) "
                            "ORDER BY TABLE_SCHEMA, TABLE_NAME")
        self.estimates = {(_str(s), _str(t)): int(n or 0) for s, t, n in rows}
        return list(self.estimates)

    # ------------------------------------------------------------------ one table
    async def _table(self, schema: str, table: str) -> None:
        """Read the rest of one table, chunk by chunk, each committed; then mark it done."""
        import pymysql

        daemon, state, name = self.daemon, self.state, f"{schema}.{table}"
        info = await describe(self.conn, schema, table)
        if info is None:
            self.log.warning("snapshot: %s is gone (dropped since the snapshot began); its DROP is in the stream",
                             name)
            return await self._table_done(name, 0, 0.0)
        chunk = self.cfg.chunk_rows if info.key else None
        if not info.key:
            self.log.info("snapshot: %s has no primary key: read in one pass, which cannot be resumed by chunk",
                          name)
            if (self.view.file, self.view.pos) != (state["position"]["file"], state["position"]["pos"]):
                self.log.warning("snapshot: %s (no primary key) is read again in a later view than the stream's "
                                 "start: its changes between %s:%d and %s:%d may be delivered twice", name,
                                 state["position"]["file"], state["position"]["pos"], self.view.file, self.view.pos)
        total = max(1, -(-info.rows_estimate // chunk)) if chunk else 1
        chunks, began, last_line, rows_now = 0, time.monotonic(), time.monotonic(), 0
        renewed = 0
        reader = ChunkReader(info)
        pending: asyncio.Future | None = None   # the next chunk's query, sent before this chunk is written
        try:
            while True:
                if daemon.stopping.is_set():  # the last chunk is committed: stop here
                    raise _Stop
                try:
                    got = await (pending or self._fetch(reader, state["last"], chunk))
                    pending = None
                except pymysql.err.MySQLError as exc:
                    pending = None
                    code = exc.args[0] if exc.args else 0
                    if code == ER_NO_SUCH_TABLE:
                        self.log.warning("snapshot: %s was dropped while it was read; its DROP is in the stream",
                                         name)
                        return await self._table_done(name, rows_now, time.monotonic() - began)
                    if code != ER_TABLE_DEF_CHANGED or renewed >= 3:
                        raise
                    renewed += 1
                    self.log.info("snapshot: %s changed definition after the read view opened: renewing the view",
                                  name)
                    await _query(self.conn, "ROLLBACK")
                    await self._open_view()
                    info = await describe(self.conn, schema, table) or info
                    reader = ChunkReader(info)
                    continue
                renewed = 0
                rows, last = got
                n = len(rows)
                full = chunk is not None and n == chunk
                if full and self.fast:  # the server reads the next chunk while this one is written
                    pending = asyncio.ensure_future(self._fetch(reader, last, chunk))
                    await asyncio.sleep(0)
                self._write(reader, info, rows)
                chunks += 1
                rows_now += n
                state["rows"] += n
                if last is not None:
                    state["last"] = last
                if full:
                    await self._commit(state)
                daemon.metrics.snapshot_chunk(name, n, chunks, total)
                if not full:
                    return await self._table_done(name, rows_now, time.monotonic() - began)
                if time.monotonic() - last_line >= _PROGRESS_SECONDS:
                    last_line = time.monotonic()
                    rate = rows_now / max(1e-6, last_line - began)
                    left = max(0, info.rows_estimate - state["rows"])
                    self.log.info("snapshot: %s: %d rows so far (%.0f rows/s), about %.0fs left", name,
                                  state["rows"], rate, left / rate if rate else 0.0)
        finally:
            if pending is not None:  # the connection is mid-result: it is closed with the snapshot
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    async def _fetch(self, reader: ChunkReader, after: list | None, limit: int | None) -> tuple[list, list | None]:
        """One chunk's rows (row packets on the fast path, PyMySQL tuples else) and last key, then the chunk's
        metadata lock released."""
        if self.fast:
            got = await reader.fetch(self.conn, after, limit)
        else:
            rows = await read_chunk(self.conn, reader.info, after, limit)
            got = rows, (reader.info.last_key(rows[-1]) if rows and reader.info.key else None)
        await release(self.conn)
        return got

    def _write(self, reader: ChunkReader, info, rows) -> None:
        """Give the sink the change events of one chunk's rows (see :meth:`_fetch`): on the fast path as JSON
        lines in one call when it takes them (``change_lines``: the JSON-lines sink), else one by one."""
        source, ts, sink = self._source(), self.state["view"].get("ts", self.view_ts), self.daemon.sink
        if self.fast:
            take = getattr(sink, "change_lines", None)
            if take is not None and reader.write_lines(rows, source, ts, self.state["rows"], take):
                return
            changes = reader.changes(rows, source, ts, self.state["rows"])
        else:
            changes = info.changes(rows, source, ts, self.state["rows"])
        for item in changes:
            sink.change(item)

    async def _table_done(self, name: str, rows: int, elapsed: float) -> None:
        """Commit the table's last chunk with the table marked done; log rows, time, rate and an ETA."""
        state = self.state
        total_rows = state["rows"]
        state.update(done=state["done"] + 1, last=None, rows=0)
        await self._commit(state)
        rate = rows / elapsed if elapsed > 0 else 0.0
        self.run_rows += rows
        overall = self.run_rows / max(1e-6, time.monotonic() - self.run_began)
        left = sum(self.estimates.get(tuple(t), 0) for t in state["tables"][state["done"]:])
        self.log.info("snapshot: %s: %d rows (%d in this run) in %.1fs, %.0f rows/s; %d of %d tables done, "
                      "ETA %.0fs (about %d rows left)", name, total_rows, rows, elapsed, rate, state["done"],
                      len(state["tables"]), left / overall if overall else 0.0, left)

    def _source(self) -> dict:
        """The ``source`` of this view's rows (``row`` is added per row)."""
        view = self.view
        return {"server_id": self.info.server_id, "file": view.file, "pos": view.pos,
                "gtid": view.gtid_list or view.gtid_set or None, "snapshot": True}

    async def _commit(self, state: dict | None) -> None:
        """Commit what the sink holds like a transaction: flush now, sync and save the checkpoint (position P1,
        the snapshot's ``state``; None once it is done) in the committer's worker.

        Raises:
            SinkError, CheckpointError: this or an earlier sync failed.
        """
        committer = self.daemon.committer
        p1 = Position.from_dict(self.state["position"])
        snapshot = None if state is None else {k: v for k, v in state.items()}
        resume = ResumeState(p1, self.state.get("by_gtid", self.by_gtid), None, self.resume.source, None, snapshot)
        token = committer.flush(resume)
        committer.sync(token)
        if committer.failed:
            await committer.settle()


class LockRefused(SourceError):
    """The server has no ``Binlog_snapshot_position`` and refused ``FLUSH TABLES WITH READ LOCK``."""


class _Stop(Exception):
    """A stop was asked for between two chunks (the last is committed)."""


def _is_server_error(exc: BaseException) -> bool:
    import pymysql

    return isinstance(exc, (pymysql.err.MySQLError, OSError))
