"""One session with the primary: connect, decide where to start, dump, and read events.

A :class:`Session` owns a :class:`~binlogd.daemon.replication.connection.SourceConnection` and, once the dump is
sent, a reader task that puts the events the socket brought into a bounded queue, in batches; the
consumer takes them with :meth:`Session.get`. Closing the session (``async with``) cancels and
awaits the reader and closes the connection.
"""

from __future__ import annotations

import asyncio

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.connection import (
    RAW_RECEIVE_BUFFER,
    RECEIVE_BUFFER,
    ServerInfo,
    SourceConnection,
    SourceError,
)
from binlogd.daemon.state import ResumeState
from binlogd.daemon.tasks import close_tasks
from binlogd.protocol.constants import HEARTBEATS
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.position import Position, is_before

BATCH = 1024  # events per reader -> consumer hand-off at most


class Session:
    """A replica's session: :meth:`open`, then :meth:`dump`, then :meth:`get` batches until it fails.

    Args:
        config: the daemon's :class:`~binlogd.daemon.config.Config`.
        metrics: where the queue depth is reported.
        rows: the consumer decodes rows (else the connection receives into larger buffers:
            :data:`~binlogd.daemon.replication.connection.RAW_RECEIVE_BUFFER`).
    Fields:
        info: what the primary told about itself (after :meth:`open`).
        queued: events in the queue now.
    """

    def __init__(self, config, metrics: Metrics, rows: bool = True):
        self.cfg = config
        self.metrics = metrics
        self.conn = SourceConnection(config.source, RECEIVE_BUFFER if rows else RAW_RECEIVE_BUFFER)
        self.info: ServerInfo | None = None
        self.queued = 0
        self._queue: asyncio.Queue | None = None
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def open(self) -> ServerInfo:
        """Connect and authenticate (see :meth:`SourceConnection.open`, which raises SourceError)."""
        self.info = await self.conn.open()
        return self.info

    async def start_state(self, loaded: ResumeState | None) -> ResumeState:
        """Where the daemon's first session starts: the checkpoint ``loaded`` if there is one, else
        ``source.start`` (the daemon adds the source's facts to it, every session).

        Raises:
            SourceError: the primary cannot tell its position or list its files.
        """
        info = self.info
        if loaded is not None:
            return loaded
        spec = self.cfg.source.start_spec
        if spec.kind == "current":
            start = await self.conn.current_position()
            by_gtid = bool(start.gtid_list) if info.flavor == "mariadb" else info.gtid_mode
            return ResumeState(start, by_gtid)
        if spec.kind == "file":
            start = Position(spec.file, spec.pos)
            await self._check_file(start)
            return ResumeState(start)
        if spec.kind == "gtid":
            text = str(spec.gtid)
            start = Position("", 4, gtid_list=text) if info.flavor == "mariadb" else Position("", 4, gtid_set=text)
            return ResumeState(start, True)
        start = Position(await self._file_for_datetime(spec.timestamp), 4)
        return ResumeState(start, skip_before=spec.timestamp)

    async def _check_file(self, start: Position) -> None:
        """A ``file:`` start names a file the primary lists, and a position where one of its events starts (or
        where it ends).

        Raises:
            SourceError("binlog_missing", fatal): it does not; "probably purged" only when the name is older
                than the oldest file it has, else the files it has are named; a position inside an event or
                past the end names the nearest event boundaries.
        """
        sizes = await self.conn.binlog_sizes()
        files = list(sizes)
        if start.file in sizes:
            why = await self.conn.off_boundary(start.file, start.pos, sizes[start.file])
            if why is not None:
                raise SourceError("binlog_missing", f"source.start: no event of {start.file} starts at {start.pos}: "
                                  f"{why}", fatal=True)
            return
        if not files:
            return
        if is_before(start.file, 4, files[0], 4):
            raise SourceError("binlog_missing", f"source.start: {start.file} is older than the oldest binlog file "
                              f"on the primary ({files[0]}): it was probably purged: see README 'After ERR 1236'",
                              fatal=True)
        raise SourceError("binlog_missing", f"source.start: the primary has no binlog file {start.file} (it has "
                          f"{files[0]} to {files[-1]})", fatal=True)

    async def _file_for_datetime(self, when: float) -> str:
        """The newest binlog file that began at or before ``when``: each file's first event is read
        with a non-blocking dump (newest first); no file is streamed through."""
        files = await self.conn.binlog_files()
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

    async def dump(self, resume: ResumeState, check: bool = False) -> None:
        """Ask for the stream from ``resume`` and start the reader task.

        Args:
            check: first wait until the primary shows it can serve that position: an event that is in
                its file (a position inside an event gets ERR 1236 after the stream's header), or a
                heartbeat (the end of the log). For a ``source.start`` not yet saved in a checkpoint.
        Raises:
            SourceError: the primary refused (ERR 1236: the position or GTIDs are gone, …), or
                (``check``) sent nothing for 2 × heartbeat.
        """
        source = self.cfg.source
        await self.conn.start_dump(source.server_id, resume.position, resume.by_gtid, source.heartbeat_seconds)
        self.conn.idle_timeout = 2 * source.heartbeat_seconds  # no byte for that long: the link is dead
        # daemon.queue_events bounds the events in the queue: batches of at most BATCH events.
        batch = min(BATCH, self.cfg.daemon.queue_events)
        first = await self._accepted(batch) if check else []
        self._queue = asyncio.Queue(max(1, self.cfg.daemon.queue_events // batch))
        self._reader = asyncio.create_task(self._read(batch, first))

    async def _accepted(self, batch: int) -> list[list]:
        """The batches read until one holds an event that is in the file, or a heartbeat."""
        batches, decoder = [], Decoder()
        while True:
            events = await self.conn.read_events(batch)
            batches.append(events)
            for raw in events:
                header = decoder.decode_header(raw)
                if not header.artificial or header.type_code in HEARTBEATS:
                    return batches

    async def _read(self, batch: int, first: list[list]) -> None:
        """The reader task: the batches ``first`` (read by :meth:`_accepted`), then events as they come,
        into the queue in batches of at most ``batch``; no byte for 2 × heartbeat is an error (raised by
        the connection)."""
        conn, queue = self.conn, self._queue
        pending = iter(first)
        try:
            while True:
                events = next(pending, None) or await conn.read_events(batch)
                await queue.put(events)
                self.queued += len(events)
                self.metrics.queue_depth(self.queued)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, which raises it in order
            await queue.put(exc)

    async def get(self, timeout: float) -> list | None:
        """The next batch of events (bytes or memoryviews), or None when none came within ``timeout``.

        Raises:
            SourceError, ProtocolError, …: what the reader met, once the batches before it were taken.
        """
        try:
            async with asyncio.timeout(timeout):
                item = await self._queue.get()
        except TimeoutError:
            return None
        if isinstance(item, BaseException):
            raise item
        self.queued -= len(item)
        self.metrics.queue_depth(self.queued)
        return item

    @property
    def idle(self) -> bool:
        """Nothing is waiting in the queue."""
        return self._queue.empty()

    async def close(self) -> None:
        """Cancel and await the reader task, then close the connection."""
        reader, self._reader = self._reader, None
        try:
            await close_tasks(reader)
        finally:
            await self.conn.close()
