"""What the message-bus sinks (Redis Streams, NATS JetStream, PostgreSQL) share: an ordered pipeline to a
private thread that runs the broker's asyncio client.

The consumer side (``rows``/``change``/``flush``/``flushed``) turns each change into one message (the bytes
the jsonl sink writes for it, without the newline), kept in blocks (a rows event's messages in one bytes
object), and hands pieces of about :data:`PIECE_BYTES` to the worker thread, then a *mark* per flush carrying
the checkpoint that flush reaches. The worker applies them in order, one at a time: pieces are written
(Redis: queued in a MULTI, or staged in a staging stream past ``STAGE_BYTES``; PostgreSQL: COPY into the open
transaction; NATS: published with acks pending), and a mark commits everything before it together with its
checkpoint (Redis MULTI/EXEC, or a Lua script for staged entries; a PostgreSQL COMMIT; NATS: all acks in).
``sync`` waits until the worker committed the last mark ``begin_sync`` took. A Redis commit is confirmed (its
EXEC's reply read) while the next one's pieces go out: by the next commit, or when the queue is empty, or once
CONFIRM_SECONDS old.

Memory stays bounded: at most :data:`PENDING_BYTES` of handed-over, unwritten pieces (and the piece that
passed it); past it the consumer awaits :meth:`BusSink.room` (at most :data:`WAIT_SECONDS`, then a retryable
SinkError), and the daemon's event loop goes on meanwhile: no call of the sink on it waits for the broker
(the daemon opens and closes the sink in a worker thread). A worker error is kept and raised by the
next call on the consumer side or by ``sync``; the daemon then reopens the sink, which rolls back whatever
the broker did not commit.

Because every mark commits as soon as the worker reaches it, the broker may be ahead of the daemon's
durable state when a session fails. ``open`` therefore reads what the broker holds (its checkpoint, or for
NATS the last message) and drops re-read changes at or before it (:attr:`BusSink._skip`), and a checkpoint
older than the broker's is never written back.

The events beyond rows (:meth:`BusSink.meta`: a transaction's begin and commit, a schema change, a heartbeat) go
through the same pipeline, one block each whose meta's row is the id's word (a str), and are committed with the
changes; each worker routes such a block to its kind's stream, subject or table (:attr:`BusSink.events`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from urllib.parse import urlsplit

import orjson

from binlogd.daemon.sinks.base import Sink, SinkError
from binlogd.library.debezium import DEFAULT_SERVER_NAME, formatter, meta_formatter, rows_writer, transaction_lines
from binlogd.library.identity import boundary_key, order_key, stream_prefix
from binlogd.library.metaevents import KINDS
from binlogd.library.serialize import dumps
from binlogd.protocol.events import RowsEvent

PIECE_BYTES = 1 << 20     # a piece handed to the worker is about this big at most
PENDING_BYTES = 32 << 20  # handed to the worker and not yet written: the consumer waits above this
WAIT_SECONDS = 60.0       # longest wait for the broker (open, a write, a commit) before a retryable SinkError
CONFIRM_SECONDS = 0.25    # a commit left in flight (Redis) is confirmed before the next op once this old
_ROOM_POLL = 0.005        # how often a consumer waiting for room looks again
EXIT_UNREACHABLE, EXIT_AUTH, EXIT_MISCONFIGURED, EXIT_DATA, EXIT_CHECKPOINT = 4, 3, 6, 7, 8  # README, "Exit codes"


def redact(url: str) -> str:
    """``url`` without its password (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


class BusSink(Sink):
    """Base of the bus sinks; subclasses implement the ``_connect``/``_write``/``_commit``/``_disconnect``
    coroutines (run on the worker's loop) and ``_error_of``.

    Args:
        url: the broker's URL.
        max_change_bytes: a change's message may be this big at most (a bigger one: SinkError, exit 7).
        format, server_name: the change events' format (:func:`library.debezium.formatter`).
        events: where the events beyond rows go, by kind (:data:`library.metaevents.KINDS`: "transaction",
            "schema", "heartbeat") to the stream, subject or table named for it; a kind not named is not written.
    Fields:
        name: "<kind> sink at <url without password>", for messages.
        remote: the Checkpoint the broker held at :meth:`open` (Redis, PostgreSQL), else None.
        epoch: the ``[ha]`` lease's fencing epoch this instance holds (:mod:`.lease`), set before :meth:`open`;
            every commit checks it in the broker's atomic step and fails once another instance took the lease
            (None: no lease, no check).
    """

    KIND = "bus"
    commits_position = True
    epoch: int | None = None

    def __init__(self, url: str, max_change_bytes: int, format: str = "binlogd",
                 server_name: str = DEFAULT_SERVER_NAME, events: dict | None = None):
        self.url, self.max_change_bytes = url, max_change_bytes
        self.name = f"{self.KIND} sink at {redact(url)}"
        self._json, self._lines = formatter(format, server_name), rows_writer(format, server_name)
        self._meta_json, self._server_name = meta_formatter(format, server_name), server_name
        self.events = dict(events or {})
        self.remote = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._reset()

    def _reset(self) -> None:
        self._piece: list = []      # blocks (meta, lines, n) not yet handed over (consumer only): see _add
        self._piece_bytes = 0
        self._pending = 0           # bytes handed over, not yet applied (under _cond)
        self._mark = 0              # the last flush's mark (consumer only)
        self._target = 0            # the mark begin_sync handed to sync
        self._committed = 0         # the last mark the worker committed (under _cond)
        self._failed: SinkError | None = None  # the worker's error (under _cond)
        self._skip: tuple | None = None        # changes whose order_key is at or before this are in the broker
        self._floor: tuple | None = None       # the broker's checkpoint position: never written back below it
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._pieces = 0            # pieces handed to the worker since open

    # ------------------------------------------------------------------ payloads (consumer)
    def _payload(self, change: dict) -> bytes:
        """The message of one change: its JSON in the configured format (no newline)."""
        return self._json(change)

    def change(self, change: dict) -> None:
        src = change.get("source") or {}
        prefix, _, row = src["id"].rpartition(":")
        if self._skip is not None:
            key = order_key(src["id"])
            if key <= self._skip:
                return
            self._skip = None  # the stream is past what the broker holds
        meta = (change.get("schema"), change.get("table"), src.get("file") or "", src.get("pos") or 0, int(row),
                src.get("gtid"), change.get("op"), src.get("server_id"), prefix)
        self._add(meta, self._payload(change) + b"\n", 1)

    def meta(self, event: dict) -> None:
        """:meth:`Sink.meta`: one block of one message, its meta's row the id's word (``begin``, ``commit``,
        ``ddl.<k>``, ``heartbeat``: a str, where a change's row is an int), for the stream, subject or table
        of its kind (:attr:`events`). Skipped when the broker holds it (:attr:`_skip`), as a change.

        Raises:
            SinkError: (fatal, exit 6) its kind has no destination; (fatal, exit 7) over max_change_bytes.
        """
        src, op = event["source"], event["op"]
        if KINDS[op] not in self.events:
            raise SinkError(f"{self.name}: no {KINDS[op]} destination for a {op} event", fatal=True,
                            exit_code=EXIT_MISCONFIGURED)
        if self._skip is not None:
            if order_key(src["id"]) <= self._skip:
                return
            self._skip = None  # the stream is past what the broker holds
        payload = self._meta_json(event)
        if len(payload) > self.max_change_bytes:
            raise SinkError(f"{self.name}: the {op} event {src['id']} is {len(payload)} bytes, over the limit of "
                            f"{self.max_change_bytes} ({self._limit_name()})", fatal=True, exit_code=EXIT_DATA)
        prefix, _, word = src["id"].rpartition(":")
        meta = (event.get("schema") or "", event.get("table") or "", src.get("file") or "", src.get("pos") or 0,
                word, src.get("gtid"), op, src.get("server_id"), prefix)
        self._piece.append((meta, payload + b"\n", 1))
        self._piece_bytes += len(payload) + 64
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()

    def rows(self, event: RowsEvent, file: str, gtid: str | None, inner: int = 0, order: tuple | None = None) -> int:
        if not self._own_payloads():
            return super().rows(event, file, gtid, inner)
        if order is None:
            lines, n = self._lines(event, file, gtid, inner)
        else:
            lines, n = transaction_lines(event, file, gtid, inner, order, self._server_name)
        h, row0, prefix = event.header, 0, stream_prefix(file, event.header.pos, inner)
        if self._skip is not None:
            lines, row0 = self._unskipped(prefix, lines, n, 0)
        if lines:
            self._add((event.schema, event.table, file, h.pos, row0, gtid, event.kind, h.server_id, prefix), lines,
                      n - row0)
        return n

    def change_lines(self, lines, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """:meth:`Sink.change_lines`: one block of messages, the lines as they are (copied: the worker thread
        writes them later), with the ids, keys and fields :meth:`change` gives the same changes (``source``'s
        server_id, file, pos and gtid read from the first line: the lines share them). False when the messages
        are of another format."""
        if not self._own_payloads() or self._json is not dumps:
            return False
        if not count:
            return True
        data = bytes(lines)
        src = orjson.loads(data[:data.index(b"\n")])["source"]
        row0 = first
        if self._skip is not None:
            data, row0 = self._unskipped(prefix, data, count, first)
        if data:
            self._add((schema, table, src.get("file") or "", src.get("pos") or 0, row0, src.get("gtid"), "read",
                       src.get("server_id"), prefix), data, first + count - row0)
        return True

    def _own_payloads(self) -> bool:
        """Whether the messages are :meth:`_payload`'s own (a subclass may write others, from change dicts)."""
        return getattr(self._payload, "__func__", None) is BusSink._payload

    def _unskipped(self, prefix: str, lines: bytes, n: int, first: int) -> tuple[bytes, int]:
        """The lines of n changes (ids ``<prefix>:<first>`` ...) that come after :attr:`_skip`, and the first one's
        row (b"" when none does); clears ``_skip`` once the stream is past it."""
        skip, base = self._skip, order_key(prefix + ":0")[:-1]
        if base + (first + n - 1,) <= skip:
            return b"", first + n
        self._skip = None  # the stream is past what the broker holds
        row0, cut = first, 0
        while base + (row0,) <= skip:  # the broker holds these changes' first rows (NATS)
            row0, cut = row0 + 1, lines.index(b"\n", cut) + 1
        return lines[cut:], row0

    def _add(self, meta: tuple, lines: bytes, n: int) -> None:
        """Append the block ``(meta, lines, n)`` to the piece, and hand the piece over once PIECE_BYTES big.

        Args:
            meta: (schema, table, file, pos, row0, gtid, op, server_id, prefix); the block's rows are row0 .. row0 +
                n - 1, their ids ``<prefix>:<row>`` (:mod:`library.identity`). (An event beyond rows is a block
                of its own, :meth:`meta`, whose row0 is a str.)
            lines: the n changes' messages, each ending in b"\\n".
        Raises:
            SinkError: (fatal, exit 7) a message is over max_change_bytes; nothing of the block was added.
        """
        if len(lines) - n > self.max_change_bytes:  # else not even all of them together are
            for row, payload in enumerate(lines.split(b"\n")[:n]):
                if len(payload) > self.max_change_bytes:
                    schema, table, file, pos, row0 = meta[:5]
                    raise SinkError(f"{self.name}: the change to {schema}.{table} at {file}:{pos} row {row0 + row} "
                                    f"(id {meta[8]}:{row0 + row}) "
                                    f"is {len(payload)} bytes, over the limit of {self.max_change_bytes} "
                                    f"({self._limit_name()})", fatal=True, exit_code=EXIT_DATA)
        self._piece.append((meta, lines, n))
        self._piece_bytes += len(lines) + 64 * n
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()

    def _limit_name(self) -> str:
        """What sets max_change_bytes, for the size error."""
        return f"sink.{self.KIND}.max_change_bytes"

    def _hand_piece(self) -> None:
        if self._piece:
            piece, size = self._piece, self._piece_bytes
            self._piece, self._piece_bytes = [], 0
            self._pieces += 1
            self._submit(("piece", piece, size), size)

    # ------------------------------------------------------------------ the Sink API
    def open(self, state: dict | None) -> None:
        if state and state.get("bus") != self.KIND:
            raise SinkError(f"checkpoint's sink state {state!r} is not a {self.KIND} sink's (was the sink kind "
                            "changed? move the checkpoint away to start over)", fatal=True, exit_code=EXIT_CHECKPOINT)
        self.close()
        self._reset()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"binlogd-{self.KIND}", daemon=True)
        self._thread.start()
        try:
            self._call(self._open_worker())
        except BaseException:
            self.close()
            raise

    async def _open_worker(self) -> None:
        await self._connect()
        self._queue = asyncio.Queue()
        self._task = asyncio.ensure_future(self._drain())

    def flush(self) -> dict:
        failed = self._loop is None or self._failed is not None
        if failed and not self._piece and self._pieces == 0 and self._committed == 0 \
                and not (self._failed is not None and self._failed.fatal):
            # Nothing but marks was handed on since the last open and none committed (the daemon's first
            # commit, retried without a reopen): reopening loses nothing.
            self.open(None)
        self._hand_piece()
        return {"bus": self.KIND}

    def flushed(self, checkpoint) -> None:
        self._mark += 1
        key = boundary_key(checkpoint.position.file or "", checkpoint.position.pos)
        body = None if self._floor is not None and key < self._floor else checkpoint.to_bytes()
        self._submit(("mark", self._mark, body), 0)

    def begin_sync(self) -> None:
        self._target = self._mark

    def sync(self) -> None:
        target, deadline = self._target, time.monotonic() + WAIT_SECONDS
        with self._cond:
            while self._failed is None and self._committed < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SinkError(f"{self.name}: no commit in {WAIT_SECONDS:.0f}s (broker slow or stuck)")
                self._cond.wait(left)
            if self._failed is not None:
                raise self._copy(self._failed)

    def remote_checkpoint(self):
        return self.remote

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        self._loop = self._thread = None

        async def stop() -> None:
            if self._task is not None:
                self._task.cancel()
            try:
                await asyncio.wait_for(self._disconnect(), 10)
            except BaseException:  # noqa: BLE001 (closing: a dead broker must not keep us)
                pass

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(15)
        except BaseException:  # noqa: BLE001
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()
        with self._cond:
            self._failed = self._failed or SinkError(f"{self.name}: closed")
            self._cond.notify_all()

    # ------------------------------------------------------------------ the pipeline
    def _call(self, coro, timeout: float = WAIT_SECONDS):
        """Run ``coro`` on the worker's loop and wait for it; broker errors become SinkErrors."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise SinkError(f"{self.name}: no answer in {timeout:.0f}s", exit_code=EXIT_UNREACHABLE) from None
        except SinkError:
            raise
        except Exception as exc:
            raise self._error_of(exc) from exc

    def _submit(self, op: tuple, size: int) -> None:
        """Queue ``op`` for the worker (never waits: the consumer awaits :meth:`room` when :meth:`over`)."""
        with self._cond:
            if self._failed is not None:
                raise self._copy(self._failed)
            self._pending += size
        self._loop.call_soon_threadsafe(self._queue.put_nowait, op)

    def over(self) -> bool:
        return self._pending > PENDING_BYTES

    async def room(self) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            with self._cond:
                if self._failed is not None:
                    raise self._copy(self._failed)
                if self._pending <= PENDING_BYTES:
                    return
            if time.monotonic() > deadline:
                raise SinkError(f"{self.name}: the broker took no writes for {WAIT_SECONDS:.0f}s")
            await asyncio.sleep(_ROOM_POLL)

    async def _drain(self) -> None:
        """The worker: apply the queued ops in order; after an error, drop them. A commit that
        :meth:`_commit` left in flight is confirmed by the next commit, or as soon as the queue is empty
        or it is CONFIRM_SECONDS old (a big transaction's pieces keep coming: ``sync`` must not wait for
        all of them)."""
        sent, sent_at = 0, 0.0  # the mark whose commit is sent and not yet confirmed (0: none), since when
        while True:
            if sent and (self._queue.empty() or time.monotonic() - sent_at > CONFIRM_SECONDS):
                mark, sent = sent, 0
                if await self._run(self._confirm()):
                    with self._cond:
                        self._committed = mark
                        self._cond.notify_all()
            op = await self._queue.get()
            if op[0] == "piece":
                await self._run(self._write(op[1]))
                with self._cond:
                    self._pending -= op[2]
                    if self._pending + op[2] > PENDING_BYTES >= self._pending:  # _submit may wait for this
                        self._cond.notify_all()
            elif self._failed is None:
                done = await self._run(self._commit(op[2]))
                if done is not None:
                    with self._cond:
                        if done is False:  # this mark's commit is in flight, every earlier one confirmed
                            self._committed, sent, sent_at = sent or self._committed, op[1], time.monotonic()
                        else:
                            self._committed, sent = op[1], 0
                        self._cond.notify_all()  # for sync

    async def _run(self, coro):
        """Await ``coro`` (at most WAIT_SECONDS) unless the worker failed already; returns its result (a
        commit: True, or False when left in flight), or None when it failed now or before (kept in
        ``_failed``)."""
        if self._failed is not None:
            coro.close()
            return None
        try:
            result = await asyncio.wait_for(coro, WAIT_SECONDS)
            return True if result is None else result
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (kept, raised on the consumer's side)
            error = exc if isinstance(exc, SinkError) else self._error_of(exc)
            if isinstance(exc, asyncio.TimeoutError):
                error = SinkError(f"{self.name}: no answer in {WAIT_SECONDS:.0f}s")
            with self._cond:
                self._failed = error
                self._cond.notify_all()
            return None

    @staticmethod
    def _copy(error: SinkError) -> SinkError:
        return SinkError(str(error), error.fatal, error.exit_code)

    # ------------------------------------------------------------------ for subclasses
    async def _connect(self) -> None:
        """Connect, check or create the stream/table, read the broker's position (``remote``, ``_skip``,
        ``_floor``). Raises SinkError or the client's errors (mapped by :meth:`_error_of`)."""
        raise NotImplementedError

    async def _write(self, piece: list) -> None:
        """Write one piece, uncommitted: a list of blocks (meta, lines, n), each n changes' messages ending
        in b"\\n" (meta: as :meth:`_add` takes it)."""
        raise NotImplementedError

    async def _commit(self, checkpoint: bytes | None) -> bool | None:
        """Commit everything written so far, with ``checkpoint`` (None: leave the broker's as it is).

        Returns:
            None or True: committed; False: sent, not yet confirmed (every earlier commit is), for
            :meth:`_confirm`. Raises the client's errors.
        """
        raise NotImplementedError

    async def _confirm(self) -> None:
        """Wait until the commit :meth:`_commit` left in flight is confirmed; raises if it failed."""

    async def _disconnect(self) -> None:
        """Drop the connection, discarding what is not committed."""

    def _error_of(self, exc: Exception) -> SinkError:
        """The SinkError for a client error (auth: fatal, exit 3; otherwise retryable)."""
        return SinkError(f"{self.name}: {exc}")

    def _use_checkpoint(self, checkpoint) -> None:
        """After reading the broker's ``checkpoint`` (a Checkpoint or None): the daemon resumes from it
        (:meth:`remote_checkpoint`), and no older one is written back."""
        self.remote = checkpoint
        if checkpoint is not None and checkpoint.position.file:
            self._floor = boundary_key(checkpoint.position.file, checkpoint.position.pos)


__all__ = ["BusSink", "redact"]
