"""Incremental snapshots while streaming: Debezium's signal table, read-only watermarks (DBLog).

``[snapshot] signal_table = "db.table"`` names a table with columns ``(id, type, data)``. The daemon sees its
INSERTs in the binlog (whatever ``[filters]`` selects; its own rows are delivered only when selected):

- ``type = 'execute-snapshot'``, ``data = '{"data-collections": ["db.t1"], "type": "incremental"}'`` queues
  those tables (each must be selected by ``[filters]``, exist and have a primary key, else it is refused with
  one log line and the stream goes on);
- ``type = 'stop-snapshot'``: ``data`` with ``data-collections`` takes those tables out, without: all.

Each table is read in primary-key chunks of ``[snapshot] chunk_rows`` (keyset, :mod:`.tables`), on an
admin connection of its own, at a transaction boundary of the stream (the consumer waits meanwhile):

1. the low watermark is the consumer's own position C at that boundary (at or before the server's binlog end
   when the chunk is read: a window at least as wide as DBLog's);
2. the chunk is SELECTed in a read view of its own (``START TRANSACTION WITH CONSISTENT SNAPSHOT``) and
   buffered by key;
3. the high watermark H is that view's binlog position where the server tells it (MariaDB, Percona:
   ``Binlog_snapshot_file/position``; the chunk is then exactly the binlog's prefix up to H, and a view
   before C, which misses a transaction the stream already passed, is read again), else the binlog end after
   the SELECT (``SHOW MASTER STATUS``/``SHOW BINARY LOG STATUS``) with its executed GTID set (MySQL): a stream
   resumed by GTID, whose position stays behind the transactions the server skipped, has reached H once it
   holds that set (Debezium's read-only watermarks);
4. the stream goes on; every row change of the table after C drops its keys (before and after image) from
   the buffer: the streamed change wins;
5. at the first transaction boundary at or after H, the rows left are written as ``op: "read"`` events
   (``source``: the stream's position, ``"snapshot": "incremental"``) and committed with the checkpoint,
   whose ``incremental`` object then names the chunk's last key; the next chunk follows.

ARCHITECTURE.md ("Incremental snapshots") argues why the replay (reads as upserts, changes in order) ends
equal to the table. A crash loses only the chunk not yet committed; it is read again after the checkpointed
key, so each key is read at most once into the sink.

The checkpoint's ``incremental`` object: ``tables`` ([schema, table] still to read, the current first),
``last`` (the current table's last key written, JSON-safe as :meth:`TableInfo.last_key` gives it, or None),
``rows`` (rows of the current table written), ``chunks`` (its chunks written), ``started`` (unix time).
"""

from __future__ import annotations

import logging
import time

import orjson

from binlogd.daemon.snapshot.context import SnapshotContext
from binlogd.daemon.snapshot.servererrors import (
    ER_NO_SUCH_TABLE,
    ER_TABLE_DEF_CHANGED,
    error_code,
    is_server_error,
    server_error,
)
from binlogd.daemon.snapshot.tables import TableInfo, describe, read_chunk
from binlogd.daemon.snapshot.views import binlog_end, consistent_snapshot, end_view
from binlogd.library.identity import incremental_prefix
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.position import is_before

_MISSING = object()
_BUDGET_SECONDS = 0.5       # chunks read and written in one boundary call at most this long (a caught-up stream)
_PROGRESS_SECONDS = 30.0    # a progress line this often while one table is read


def _run_now() -> int:
    """A new run's number: the time in milliseconds (a later run, a greater number)."""
    return time.time_ns() // 1_000_000


def _norm(value):
    """A key value as both sides compare it: int, str and bytes as they are, anything else as its text."""
    if value is None or isinstance(value, (int, str, bytes, float)):
        return value
    return str(value)


def _text(value) -> str | None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)


def parse_collection(name: str) -> tuple[str, str] | None:
    """``"db.table"`` (Debezium's ``data-collections`` entry; a leading catalog part is ignored) as
    (schema, table), or None when it is not one."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) < 2 or not parts[-2] or not parts[-1]:
        return None
    return parts[-2], parts[-1]


class Incremental:
    """One session's incremental snapshot: the signal table watched, the current chunk's buffer, the state.

    Args:
        ctx: what the snapshot uses of the daemon (:class:`SnapshotContext`: config, filters, sink, metrics,
            log, connections to the session's source).
        info: the session's :class:`~binlogd.daemon.replication.connection.ServerInfo`.
        state: the checkpoint's ``incremental`` object (None: none running).
    Fields:
        state: the snapshot's state as the next commit records it (None: none running); it moves only when a
            chunk's rows are written (and when a signal or a refusal changes the tables).
        signal: (schema, table) of the signal table.
        buffer: the current chunk's rows by key (None: no chunk read), ``high`` its high watermark.
    """

    def __init__(self, ctx: SnapshotContext, info, state: dict | None):
        self.ctx, self.info = ctx, info
        self.log: logging.Logger = ctx.log
        self.metrics, self.sink = ctx.metrics, ctx.sink
        schema, _, table = ctx.config.signal_table.partition(".")
        self.signal = (schema, table)
        self.state: dict | None = orjson.loads(orjson.dumps(state)) if state and state.get("tables") else None
        if self.state is not None:  # this session's chunks are another run's: their rows' ids say so
            self.state["run"] = max(self.state.get("run", 0) + 1, _run_now())
        self._chunks = 0  # chunks written in this run
        self.watched = {self.signal}
        self.buffer: dict | None = None
        self.high: tuple[str, int] = ("", 0)
        self.high_gtids = ""                   # MySQL: the executed GTID set at the high watermark
        self.chunk_last: list | None = None    # the last key the buffered chunk read
        self.chunk_full = False                # it read chunk_rows rows (more may follow)
        self.table: TableInfo | None = None
        self.conn = None
        self._began = self._last_line = 0.0
        self._session_rows = 0
        self._timing: tuple[str, str] | None = None   # the table the counters above are for
        if self.state is not None:
            t = self.state["tables"][0]
            self.log.info("incremental snapshot: resuming %s.%s after key %s (%d tables to go)", t[0], t[1],
                          self.state.get("last"), len(self.state["tables"]))
            self.metrics.snapshot_state(1)

    def close(self) -> None:
        """Close the chunk connection (the buffered chunk, not committed, is read again by the next session)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def saved(self) -> dict | None:
        """A copy of :attr:`state` for a commit (the committer saves it later, while the state moves on)."""
        return None if self.state is None else orjson.loads(orjson.dumps(self.state))

    # ------------------------------------------------------------------ the stream's side
    def observe(self, event) -> None:
        """A rows event of the stream (any table, before the filters): a signal, or changes that win over the
        buffered chunk's rows of the same keys."""
        name = (event.schema, event.table)
        if name not in self.watched:
            return
        if name == self.signal and event.kind == "insert":
            for row in event.rows:
                self._signal(row)
        table = self.table
        if self.buffer is not None and table is not None and name == (table.schema, table.table):
            self._drop(event)

    def _drop(self, event) -> None:
        buffer, key = self.buffer, self.table.key
        rows = event.rows
        images = [image for pair in rows for image in pair] if event.kind == "update" else rows
        for image in images:
            k = tuple(image.get(c, _MISSING) for c in key)
            if _MISSING in k:  # the key's columns are not named: the chunk is read again later
                self.log.warning("incremental snapshot: %s.%s: a streamed change has no named key columns (%s): "
                                 "the chunk is read again", event.schema, event.table, ", ".join(event.columns))
                self._forget_chunk()
                return
            buffer.pop(tuple(map(_norm, k)), None)

    def _signal(self, row: dict) -> None:
        """One INSERT into the signal table: execute-snapshot, stop-snapshot; other types are logged."""
        if "type" in row:
            sid, kind, data = row.get("id"), row.get("type"), row.get("data")
        else:  # columns not named (the signal table is not selected): (id, type, data) by position
            values = list(row.values()) + [None, None, None]
            sid, kind, data = values[0], values[1], values[2]
        sid, kind, data = _text(sid), (_text(kind) or "").strip().lower(), _text(data)
        try:
            data = orjson.loads(data) if data and data.strip() else {}
        except orjson.JSONDecodeError as exc:
            self.log.warning("incremental snapshot: signal %s (%s): data is not JSON (%s): ignored", sid, kind, exc)
            return
        if not isinstance(data, dict):
            self.log.warning("incremental snapshot: signal %s (%s): data is not a JSON object: ignored", sid, kind)
            return
        names = data.get("data-collections")
        if kind == "execute-snapshot":
            how = str(data.get("type", "incremental")).lower()
            if how != "incremental":
                self.log.warning("incremental snapshot: signal %s: snapshot type %r is not supported (only "
                                 "\"incremental\"): ignored", sid, how)
                return
            if not isinstance(names, list) or not names:
                self.log.warning("incremental snapshot: signal %s: no data-collections list: ignored", sid)
                return
            self._queue(sid, names)
        elif kind == "stop-snapshot":
            self._stop(sid, names if isinstance(names, list) else None)
        else:
            self.log.info("incremental snapshot: signal %s: type %r is not one binlogd acts on: ignored", sid, kind)

    def _queue(self, sid, names: list) -> None:
        queued = []
        tables = self.state["tables"] if self.state is not None else []
        for name in names:
            parsed = parse_collection(name)
            if parsed is None:
                self.log.warning("incremental snapshot: signal %s: %r is not 'database.table': refused", sid, name)
            elif not self.ctx.selected(*parsed):
                self.log.warning("incremental snapshot: %s.%s is not selected by [filters]: refused", *parsed)
            elif list(parsed) not in tables:
                tables.append(list(parsed))
                queued.append(".".join(parsed))
        if queued and self.state is None:
            self.state = {"tables": tables, "last": None, "rows": 0, "chunks": 0, "started": time.time(),
                          "run": _run_now()}
        if queued:
            self.metrics.snapshot_state(1)
            self.log.info("incremental snapshot: signal %s: queued %s (%d tables to go)", sid, ", ".join(queued),
                          len(tables))

    def _stop(self, sid, names: list | None) -> None:
        if self.state is None:
            self.log.info("incremental snapshot: signal %s: stop-snapshot, but none is running", sid)
            return
        tables = self.state["tables"]
        gone = [list(p) for p in map(parse_collection, names or []) if p is not None] if names else list(tables)
        if tables and tables[0] in gone:
            self._forget_chunk()
            self.table = None
            self.state.update(last=None, rows=0, chunks=0)
        left = [t for t in tables if t not in gone]
        self.log.info("incremental snapshot: signal %s: stopped %s (%d tables to go)", sid,
                      ", ".join(".".join(t) for t in tables if t in gone) or "nothing", len(left))
        self.state["tables"] = left
        if not left:
            self.state = None
            self.metrics.snapshot_state(2)

    def _forget_chunk(self) -> None:
        self.buffer, self.chunk_last = None, None
        self.watched = {self.signal}

    # ------------------------------------------------------------------ the chunks
    async def at_boundary(self, consumer) -> None:
        """At a transaction boundary of ``consumer`` (a :class:`~binlogd.daemon.delivery.consumer.Consumer`): write the
        buffered chunk once the stream reached its high watermark, then read the next chunk; when the stream is
        caught up, more chunks, for up to half a second.

        Raises:
            SourceError: the chunk connection failed (the session starts again from the checkpoint).
            SinkError, CheckpointError: the commit failed.
        """
        if self.state is None:
            return
        tracker, deadline = consumer.tracker, time.monotonic() + _BUDGET_SECONDS
        try:
            while self.state is not None:
                if self.buffer is not None:
                    if is_before(tracker.file, tracker.pos, *self.high) and not self._gtids_reached(tracker):
                        return
                    await self._write(consumer)
                elif consumer.stopping.is_set() or time.monotonic() > deadline:
                    return
                else:
                    if await self._read(tracker):  # a table refused or dropped: the tables to go changed
                        await consumer.commit(wait=False)
        except Exception as exc:
            if is_server_error(exc):
                self.close()
                raise server_error(exc, "incremental snapshot") from None
            raise

    def _gtids_reached(self, tracker) -> bool:
        """Whether the stream holds every transaction of the high watermark's GTID set (MySQL; else False)."""
        if not self.high_gtids:
            return False
        have = tracker.gtid_set
        return have.union(MysqlGtidSet.parse(self.high_gtids)) == have

    async def _table(self) -> TableInfo | None:
        """The current table, described when it changed; None when it was refused (taken out of the tables)."""
        schema, table = self.state["tables"][0]
        if self.table is not None and (self.table.schema, self.table.table) == (schema, table):
            return self.table
        info = await describe(self.conn, schema, table)
        why = "does not exist" if info is None else "has no primary key" if not info.key else None
        if why is not None:
            self.log.warning("incremental snapshot: %s.%s %s: refused (the stream goes on)", schema, table, why)
            self._next_table()
            return None
        self.table = info
        if self._timing == (schema, table):  # described again after a DDL
            return info
        self._timing, self._began, self._last_line, self._session_rows = (schema, table), time.monotonic(), \
            time.monotonic(), 0
        self.log.info("incremental snapshot: %s: reading in chunks of %d rows (about %d rows)%s", info.name,
                      self.ctx.config.chunk_rows, info.rows_estimate,
                      f", after key {self.state['last']}" if self.state["last"] is not None else "")
        return info

    async def _read(self, tracker) -> bool:
        """Read the current table's next chunk into the buffer, with its high watermark; the stream stands at a
        boundary of ``tracker`` (the low watermark). Returns True when the tables to go changed (one refused).

        In a consistent read view where the server tells its binlog position (MariaDB, Percona:
        ``Binlog_snapshot_file/position``), that position is the high watermark: the chunk is then exactly the
        binlog's prefix up to it. A view behind the stream (a transaction streamed but not yet visible) is
        dropped and the chunk read again. Elsewhere (MySQL) the binlog end after the SELECT is.
        """
        import pymysql

        if self.conn is None:
            self.conn = await self.ctx.raw_connection()
        info = await self._table()
        if info is None:
            return True
        limit, low = self.ctx.config.chunk_rows, (tracker.file, tracker.pos)
        try:
            cut = await consistent_snapshot(self.conn)
            try:
                raw = await read_chunk(self.conn, info, self.state["last"], limit)
                now = await describe(self.conn, info.schema, info.table)
            finally:
                await end_view(self.conn)
        except pymysql.err.MySQLError as exc:
            code = error_code(exc)
            if code == ER_TABLE_DEF_CHANGED:  # altered since the view opened: read again in a new one
                return False
            if code != ER_NO_SUCH_TABLE:
                raise
            self.log.warning("incremental snapshot: %s was dropped while it was read: refused", info.name)
            self._next_table()
            return True
        if now is None or (now.columns, now.types, now.key) != (info.columns, info.types, info.key):
            # a DDL since the table was described: the chunk may lack a column; read again as it is now
            self.log.info("incremental snapshot: %s changed definition: the chunk is read again", info.name)
            self.table = None
            return False
        if cut is not None and is_before(*cut, *low):
            return False  # the view misses a transaction the stream passed: read again
        self.high_gtids = ""
        if cut is None:  # no view position (MySQL): the binlog's end after the SELECT is the high watermark
            end = await binlog_end(self.conn)
            cut, self.high_gtids = (end.file, end.pos), end.gtid_set
        self.buffer = {}
        for r in raw:
            row = info.row(r)
            self.buffer[tuple(_norm(row[k]) for k in info.key)] = row
        self.chunk_last = info.last_key(raw[-1]) if raw else None
        self.chunk_full = len(raw) >= limit
        self.high = cut
        self.watched = {self.signal, (info.schema, info.table)}
        return False

    async def _write(self, consumer) -> None:
        """The buffered rows left as ``op: "read"`` events, committed with the state that names the chunk's last
        key (and the table done when the chunk was short)."""
        info, state, rows = self.table, self.state, list(self.buffer.values())
        tracker = consumer.tracker
        committed = tracker.committed
        source = {"server_id": self.info.server_id, "file": tracker.file, "pos": tracker.pos,
                  "gtid": committed.gtid_list or committed.gtid_set or None, "snapshot": "incremental"}
        ts, change, schema, table = int(time.time()), self.sink.change, info.schema, info.table
        prefix = incremental_prefix(tracker.file, tracker.pos, state["run"], self._chunks)
        self._chunks += 1
        for index, row in enumerate(rows, state["rows"]):
            change({"op": "read", "schema": schema, "table": table, "before": None, "after": row, "ts": ts,
                    "source": {**source, "row": index, "id": f"{prefix}:{index}"}})
            if self.sink.over():
                await self.sink.room()
        full, last = self.chunk_full, self.chunk_last
        self._forget_chunk()
        state["rows"] += len(rows)
        state["chunks"] += 1
        self._session_rows += len(rows)
        if last is not None:
            state["last"] = last
        chunk = self.ctx.config.chunk_rows
        self.metrics.snapshot_chunk(info.name, len(rows), state["chunks"],
                                    max(1, -(-info.rows_estimate // chunk)))
        if full:
            self._progress(info)
        else:
            elapsed = time.monotonic() - self._began
            self.log.info("incremental snapshot: %s: %d rows (%d in this run) in %.1fs, %.0f rows/s; %d tables "
                          "to go", info.name, state["rows"], self._session_rows, elapsed,
                          self._session_rows / elapsed if elapsed > 0 else 0.0, len(state["tables"]) - 1)
            self._next_table()
        await consumer.commit(wait=False)

    def _progress(self, info: TableInfo) -> None:
        now = time.monotonic()
        if now - self._last_line < _PROGRESS_SECONDS:
            return
        self._last_line = now
        rate = self._session_rows / max(1e-6, now - self._began)
        left = max(0, info.rows_estimate - self.state["rows"])
        self.log.info("incremental snapshot: %s: %d rows so far (%.0f rows/s), about %.0fs left", info.name,
                      self.state["rows"], rate, left / rate if rate else 0.0)

    def _next_table(self) -> None:
        """The current table is done (or refused): on to the next, or the snapshot is done."""
        state = self.state
        state["tables"].pop(0)
        state.update(last=None, rows=0, chunks=0)
        self.table, self._timing = None, None
        self._forget_chunk()
        if not state["tables"]:
            elapsed = time.time() - state.get("started", time.time())
            self.log.info("incremental snapshot: done in %.1fs", elapsed)
            self.state = None
            self.metrics.snapshot_state(2)

