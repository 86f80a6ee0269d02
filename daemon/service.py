"""The replication daemon: follow the primary forever, deliver each transaction once.

:class:`Daemon` is a library object: :meth:`Daemon.start` locks and loads the checkpoint, opens the sink
and serves the metrics, then runs sessions in a background task until :meth:`Daemon.stop` (or
``async with Daemon(config):``). It installs no signal handlers: ``binlogd run`` (the CLI layer) does.

Each session is one path of steps (:meth:`Daemon._session`): pick the server (a
:class:`~binlogd.daemon.replication.failover.OneHost`, or a
:class:`~binlogd.daemon.replication.failover.Failover` over several
``source.hosts``), open the :mod:`~binlogd.daemon.replication.session`, choose the resume state, reopen the sink at its
committed state, attach the schema history, dump, and stream: a reader task queues the events, and the
:mod:`~binlogd.daemon.delivery.consumer` decodes them, writes the sink and commits through the
:mod:`~binlogd.daemon.delivery.committer` (sink durable first, then the checkpoint). After any error the loop starts
a new session from the last durable commit, with capped exponential backoff and jitter, so a transaction
that was partly written is written again exactly once. Fatal errors end it with an exit code (see README,
"Exit codes").

:meth:`Daemon.stop` ends a session that is not streaming yet (a connect, a failover probe, a dump) at
once; a streaming one stops at the next transaction boundary, and whatever it still awaits (a schema seed,
a ``SHOW BINLOG EVENTS`` scan) is cancelled once ``daemon.shutdown_seconds`` have passed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time

from binlogd.daemon.delivery import standby
from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.delivery.committer import Committer
from binlogd.daemon.delivery.consumer import Consumer
from binlogd.daemon.delivery.resumerule import adopt, check_source
from binlogd.daemon.operations import systemd
from binlogd.daemon.operations.http import MetricsServer
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.connection import ServerInfo, SourceError, admin_connection
from binlogd.daemon.replication.failover import Failover, OneHost, hosts_for
from binlogd.daemon.replication.schemaqueries import ServerSchema
from binlogd.daemon.replication.serverschema import DaemonSchema, history_path
from binlogd.daemon.replication.session import Session
from binlogd.daemon.sinks import SinkError, make_sink
from binlogd.daemon.sinks.lease import Lease, lease_for
from binlogd.daemon.state import CheckpointError, ResumeState
from binlogd.daemon.tasks import close_tasks
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, ChecksumError, EventDecodeError, ProtocolError, UnknownEventError
from binlogd.protocol.position import PositionTracker

EXIT_OK, EXIT_INTERNAL, EXIT_CONFIG, EXIT_AUTH, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_BINLOG_MISSING, EXIT_MISCONFIGURED, EXIT_DATA, EXIT_CHECKPOINT, EXIT_DIVERGED = 5, 6, 7, 8, 9
_FATAL_EXIT = {"auth": EXIT_AUTH, "binlog_missing": EXIT_BINLOG_MISSING, "misconfigured": EXIT_MISCONFIGURED,
               "tls": EXIT_MISCONFIGURED, "unreachable": EXIT_UNREACHABLE, "diverged": EXIT_DIVERGED}


class StartError(BinlogError):
    """The daemon cannot start (checkpoint locked or unreadable, sink state wrong, metrics port taken).

    Fields:
        exit_code: what ``binlogd run`` exits with.
    """

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Daemon:
    """``binlogd run``: ``rc = await Daemon(config).run()``, or ``async with Daemon(config) as daemon:``.

    Args:
        config: a :class:`binlogd.daemon.config.Config`.
        log: the logger (default: ``binlogd``).
        metrics: the Metrics to report to (default: a new one).
    Fields:
        sink, store, committer, metrics: the sink, the checkpoint store, the commit pipeline.
        schema: the schema history (:class:`~.serverschema.DaemonSchema`), None with ``schema.source = "none"``
            or a sink that takes no rows.
        consumer: the current session's :class:`Consumer` (None before the first).
        hosts: which server each session uses: a :class:`~.failover.OneHost`, or with several
            ``source.hosts`` a :class:`~.failover.Failover` (made again by :meth:`start`, from the checkpoint).
        sessions: sessions that reached streaming.
        stopping: set once a stop was asked for.
        lease: the ``[ha]`` lease (:mod:`~.sinks.lease`), None with ``ha.mode = "off"``.
        metrics_server: the HTTP server (``.port`` is the bound port) once started.
    """

    def __init__(self, config, log: logging.Logger | None = None, metrics: Metrics | None = None):
        self.cfg = config
        self.log = log or logging.getLogger("binlogd")
        self.metrics = metrics or Metrics(table_labels=config.metrics.table_labels)
        self.store = CheckpointStore(config.checkpoint.path, config.checkpoint.lock)
        self.sink = make_sink(config.sink, self.metrics, self.log)
        self.committer = Committer(self.sink, self.store, self.metrics, None)
        # a sink that takes no rows (the raw archive) names no columns: it keeps no schema history
        names = config.schema.source != "none" and self.sink.wants_rows
        self.schema = None if not names else DaemonSchema(
            history_path(config.schema.history_path, config.checkpoint.path),
            ServerSchema(self._admin_connection), config.filters.table_selected,
            self.metrics, self.log)
        if self.schema is not None:
            self.sink.use_schema(self.schema.lookup)
        self.consumer: Consumer | None = None
        self.hosts: OneHost | Failover = hosts_for(config.source, self.log, self.metrics)
        self._source = config.source  # the server of the current session (the schema lookups ask it)
        self.sessions = 0
        self.stopping = asyncio.Event()
        self.lease: Lease | None = None if config.ha.mode == "off" else \
            lease_for(config.sink, config.ha.holder, config.ha.lease_seconds)
        self._lost = asyncio.Event()  # [ha]: another instance took the lease; the sessions end, we stand by
        self.metrics_server: MetricsServer | None = None
        self._main: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None
        self._session_task: asyncio.Task | None = None  # the session in flight
        self._sink_busy: asyncio.Future | None = None   # the sink's open or close in its thread (_sink_call)
        self._ending: asyncio.Event | None = None        # its consumer's stop event, once it has one
        self._streaming = False     # the session in flight reached its consumer
        self._deadline: asyncio.TimerHandle | None = None  # stop(): cancels a streaming session at shutdown_seconds
        self._start: ResumeState | None = None  # where the first session starts, resolved once
        self._started = False       # the first commit (at the start position) is durable
        self._progress = time.monotonic()  # last pass of the reconnect loop (systemd watchdog)
        self._reached = False       # a session's connect succeeded once (a refused first connect gives up: _loop)

    @property
    def tracker(self) -> PositionTracker | None:
        """The current session's position tracker (None before the first session)."""
        return self.consumer.tracker if self.consumer is not None else None

    @property
    def running(self) -> bool:
        """True from :meth:`start` until the sessions ended (stopped, or a fatal error)."""
        return self._main is not None and not self._main.done()

    @property
    def exit_code(self) -> int | None:
        """The exit code once the sessions ended, else None."""
        return self._main.result() if self._main is not None and self._main.done() else None

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> int:
        """Start, then run until stopped (exit 0) or a fatal error (its exit code)."""
        try:
            await self.start()
        except StartError as exc:
            self.log.error("%s", exc)
            return exc.exit_code
        return await self._main

    async def start(self) -> None:
        """Lock and load the checkpoint, open the sink, serve metrics, and start streaming in the
        background (the daemon's own tasks: sessions and systemd's watchdog).

        Raises:
            StartError: exit 8 (checkpoint or sink state) or 2 (metrics.listen cannot be bound, or a file/pos
                checkpoint with several source.hosts).
        """
        try:
            self.store.acquire()
            loaded = self.store.load()
            state = ResumeState.from_checkpoint(loaded) if loaded else None
            if self.lease is None:  # with [ha] the sink opens once the lease is ours (_reopen_sink)
                await self._sink_call(self.sink.open, loaded.sink if loaded else None)
                state = adopt(self.sink, state, self.log, self.metrics)
                self.metrics.ha_active(0)
        except (CheckpointError, SinkError) as exc:
            self.store.release()
            raise StartError(str(exc), getattr(exc, "exit_code", None) or EXIT_CHECKPOINT) from exc
        self.committer.durable = state
        self.hosts = hosts_for(self.cfg.source, self.log, self.metrics, state.source.get("host") if state else None)
        if self.hosts.by_gtid and state is not None and not state.by_gtid:
            self.sink.close()
            self.store.release()
            raise StartError(f"checkpoint {self.store.path} resumes by binlog file and position, and positions "
                             "differ between servers: several source.hosts need GTID resume", EXIT_CONFIG)
        server = self.metrics_server = MetricsServer(
            self.metrics, self.cfg.metrics.listen,
            ready_max_checkpoint_age=max(60.0, 4 * self.cfg.source.heartbeat_seconds))
        try:
            server.start()
        except OSError as exc:
            self.sink.close()
            self.store.release()
            raise StartError(f"metrics.listen: {exc}", EXIT_CONFIG) from exc
        if self.cfg.metrics.listen:
            self.log.info("metrics on http://%s:%d/metrics", self.cfg.metrics.listen.rsplit(":", 1)[0], server.port)
        self._watchdog = self._start_watchdog()
        self._main = asyncio.create_task(self._run_sessions())

    def stop(self) -> asyncio.Future:
        """Ask the daemon to stop (safe from signal handlers, and more than once): a session that is not
        streaming yet ends now; a streaming one at the next transaction boundary, or once
        ``daemon.shutdown_seconds`` have passed (what it still awaits is cancelled then).

        Returns:
            A future of the exit code, done once the daemon closed (await it, or not).
        """
        if not self.stopping.is_set():
            systemd.notify("STOPPING=1")
            self.stopping.set()
            if self._ending is not None:
                self._ending.set()
            if self._streaming:
                self._deadline = asyncio.get_running_loop().call_later(
                    self.cfg.daemon.shutdown_seconds, self._cancel_session)
            else:
                self._cancel_session()
        if self._main is None:
            done = asyncio.get_running_loop().create_future()
            done.set_result(EXIT_OK)
            return done
        return asyncio.shield(self._main)

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _cancel_session(self) -> None:
        if self._session_task is not None:
            self._session_task.cancel()

    async def _run_sessions(self) -> int:
        """The main task: sessions until stopped; then everything is closed (after the last sync)."""
        try:
            return await (self._loop() if self.lease is None else self._ha_sessions())
        finally:
            if self._deadline is not None:
                self._deadline.cancel()
            await close_tasks(self._watchdog)
            self.metrics.set_up(False)
            await self.committer.drain()
            await self._sink_call(self.sink.close)
            if self.lease is not None:
                await standby.give_up(self.lease, self.log)
            if self.schema is not None:
                await self.schema.close()
            self.store.release()
            self.metrics_server.stop()

    def _start_watchdog(self) -> asyncio.Task | None:
        """systemd's watchdog (``WatchdogSec``): ping at half the interval while the loops make progress: the
        reconnect loop, the consumer, or the server answering the schema history's seed and repair queries."""
        interval = systemd.watchdog_interval()
        if interval is None:
            return None
        if interval < 4 * self.cfg.source.heartbeat_seconds:
            self.log.warning("WatchdogSec (%.0fs) is under 4 x source.heartbeat_seconds: a quiet primary may "
                             "look like a hung daemon", interval)

        async def ping() -> None:
            while True:
                progress = max(self._progress, self.consumer.last_pass if self.consumer else 0.0,
                               self.schema.server.answered if self.schema else 0.0)
                if time.monotonic() - progress < interval:
                    systemd.notify("WATCHDOG=1")
                await asyncio.sleep(interval / 2)

        return asyncio.create_task(ping())

    # ------------------------------------------------------------------ high availability
    async def _ha_sessions(self) -> int:
        """``[ha]``: stand by until the lease is ours, then run sessions (each reopens the sink with the lease's
        epoch, at the broker's committed position) until stopped or another instance took the lease; then step
        down and stand by again. Returns the exit code."""
        try:
            while await standby.wait_for_lease(self.lease, self.stopping, self.log, self.metrics, self._polled):
                self._lost.clear()
                self.sink.epoch = self.lease.epoch
                keeper = asyncio.create_task(standby.keep_lease(self.lease, self.log, self._lose))
                try:
                    rc = await self._loop()
                finally:
                    await close_tasks(keeper)
                if not self._lost.is_set():
                    return rc
                await self._step_down()
        except SinkError as exc:  # the broker refused the credentials
            self.log.error("%s", exc)
            return exc.exit_code or EXIT_AUTH
        return EXIT_OK

    def _polled(self) -> None:
        """A standby's poll of the lease: progress, for systemd's watchdog."""
        self._progress = time.monotonic()

    def _lose(self) -> None:
        """Another instance took the lease: end the session now (nothing it writes can commit any more)."""
        self._lost.set()
        if self._ending is not None:
            self._ending.set()
        self._cancel_session()

    async def _confirm_lease(self) -> None:
        """Before the sink opens (a NATS open fences every other writer): the lease is still ours.

        Raises:
            SinkError: another instance took it (:attr:`_lost` set), or the broker did not answer (retried).
        """
        held = await standby.renewed(self.lease)
        if held is False:
            self._lost.set()
        if not held:
            raise SinkError(f"ha: {'another instance took' if held is False else 'cannot renew'} {self.lease.where}")

    async def _step_down(self) -> None:
        """Close the sink, forget a start not yet committed, and say so: the instance stands by again."""
        epoch, self.lease.epoch = self.lease.epoch, None
        self.log.warning("ha: %s lost the lease (epoch %s) to another instance: stepping down to standby",
                         self.lease.holder, epoch)
        self.metrics.set_up(False)
        self.metrics.ha_standby()
        await self.committer.drain()
        await self._sink_call(self.sink.close)
        if not self._started:
            self._start = None

    # ------------------------------------------------------------------ sessions
    async def _loop(self) -> int:
        """Sessions with backoff between them; returns the exit code."""
        rc = self.cfg.reconnect
        delay, attempts, began = rc.initial_seconds, 0, time.monotonic()
        while not self.stopping.is_set() and not self._lost.is_set():
            self._progress = time.monotonic()
            sessions_before = self.sessions
            try:
                await self._one_session()
                return EXIT_OK
            except SourceError as exc:
                self.metrics.error(exc.kind)
                if exc.fatal or (exc.kind == "unreachable" and self.sessions == 0):
                    self.log.error("%s", exc)
                    return _FATAL_EXIT.get(exc.kind, EXIT_INTERNAL)
                if self._never_reached(exc, time.monotonic() - began):
                    return EXIT_UNREACHABLE
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
                    return getattr(exc, "exit_code", None) or EXIT_CHECKPOINT
                durable = self.committer.durable
                at = f"{durable.position.file}:{durable.position.pos}" if durable else "start"
                message, level = f"{exc}; checkpoint stays at {at}, retrying", logging.ERROR
                if self.lease is not None and (self._lost.is_set() or await standby.renewed(self.lease) is False):
                    self._lost.set()  # a fenced commit: another instance took the lease
                    return EXIT_OK
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

    def _never_reached(self, exc: SourceError, waited: float) -> bool:
        """Whether to give up (exit 4, logged): one host that no connect reached since the start, ``waited`` seconds
        ago, for ``source.failover_timeout_seconds`` (refused, timed out: ``exc``). A source that was reached once
        is retried for ever."""
        if exc.kind != "connection" or self._reached or not isinstance(self.hosts, OneHost):
            return False
        if waited < self.cfg.source.failover_timeout_seconds:
            return False
        self.log.error("%s; no connect succeeded since the start %.0fs ago (source.failover_timeout_seconds): giving "
                       "up (check source.host and source.port)", exc, waited)
        return True

    async def _one_session(self) -> None:
        """:meth:`_session` as the task :meth:`stop` may cancel; a cancel by stop() returns (the loop ends).

        Raises:
            What the session raised; CancelledError when the caller itself was cancelled.
        """
        task = self._session_task = asyncio.create_task(self._session())
        try:
            await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling() or not (self.stopping.is_set() or self._lost.is_set()):
                raise
            if self._streaming and not self._lost.is_set():
                self.log.warning("shutdown: the session was still busy after %.0fs (a schema seed?); what it had "
                                 "not committed is read again at the next start", self.cfg.daemon.shutdown_seconds)
        finally:
            self._session_task, self._ending, self._streaming = None, None, False

    def _where(self) -> str:
        t = self.tracker
        return f"{t.committed.file}:{t.committed.pos}" if t else "start"

    def _admin_connection(self):
        """A connection to the current session's server for the schema lookups (an awaitable)."""
        return admin_connection(self._source)

    async def _session(self) -> None:
        """One session: from the last durable commit (the start, the first time) until it fails or stops."""
        endpoint = await self._pick()
        async with Session(dataclasses.replace(self.cfg, source=self._source), self.metrics,
                           rows=self.sink.wants_rows) as session:
            info = await session.open()
            self._reached = True
            await self._reopen_sink()  # first: the sync in flight moves the durable state the session resumes from
            await self._check_source(session, info)
            resume = await self._resume_state(session, endpoint, info)
            await self._attach_schema(info, resume)  # before a snapshot seeds it: whose history it is
            snapped = await self._snapshot(info, resume)
            if snapped is not resume:
                resume = snapped
                await self._attach_schema(info, resume)  # the history at the snapshot's position
            consumer = self._new_consumer(info, resume)
            await self._dump(session, endpoint, resume)
            await self._stream(session, consumer, endpoint, info)

    async def _pick(self) -> str:
        """The server of the session (``host:port``): the only one, or the one :meth:`Failover.pick` chose."""
        chosen = await self.hosts.pick(self.hosts.delivered(self.committer.durable or self._start))
        self._source = self.hosts.config(chosen.endpoint)
        return chosen.endpoint

    async def _resume_state(self, session: Session, endpoint: str, info: ServerInfo) -> ResumeState:
        """Where the session starts: the last durable commit, or (until the first commit is durable) the
        start resolved once; named after the source. Several hosts resume by GTID."""
        if not self._started and self._start is None:  # kept while the first commit fails: "current" stays
            self._start = await session.start_state(self.committer.durable)
        resume = self.committer.durable if self._started else self._start
        return dataclasses.replace(resume, by_gtid=resume.by_gtid or self.hosts.by_gtid, source={
            "host": endpoint, "flavor": info.flavor, "server_id": info.server_id, "server_uuid": info.server_uuid,
            "version": info.version_text})

    async def _snapshot(self, info: ServerInfo, resume: ResumeState) -> ResumeState:
        """[snapshot]: the tables first, when one is due (:func:`snapshot.run` decides); where to stream from."""
        if self.cfg.snapshot.mode == "never" and resume.snapshot is None:
            return resume
        from binlogd.daemon.snapshot import initial  # its modules only where snapshots are configured

        return await initial.run(self._snapshot_context(), info, resume)

    def _snapshot_context(self):
        """What a snapshot (initial or incremental) uses of the daemon: a
        :class:`~binlogd.daemon.snapshot.context.SnapshotContext` for the current session."""
        from binlogd.daemon.snapshot.context import SnapshotContext

        cfg = self.cfg
        return SnapshotContext(
            connect=self._admin_connection, sink=self.sink, committer=self.committer, metrics=self.metrics,
            log=self.log, schema=self.schema, config=cfg.snapshot,
            selected=cfg.filters.table_selected, sink_kind=cfg.sink.kind, binlogd_format=cfg.sink.format == "binlogd",
            start_kind=cfg.source.start_spec.kind, checkpointed=self._checkpointed)

    async def _sink_call(self, fn, *args):
        """``fn(*args)`` (the sink's open or close) in a thread, after the one before it ended: a cancelled
        session's open runs on in its thread, and no close may run beside it. Returns what ``fn`` returns."""
        busy = self._sink_busy
        if busy is not None:
            await asyncio.wait([busy])
            if not busy.cancelled():
                busy.exception()  # retrieved: the caller that awaited it saw it, or was cancelled
        self._sink_busy = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        return await asyncio.shield(self._sink_busy)

    def _checkpointed(self) -> None:
        """A durable checkpoint exists (a snapshot committed one): a new session resumes from it."""
        self._started = True

    async def _reopen_sink(self) -> None:
        """Back to the last durable commit: discard what the last session wrote after it; a sink that commits
        the position with its data says where the session resumes (:func:`.resumerule.adopt`)."""
        if self.lease is not None:
            await self._confirm_lease()
        if self._started or self.lease is not None:  # [ha]: opened with the lease's epoch, as the broker has it
            await self.committer.drain()  # the sync in flight ends first: the sink reopens at what it made durable
            await self._sink_call(self.sink.close)
            durable = self.committer.durable
            await self._sink_call(self.sink.open, durable.sink if durable else None)
            self.committer.durable = adopt(self.sink, self.committer.durable, self.log, self.metrics)

    async def _check_source(self, session: Session, info: ServerInfo) -> None:
        """Refuse to resume from a bus sink's checkpoint of another source (:func:`.resumerule.check_source`; with
        several source.hosts, :class:`~.failover.Failover` judges the hosts).

        Raises:
            SinkError: (fatal, exit 8) it is another source's.
        """
        state = self.committer.durable
        if state is None or not state.source.get("flavor") or not isinstance(self.hosts, OneHost) \
                or self.sink.remote_checkpoint() is None:  # a local file: the schema history names its source
            return
        if info.flavor == "mariadb":
            rows = await session.conn.query("SELECT @@global.gtid_binlog_state, @@global.gtid_slave_pos")
        else:
            rows = await session.conn.query("SELECT @@global.gtid_executed")
        status = await session.conn.query(info.admin_show_status)
        check_source(state, info, str(status[0][0]) if status else "",
                     ",".join(str(v) for v in rows[0] if v).replace("\n", ""), f"the checkpoint in {self.sink.name}")

    async def _attach_schema(self, info: ServerInfo, resume: ResumeState) -> None:
        """The schema history for this session: its server lookups go to the session's server, and it
        stands as it did at the resume position (seeded when first needed)."""
        if self.schema is None:
            return
        await self.schema.server.reconnect(self._admin_connection)
        await self.schema.attach(info, resume)  # whose history it is; a failover re-anchors it (exit 8: another's)

    def _new_consumer(self, info: ServerInfo, resume: ResumeState) -> Consumer:
        """The session's consumer and decoder; it stops when :attr:`_ending` is set (by :meth:`stop`, or by
        the failover watch that leaves a read-only source)."""
        decoder = Decoder(checksum_alg=1 if info.checksum == "CRC32" else 0,
                          schema_source=self.schema.lookup if self.schema else None, rows=self.sink.wants_rows)
        self._ending = asyncio.Event()
        if self.stopping.is_set():
            self._ending.set()
        self.consumer = Consumer(self.cfg, resume, decoder, self.sink, self.committer, self.metrics, self.log,
                                 self.schema, self._ending)
        if self.cfg.snapshot.signal_table or resume.incremental:  # incremental snapshots (signals, or no lock)
            if self.sink.wants_rows:
                from binlogd.daemon.snapshot.incremental import Incremental

                self.consumer.incremental = Incremental(self._snapshot_context(), info, resume.incremental)
            elif self.sessions == 0:
                self.log.warning("snapshot.signal_table is not used: the sink takes no rows")
        return self.consumer

    async def _dump(self, session: Session, endpoint: str, resume: ResumeState) -> None:
        """Ask for the stream. A source.start of the config (no checkpoint yet) is saved only once the primary
        serves it; a refusal (ERR 1236) is the host's to judge (:meth:`Failover.refused`)."""
        try:
            await session.dump(resume, check=self.committer.durable is None
                               and self.cfg.source.start_spec.kind in ("file", "gtid"))
        except SourceError as exc:
            if exc.kind != "binlog_missing":
                raise
            raise self.hosts.refused(endpoint, exc) from None

    async def _stream(self, session: Session, consumer: Consumer, endpoint: str, info: ServerInfo) -> None:
        """Report the session streaming, then run the consumer until it fails or stops."""
        if not self._started:
            await consumer.commit()  # a durable sink state and checkpoint from the very start
            self._started = True
        self.sessions += 1
        position, by_gtid = consumer.resume.position, consumer.resume.by_gtid
        self.metrics.source(endpoint, info.server_id, info.server_uuid, info.version_text)
        self.log.info("streaming from %s %s at %s:%d, %s", info.flavor, info.version_text, position.file,
                      position.pos, f"GTID {position.gtid_set or position.gtid_list}" if by_gtid else "file/pos")
        self.metrics.set_up(True)
        status = f"STATUS=streaming from {info.flavor} {info.version_text} at {position.file}:{position.pos}"
        systemd.notify(f"READY=1\n{status}" if self.sessions == 1 else status)
        if self.hosts.streaming(endpoint, position):
            await consumer.commit()  # the checkpoint names the new source
        self._streaming = True  # from here stop() lets the consumer reach a transaction boundary
        try:
            await self.hosts.run(consumer, session, self.stopping, self._ending)
        finally:
            if consumer.incremental is not None:
                consumer.incremental.close()
