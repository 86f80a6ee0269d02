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
  in a new view P2 >= P1, and the stream starts at P1 once the last table is done (reads are upserts);
- a big table with a one-column integer key is read in ``[snapshot] readers`` key ranges at once, each on
  its own connection and view (a later one than P1, as after a crash), each range's progress in the
  checkpoint's ``ranges``.

:func:`run` is the daemon's one call: it runs or resumes a snapshot when one is due and returns the state
the session streams from.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time

from binlogd.daemon.replication.connection import SourceError, admin_connection
from binlogd.daemon.replication.schemaqueries import SYSTEM_SCHEMAS
from binlogd.daemon.snapshot.tables import describe, quote_name, raw_connection, read_chunk
from binlogd.daemon.snapshot.views import LockRefused, Reader, as_text, binlog_end, open_view, query, release
from binlogd.daemon.snapshot.wire import ChunkReader
from binlogd.daemon.state import ResumeState
from binlogd.daemon.tasks import close_tasks
from binlogd.library.identity import snapshot_prefix
from binlogd.protocol.position import Position

ER_TABLE_DEF_CHANGED = 1412
ER_NO_SUCH_TABLE = 1146
_DENIED = (1044, 1045, 1142, 1143, 1227)   # access denied to a database, table, column, or a privilege
_LOST = (2006, 2013, 2003, 2055)
_PROGRESS_SECONDS = 30.0                   # a progress line this often while one table is read


async def run(daemon, info, endpoint: str, resume: ResumeState) -> ResumeState:
    """Run the initial snapshot when one is due: none is checkpointed yet and ``[snapshot] mode = "initial"``,
    or the checkpoint has an unfinished one (``resume.snapshot``).

    Args:
        daemon: the :class:`~binlogd.daemon.service.Daemon` (cfg, sink, committer, metrics, log, schema,
            stopping, its current source).
        info: the session's :class:`~binlogd.daemon.replication.connection.ServerInfo`.
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
        try:
            daemon.sink.bulk(False)
        finally:
            await snapshot.close()
    if snapshot.instead is not None:
        p1, incremental = snapshot.instead
        by_gtid = resume.by_gtid or bool(info.gtid_mode and p1.gtid_set)
        return dataclasses.replace(resume, position=p1, by_gtid=by_gtid, incremental=incremental, skip_before=None)
    return dataclasses.replace(daemon.committer.durable, by_gtid=resume.by_gtid or daemon.committer.durable.by_gtid,
                               source=resume.source)


def server_error(exc: BaseException, doing: str) -> SourceError:
    """A pymysql/OS error of the snapshot's connection as a SourceError (fatal when retrying cannot help)."""
    code = exc.args[0] if getattr(exc, "args", None) and isinstance(exc.args[0], int) else 0
    if code in _DENIED:
        return SourceError("misconfigured", f"snapshot: {doing}: {exc.args[-1]} (the user needs SELECT on the "
                           "tables it reads, and RELOAD on MySQL)", fatal=True)
    kind = "connection" if code in _LOST or isinstance(exc, OSError) or not code else "server"
    return SourceError(kind, f"snapshot: {doing}: {exc}")


@dataclasses.dataclass
class _TableRun:
    """One table's reading in this run, shared by its key ranges' readers.

    Fields: name (``schema.table``), info (its :class:`TableInfo`), chunk (rows per chunk, None: one pass),
    total (chunks estimated), chunks and rows (read in this run), began and logged (monotonic seconds: start,
    last progress line), gone (the table was dropped while it was read).
    """

    name: str
    info: object
    chunk: int | None
    total: int
    chunks: int = 0
    rows: int = 0
    began: float = dataclasses.field(default_factory=time.monotonic)
    logged: float = dataclasses.field(default_factory=time.monotonic)
    gone: bool = False


class Snapshot:
    """One run of the initial snapshot (a new one, or the rest of a checkpointed one).

    Args: as :func:`run`.
    Fields:
        state: the checkpoint's ``snapshot`` object: ``position`` (P1), ``tables`` ([schema, table] in read
            order), ``done`` (tables finished), ``last`` (the current table's last key read, or None), ``rows``
            (rows of the current table read), ``view`` (position of the current read view), ``started`` (unix
            time), ``run`` (0, then one more at each resume: the rows' ids name it); ``ranges`` while the current
            table is read in key ranges at once: ``[{"last": key after
            which the range's next chunk starts, "upto": its last key or None (no end), "done"}, ...]``.
        readers: the connections, each in its own view: the first is the main one (P1's view, the schema's
            and the table list's); more are opened for the key ranges of a table (:meth:`_ranges`).
    """

    def __init__(self, daemon, info, endpoint: str, resume: ResumeState):
        self.daemon, self.info, self.endpoint, self.resume = daemon, info, endpoint, resume
        self.cfg = daemon.cfg.snapshot
        self.log: logging.Logger = daemon.log
        self.state: dict = dict(resume.snapshot or {})
        self.readers: list[Reader] = []
        self.spares: list[asyncio.Future] = []   # more readers being opened (:meth:`_open_spares`)
        self.row_image: str | None = None        # @@binlog_row_image, once asked (:meth:`_full_images`)
        self.gtids: dict[tuple[str, int], str] = {}   # BINLOG_GTID_POS of the views' positions (open_view)
        self.by_gtid = resume.by_gtid
        self.fast = daemon.cfg.sink.format == "binlogd"  # rows off the wire, straight to JSON
        self.estimates: dict[tuple[str, str], int] = {}   # information_schema's row count of each table
        self.run_rows, self.run_began = 0, time.monotonic()  # rows read by this run, for the ETA
        self.instead: tuple[Position, dict] | None = None  # FTWRL refused: (P1, the incremental state) instead

    @property
    def conn(self):
        """The main reader's connection."""
        return self.readers[0].conn

    @property
    def view(self) -> Position:
        """The main reader's view."""
        return self.readers[0].view

    async def close(self) -> None:
        ended = await close_tasks(*self.spares)
        self.readers += [spare.result() for spare, error in zip(self.spares, ended) if error is None]
        for reader in self.readers:
            reader.conn.close()
        self.readers, self.spares = [], []

    # ------------------------------------------------------------------ the run
    async def run(self) -> None:
        daemon = self.daemon
        daemon.metrics.snapshot_state(1)
        try:
            self.readers.append(Reader(await self._connect()))
            new = not self.state
            try:
                await self._open_view(self.readers[0])
            except LockRefused as exc:
                if not new:
                    raise
                return await self._incremental_instead(str(exc))
            self._open_spares()
            if new:
                await self._begin()
            else:
                daemon._started = True  # the checkpoint is durable: after an error the sink reopens at it
                self.state["run"] = self.state.get("run", 0) + 1  # rows read from here are this run's changes
                await self._commit(self.state)
                await self._estimate()
                p1 = self.state["position"]
                self.log.info("snapshot: resuming at table %d of %d %s, in a new read view at %s:%d (the stream "
                              "starts at %s:%d, where the snapshot began)", self.state["done"] + 1,
                              len(self.state["tables"]), self._where(), self.view.file, self.view.pos,
                              p1["file"], p1["pos"])
            tables = self.state["tables"]
            try:
                while self.state["done"] < len(tables):
                    await self._table(*tables[self.state["done"]])
            except _Stop:
                self.log.info("snapshot: stopped in table %d of %d %s; it resumes there", self.state["done"] + 1,
                              len(tables), self._where())
                await daemon.committer.settle()
                return
            await self._commit(None)
            await daemon.committer.settle()
            p1, runs = self.state["position"], self.state.get("run", 0)
            self.log.info("snapshot: done, %d tables in %.1fs%s; streaming from %s:%d", len(tables),
                          time.monotonic() - self.run_began, f" (this run; resumed {runs} times)" if runs else "",
                          p1["file"], p1["pos"])
            daemon.metrics.snapshot_state(2)
            for reader in self.readers:
                try:
                    await query(reader.conn, "ROLLBACK")  # a COMMIT would log the savepoint
                except Exception:  # noqa: BLE001 (the view is no longer needed; the connection closes anyway)
                    pass
        except SourceError:
            raise
        except Exception as exc:
            if is_server_error(exc):
                raise server_error(exc, "reading the tables") from None
            raise

    async def _connect(self):
        """A new connection for a reader (raw values).

        Raises:
            pymysql.err.Error, OSError: it could not be had.
        """
        conn = await admin_connection(self.daemon._source)
        try:
            await raw_connection(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_spares(self) -> None:
        """Begin opening the readers that key ranges need (``readers`` - 1, each with its own view), beside
        the schema's seeding and the first tables: only where a view needs no lock."""
        if self.readers[0].how == "binlog_snapshot":
            self.spares = [asyncio.ensure_future(self._spare()) for _ in range(self.cfg.readers - 1)]

    async def _spare(self) -> Reader:
        """A new reader in a new view.

        Raises:
            pymysql.err.Error, OSError: a query failed.
        """
        reader = Reader(await self._connect())
        try:
            await self._open_view(reader)
        except BaseException:
            reader.conn.close()
            raise
        return reader

    def _where(self) -> str:
        """Where the current table's reading stands, for the log: after which key (in each key range)."""
        ranges = self.state.get("ranges")
        if not ranges:
            return f"after key {self.state.get('last')}"
        return "in key ranges " + ", ".join("done" if r["done"] else f"after {r['last']}" if r["last"] else
                                            "from the start" for r in ranges)

    async def _open_view(self, reader: Reader) -> None:
        """A new consistent read view of ``reader`` (the main reader's first is P1, and the main reader's is the
        checkpoint's ``view``)."""
        reader.view, reader.how = await open_view(reader.conn, self.info.flavor, self.gtids)
        reader.ts = int(time.time())
        view = reader.view
        self.log.log(logging.INFO if reader is self.readers[0] else logging.DEBUG,  # a key range reader's: quiet
                     "snapshot: read view at %s:%d%s (%s)", view.file, view.pos,
                     f", GTID {view.gtid_list or view.gtid_set}" if view.gtid_list or view.gtid_set else "",
                     "no lock" if reader.how == "binlog_snapshot" else
                     "FLUSH TABLES WITH READ LOCK held while it opened")
        if reader is self.readers[0]:
            self.state["view"] = view.to_dict() | {"ts": reader.ts}

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
        rows = await query(self.conn, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                            f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ({skip}) "
                            "ORDER BY TABLE_SCHEMA, TABLE_NAME")
        self.estimates = {(as_text(s), as_text(t)): int(n or 0) for s, t, n in rows}
        return list(self.estimates)

    # ------------------------------------------------------------------ one table
    async def _table(self, schema: str, table: str) -> None:
        """Read the rest of one table, chunk by chunk (in key ranges at once where :meth:`_ranges` splits it),
        each chunk committed; then mark it done."""
        state, name = self.state, f"{schema}.{table}"
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
        run = _TableRun(name, info, chunk, max(1, -(-info.rows_estimate // chunk)) if chunk else 1)
        if chunk and state["last"] is None and "ranges" not in state:
            ranges = await self._ranges(info)
            if ranges:
                state["ranges"] = ranges
        ranges = state.get("ranges")
        if not ranges:
            await self._range(self.readers[0], run, None)
        else:
            if not info.integer_key:
                raise SourceError("misconfigured", f"snapshot: {name}'s primary key changed while it was read in "
                                  "key ranges: its snapshot cannot go on (move the checkpoint and the sink away "
                                  "to start over)", fatal=True)
            await self._read_ranges(run)
        if run.gone:
            self.log.warning("snapshot: %s was dropped while it was read; its DROP is in the stream", name)
        await self._table_done(name, run.rows, time.monotonic() - run.began)

    async def _full_images(self) -> bool:
        """Whether the server logs full row images (``binlog_row_image = FULL``), which a key range read in a
        later view needs (a row moved into it from another range after that range's view comes back whole
        only from the update's after image); logged once when not."""
        if self.row_image is None:
            rows = await query(self.conn, "SELECT @@GLOBAL.binlog_row_image")
            self.row_image = as_text(rows[0][0]).upper() if rows and rows[0][0] is not None else ""
            if self.row_image != "FULL":
                self.log.warning("snapshot: binlog_row_image is %s, not FULL: each table is read on one "
                                 "connection (key ranges read at once need full row images)", self.row_image)
        return self.row_image == "FULL"

    async def _read_ranges(self, run: _TableRun) -> None:
        """Read the key ranges (``state["ranges"]``) that are not done, each by the first reader free: the main
        reader and those of earlier tables at once, the others as their connections come (one reader per range
        at most). A reader that cannot connect (``max_user_connections``, say) leaves the ranges to the others.

        Raises:
            as :meth:`_range`.
        """
        ranges = self.state["ranges"]
        todo = collections.deque(i for i, at in enumerate(ranges) if not at["done"])
        while len(self.readers) + len(self.spares) < len(ranges):
            self.spares.append(asyncio.ensure_future(self._spare()))
        waiting = self.spares[:max(0, len(ranges) - len(self.readers))]

        async def read(reader: Reader) -> None:
            while todo:
                await self._range(reader, run, todo.popleft())

        async def connect_then_read(spare: asyncio.Future) -> None:
            try:
                reader = await spare   # kept in spares until it is a reader: close() finds it either way
            except Exception as exc:  # noqa: BLE001 (the other readers read the ranges)
                self.spares.remove(spare)
                self.log.warning("snapshot: no connection for another key range reader (%s): the other readers "
                                 "read its ranges", exc)
                return
            self.spares.remove(spare)
            self.readers.append(reader)
            await read(reader)

        await _all([read(reader) for reader in self.readers[:len(ranges)]]
                   + [connect_then_read(spare) for spare in waiting])

    async def _ranges(self, info) -> list[dict] | None:
        """The key ranges to read ``info`` in at once, one per reader (``[snapshot] readers``), or None: one
        reader reads it. Only a table of at least two chunks per reader with a one-column integer key is split,
        at equal steps between its least and greatest key, and only where a view needs no lock (MariaDB,
        Percona): each reader's view is a later one than P1, as after a crash (ARCHITECTURE.md).

        Raises:
            pymysql.err.Error, OSError: the query failed (but for a changed or dropped table: None).
        """
        n = self.cfg.readers
        if (n < 2 or self.readers[0].how != "binlog_snapshot" or not info.integer_key
                or info.rows_estimate < 2 * n * self.cfg.chunk_rows or not await self._full_images()):
            return None
        import pymysql

        key = quote_name(info.key[0])
        try:
            least, most = (await query(self.conn, f"SELECT MIN({key}), MAX({key}) FROM {quote_name(info.schema)}."
                                       f"{quote_name(info.table)}"))[0]
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in (ER_TABLE_DEF_CHANGED, ER_NO_SUCH_TABLE):
                return None   # one reader meets it again, and renews its view or finds the table gone
            raise
        await release(self.conn)
        if least is None or int(most) - int(least) < n:
            return None
        least, most = int(least), int(most)
        bounds = [least + (most - least) * i // n for i in range(1, n)]
        return [{"last": [str(bounds[i - 1])] if i else None, "upto": [str(bounds[i])] if i < n - 1 else None,
                 "done": False} for i in range(n)]

    async def _range(self, reader: Reader, run: _TableRun, index: int | None) -> None:
        """Read one key range of the table (``state["ranges"][index]``; None: the whole table after
        ``state["last"]``) on ``reader``, chunk by chunk, each committed; return when it is read (or the table is
        gone: ``run.gone``).

        Raises:
            _Stop: a stop was asked for (the last chunk is committed).
            pymysql.err.Error, OSError: a query failed.
        """
        import pymysql

        daemon, state, chunk, info = self.daemon, self.state, run.chunk, run.info
        if reader is not self.readers[0]:  # its own view, opened after the main one's: described in it
            info = await describe(reader.conn, info.schema, info.table) or info
            await release(reader.conn)
        at = state["ranges"][index] if index is not None else {"last": state["last"], "upto": None}
        last, upto = at["last"], at["upto"]
        renewed = 0
        reader_rows = ChunkReader(info)
        pending: asyncio.Future | None = None   # the next chunk's query, sent before this chunk is written
        try:
            while True:
                if daemon.stopping.is_set():  # the last chunk is committed: stop here
                    raise _Stop
                try:
                    if chunk is None:  # no key: one pass, handed to the sink part by part
                        await self._keyless(reader, run, info)
                        daemon.metrics.snapshot_chunk(run.name, run.rows, 1, 1)
                        return
                    got = await (pending or self._fetch(reader, reader_rows, last, chunk, upto))
                    pending = None
                except pymysql.err.MySQLError as exc:
                    pending = None
                    code = exc.args[0] if exc.args else 0
                    if code == ER_NO_SUCH_TABLE:
                        run.gone = True
                        return
                    if code != ER_TABLE_DEF_CHANGED or renewed >= 3:
                        raise
                    renewed += 1
                    self.log.info("snapshot: %s changed definition after the read view opened: renewing the view",
                                  run.name)
                    await query(reader.conn, "ROLLBACK")
                    await self._open_view(reader)
                    info = await describe(reader.conn, info.schema, info.table) or info
                    reader_rows = ChunkReader(info)
                    continue
                renewed = 0
                rows, key = got
                n = len(rows)
                full = chunk is not None and n == chunk
                if full and self.fast:  # the server reads the next chunk while this one is written
                    pending = asyncio.ensure_future(self._fetch(reader, reader_rows, key, chunk, upto))
                    await asyncio.sleep(0)
                self._write(reader, reader_rows, info, rows, not full and self._last_range(index))
                last = key if key is not None else last
                run.chunks += 1
                run.rows += n
                state["rows"] += n
                if index is None:
                    state["last"] = last
                else:
                    state["ranges"][index] = {"last": last, "upto": upto, "done": not full}
                if full or index is not None:  # a table's last chunk is committed with the table done
                    await self._commit(state)
                if daemon.sink.over():
                    await daemon.sink.room()
                daemon.metrics.snapshot_chunk(run.name, n, run.chunks, run.total)
                if not full:
                    return
                if time.monotonic() - run.logged >= _PROGRESS_SECONDS:
                    run.logged = time.monotonic()
                    rate = run.rows / max(1e-6, run.logged - run.began)
                    left = max(0, info.rows_estimate - state["rows"])
                    self.log.info("snapshot: %s: %d rows so far (%.0f rows/s), about %.0fs left", run.name,
                                  state["rows"], rate, left / rate if rate else 0.0)
        finally:
            await close_tasks(pending)  # a connection mid-result is closed with the snapshot

    def _last_range(self, index: int | None) -> bool:
        """Whether the current table is the snapshot's last and the key range ``index`` (None: the whole table) the
        last of it still read."""
        state = self.state
        return state["done"] == len(state["tables"]) - 1 and (
            index is None or all(at["done"] for i, at in enumerate(state["ranges"]) if i != index))

    async def _keyless(self, reader: Reader, run: _TableRun, info) -> None:
        """Read a table without a key in one pass of ``reader``'s view, on an unbuffered cursor: its rows go to the
        sink ``chunk_rows`` at a time (memory stays bounded), and are committed with the table done.

        Raises:
            pymysql.err.Error, OSError: a query failed (before any row was handed over, when the server refuses it).
        """
        import aiomysql

        source, ts, sink, state = reader.source(self.info.server_id), reader.ts, self.daemon.sink, self.state
        prefix = snapshot_prefix(state["done"], state.get("run", 0))
        async with reader.conn.cursor(aiomysql.SSCursor) as cur:
            await cur.execute(info.chunk_sql(None, None, reader.conn.escape))
            rows = await cur.fetchmany(self.cfg.chunk_rows)
            while rows:
                more = await cur.fetchmany(self.cfg.chunk_rows)  # none: these are the table's last
                changes = list(info.changes(rows, source, ts, state["rows"], prefix))
                if not more and self._last_range(None):
                    changes[-1]["source"]["snapshot"] = "last"
                for item in changes:
                    sink.change(item)
                state["rows"] += len(rows)
                run.rows += len(rows)
                if sink.over():
                    await sink.room()
                rows = more
        await release(reader.conn)

    async def _fetch(self, reader: Reader, rows: ChunkReader, after: list | None, limit: int | None,
                     upto: list | None) -> tuple[list, list | None]:
        """One chunk's rows on ``reader`` (row packets on the fast path, PyMySQL tuples else) and last key, then
        the chunk's metadata lock released."""
        conn = reader.conn
        if self.fast:
            got = await rows.fetch(conn, after, limit, upto)
        else:
            found = await read_chunk(conn, rows.info, after, limit, upto)
            got = found, (rows.info.last_key(found[-1]) if found and rows.info.key else None)
        await release(conn)
        return got

    def _write(self, reader: Reader, rows: ChunkReader, info, found, final: bool = False) -> None:
        """Give the sink the change events of one chunk's rows (see :meth:`_fetch`) read in ``reader``'s view: on
        the fast path as JSON lines in one call when it takes them (``change_lines``: the JSON-lines sink, which
        writes them in its own thread in a bulk load, while the next chunk's go into the reader's other
        buffer), else one by one. Their ids: :func:`library.identity.snapshot_prefix` of the table and run.
        ``final``: the snapshot's last chunk, whose last row's ``source.snapshot`` is ``"last"``."""
        source, ts, sink, state = reader.source(self.info.server_id), reader.ts, self.daemon.sink, self.state
        prefix = snapshot_prefix(state["done"], state.get("run", 0))
        if self.fast:
            take = getattr(sink, "change_lines", None)
            if not final and take is not None and take(rows.lines(found, source, ts, state["rows"], prefix)):
                return
            changes = rows.changes(found, source, ts, state["rows"], prefix)
        else:
            changes = list(info.changes(found, source, ts, state["rows"], prefix))
        if final and changes:
            changes[-1]["source"]["snapshot"] = "last"
        for item in changes:
            sink.change(item)

    async def _table_done(self, name: str, rows: int, elapsed: float) -> None:
        """Commit the table's last chunk with the table marked done; log rows, time, rate and an ETA."""
        state = self.state
        total_rows = state["rows"]
        state.update(done=state["done"] + 1, last=None, rows=0)
        state.pop("ranges", None)
        await self._commit(state)
        rate = rows / elapsed if elapsed > 0 else 0.0
        self.run_rows += rows
        overall = self.run_rows / max(1e-6, time.monotonic() - self.run_began)
        left = sum(self.estimates.get(tuple(t), 0) for t in state["tables"][state["done"]:])
        self.log.info("snapshot: %s: %d rows (%d in this run) in %.1fs, %.0f rows/s; %d of %d tables done, "
                      "ETA %.0fs (about %d rows left)", name, total_rows, rows, elapsed, rate, state["done"],
                      len(state["tables"]), left / overall if overall else 0.0, left)

    async def _commit(self, state: dict | None) -> None:
        """Commit what the sink holds like a transaction: flush now, sync and save the checkpoint (position P1,
        a copy of the snapshot's ``state``; None once it is done) in the committer's worker.

        Raises:
            SinkError, CheckpointError: this or an earlier sync failed.
        """
        committer = self.daemon.committer
        p1 = Position.from_dict(self.state["position"])
        snapshot = None if state is None else dict(state)
        if snapshot is not None and "ranges" in snapshot:  # its entries are replaced, never changed
            snapshot["ranges"] = list(snapshot["ranges"])
        resume = ResumeState(p1, self.state.get("by_gtid", self.by_gtid), None, self.resume.source, None, snapshot)
        token = committer.flush(resume)
        committer.sync(token)
        if committer.failed:
            await committer.settle()


async def _all(coros) -> None:
    """Run the coroutines at once; when one raises, the others are cancelled and its exception is raised (an
    error before a stop)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    if not tasks:
        return
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        ended = await close_tasks(*tasks)
    errors = [e for e in ended if e is not None and not isinstance(e, asyncio.CancelledError)]
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stop)), errors[0])


class _Stop(Exception):
    """A stop was asked for between two chunks (the last is committed)."""


def is_server_error(exc: BaseException) -> bool:
    import pymysql

    return isinstance(exc, (pymysql.err.MySQLError, OSError))
