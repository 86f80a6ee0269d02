"""The initial snapshot: the selected tables' rows, then the stream from the point they are consistent with.

ARCHITECTURE.md ("Snapshots: exactly once") has the argument; in short:

- the read view and its binlog position P1 come from ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and,
  on MariaDB/Percona, ``Binlog_snapshot_file/position`` (no lock); on MySQL from ``SHOW MASTER STATUS``
  read under ``FLUSH TABLES WITH READ LOCK``, the transaction opened inside the lock (:func:`.views.open_view`);
- each table is read in primary-key chunks of ``[snapshot] chunk_rows``; each chunk's ``op: "read"`` events
  go to the sink and are committed like a transaction: the checkpoint's ``position`` is P1 and its
  ``snapshot`` object the progress (``tables``, ``done``, ``last`` key, ``rows`` of the current table,
  ``view``: the position of the view the rows are read in);
- after a crash the sink is back at the last chunk's commit; the snapshot goes on after the checkpointed key
  in a new view P2 >= P1, and the stream starts at P1 once the last table is done (reads are upserts);
- a big table with a one-column integer key is read in ``[snapshot] readers`` key ranges at once, each on
  its own connection and view (a later one than P1, as after a crash; on MySQL one opened with P1's, inside
  the same lock: :mod:`.readers`, :mod:`.ranges`), each range's progress in the checkpoint's ``ranges``.

:func:`run` is the daemon's one call: it runs or resumes a snapshot when one is due and returns the state
the session streams from.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from binlogd.daemon.replication.connection import SourceError
from binlogd.daemon.replication.schemaqueries import SYSTEM_SCHEMAS
from binlogd.daemon.snapshot.context import SnapshotContext
from binlogd.daemon.snapshot.ranges import Chunk, RangeReader, all_at_once, key_ranges
from binlogd.daemon.snapshot.readers import Readers
from binlogd.daemon.snapshot.servererrors import is_server_error, server_error
from binlogd.daemon.snapshot.tables import TableInfo, describe
from binlogd.daemon.snapshot.views import LockRefused, Reader, as_text, binlog_end, query, release
from binlogd.daemon.state import ResumeState
from binlogd.library.identity import snapshot_prefix
from binlogd.protocol.position import Position

_PROGRESS_SECONDS = 30.0                   # a progress line this often while one table is read


async def run(ctx: SnapshotContext, info, resume: ResumeState) -> ResumeState:
    """Run the initial snapshot when one is due: none is checkpointed yet and ``[snapshot] mode = "initial"``,
    or the checkpoint has an unfinished one (``resume.snapshot``).

    Args:
        ctx: what the snapshot uses of the daemon (:class:`SnapshotContext`).
        info: the session's :class:`~binlogd.daemon.replication.connection.ServerInfo`.
        resume: where the session would start without a snapshot.
    Returns:
        Where the session streams from: ``resume`` when no snapshot was due, else the snapshot's position P1;
        when no lock is to be had
        (FTWRL refused), the binlog's end with an ``incremental`` state naming the tables to read instead.
    Raises:
        SourceError: the server refused (fatal: no privilege; FTWRL refused while resuming a snapshot begun
            with it) or the connection was lost.
        SinkError, CheckpointError: a chunk could not be committed (the session is retried from the last one).
    """
    committer = ctx.committer
    if committer.durable is None:
        if ctx.config.mode != "initial":
            return resume
        if not ctx.sink.wants_rows:
            ctx.log.warning("snapshot: the %s sink takes no rows: no snapshot is taken", ctx.sink_kind)
            return resume
    elif resume.snapshot is None:
        return resume
    snapshot = Snapshot(ctx, info, resume)
    ctx.sink.bulk(True)
    try:
        await snapshot.run()
    finally:
        try:
            ctx.sink.bulk(False)
        finally:
            await snapshot.readers.close()
    if snapshot.instead is not None:
        p1, incremental = snapshot.instead
        by_gtid = resume.by_gtid or bool(info.gtid_mode and p1.gtid_set)
        return dataclasses.replace(resume, position=p1, by_gtid=by_gtid, incremental=incremental, skip_before=None)
    return dataclasses.replace(committer.durable, by_gtid=resume.by_gtid or committer.durable.by_gtid,
                               source=resume.source)


@dataclasses.dataclass
class TableRun:
    """One table's reading in this run, shared by its key ranges' readers.

    Fields: name (``schema.table``), info (its :class:`TableInfo`), total (chunks estimated), chunks and rows
    (read in this run), began and logged (monotonic seconds: start, last progress line), gone (the table was
    dropped while it was read).
    """

    name: str
    info: TableInfo
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
            time), ``run`` (0, then one more at each resume: the rows' ids name it), ``read_views`` (``[{"table":
            [schema, table], "file", "pos"}, ...]``: the view each table without a key was read in whole);
            ``ranges`` while the current table is read in key ranges at once: ``[{"last": key after which the
            range's next chunk starts, "upto": its last key or None (no end), "done"}, ...]``.
        readers: the connections, each in its own view (:class:`~.readers.Readers`): the main one's is P1's
            view (the schema's and the table list's).
        instead: when FTWRL was refused: (P1, the ``incremental`` state) to stream from instead.
    """

    def __init__(self, ctx: SnapshotContext, info, resume: ResumeState):
        self.ctx, self.info, self.resume = ctx, info, resume
        self.cfg, self.log = ctx.config, ctx.log
        self.state: dict = dict(resume.snapshot or {})
        self.readers = Readers(ctx, info.flavor, self._main_view)
        self.row_image: str | None = None        # @@binlog_row_image, once asked (:meth:`_full_images`)
        self.by_gtid = resume.by_gtid
        self.fast = ctx.binlogd_format           # rows off the wire, straight to JSON
        self.estimates: dict[tuple[str, str], int] = {}   # information_schema's row count of each table
        self.run_rows, self.run_began = 0, time.monotonic()  # rows read by this run, for the ETA
        self.instead: tuple[Position, dict] | None = None

    @property
    def conn(self):
        """The main reader's connection."""
        return self.readers.main.conn

    @property
    def view(self) -> Position:
        """The main reader's view."""
        return self.readers.main.view

    def _main_view(self, reader: Reader) -> None:
        self.state["view"] = reader.view.to_dict() | {"ts": reader.ts}

    # ------------------------------------------------------------------ the run
    async def run(self) -> None:
        """Open the views, begin or resume, read every table left, and mark the snapshot done (a stop cancels
        it: the daemon's sessions are cancelled until they stream; the next start goes on after the last commit).

        Raises:
            as :func:`run`.
        """
        self.ctx.metrics.snapshot_state(1)
        try:
            if await self._start():
                await self._read_tables()
        except SourceError:
            raise
        except Exception as exc:
            if is_server_error(exc):
                raise server_error(exc, "reading the tables") from None
            raise

    async def _start(self) -> bool:
        """Open the main reader's view and the key range readers' (beside it, or on MySQL with it), then begin a
        new snapshot or resume the checkpointed one. False: FTWRL was refused, :attr:`instead` says what then."""
        new = not self.state
        try:
            await self.readers.start(self.cfg.readers)
        except LockRefused as exc:
            if not new:
                raise
            await self._incremental_instead(str(exc))
            return False
        if self.readers.lock_free:  # opened while the schema is seeded and the first tables are read
            self.readers.prepare(self.cfg.readers)
        if new:
            await self._begin()
        else:
            await self._resume()
        return True

    async def _read_tables(self) -> None:
        """Read the tables left, then commit the snapshot done and end the views."""
        tables, state = self.state["tables"], self.state
        while state["done"] < len(tables):
            await self._table(*tables[state["done"]])
        await self._commit(None)
        await self.ctx.committer.settle()
        p1, runs = state["position"], state.get("run", 0)
        self.log.info("snapshot: done, %d tables in %.1fs%s; streaming from %s:%d", len(tables),
                      time.monotonic() - self.run_began, f" (this run; resumed {runs} times)" if runs else "",
                      p1["file"], p1["pos"])
        self.ctx.metrics.snapshot_state(2)
        await self.readers.end()

    def _where(self) -> str:
        """Where the current table's reading stands, for the log: after which key (in each key range)."""
        ranges = self.state.get("ranges")
        if not ranges:
            return f"after key {self.state.get('last')}"
        return "in key ranges " + ", ".join("done" if r["done"] else f"after {r['last']}" if r["last"] else
                                            "from the start" for r in ranges)

    async def _begin(self) -> None:
        """A new snapshot at the view just opened: list the tables, seed the schema history at P1, and make the
        first commit (no rows yet), so the sink's cut-back on a restart covers every row written after it."""
        ctx, p1 = self.ctx, self.view
        names, keyless = await self._selected()
        ordered = [n for n in names if n in keyless] + [n for n in names if n not in keyless]
        self.by_gtid = bool(p1.gtid_list) if self.info.flavor == "mariadb" else bool(self.info.gtid_mode and
                                                                                      p1.gtid_set)
        self.state.update(position=p1.to_dict(), by_gtid=self.by_gtid, tables=[list(n) for n in ordered], done=0,
                          last=None, rows=0, started=time.time())
        if ctx.start_kind != "current":
            self.log.warning("snapshot: source.start is not used: the stream starts where the snapshot is "
                             "consistent, %s:%d", p1.file, p1.pos)
        self.log.info("snapshot: %d tables at %s:%d (%d without a primary key, read first in one pass each: "
                      "they cannot be resumed by chunk)", len(ordered), p1.file, p1.pos, len(keyless))
        if ctx.schema is not None:  # the history seeded at P1, from the definitions as the view opened
            await ctx.schema.open(p1.file, p1.pos)
        await self._commit(self.state)
        await ctx.committer.settle()
        ctx.checkpointed()  # a durable checkpoint exists: a new session resumes from it

    async def _resume(self) -> None:
        """The checkpointed snapshot goes on in the view just opened, as a new run (committed before any row)."""
        self.ctx.checkpointed()  # the checkpoint is durable: after an error the sink reopens at it
        self.state["run"] = self.state.get("run", 0) + 1  # rows read from here are this run's changes
        await self._commit(self.state)
        await self._estimate()
        p1 = self.state["position"]
        self.log.info("snapshot: resuming at table %d of %d %s, in a new read view at %s:%d (the stream starts at "
                      "%s:%d, where the snapshot began)", self.state["done"] + 1, len(self.state["tables"]),
                      self._where(), self.view.file, self.view.pos, p1["file"], p1["pos"])

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
        names = [n for n in await self._estimate() if self.ctx.selected(*n)]
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
        """Read the rest of one table, chunk by chunk (in key ranges at once where :meth:`_split` splits it),
        each chunk committed; then mark it done."""
        state, name = self.state, f"{schema}.{table}"
        info = await describe(self.conn, schema, table)
        if info is None:
            self.log.warning("snapshot: %s is gone (dropped since the snapshot began); its DROP is in the stream",
                             name)
            return await self._table_done(name, 0, 0.0)
        if not info.key:
            self._warn_keyless(name)
        chunk = self.cfg.chunk_rows if info.key else None
        run = TableRun(name, info, max(1, -(-info.rows_estimate // chunk)) if chunk else 1)
        if chunk and state["last"] is None and "ranges" not in state:
            ranges = await self._split(info)
            if ranges:
                state["ranges"] = ranges
                self.log.info("snapshot: %s: read in %d key ranges at once", name, len(ranges))
        if state.get("ranges"):
            if not info.integer_key:
                raise SourceError("misconfigured", f"snapshot: {name}'s primary key changed while it was read in "
                                  "key ranges: its snapshot cannot go on (move the checkpoint and the sink away "
                                  "to start over)", fatal=True)
            await self._read_ranges(run)
        elif not info.key:
            await self._whole(run)
            if not run.gone:
                self._read_view(schema, table)
        else:
            await self._range(self.readers.main, run, None)
        if run.gone:
            self.log.warning("snapshot: %s was dropped while it was read; its DROP is in the stream", name)
        await self._table_done(name, run.rows, time.monotonic() - run.began)

    def _read_view(self, schema: str, table: str) -> None:
        """Name in the state (``read_views``, committed with the table done) the view a table without a key was
        read in whole: a sink that applies its rows without a key skips the stream's changes of it before there."""
        view = self.readers.main.view
        views = [v for v in self.state.get("read_views", ()) if v["table"] != [schema, table]]
        self.state["read_views"] = [*views, {"table": [schema, table], "file": view.file, "pos": view.pos}]

    def _warn_keyless(self, name: str) -> None:
        """Log that a table without a key is read in one pass (and may be delivered twice when not in P1's view)."""
        p1 = self.state["position"]
        self.log.info("snapshot: %s has no primary key: read in one pass, which cannot be resumed by chunk", name)
        if (self.view.file, self.view.pos) != (p1["file"], p1["pos"]):
            self.log.warning("snapshot: %s (no primary key) is read again in a later view than the stream's "
                             "start: its changes between %s:%d and %s:%d may be delivered twice (the mirror "
                             "skips them)", name,
                             p1["file"], p1["pos"], self.view.file, self.view.pos)

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

    async def _split(self, info: TableInfo) -> list[dict] | None:
        """The key ranges to read ``info`` in at once, one per reader (``[snapshot] readers``), or None: one
        reader reads it. Only a table of at least two chunks per reader with a one-column integer key is split
        (:func:`~.ranges.key_ranges`), and only where the readers have views: where a view needs no lock
        (MariaDB, Percona) each reader's is a later one than P1, as after a crash (ARCHITECTURE.md); on Oracle
        MySQL they were opened with the main one, at P1 (:meth:`Readers.start`).

        Raises:
            pymysql.err.Error, OSError: a query failed.
        """
        n = self.cfg.readers
        if (n < 2 or not self.readers.ranges or not info.integer_key
                or info.rows_estimate < 2 * n * self.cfg.chunk_rows or not await self._full_images()):
            return None
        return await key_ranges(self.conn, info, n)

    async def _read_ranges(self, run: TableRun) -> None:
        """Read the key ranges (``state["ranges"]``) that are not done, each by the first reader free: the main
        reader and those of earlier tables at once, the others as their connections come (one reader per range
        at most). A reader that cannot connect (``max_user_connections``, say) leaves the ranges to the others.

        Raises:
            as :meth:`_range`.
        """
        ranges, readers = self.state["ranges"], self.readers
        todo = collections.deque(i for i, at in enumerate(ranges) if not at["done"])
        readers.prepare(len(ranges))
        waiting = readers.spares[:max(0, len(ranges) - len(readers.open))]

        async def read(reader: Reader) -> None:
            while todo:
                await self._range(reader, run, todo.popleft())

        async def connect_then_read(spare) -> None:
            reader = await readers.take(spare)
            if reader is not None:
                await read(reader)

        await all_at_once([read(reader) for reader in readers.open[:len(ranges)]]
                          + [connect_then_read(spare) for spare in waiting])

    async def _range(self, reader: Reader, run: TableRun, index: int | None) -> None:
        """Read one key range of the table (``state["ranges"][index]``; None: the whole table after
        ``state["last"]``) on ``reader``, chunk by chunk, each handed to the sink and committed
        (:meth:`_chunk_done`); return when it is read or the table is gone (``run.gone``).

        Raises:
            pymysql.err.Error, OSError: a query failed.
        """
        info = run.info
        if reader is not self.readers.main:  # its own view, opened after the main one's: described in it
            info = await describe(reader.conn, info.schema, info.table) or info
            await release(reader.conn)
        at = self.state["ranges"][index] if index is not None else {"last": self.state["last"], "upto": None}
        ranger = RangeReader(self.readers, reader, info, at["last"], at["upto"], self.cfg.chunk_rows, self.fast)
        try:
            more = True
            while more:
                chunk = await ranger.next()
                if chunk is None:
                    run.gone = True
                    return
                self._write(ranger, chunk, not chunk.full and self._last_range(index))
                more = await self._chunk_done(run, index, ranger, chunk)
        finally:
            await ranger.close()

    async def _chunk_done(self, run: TableRun, index: int | None, ranger: RangeReader, chunk: Chunk) -> bool:
        """The commit policy, after a chunk went to the sink: its progress goes in the state (the key read up to;
        a key range done when its chunk was short) and is committed, but for a whole table's last chunk, which is
        committed with the table done (:meth:`_table_done`); then the sink's room is awaited, the metrics move
        and a progress line is logged every :data:`_PROGRESS_SECONDS`.

        Returns:
            Whether more chunks follow (the chunk was full).
        Raises:
            SinkError, CheckpointError: as :meth:`_commit`; SinkError: the sink had no room in time.
        """
        state, n, sink = self.state, len(chunk.rows), self.ctx.sink
        run.chunks += 1
        run.rows += n
        state["rows"] += n
        if index is None:
            state["last"] = ranger.last
        else:
            state["ranges"][index] = {"last": ranger.last, "upto": ranger.upto, "done": not chunk.full}
        if chunk.full or index is not None:
            await self._commit(state)
        if sink.over():
            await sink.room()
        self.ctx.metrics.snapshot_chunk(run.name, n, run.chunks, run.total)
        if chunk.full and time.monotonic() - run.logged >= _PROGRESS_SECONDS:
            run.logged = time.monotonic()
            rate = run.rows / max(1e-6, run.logged - run.began)
            left = max(0, run.info.rows_estimate - state["rows"])
            self.log.info("snapshot: %s: %d rows so far (%.0f rows/s), about %.0fs left", run.name,
                          state["rows"], rate, left / rate if rate else 0.0)
        return chunk.full

    def _last_range(self, index: int | None) -> bool:
        """Whether the current table is the snapshot's last and the key range ``index`` (None: the whole table) the
        last of it still read."""
        state = self.state
        return state["done"] == len(state["tables"]) - 1 and (
            index is None or all(at["done"] for i, at in enumerate(state["ranges"]) if i != index))

    async def _whole(self, run: TableRun) -> None:
        """Read a table without a key in one pass of the main reader's view (:meth:`_keyless`), the view renewed
        when the table changed definition under it (``run.gone``: it was dropped).

        Raises:
            pymysql.err.Error, OSError: a query failed.
        """
        import pymysql

        ranger = RangeReader(self.readers, self.readers.main, run.info, None, None, self.cfg.chunk_rows, False)
        while True:
            try:
                await self._keyless(ranger.reader, run, ranger.info)
                break
            except pymysql.err.MySQLError as exc:
                if not await ranger.retry(exc):
                    run.gone = True
                    return
        self.ctx.metrics.snapshot_chunk(run.name, run.rows, 1, 1)

    async def _keyless(self, reader: Reader, run: TableRun, info: TableInfo) -> None:
        """Read a table without a key in one pass of ``reader``'s view, on an unbuffered cursor: its rows go to the
        sink ``chunk_rows`` at a time (memory stays bounded), and are committed with the table done.

        Raises:
            pymysql.err.Error, OSError: a query failed (before any row was handed over, when the server refuses it).
        """
        import aiomysql

        source, ts, sink, state = reader.source(self.info.server_id), reader.ts, self.ctx.sink, self.state
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

    def _write(self, ranger: RangeReader, chunk: Chunk, final: bool = False) -> None:
        """Give the sink the change events of one chunk's rows, read in ``ranger``'s view: on the fast path as the
        server sent them when the sink takes them so (``text_rows``: the mirror), else as JSON lines in one call
        when it takes those (``change_lines``: the "binlogd" format's sinks), else as change dicts one by one. Their
        ids: :func:`library.identity.snapshot_prefix` of the table and run. ``final``: the snapshot's last chunk,
        whose last row's ``source.snapshot`` is ``"last"``."""
        rows, info, sink, state = chunk.rows, ranger.info, self.ctx.sink, self.state
        if not len(rows):
            return
        source, ts, first = ranger.reader.source(self.info.server_id), ranger.reader.ts, state["rows"]
        prefix = snapshot_prefix(state["done"], state.get("run", 0))
        if self.fast:
            if sink.text_rows(rows, info.columns, count=len(rows), prefix=prefix, first=first, schema=info.schema,
                              table=info.table):
                return
            lines = ranger.rows.lines(rows, source, ts, first, prefix, last=final)
            if sink.change_lines(lines, count=len(rows), prefix=prefix, first=first, schema=info.schema,
                                 table=info.table):
                return
            changes = ranger.rows.changes(rows, source, ts, first, prefix)
        else:
            changes = list(info.changes(rows, source, ts, first, prefix))
        if final:
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
        committer = self.ctx.committer
        p1 = Position.from_dict(self.state["position"])
        snapshot = None if state is None else dict(state)
        if snapshot is not None and "ranges" in snapshot:  # its entries are replaced, never changed
            snapshot["ranges"] = list(snapshot["ranges"])
        resume = ResumeState(p1, self.state.get("by_gtid", self.by_gtid), None, self.resume.source, None, snapshot)
        token = committer.flush(resume)
        committer.sync(token)
        if committer.failed:
            await committer.settle()
