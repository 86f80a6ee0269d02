"""The consumer: the session's events in order, decoded, followed, written, committed.

One :class:`Consumer` per session. For each event it decodes it, lets the
:class:`~binlogd.protocol.position.PositionTracker` follow it, hands it (and, for sinks that take
rows, its row changes) to the sink, and at transaction boundaries commits through the
:class:`~binlogd.daemon.delivery.committer.Committer`: at once when the queue is idle, else grouped (see
:meth:`Consumer.commit_due`). For a sink that takes no rows, runs of rows events inside a
transaction are checked and passed in one call (:meth:`Decoder.skim_run`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from binlogd.daemon.delivery.committer import Committer
from binlogd.daemon.delivery.markers import Markers
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.serverschema import FOLLOWED, DaemonSchema
from binlogd.daemon.replication.session import Session
from binlogd.daemon.sinks import Sink
from binlogd.daemon.state import ResumeState
from binlogd.protocol import events as E
from binlogd.protocol.constants import HEARTBEATS, LOG_EVENT_IGNORABLE_F, event_name
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import UnknownEventError
from binlogd.protocol.position import PositionTracker

COMMIT_EVERY = 1000      # transactions per commit at most while the queue is busy
COMMIT_SECONDS = 1.0     # and at least this often
COMMIT_BYTES = 8 << 20   # and after this many bytes of events (each sync then has little to write)
_IDLE_POLL = 0.25        # seconds without events after which a pending commit is made
_TYPE_NAMES: dict[int, str] = {}


def _type_name(type_code: int) -> str:
    """``EventHeader.type_name`` for a type code, cached."""
    name = _TYPE_NAMES.get(type_code)
    if name is None:
        name = _TYPE_NAMES[type_code] = event_name(type_code)
    return name


class Consumer:
    """Follows one session's stream from ``resume`` on.

    Args:
        config: the daemon's Config (filters, daemon.shutdown_seconds, daemon.unknown_events).
        resume: the durable state the session started from (its position is where the dump starts).
        decoder: a fresh Decoder for the session.
        sink, committer, metrics, log: the daemon's.
        schema: the schema history (:class:`~binlogd.daemon.replication.serverschema.DaemonSchema`), None with
            schema.source "none".
        stopping: set when the daemon should stop at the next transaction boundary.
    Fields:
        tracker: the live position and the last committed boundary.
        skip_before: unix time of a ``datetime:`` start not reached yet (rows before it are dropped), or None.
        last_pass: monotonic time of the loop's last pass (systemd's watchdog checks it).
        incremental: the session's :class:`~binlogd.daemon.snapshot.incremental.Incremental` (set by the daemon with
            ``[snapshot] signal_table``), else None.
    """

    def __init__(self, config, resume: ResumeState, decoder: Decoder, sink: Sink, committer: Committer,
                 metrics: Metrics, log: logging.Logger, schema: DaemonSchema | None, stopping: asyncio.Event):
        self.cfg, self.resume, self.decoder = config, resume, decoder
        self.sink, self.committer, self.metrics, self.log = sink, committer, metrics, log
        self.schema, self.stopping = schema, stopping
        self.tracker = PositionTracker(resume.position)
        self.skip_before = resume.skip_before
        self.last_pass = time.monotonic()
        self._uncommitted = 0          # transactions written but not yet committed
        self._dirty = False            # anything written since the last commit
        self._last_commit = time.monotonic()
        self._bytes_since_commit = 0
        self.incremental = None
        sc = config.sink
        self.markers = Markers(sc, sink, resume.source.get("server_id")) \
            if sc.transaction_events or sc.schema_events or sc.heartbeat_seconds else None

    async def run(self, session: Session) -> None:
        """Take the session's events until it fails (raised) or the daemon stops (at a boundary, or
        after daemon.shutdown_seconds inside a transaction); then commit what is written.

        Raises:
            SourceError, ProtocolError, decode errors, SinkError, CheckpointError: the session ends.
        """
        deadline = None
        skim = not self.decoder.rows
        tracker = self.tracker
        while True:
            self.last_pass = time.monotonic()
            if self.committer.failed:
                await self.committer.settle()  # raises a failed sync now, not at the next commit
            if self.stopping.is_set():
                if not tracker.in_transaction:
                    break
                deadline = deadline or time.monotonic() + self.cfg.daemon.shutdown_seconds
                if time.monotonic() > deadline:
                    self.log.warning("shutdown: transaction still open after %.0fs; it will be read again",
                                     self.cfg.daemon.shutdown_seconds)
                    break
            batch = await session.get(_IDLE_POLL)
            if batch is None:
                if self.incremental is not None and not tracker.in_transaction:
                    await self.incremental.at_boundary(self)
                self._heartbeat()
                if self._dirty and not tracker.in_transaction:
                    await self.commit()
                continue
            index, end = 0, len(batch)
            while index < end:
                if skim and tracker.inside:
                    # A run of rows events (no transaction ends inside it); the event it stops
                    # before is not one to skim (or is bad): it is decoded next.
                    index = self._skim(batch, index)
                    if index == end:
                        break
                await self._handle(batch[index])
                index += 1
                if self.incremental is not None and self.incremental.state is not None and not tracker.in_transaction:
                    await self.incremental.at_boundary(self)
                self._heartbeat()
                if not tracker.in_transaction and self._dirty and self.commit_due(index == end and session.idle):
                    await self.commit(wait=False)
        if self._dirty and not tracker.in_transaction:
            await self.commit()
        else:
            await self.committer.settle()

    def commit_due(self, idle: bool) -> bool:
        """At a transaction boundary: commit now? Always when nothing else is queued (``idle``);
        while busy, after COMMIT_EVERY transactions, COMMIT_BYTES bytes or COMMIT_SECONDS."""
        return idle or self._uncommitted >= COMMIT_EVERY or self._bytes_since_commit >= COMMIT_BYTES \
            or time.monotonic() - self._last_commit >= COMMIT_SECONDS

    async def commit(self, wait: bool = True) -> None:
        """Commit at a transaction boundary: flush the sink now, sync it and save the checkpoint in
        the Committer's worker; ``wait``: return once that is durable.

        Raises:
            SinkError, CheckpointError: the flush failed, or (``wait``) a sync or save did.
        """
        resume = ResumeState(self.tracker.committed, self.resume.by_gtid, None, self.resume.source, self.skip_before,
                             self.resume.snapshot,  # an unfinished snapshot (only a stop leaves one) is kept
                             self.incremental.saved() if self.incremental is not None else self.resume.incremental)
        token = self.committer.flush(resume)
        self._uncommitted, self._dirty, self._last_commit, self._bytes_since_commit = 0, False, time.monotonic(), 0
        self.committer.sync(token)
        if wait:
            await self.committer.settle()

    def _heartbeat(self) -> None:
        """Write a heartbeat with the committed position when one is due at a transaction boundary."""
        markers = self.markers
        if markers is not None and not self.tracker.in_transaction and markers.heartbeat_due():
            committed = self.tracker.committed
            markers.heartbeat(committed.file, committed.pos, committed.gtid_set or committed.gtid_list or None)
            self._dirty = True

    def _skim(self, events: list, start: int) -> int:
        """Pass the run of rows events (and their context) from ``events[start]`` on, checked in one
        call (:meth:`Decoder.skim_run`), to a sink that takes no rows; returns where the run stops."""
        tracker = self.tracker
        run = self.decoder.skim_run(events, start, len(events), tracker.pos)
        if run.stop > start:
            self.metrics.events({_type_name(tc): n for tc, n in run.counts.items()}, run.last_timestamp, run.nbytes)
            self.sink.event_run(events[start:run.stop], tracker.pos, run.next_position)
            tracker.skip(run.next_position)
            self.metrics.position(tracker.file, tracker.pos)
            self._bytes_since_commit += run.nbytes
            self._dirty = True
        return run.stop

    async def _handle(self, raw: bytes | memoryview) -> None:
        """Decode one event and account for it everywhere.

        Raises:
            UnknownEventError: an unknown, non-ignorable event while daemon.unknown_events = "error".
            ChecksumError, EventDecodeError, ProtocolError, SinkError: from decoding or the sink.
        """
        decoder, tracker = self.decoder, self.tracker
        pos = tracker.start_of(raw)
        event = decoder.decode(raw, pos)
        h = event.header
        tc = h.type_code
        artificial = h.artificial
        heartbeat = tc in HEARTBEATS
        self.metrics.event(_type_name(tc), h.timestamp, len(raw), artificial or heartbeat)
        self._bytes_since_commit += len(raw)
        if heartbeat:
            self.metrics.heartbeat()
            return
        if isinstance(event, E.UnknownEvent) and not h.flags & LOG_EVENT_IGNORABLE_F \
                and self.cfg.daemon.unknown_events == "error":
            raise UnknownEventError(f"unknown event type {tc} at {tracker.file}:{pos} "
                                    "(set daemon.unknown_events = \"skip\" to pass it by)", pos)
        markers = self.markers
        if markers is not None and not tracker.in_transaction:
            markers.outside(tracker.file, pos, h.timestamp)
        if self.schema is not None and tc in FOLLOWED:  # DDL into the history (durably), TABLE_MAPs repaired
            event = await self.schema.follow(event, raw, pos, tracker.file, decoder)
            if markers is not None and markers.schemas and self.schema.changed:
                markers.ddl(event.query, self.schema.changed, self.cfg.filters.table_selected, tracker.file, pos,
                            h.timestamp, tracker.gtid)
        if isinstance(event, E.RotateEvent) and not artificial:
            self.log.info("rotate to %s", event.next_file)
        self.sink.event(raw, event)
        if not artificial:
            self._dirty = True
        if self.sink.wants_rows:
            if isinstance(event, E.TransactionPayloadEvent):
                for item, inner in zip(event.events, event.offsets):
                    if isinstance(item, E.RowsEvent):
                        self._rows(item, inner)
            elif isinstance(event, E.RowsEvent):
                self._rows(event)
            if self.sink.over():
                await self.sink.room()
        gtid = tracker.gtid
        if tracker.observe(event):
            if markers is not None:
                inner = event.offsets[-1] if isinstance(event, E.TransactionPayloadEvent) and event.offsets else 0
                markers.ended(tracker.file, pos, inner, h.timestamp, gtid)
            self._uncommitted += 1
            self.metrics.transaction()
            if self.skip_before is not None and h.timestamp >= self.skip_before:
                self.skip_before = None
        self.metrics.position(tracker.file, tracker.pos)

    def _rows(self, event: E.RowsEvent, inner: int = 0) -> None:
        """The row changes of one rows event (at ``inner`` in its TRANSACTION_PAYLOAD, 0 outside one) that pass
        the filters and the datetime start, to the sink."""
        if self.incremental is not None:  # signals and the chunk's keys, whatever the filters select
            self.incremental.observe(event)
        f = self.cfg.filters
        if not f.table_selected(event.schema, event.table) or not f.event_selected(event.header.type_name):
            return
        if self.skip_before is not None and event.header.timestamp < self.skip_before:
            return
        if event.columns and event.columns[0].startswith("@"):
            self.metrics.unnamed_columns()
        file, gtid, markers = self.tracker.file, self.tracker.gtid, self.markers
        if markers is None:
            n = self.sink.rows(event, file, gtid, inner)
        else:
            order = markers.rows(event.schema, event.table, file, gtid)
            n = self.sink.rows(event, file, gtid, inner) if order is None else \
                self.sink.rows(event, file, gtid, inner, order)
            markers.written(event.schema, event.table, n)
        self.metrics.rows(event.schema, event.table, event.kind, n)
