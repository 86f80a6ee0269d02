"""The replication daemon: follow the primary forever, deliver each transaction once.

One asyncio task reads packets from the primary into a bounded queue (in batches: every
complete event a socket read brought). Another task,
the consumer, decodes them, writes each transaction to the sink, and commits
the sink and then the checkpoint at transaction boundaries. Several
transactions may be grouped per commit while the queue is busy. A commit flushes
the sink on the consumer (the transaction is then readable); a worker thread makes
it durable (fsync) and then saves the checkpoint, while the consumer goes on with
the next transactions. After any
error it reconnects from the last committed boundary, with capped
exponential backoff and jitter, and reopens the sink at its committed state,
so a transaction that was partly written is written again exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import struct
import time

from binlogd.protocol import events as E
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_IGNORABLE_F, event_name
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import ChecksumError, EventDecodeError, ProtocolError, UnknownEventError
from binlogd.protocol.serialize import change_events

from . import systemd
from .checkpoint import Checkpoint, CheckpointError, CheckpointStore
from .http import MetricsServer
from .metrics import Metrics
from .position import Position, PositionTracker
from .schema import SchemaCache, is_ddl
from .sinks import SinkError, make_sink
from .source import SourceConnection, SourceError, require_tls

EXIT_OK, EXIT_INTERNAL, EXIT_CONFIG, EXIT_AUTH, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_BINLOG_MISSING, EXIT_MISCONFIGURED, EXIT_DATA, EXIT_CHECKPOINT = 5, 6, 7, 8
_FATAL_EXIT = {"auth": EXIT_AUTH, "binlog_missing": EXIT_BINLOG_MISSING, "misconfigured": EXIT_MISCONFIGURED,
               "tls": EXIT_MISCONFIGURED, "unreachable": EXIT_UNREACHABLE}
_COMMIT_EVERY = 1000      # transactions per commit at most while the queue is busy
_COMMIT_SECONDS = 1.0     # and at least this often
_COMMIT_BYTES = 8 << 20   # and after this many bytes of events (each sync then has little to write)
_BATCH = 1024             # events per reader -> consumer hand-off at most
_LENGTH_NEXT = struct.Struct("<II")  # event_length and next_position, at offset 9 of a v4 header
_HEARTBEATS = frozenset({ET.HEARTBEAT, ET.HEARTBEAT_V2})  # a set: IntEnum member lookups cost ~0.2 µs
_TYPE_NAMES: dict[int, str] = {}


def _type_name(type_code: int) -> str:
    """``EventHeader.type_name`` for a type code, cached."""
    name = _TYPE_NAMES.get(type_code)
    if name is None:
        name = _TYPE_NAMES[type_code] = event_name(type_code)
    return name


def _stream_pos(raw: bytes | memoryview, decoder: Decoder) -> int:
    """Where the event starts in its file: next_position - event_length (0 for artificial events).

    Raises:
        ProtocolError: from :meth:`Decoder.decode_header` when the header is short or impossible.
    """
    if decoder.header_len == 19 and len(raw) >= 19:
        length, next_position = _LENGTH_NEXT.unpack_from(raw, 9)
        if length >= 19:
            return next_position - length if next_position >= length else 0
    h = decoder.decode_header(raw)
    return h.next_position - h.event_length if h.next_position >= h.event_length else 0


class Daemon:
    """``binlogd run``: build with a :class:`daemon.config.Config`, then ``await run()`` for the exit code."""

    def __init__(self, config, log: logging.Logger | None = None, metrics: Metrics | None = None):
        self.cfg = config
        self.log = log or logging.getLogger("binlogd")
        self.metrics = metrics or Metrics(table_labels=config.metrics.table_labels)
        self.store = CheckpointStore(config.checkpoint.path, config.checkpoint.lock)
        self.sink = make_sink(config.sink)
        self.tracker: PositionTracker | None = None
        self.resume_gtid = False
        self.stopping = asyncio.Event()
        self.sessions = 0
        self._sink_state: dict | None = None
        self._durable: Position | None = None  # the position of the last checkpoint saved: resume from here
        self._source_facts: dict = {}
        self._uncommitted = 0          # transactions written but not yet committed
        self._dirty = False            # anything written since the last commit
        self._last_commit = time.monotonic()
        self._bytes_since_commit = 0
        self._syncing: asyncio.Future | None = None  # the sink sync + checkpoint save in flight
        self._flushed: Checkpoint | None = None  # flushed since that sync began: the next one to make durable
        self._skip_before: float | None = None
        self._queued = 0  # events in the reader -> consumer queue
        self._schema: SchemaCache | None = None
        self._checkpoint: Checkpoint | None = None
        self.metrics_server: MetricsServer | None = None  # set by run(); .port is the bound port
        self._progress = time.monotonic()  # last pass of the read/commit loops (systemd watchdog)

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> int:
        """Run until stopped (exit 0) or a fatal error (its exit code)."""
        try:
            self.store.acquire()
            self._checkpoint = self.store.load()
            self._sink_state = self._checkpoint.sink if self._checkpoint else None
            self.sink.open(self._sink_state)
        except (CheckpointError, SinkError) as exc:
            self.log.error("%s", exc)
            return EXIT_CHECKPOINT
        server = self.metrics_server = MetricsServer(
            self.metrics, self.cfg.metrics.listen,
            ready_max_checkpoint_age=max(60.0, 4 * self.cfg.source.heartbeat_seconds))
        try:
            server.start()
        except OSError as exc:
            self.log.error("metrics.listen: %s", exc)
            self.store.release()
            return EXIT_CONFIG
        if self.cfg.metrics.listen:
            self.log.info("metrics on http://%s:%d/metrics", self.cfg.metrics.listen.rsplit(":", 1)[0], server.port)
        self._install_signals()
        watchdog = self._start_watchdog()
        try:
            return await self._loop()
        finally:
            if watchdog is not None:
                watchdog.cancel()
            self.metrics.set_up(False)
            await self._drain()
            self.sink.close()
            if self._schema is not None:
                await self._schema.close()
            self.store.release()
            server.stop()

    def _start_watchdog(self) -> asyncio.Task | None:
        """systemd's watchdog (``WatchdogSec``): ping at half the interval while the loops make progress."""
        interval = systemd.watchdog_interval()
        if interval is None:
            return None
        if interval < 4 * self.cfg.source.heartbeat_seconds:
            self.log.warning("WatchdogSec (%.0fs) is under 4 x source.heartbeat_seconds: a quiet primary may "
                             "look like a hung daemon", interval)

        async def ping() -> None:
            while True:
                if time.monotonic() - self._progress < interval:
                    systemd.notify("WATCHDOG=1")
                await asyncio.sleep(interval / 2)

        return asyncio.create_task(ping())

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if self.stopping.is_set():
                self.log.warning("second %s: exiting now", signal.Signals(signum).name)
                raise SystemExit(128 + signum)
            self.log.info("%s: finishing the current transaction, then stopping", signal.Signals(signum).name)
            self.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError):
                pass  # not the main thread (tests): stop() is the way

    def stop(self) -> None:
        """Ask the daemon to stop at the next transaction boundary."""
        systemd.notify("STOPPING=1")
        self.stopping.set()

    async def _loop(self) -> int:
        rc = self.cfg.reconnect
        delay, attempts = rc.initial_seconds, 0
        while not self.stopping.is_set():
            self._progress = time.monotonic()
            sessions_before = self.sessions
            try:
                await self._session()
                return EXIT_OK
            except SourceError as exc:
                self.metrics.error(exc.kind)
                if exc.fatal or (exc.kind == "unreachable" and self.sessions == 0):
                    self.log.error("%s", exc)
                    return _FATAL_EXIT.get(exc.kind, EXIT_INTERNAL)
                message, level = f"{exc}; reconnecting", logging.WARNING
            except (ChecksumError, EventDecodeError, UnknownEventError) as exc:
                self.metrics.error("decode")
                self.log.error("cannot decode the stream at %s: %s", self._where(), exc)
                return EXIT_DATA
            except ProtocolError as exc:
                self.metrics.error("protocol")
                message, level = f"protocol error from the primary ({exc}); reconnecting", logging.WARNING
            except (SinkError, CheckpointError) as exc:
                self.metrics.error("sink")
                if getattr(exc, "fatal", False):
                    self.log.error("%s", exc)
                    return EXIT_CHECKPOINT
                durable = f"{self._durable.file}:{self._durable.pos}" if self._durable else "start"
                message, level = f"{exc}; checkpoint stays at {durable}, retrying", logging.ERROR
            self.metrics.set_up(False)
            if self.sessions > sessions_before:  # it did stream: start the backoff over
                delay, attempts = rc.initial_seconds, 0
            self.log.log(level, "%s in %.1fs", message, delay)
            systemd.notify(f"STATUS=reconnecting in {delay:.1f}s")
            attempts += 1
            if rc.max_attempts and attempts >= rc.max_attempts:
                self.log.error("giving up after %d attempts", attempts)
                return EXIT_INTERNAL
            self.metrics.reconnect()
            try:
                await asyncio.wait_for(self.stopping.wait(), delay * (1 + rc.jitter * random.random()))
            except asyncio.TimeoutError:
                pass
            delay = min(rc.max_seconds, delay * 2)
        return EXIT_OK

    def _where(self) -> str:
        t = self.tracker
        return f"{t.committed.file}:{t.committed.pos}" if t else "start"

    # ------------------------------------------------------------------ one connection
    async def _session(self) -> None:
        cfg = self.cfg
        conn = SourceConnection(cfg.source)
        reader = None
        try:
            info = await conn.open()
            if self.tracker is None:
                await self._first_start(conn, info)
                await self._commit()  # a durable sink state and checkpoint from the very start
            else:
                # Back to the last durable commit: discard what the last session wrote after it.
                await self._drain()
                self.sink.close()
                self.sink.open(self._sink_state)
            position = self._durable
            self.tracker = PositionTracker(position)
            await conn.start_dump(cfg.source.server_id, position, self.resume_gtid, cfg.source.heartbeat_seconds)
            self.sessions += 1
            self.log.info("streaming from %s %s at %s:%d, %s", info.flavor, info.version_text,
                          position.file, position.pos,
                          f"GTID {position.gtid_set or position.gtid_list}" if self.resume_gtid else "file/pos")
            self.metrics.set_up(True)
            status = f"STATUS=streaming from {info.flavor} {info.version_text} at {position.file}:{position.pos}"
            systemd.notify(f"READY=1\n{status}" if self.sessions == 1 else status)
            decoder = Decoder(checksum_alg=1 if info.checksum == "CRC32" else 0, schema_source=self._schema_lookup(),
                              rows=self.sink.wants_rows)
            # daemon.queue_events bounds the events in the queue: batches of at most _BATCH events.
            batch = min(_BATCH, cfg.daemon.queue_events)
            queue: asyncio.Queue = asyncio.Queue(max(1, cfg.daemon.queue_events // batch))
            self._queued = 0
            reader = asyncio.create_task(self._read(conn, queue, batch))
            await self._consume(queue, decoder)
        finally:
            if reader is not None:
                reader.cancel()
                try:
                    await reader
                except (asyncio.CancelledError, Exception):
                    pass
            await conn.close()

    async def _first_start(self, conn: SourceConnection, info) -> None:
        """Where to start: the checkpoint if there is one, else ``source.start``."""
        self._source_facts = {"flavor": info.flavor, "server_id": info.server_id, "server_uuid": info.server_uuid}
        if self._checkpoint is not None:
            self.resume_gtid = self._checkpoint.source.get("resume") == "gtid"
            self.tracker = PositionTracker(self._checkpoint.position)
            self._source_facts["resume"] = self._checkpoint.source.get("resume", "file")
            # A datetime start whose first transaction at or after the datetime was not reached yet.
            self._skip_before = self._checkpoint.source.get("skip_before")
            return
        spec = self.cfg.source.start_spec
        if spec.kind == "current":
            start = await conn.current_position()
            self.resume_gtid = bool(start.gtid_list) if info.flavor == "mariadb" else info.gtid_mode
        elif spec.kind == "file":
            start = Position(spec.file, spec.pos)
        elif spec.kind == "gtid":
            text = str(spec.gtid)
            start = Position("", 4, gtid_list=text) if info.flavor == "mariadb" else Position("", 4, gtid_set=text)
            self.resume_gtid = True
        else:
            start = Position(await self._file_for_datetime(conn, spec.timestamp), 4)
            self._skip_before = spec.timestamp
        self._source_facts["resume"] = "gtid" if self.resume_gtid else "file"
        self.tracker = PositionTracker(start)

    async def _file_for_datetime(self, conn: SourceConnection, when: float) -> str:
        """The newest binlog file that began at or before ``when``: each file's first event is read
        with a non-blocking dump (newest first); no file is streamed through."""
        files = await conn.binlog_files()
        for name in reversed(files):
            probe = SourceConnection(self.cfg.source)
            try:
                await probe.open()
                await probe.start_dump(self.cfg.source.server_id + 1, Position(name, 4), False, 30.0, True)
                decoder = Decoder(checksum_alg=1 if probe.info.checksum == "CRC32" else 0)
                while True:
                    event = decoder.decode(await asyncio.wait_for(probe.read_event(), 30), 0)
                    if event.header.timestamp:
                        break
            finally:
                await probe.close()
            if event.header.timestamp <= when:
                return name
        return files[0]

    def _schema_lookup(self):
        source = self.cfg.schema.source
        if source == "none":
            return None
        if self._schema is None:
            self._schema = SchemaCache(self._schema_connection)
        return self._schema.lookup

    async def _schema_connection(self):
        import aiomysql

        s = self.cfg.source
        conn = await aiomysql.connect(host=s.host, port=s.port, user=s.user, password=s.password.reveal(),
                                      ssl=s.tls.ssl_context(), connect_timeout=s.connect_timeout, autocommit=True)
        require_tls(conn, s)
        return conn

    async def _read(self, conn: SourceConnection, queue: asyncio.Queue, batch: int) -> None:
        """Reader task: events into the queue in batches of at most ``batch``; no byte for
        2 × heartbeat is an error (raised by conn)."""
        conn.idle_timeout = 2 * self.cfg.source.heartbeat_seconds
        try:
            while True:
                events = await conn.read_events(batch)
                await queue.put(events)
                self._queued += len(events)
                self.metrics.queue_depth(self._queued)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, which raises it in order
            await queue.put(exc)

    # ------------------------------------------------------------------ the consumer
    async def _consume(self, queue: asyncio.Queue, decoder: Decoder) -> None:
        deadline = None
        skim = not decoder.rows
        while True:
            self._progress = time.monotonic()
            job = self._syncing
            if job is not None and job.done() and (job.cancelled() or job.exception() is not None):
                await self._settle()  # raises a failed sync now, not at the next commit
            if self.stopping.is_set():
                if not self.tracker.in_transaction:
                    break
                deadline = deadline or time.monotonic() + self.cfg.daemon.shutdown_seconds
                if time.monotonic() > deadline:
                    self.log.warning("shutdown: transaction still open after %.0fs; it will be read again",
                                     self.cfg.daemon.shutdown_seconds)
                    break
            try:
                async with asyncio.timeout(0.25):
                    item = await queue.get()
            except TimeoutError:
                if self._dirty and not self.tracker.in_transaction:
                    await self._commit()
                continue
            if isinstance(item, BaseException):
                raise item
            self._queued -= len(item)
            self.metrics.queue_depth(self._queued)
            index, end = 0, len(item)
            while index < end:
                if skim and self.tracker.inside:
                    stop = self._skim(item, index, decoder)
                    if stop > index:  # a run of rows events: no transaction ends inside it
                        index = stop
                        continue
                await self._handle(item[index], decoder)
                index += 1
                if not self.tracker.in_transaction and self._dirty \
                        and self._commit_due(index == end and queue.empty()):
                    await self._commit(wait=False)
        if self._dirty and not self.tracker.in_transaction:
            await self._commit()
        else:
            await self._settle()

    def _commit_due(self, idle: bool) -> bool:
        """At a transaction boundary: commit now? Always when nothing else is queued (``idle``);
        while busy, after _COMMIT_EVERY transactions, _COMMIT_BYTES bytes or _COMMIT_SECONDS."""
        return idle or self._uncommitted >= _COMMIT_EVERY or self._bytes_since_commit >= _COMMIT_BYTES \
            or time.monotonic() - self._last_commit >= _COMMIT_SECONDS

    def _skim(self, events: list, start: int, decoder: Decoder) -> int:
        """Pass the run of rows events (and their context) from ``events[start]`` on, checked in one
        call (:meth:`Decoder.skim_run`), to a sink that takes no rows; returns where the run stops."""
        tracker = self.tracker
        run = decoder.skim_run(events, start, len(events), tracker.pos)
        if run.stop > start:
            self.metrics.events({_type_name(tc): n for tc, n in run.counts.items()}, run.last_timestamp, run.nbytes)
            self.sink.event_run(events[start:run.stop], tracker.pos, run.next_position)
            tracker.skip(run.next_position)
            self.metrics.position(tracker.file, tracker.pos)
            self._bytes_since_commit += run.nbytes
            self._dirty = True
        return run.stop

    async def _handle(self, raw: bytes | memoryview, decoder: Decoder) -> None:
        pos = _stream_pos(raw, decoder)
        event = decoder.decode(raw, pos)
        h = event.header
        tc = h.type_code
        artificial = bool(h.flags & LOG_EVENT_ARTIFICIAL_F) or h.timestamp == 0
        heartbeat = tc in _HEARTBEATS
        self.metrics.event(_type_name(tc), h.timestamp, len(raw), artificial or heartbeat)
        self._bytes_since_commit += len(raw)
        if heartbeat:
            self.metrics.heartbeat()
            return
        if isinstance(event, E.UnknownEvent) and not h.flags & LOG_EVENT_IGNORABLE_F \
                and self.cfg.daemon.unknown_events == "error":
            raise UnknownEventError(f"unknown event type {tc} at {self.tracker.file}:{pos} "
                                    "(set daemon.unknown_events = \"skip\" to pass it by)", pos)
        if self._schema is not None and self._schema.misses:
            inner = event.events if isinstance(event, E.TransactionPayloadEvent) else (event,)
            missing = {(t.schema, t.table) for t in inner if isinstance(t, E.TableMapEvent)} & self._schema.misses
            for schema, table in missing:
                await self._schema.fetch(schema, table)
            if missing:
                event = decoder.decode(raw, pos)
        elif isinstance(event, (E.QueryEvent,)) and self._schema is not None and is_ddl(event.query):
            self._schema.invalidate()
        if isinstance(event, E.RotateEvent) and not artificial:
            self.log.info("rotate to %s", event.next_file)
        self.sink.event(raw, event)
        if not artificial:
            self._dirty = True
        if self.sink.wants_rows:
            for item in (event.events if isinstance(event, E.TransactionPayloadEvent) else (event,)):
                if isinstance(item, E.RowsEvent):
                    self._rows(item)
        if self.tracker.observe(event):
            self._uncommitted += 1
            self.metrics.transaction()
            if self._skip_before is not None and h.timestamp >= self._skip_before:
                self._skip_before = None
        self.metrics.position(self.tracker.file, self.tracker.pos)

    def _rows(self, event: E.RowsEvent) -> None:
        f = self.cfg.filters
        if not f.table_selected(event.schema, event.table) or not f.event_selected(event.header.type_name):
            return
        if self._skip_before is not None and event.header.timestamp < self._skip_before:
            return
        if event.columns and event.columns[0].startswith("@"):
            self.metrics.unnamed_columns()
        n = 0
        for change in change_events(event, self.tracker.file, self.tracker.gtid):
            self.sink.change(change)
            n += 1
        self.metrics.rows(event.schema, event.table, event.kind, n)

    async def _commit(self, wait: bool = True) -> None:
        """Sink first (durable), then the checkpoint; only at a transaction boundary.

        The sink's flush runs here. Its sync and then the checkpoint save run in a worker thread, one
        at a time: a commit made while one runs is made durable by the next (with any later ones).
        ``wait``: return only once everything flushed is durable.

        Raises:
            SinkError, CheckpointError: the flush failed, or (``wait``) a sync or save did.
        """
        state = self.sink.flush()
        facts = self._source_facts if self._skip_before is None else {**self._source_facts,
                                                                      "skip_before": self._skip_before}
        self._flushed = Checkpoint(self.tracker.committed, state, facts)
        self._uncommitted, self._dirty, self._last_commit, self._bytes_since_commit = 0, False, time.monotonic(), 0
        if self._syncing is None:
            self._sync_flushed()
        if wait:
            await self._settle()

    def _sync_flushed(self) -> None:
        """Start making the latest flushed commit durable, in a worker thread."""
        checkpoint, self._flushed = self._flushed, None
        self._syncing = asyncio.ensure_future(asyncio.to_thread(self._make_durable, checkpoint))
        self._syncing.add_done_callback(lambda job: self._made_durable(job, checkpoint))

    def _make_durable(self, checkpoint: Checkpoint) -> None:
        """In a worker thread: sync the sink, then save the checkpoint."""
        self.sink.sync()
        self.store.save(checkpoint)

    def _made_durable(self, job: asyncio.Future, checkpoint: Checkpoint) -> None:
        """On the loop, as soon as a sync ends (before anyone awaiting it resumes): record it, and
        start the next one if commits were flushed meanwhile. A failed one stays for _settle to raise."""
        if job.cancelled() or job.exception() is not None:
            return
        self._sink_state, self._durable = checkpoint.sink, checkpoint.position
        self.metrics.sink_commit()
        self.metrics.checkpoint_saved()
        if self._flushed is not None:
            self._sync_flushed()
        else:
            self._syncing = None

    async def _drain(self) -> None:
        """Before the sink is reopened or closed: let a sync the last session left running end (while
        the next connection was being made). If it failed, the checkpoint simply stayed before it."""
        try:
            await self._settle()
        except (SinkError, CheckpointError):
            pass

    async def _settle(self) -> None:
        """Wait until every flushed commit is durable.

        Raises:
            SinkError, CheckpointError: a sync or save failed (the checkpoint stays before it, and
            commits flushed after it are dropped: the session ends and the sink is reopened).
        """
        while self._syncing is not None:
            job = self._syncing
            try:
                await job
            except BaseException:
                if self._syncing is job:
                    self._syncing = self._flushed = None
                raise
            if self._syncing is job:  # done, but its callback (_made_durable) has not run yet
                await asyncio.sleep(0)
