"""NATS JetStream sink: one message per change on ``binlogd.{schema}.{table}``, in a stream with file storage.
An event beyond rows is a message of the same stream and chain on its kind's subject (``binlogd.transaction``,
``binlogd``, ``__debezium-heartbeat.binlogd`` by default), with the same headers (its id in place of a change's).

Each message carries the headers ``Nats-Msg-Id`` (``<server_id>:<change id>``, stable across re-sends: the
server drops a duplicate within the stream's duplicate window), ``Binlogd-Source`` (the change's id,
:mod:`library.identity`) and ``Nats-Expected-Last-Sequence`` (the stream's sequence before it: the server
refuses a message that does not follow the one before it, so what the stream holds of our messages is always an
unbroken prefix of what was sent). Only the last message of each piece asks for an ack: the stream takes one
connection's messages in order, and by the chain of expected sequences an ack of sequence N proves that every
message before it is stored too (one refused or lost message makes every later one refused).

A mark (a commit) publishes the checkpoint, in the same chain, on ``_binlogd.checkpoint.<stream>`` (a subject of
the stream outside the change subjects, with ``Nats-Rollup: sub``: only the newest is kept), and waits for the
acks; only then may the daemon's local checkpoint move. ``open`` reads the newest checkpoint message: that is
where the daemon resumes (:meth:`remote_checkpoint`). Messages after it are a commit cut short: streamed changes
are read again as they were and skipped up to the last one stored; an initial snapshot's rows (read again in
another view, as another run's changes) are deleted.
"""

from __future__ import annotations

import asyncio
from collections import deque

from binlogd.daemon.sinks.base import SinkError
from binlogd.daemon.sinks.bus import (
    EXIT_AUTH,
    EXIT_CHECKPOINT,
    EXIT_MISCONFIGURED,
    EXIT_UNREACHABLE,
    WAIT_SECONDS,
    BusSink,
)
from binlogd.daemon.sinks.frames import nats_hpubs
from binlogd.library.checkpointfile import Checkpoint
from binlogd.library.identity import boundary_key, order_key
from binlogd.library.metaevents import KINDS

HEADER_ROOM = 512  # bytes of max_payload kept for the headers
TAIL_DELETES = 100_000  # an initial snapshot's rows of a commit cut short, deleted at open at most


class NatsSink(BusSink):
    """NATS JetStream (``nats-py``).

    Args:
        url: ``nats://[user:password@]host:port``.
        stream: the JetStream stream (created with subjects ``<subject prefix>>`` and the checkpoint subject, file
            storage and rollups allowed, when missing; an older one gets the checkpoint subject added).
        subject: the subject template (``{schema}``, ``{table}``).
        format, server_name, events: as :class:`~.bus.BusSink` (events: subjects, in the stream too: those
            outside ``<subject prefix>>`` are added to its subjects).
    """

    KIND = "nats"

    def __init__(self, url: str, stream: str = "BINLOGD", subject: str = "binlogd.{schema}.{table}", **kw):
        super().__init__(url, 1 << 20, **kw)
        self.stream, self.subject = stream, subject
        self.filter = subject.split("{", 1)[0] + ">"
        self._meta_subjects = {op: self.events[kind].encode() for op, kind in KINDS.items() if kind in self.events}
        self.checkpoint_subject = f"_binlogd.checkpoint.{stream}"
        self.fence_subject = f"_binlogd.fence.{stream}"  # [ha]: a taker's fence (see _fence_stream)
        self._tail = ""  # the Binlogd-Source of a commit cut short whose changes are skipped, at open
        self._last_id = ""  # [ha]: the Nats-Msg-Id of the last message sent since the fence
        self._tail_key = None  # the order key of the last change of a tail skipped at open (worker side)
        self._subjects: dict = {}
        self._nc = self._js = None
        self._seq = 0
        self._acks: deque = deque()

    def _limit_name(self) -> str:
        return "the NATS server's max_payload, less room for headers"

    async def _connect(self) -> None:
        import nats

        async def quiet(exc):  # errors reach us through the calls; nats-py would log each one
            pass

        async def lost():  # nats-py's ack futures have no timeout: fail them when the connection goes
            for ack, _seq in self._acks:
                if not ack.done():
                    ack.set_exception(SinkError(f"{self.name}: the connection to the NATS server was lost"))

        self._acks = deque()
        # no reconnects: an error ends the session and the daemon reopens at the durable state (with 0,
        # nats-py's first connect would try forever)
        self._nc = await nats.connect(self.url, connect_timeout=10, allow_reconnect=False,
                                      max_reconnect_attempts=1, reconnect_time_wait=0.2, error_cb=quiet,
                                      disconnected_cb=lost, closed_cb=lost)
        self.max_change_bytes = self._nc.max_payload - HEADER_ROOM
        self._js = self._nc.jetstream(timeout=WAIT_SECONDS / 4, publish_async_max_pending=4000)
        info = await self._stream_info()
        self._seq, self._skip = info.state.last_seq, None
        checkpoint, at = await self._last_checkpoint()
        self._use_checkpoint(checkpoint)
        self._tail, self._last_id, self._tail_key = "", "", None
        if self._seq > at:  # a commit cut short: what it stored is not sent again
            await self._cut_short(at)
        if self.epoch is not None:
            await self._fence_stream()

    async def _fence_stream(self) -> None:
        """``[ha]``: publish a fence (subject ``_binlogd.fence.<stream>``, header ``Binlogd-Fence`` = our epoch),
        expecting the last sequence read at open. From it on, every message also expects its predecessor's message
        id (``Nats-Expected-Last-Msg-Id``): a chain no other writer can join, and one foreign message (an older
        writer's, or a newer one's fence) refuses every later message of the chain, whatever the sequences (an
        expected sequence alone would line up again one message later). It repeats the ``Binlogd-Source`` of a
        tail being skipped, so the next open skips the same changes. Raises SinkError when another writer came
        first (the open fails)."""
        headers = {"Binlogd-Fence": str(self.epoch), "Nats-Rollup": "sub"}
        if self._tail:
            headers["Binlogd-Source"] = self._tail
        await self._publish(self.fence_subject, b"", headers)
        await self._commit(None)

    async def _stream_info(self):
        """The stream's info, made or given the checkpoint subject as needed.

        Raises:
            SinkError: (fatal, exit 6) it exists with other subjects or storage.
        """
        from nats.js import api
        from nats.js.errors import NotFoundError

        own = [self.checkpoint_subject, *([self.fence_subject] if self.epoch is not None else [])]
        own += sorted({s.decode() for s in self._meta_subjects.values()
                       if not (s.startswith(self.filter[:-1].encode()) and len(s) >= len(self.filter))})
        try:
            info = await self._js.stream_info(self.stream)
        except NotFoundError:
            return await self._js.add_stream(name=self.stream, subjects=[self.filter, *own],
                                             storage=api.StorageType.FILE, allow_rollup_hdrs=True)
        subjects = list(info.config.subjects or [])
        if self.filter not in subjects or info.config.storage != api.StorageType.FILE:
            raise SinkError(f"{self.name}: stream {self.stream} exists with subjects {subjects} and "
                            f"{info.config.storage} storage; binlogd needs {self.filter!r} among its subjects "
                            "and file storage", fatal=True, exit_code=EXIT_MISCONFIGURED)
        wanted = set(own)
        if not wanted <= set(subjects) or not info.config.allow_rollup_hdrs:
            info.config.subjects = sorted({*subjects, *wanted})
            info.config.allow_rollup_hdrs = True
            info = await self._js.update_stream(info.config)
        return info

    async def _last_checkpoint(self) -> tuple:
        """(the newest checkpoint message's Checkpoint, its sequence), or (None, 0) when there is none.

        Raises:
            SinkError: (fatal, exit 8) it is not a checkpoint.
        """
        from nats.js.errors import NotFoundError

        try:
            msg = await self._js.get_msg(self.stream, subject=self.checkpoint_subject)
        except NotFoundError:
            return None, 0
        try:
            return Checkpoint.parse(msg.data), msg.seq
        except ValueError as exc:
            raise SinkError(f"{self.name}: message {msg.seq} on {self.checkpoint_subject} is not a binlogd "
                            f"checkpoint: {exc}", fatal=True, exit_code=EXIT_CHECKPOINT) from None

    async def _cut_short(self, at: int) -> None:
        """The stream holds messages after the checkpoint of sequence ``at`` (0: none): a commit cut short. When
        they are an initial snapshot's rows (read again after the restart, in another view and run), they are
        deleted (up to :data:`TAIL_DELETES` of them); streamed changes are read again as they were, and skipped
        up to the last one's id (:attr:`_skip`).

        Raises:
            SinkError: (fatal, exit 6) the last message is not binlogd's.
        """
        msg = await self._js.get_msg(self.stream, self._seq)
        source = (msg.headers or {}).get("Binlogd-Source") or ""
        if not source and "Binlogd-Fence" in (msg.headers or {}):  # [ha]: a fence with nothing cut short before it
            return
        if source.count(":") == 2:  # written before ids named the inner event
            file, pos, row = source.rsplit(":", 2)
            source = f"{file}:{pos}:0:{row}"
        try:
            key = order_key(source)
        except ValueError:
            raise SinkError(f"{self.name}: the last message of stream {self.stream} (sequence {self._seq}) "
                            "has no Binlogd-Source header: something else publishes to the stream",
                            fatal=True, exit_code=EXIT_MISCONFIGURED) from None
        if key[0] != 0:
            self._skip, self._tail, self._tail_key = key, source, key
        elif self._seq - at <= TAIL_DELETES:
            for seq in range(at + 1, self._seq + 1):
                await self._js.delete_msg(self.stream, seq)

    def _subject_of(self, schema: str, table: str) -> str:
        key = (schema, table)
        name = self._subjects.get(key)
        if name is None:
            name = self.subject.format(schema=schema, table=table)
            if any(c.isspace() for c in name) or "*" in name or ">" in name or ".." in name:
                raise SinkError(f"{self.name}: {schema}.{table} makes subject {name!r}, which NATS cannot carry "
                                "(whitespace, '*', '>' or an empty token): change sink.nats.subject or the filters",
                                fatal=True, exit_code=EXIT_MISCONFIGURED)
            name = self._subjects[key] = name.encode()
        return name

    async def _write(self, piece: list) -> None:
        # All but the last message without a reply (the last one's ack covers them: see the module docstring),
        # as HPUB commands framed per block (frames.nats_hpubs; an event beyond rows, row0 a str: _hpub) into one
        # buffer: nats-py's publish() costs ~60 us a message.
        *blocks, (meta, lines, n) = piece
        cut = lines.rfind(b"\n", 0, len(lines) - 1) + 1  # the piece's last line goes by publish_async, below
        blocks.append((meta, lines[:cut], n - 1))
        out, seq = [], self._seq
        for (schema, table, _file, _pos, row0, _gtid, op, sid, prefix), block, count in blocks:
            if not count:
                continue
            if row0.__class__ is str:
                out.append(self._hpub(self._meta_subjects[op], f"{sid}:{prefix}:{row0}", seq, block[:-1]))
            else:
                frame = nats_hpubs if self.epoch is None else self._chained_hpubs
                out.append(frame(self._subject_of(schema, table), sid, prefix.encode(), row0, seq, block, count))
            seq += count
        if out:
            await self._unless_lost(self._nc._send_command(b"".join(out)))
        schema, table, _file, _pos, row0, _gtid, op, sid, prefix = meta
        if row0.__class__ is str:
            source, subject = f"{prefix}:{row0}", self._meta_subjects[op]
        else:
            source, subject = f"{prefix}:{row0 + n - 1}", self._subject_of(schema, table)
        self._seq = seq
        await self._publish(subject.decode(), lines[cut:-1], {"Nats-Msg-Id": f"{sid}:{source}",
                                                              "Binlogd-Source": source})

    def _hpub(self, subject: bytes, msg_id: str, seq: int, payload: bytes) -> bytes:
        """One HPUB with the headers :func:`.frames.nats_hpubs` gives (``msg_id``: ``<server_id>:<id>``; the
        ``[ha]`` chain's expected message id too, as :meth:`_chained_hpubs`)."""
        source = msg_id.partition(":")[2].encode()
        chained = b""
        if self.epoch is not None:
            chained, self._last_id = b"Nats-Expected-Last-Msg-Id: %b\r\n" % self._last_id.encode(), msg_id
        headers = (b"NATS/1.0\r\nNats-Msg-Id: %b\r\nBinlogd-Source: %b\r\nNats-Expected-Last-Sequence: %d\r\n"
                   b"%b\r\n" % (msg_id.encode(), source, seq, chained))
        return b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, len(headers), len(headers) + len(payload), headers, payload)

    def _chained_hpubs(self, subject: bytes, sid: int, prefix: bytes, row0: int, seq0: int, lines: bytes,
                       n: int) -> bytes:
        """``[ha]``: :func:`.frames.nats_hpubs`'s HPUBs, each also expecting its predecessor's message id
        (``Nats-Expected-Last-Msg-Id``, from :attr:`_last_id`, which moves on)."""
        out = []
        for i, payload in enumerate(lines.split(b"\n")[:n]):
            msg_id = b"%d:%b:%d" % (sid, prefix, row0 + i)
            headers = (b"NATS/1.0\r\nNats-Msg-Id: %b\r\nBinlogd-Source: %b:%d\r\nNats-Expected-Last-Sequence: %d\r\n"
                       b"Nats-Expected-Last-Msg-Id: %b\r\n\r\n" % (msg_id, prefix, row0 + i, seq0 + i,
                                                                   self._last_id.encode()))
            out.append(b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, len(headers), len(headers) + len(payload), headers,
                                                         payload))
            self._last_id = msg_id.decode()
        return b"".join(out)

    async def _publish(self, subject: str, payload: bytes, headers: dict) -> None:
        """Publish the stream's next message, its ack awaited later (acks already in are checked now)."""
        headers["Nats-Expected-Last-Sequence"] = str(self._seq)
        if self.epoch is not None:  # [ha]: the chain of message ids (see _fence_stream)
            headers.setdefault("Nats-Msg-Id", f"_binlogd:{self.epoch}:{self._seq + 1}")
            if self._last_id:
                headers["Nats-Expected-Last-Msg-Id"] = self._last_id
            self._last_id = headers["Nats-Msg-Id"]
        self._seq += 1
        acks = self._acks
        if self.epoch is None:
            ack = await self._unless_lost(self._js.publish_async(subject, payload, headers=headers))
        else:  # [ha]: awaited now, so a refusal (another writer's fence) fails at once: nats-py never resolves a
            # refused publish_async's future (the wait would end only after WAIT_SECONDS)
            ack = asyncio.get_running_loop().create_future()
            ack.set_result(await self._unless_lost(self._js.publish(subject, payload, headers=headers)))
        acks.append((ack, self._seq))
        while acks and acks[0][0].done():
            self._check(*acks.popleft())

    def _check(self, ack, seq: int) -> None:
        result = ack.result()  # raises the server's refusal
        if result.duplicate or result.seq != seq or result.stream != self.stream:
            raise SinkError(f"{self.name}: stream {result.stream} stored message {result.seq}, expected {seq} in "
                            f"{self.stream}{' (a duplicate)' if result.duplicate else ''}; resynchronising")

    async def _commit(self, checkpoint: bytes | None) -> None:
        if checkpoint is not None and self._tail_key is not None:
            if self._inside_tail(checkpoint):
                checkpoint = None
            else:
                self._tail_key = None
        if checkpoint is not None:
            await self._publish(self.checkpoint_subject, checkpoint, {"Nats-Rollup": "sub"})
        acks = self._acks
        while acks:
            await self._unless_lost(acks[0][0])
            self._check(*acks.popleft())

    def _inside_tail(self, checkpoint: bytes) -> bool:
        """Whether ``checkpoint`` lies at or before the last change of the tail skipped at open: published, it
        would stand after that tail in the stream, and the next open would send the tail's changes again (NATS
        drops them as duplicates within its window, which breaks the expected-sequence chain: a retry loop)."""
        position = Checkpoint.parse(checkpoint).position
        return boundary_key(position.file or "", position.pos) < self._tail_key

    async def _unless_lost(self, awaitable):
        """Await ``awaitable`` (a nats-py call or an ack), failing as soon as the connection is closed. nats-py's
        close can fail before its callbacks (a drain on the dead socket) and leave its flush futures and the
        acks pending for ever; its status says closed all the same."""
        task = asyncio.ensure_future(awaitable)
        while not task.done():
            if self._nc is None or self._nc.is_closed:
                task.cancel()
                raise SinkError(f"{self.name}: the connection to the NATS server was lost",
                                exit_code=EXIT_UNREACHABLE)
            await asyncio.wait((task,), timeout=0.25)
        return task.result()

    async def _disconnect(self) -> None:
        for ack, _seq in self._acks:
            ack.cancel()
        self._acks = deque()
        if self._nc is not None:
            nc, self._nc = self._nc, None
            await nc.close()
            # A close that failed half way (see _unless_lost) leaves nats-py's tasks behind: the read loop's
            # exception unretrieved, the subscriptions' readers pending; end them here, not on stderr at exit.
            tasks = [getattr(nc, name, None) for name in ("_reading_task", "_flusher_task", "_ping_interval_task")]
            tasks += [getattr(sub, "_wait_for_msgs_task", None) for sub in getattr(nc, "_subs", {}).values()]
            tasks = [t for t in tasks if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _error_of(self, exc: Exception) -> SinkError:
        from nats import errors as nx

        text = str(exc) or type(exc).__name__
        if isinstance(exc, nx.AuthorizationError) or "authorization" in text.lower():
            return SinkError(f"{self.name}: authentication failed: {text}", fatal=True, exit_code=EXIT_AUTH)
        if isinstance(exc, (nx.NoServersError, nx.ConnectionClosedError, nx.TimeoutError, OSError)):
            return SinkError(f"{self.name}: unreachable: {text}", exit_code=EXIT_UNREACHABLE)
        return SinkError(f"{self.name}: {text}")
