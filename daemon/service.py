"""The replication daemon: follow the primary forever, deliver each transaction once.

:class:`Daemon` is the orchestrator. :meth:`Daemon.start` locks and loads the checkpoint, opens the
sink and serves the metrics, then runs sessions in a background task until stopped: each session
(:mod:`binlogd.daemon.session`) connects and dumps from the last durable commit, a reader task
queues the events, and the :mod:`~binlogd.daemon.consumer` decodes them, writes the sink and
commits through the :mod:`~binlogd.daemon.committer` (sink durable first, then the checkpoint).
After any error it reconnects from the last durable commit, with capped exponential backoff and
jitter, and reopens the sink at its committed state, so a transaction that was partly written is
written again exactly once. With several ``source.hosts``, a :class:`~binlogd.daemon.failover.Failover`
picks each session's server and leaves a source that turned read-only. Fatal errors end it with an exit
code (see README, "Exit codes").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import signal
import time
from typing import TYPE_CHECKING

from binlogd.daemon.connection import SourceError, admin_connection
from binlogd.daemon.serverschema import DaemonSchema, ServerSchema, history_path
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, ChecksumError, EventDecodeError, ProtocolError, UnknownEventError
from binlogd.protocol.position import PositionTracker

from . import systemd
from .checkpoint import CheckpointError, CheckpointStore, ResumeState
from .committer import Committer
from .consumer import Consumer
from .http import MetricsServer
from .metrics import Metrics
from .session import Session
from .sinks import SinkError, make_sink

if TYPE_CHECKING:  # with several source.hosts only
    from .failover import Failover

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
        failover: the :class:`Failover` with several ``source.hosts`` (from :meth:`start`), else None.
        sessions: sessions that reached streaming.
        stopping: set once a stop was asked for.
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
        self.consumer: Consumer | None = None
        self.failover: Failover | None = None
        self._source = config.source  # the server of the current session (the schema lookups ask it)
        self.sessions = 0
        self.stopping = asyncio.Event()
        self.metrics_server: MetricsServer | None = None
        self._main: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None
        self._start: ResumeState | None = None  # where the first session starts, resolved once
        self._started = False       # the first commit (at the start position) is durable
        self._progress = time.monotonic()  # last pass of the reconnect loop (systemd watchdog)

    @property
    def tracker(self) -> PositionTracker | None:
        """The current session's position tracker (None before the first session)."""
        return self.consumer.tracker if self.consumer is not None else None

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
            self.sink.open(loaded.sink if loaded else None)
        except (CheckpointError, SinkError) as exc:
            self.store.release()
            raise StartError(str(exc), EXIT_CHECKPOINT) from exc
        self.committer.durable = ResumeState.from_checkpoint(loaded) if loaded else None
        if len(self.cfg.source.endpoints) > 1:
            if loaded is not None and not self.committer.durable.by_gtid:
                self.sink.close()
                self.store.release()
                raise StartError(f"checkpoint {self.store.path} resumes by binlog file and position, and positions "
                                 "differ between servers: several source.hosts need GTID resume", EXIT_CONFIG)
            last = loaded.source.get("host") if loaded else None
            from .failover import Failover

            self.failover = Failover(self.cfg.source, self.log, self.metrics, last)
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
        self._install_signals()
        self._watchdog = self._start_watchdog()
        self._main = asyncio.create_task(self._run_sessions())

    def stop(self) -> asyncio.Future:
        """Ask the daemon to stop at the next transaction boundary (safe from signal handlers).

        Returns:
            A future of the exit code, done once the daemon closed (await it, or not).
        """
        systemd.notify("STOPPING=1")
        self.stopping.set()
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

    async def _run_sessions(self) -> int:
        """The main task: sessions until stopped; then everything is closed (after the last sync)."""
        try:
            return await self._loop()
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
                await asyncio.gather(self._watchdog, return_exceptions=True)
            self.metrics.set_up(False)
            await self.committer.drain()
            self.sink.close()
            if self.schema is not None:
                await self.schema.close()
            self.store.release()
            self.metrics_server.stop()

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
                progress = max(self._progress, self.consumer.last_pass if self.consumer else 0.0)
                if time.monotonic() - progress < interval:
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

        def on_hangup() -> None:
            self.log.info("SIGHUP: ignored (binlogd reloads nothing; restart it to apply a new configuration)")

        for sig, handler, args in ((signal.SIGTERM, on_signal, (signal.SIGTERM,)),
                                   (signal.SIGINT, on_signal, (signal.SIGINT,)), (signal.SIGHUP, on_hangup, ())):
            try:
                loop.add_signal_handler(sig, handler, *args)
            except (NotImplementedError, RuntimeError):
                pass  # not the main thread (tests): stop() is the way

    # ------------------------------------------------------------------ sessions
    async def _loop(self) -> int:
        """Sessions with backoff between them; returns the exit code."""
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
                durable = self.committer.durable
                at = f"{durable.position.file}:{durable.position.pos}" if durable else "start"
                message, level = f"{exc}; checkpoint stays at {at}, retrying", logging.ERROR
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

    def _admin_connection(self):
        """A connection to the current session's server for the schema lookups (an awaitable)."""
        return admin_connection(self._source)

    async def _session(self) -> None:
        """One connection: from the last durable commit (the start, the first time) until it fails or stops;
        with several source.hosts, to the server :meth:`Failover.pick` chose."""
        cfg, failover = self.cfg, self.failover
        if failover is not None:
            chosen = await failover.pick(failover.delivered(self.committer.durable or self._start))
            cfg = dataclasses.replace(cfg, source=failover.config(chosen.endpoint))
        self._source = cfg.source
        endpoint = f"{cfg.source.host}:{cfg.source.port}"
        async with Session(cfg, self.metrics, rows=self.sink.wants_rows) as session:
            info = await session.open()
            if self._started:
                # Back to the last durable commit: discard what the last session wrote after it.
                await self.committer.drain()
                self.sink.close()
                self.sink.open(self.committer.durable.sink)
            elif self._start is None:  # kept while the first commit fails: "current" must not move on
                self._start = await session.start_state(self.committer.durable)
            resume = self.committer.durable if self._started else self._start
            # The checkpoint names the source. Failover resumes by GTID (a MariaDB without any GTID yet too).
            resume = dataclasses.replace(resume, by_gtid=resume.by_gtid or failover is not None, source={
                "host": endpoint, "flavor": info.flavor, "server_id": info.server_id, "server_uuid": info.server_uuid,
                "version": info.version_text})
            if self.schema is not None:  # the history as it stood at the resume position (seeded when first needed)
                await self.schema.open(resume.position.file, resume.position.pos, lazy=True)
            decoder = Decoder(checksum_alg=1 if info.checksum == "CRC32" else 0,
                              schema_source=self.schema.lookup if self.schema else None, rows=self.sink.wants_rows)
            ending = asyncio.Event()  # failover: the consumer stops at a boundary (daemon stop or read-only source)
            consumer = self.consumer = Consumer(self.cfg, resume, decoder, self.sink, self.committer, self.metrics,
                                                self.log, self.schema, self.stopping if failover is None else ending)
            position = resume.position
            # A source.start of the config (no checkpoint yet) is saved only once the primary serves it.
            try:
                await session.dump(resume, check=self.committer.durable is None
                                   and self.cfg.source.start_spec.kind in ("file", "gtid"))
            except SourceError as exc:
                if failover is None or exc.kind != "binlog_missing":
                    raise
                raise failover.refused(endpoint, exc) from None
            if not self._started:
                await consumer.commit()  # a durable sink state and checkpoint from the very start
                self._started = True
            self.sessions += 1
            self.metrics.source(endpoint, info.server_id, info.server_uuid, info.version_text)
            self.log.info("streaming from %s %s at %s:%d, %s", info.flavor, info.version_text,
                          position.file, position.pos,
                          f"GTID {position.gtid_set or position.gtid_list}" if resume.by_gtid else "file/pos")
            self.metrics.set_up(True)
            status = f"STATUS=streaming from {info.flavor} {info.version_text} at {position.file}:{position.pos}"
            systemd.notify(f"READY=1\n{status}" if self.sessions == 1 else status)
            if failover is None:
                await consumer.run(session)
                return
            if failover.streaming(endpoint, position):
                await consumer.commit()  # the checkpoint names the new source
            await failover.run(consumer, session, self.stopping, ending)
