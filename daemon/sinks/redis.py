"""Redis Streams sink: one entry (field ``change``) per change in the stream ``binlogd:{schema}.{table}``,
committed with the checkpoint in one MULTI/EXEC transaction, or, for a big transaction, staged and moved in
bounded steps. An event beyond rows is an entry like a change's, in its kind's stream (``binlogd.transaction``,
``binlogd``, ``__debezium-heartbeat.binlogd`` by default), in the same MULTI or staging.

Each piece's XADDs go to Redis as the piece arrives, queued in a MULTI (so Redis parses them while binlogd
reads on); a mark sends a small Lua script, which checks that every stream written is a stream (an XADD
that failed in EXEC leaves its key as it was) and only then sets the checkpoint, and EXEC. Entries and
checkpoint appear together or not at all; a failed XADD never lets the checkpoint pass it.

The entries of the open MULTI are also kept in the worker's buffer; past ``STAGE_BYTES`` (a big
transaction) the MULTI is discarded and they go, then every later piece of the transaction, to a staging
stream (``<checkpoint_key>:staging``, fields ``s`` = target stream, then ``change``), each piece (about
``PIECE_BYTES``) in a MULTI/EXEC of its own, whose replies are read while the next one goes out. The commit
then goes in steps, none of which holds Redis for long:

1. *decide*: one small script checks that staging holds every entry staged (so a staging stream deleted
   or refilled behind the sink is never committed) and sets ``<checkpoint_key>:pending`` to the checkpoint.
   From here on the transaction is committed: it is finished, never rolled back.
2. *move*, in batches of at most ``MOVE_ENTRIES`` entries and ``MOVE_BYTES`` bytes of payload (at least one
   entry): each batch is one script that XADDs the first staged entries to their streams and trims exactly
   those from staging, so a crash between batches neither loses nor repeats an entry; the batch that
   empties staging also sets the checkpoint from the pending key and deletes both keys.

``open`` finishes a decided commit that a crash or an error left half moved (so the broker's checkpoint it
then reads is that commit's) and deletes staging that was never decided (UNLINK: freed off Redis's main
thread); ``close`` deletes its own undecided staging too. A staged entry's id in its stream is given when
it is moved.

What a reader of the streams sees: a small transaction's entries all at once, with the checkpoint key. A
big one's entries appear batch by batch once it is decided, in order, and the checkpoint key moves after
the last batch; while a move is under way (or a crashed daemon has not restarted yet) the streams hold a
prefix of a committed transaction. Delivery is still exactly once: each entry leaves staging in the same
atomic step that adds it to its stream, a decided commit is always completed and never re-sent (the
checkpoint is read only after the move, and the daemon goes on after it), and an undecided one never
reached a stream. A reader that must see whole transactions stops at changes past the checkpoint key's
position. A move longer than the sink's wait (``WAIT_SECONDS``) fails the commit and goes on at the next
open: every batch done is kept.
"""

from __future__ import annotations

import asyncio
import logging

from binlogd.daemon.sinks.base import SinkError
from binlogd.daemon.sinks.bus import (
    EXIT_AUTH,
    EXIT_CHECKPOINT,
    EXIT_MISCONFIGURED,
    EXIT_UNREACHABLE,
    WAIT_SECONDS,
    BusSink,
)
from binlogd.daemon.sinks.frames import redis_xadds
from binlogd.daemon.sinks.lease import epoch_key
from binlogd.library.checkpointfile import Checkpoint
from binlogd.library.metaevents import KINDS

log = logging.getLogger("binlogd")

STAGE_BYTES = 32 << 20  # entries buffered for one commit before they go to the staging stream
MOVE_ENTRIES = 1000     # staged entries moved by one script at most
MOVE_BYTES = 1 << 20    # ... and their payloads' bytes at most (at least one entry)

# Last in a commit's MULTI. KEYS[1] = checkpoint key, KEYS[2] = epoch key, then the streams written; ARGV[1] =
# checkpoint ('' keeps it), ARGV[2] = the [ha] epoch held ('': no lease)
_SAVE = b"""
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return redis.error_reply('FENCED epoch ' .. ARGV[2] .. ' was taken over (' .. KEYS[2] .. '): checkpoint not moved')
end
for i = 3, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'stream' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' is a ' .. kind .. ', not a stream: checkpoint not moved')
  end
end
if ARGV[1] ~= '' then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""
# KEYS[1] = staging stream, KEYS[2] = pending key, KEYS[3] = epoch key; ARGV[1] = checkpoint ('' keeps it),
# ARGV[2] = entries staged, ARGV[3] = the [ha] epoch held ('': no lease)
_DECIDE = b"""
if ARGV[3] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[3] then
  return redis.error_reply('FENCED epoch ' .. ARGV[3] .. ' was taken over (' .. KEYS[3] .. '): commit not decided')
end
local n = redis.call('XLEN', KEYS[1])
if n ~= tonumber(ARGV[2]) then
  return redis.error_reply('staging stream ' .. KEYS[1] .. ' holds ' .. n .. ' entries, not the ' .. ARGV[2] ..
                           ' staged: commit not decided')
end
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""
# KEYS[1] = staging stream, KEYS[2] = pending key, KEYS[3] = checkpoint key; ARGV[1] = entries, ARGV[2] = bytes
# at most (at least one entry). Returns the entries left in staging (0: finished), -1 when nothing is decided.
_MOVE = b"""
local checkpoint = redis.call('GET', KEYS[2])
if not checkpoint then return -1 end
local most = tonumber(ARGV[1])
local batch = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', most + 1)
local budget, take, kinds = tonumber(ARGV[2]), 0, {}
for i = 1, math.min(#batch, most) do
  local f = batch[i][2]
  budget = budget - #f[4]
  if i > 1 and budget < 0 then break end
  take = i
  if not kinds[f[2]] then
    kinds[f[2]] = redis.call('TYPE', f[2])['ok']
    if kinds[f[2]] ~= 'stream' and kinds[f[2]] ~= 'none' then
      return redis.error_reply('WRONGTYPE key ' .. f[2] .. ' is a ' .. kinds[f[2]] ..
                               ', not a stream: staged entries not moved')
    end
  end
end
for i = 1, take do
  local f = batch[i][2]
  redis.call('XADD', f[2], '*', 'change', f[4])
end
if take < #batch then
  redis.call('XTRIM', KEYS[1], 'MINID', batch[take + 1][1])
  return redis.call('XLEN', KEYS[1])
end
if checkpoint ~= '' then redis.call('SET', KEYS[3], checkpoint) end
redis.call('DEL', KEYS[2])
redis.call('UNLINK', KEYS[1])
return 0
"""
# KEYS[1] = staging stream, KEYS[2] = pending key: delete staging unless its commit is decided
_DROP = b"""
if redis.call('EXISTS', KEYS[2]) == 0 then return redis.call('UNLINK', KEYS[1]) end
return 0
"""


class _Replies:
    """The replies on the writes' connection, read from its stream and parsed here (commands are pipelined,
    and redis-py's own parser would read ahead into replies that are not its own): by ``hiredis`` when it is
    installed (``binlogd[bus]`` installs it), else by :class:`_PyReader`.

    Args:
        stream: the connection's asyncio.StreamReader.
    """

    def __init__(self, stream):
        from redis.exceptions import ResponseError

        self.stream = stream
        try:
            import hiredis
        except ImportError:
            self.reader = _PyReader()
        else:
            self.reader = hiredis.Reader(replyError=ResponseError)

    async def reply(self):
        """One reply: bytes, int, None, a list, or (an error, also inside a list) a ResponseError,
        returned, not raised."""
        while True:
            value = self.reader.gets()
            if value is not False:
                return value
            await self._more()

    async def _more(self) -> None:
        chunk = await self.stream.read(1 << 18)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        self.reader.feed(chunk)

    async def queued(self, n: int) -> str | None:
        """Read a MULTI's replies: +OK, then ``n`` - 1 times +QUEUED. Returns None when they are, else the
        first other reply."""
        gets, want = self.reader.gets, b"OK"
        for _ in range(n):
            value = gets()
            while value is False:
                await self._more()
                value = gets()
            if value != want:
                return str(value)
            want = b"QUEUED"
        return None


class _PyReader:
    """hiredis.Reader's ``feed``/``gets`` (errors as ResponseError values), in Python."""

    def __init__(self):
        self.buf, self.pos = b"", 0

    def feed(self, data: bytes) -> None:
        self.buf, self.pos = self.buf[self.pos:] + data, 0

    def gets(self):
        try:
            value, self.pos = self._parse(self.buf, self.pos)
            return value
        except IndexError:  # incomplete
            return False

    @staticmethod
    def _parse(buf: bytes, pos: int) -> tuple:
        from redis.exceptions import ResponseError

        end = buf.find(b"\r\n", pos)
        if end < 0:
            raise IndexError
        kind, line = buf[pos], buf[pos + 1:end]
        pos = end + 2
        if kind == 43:  # +
            return line, pos
        if kind == 45:  # -
            return ResponseError(line.decode(errors="replace")), pos
        if kind == 58:  # :
            return int(line), pos
        if kind == 36:  # $
            size = int(line)
            if size < 0:
                return None, pos
            if len(buf) < pos + size + 2:
                raise IndexError
            return buf[pos:pos + size], pos + size + 2
        if kind == 42:  # *
            count = int(line)
            if count < 0:
                return None, pos
            items = []
            for _ in range(count):
                item, pos = _PyReader._parse(buf, pos)
                items.append(item)
            return items, pos
        raise ConnectionError(f"unexpected reply from Redis: {buf[end - len(line) - 1:end][:80]!r}")


def _pack(parts: list) -> bytes:
    """One command in RESP."""
    return b"".join([b"*%d\r\n" % len(parts), *[b"$%d\r\n%b\r\n" % (len(p), p) for p in parts]])


class RedisSink(BusSink):
    """Redis Streams (:mod:`redis.asyncio`).

    Args:
        url: ``redis://[:password@]host:port/db``.
        stream: the stream name template (``{schema}``, ``{table}``).
        checkpoint_key: the string key holding the checkpoint (the checkpoint file's JSON).
        max_change_bytes, format, server_name, events: as :class:`~.bus.BusSink` (events: stream names).
    """

    KIND = "redis"

    def __init__(self, url: str, stream: str = "binlogd:{schema}.{table}",
                 checkpoint_key: str = "binlogd:checkpoint:binlogd", max_change_bytes: int = 512 << 20, **kw):
        super().__init__(url, max_change_bytes, **kw)
        self.stream, self.checkpoint_key = stream, checkpoint_key
        self.staging_key, self.pending_key = f"{checkpoint_key}:staging", f"{checkpoint_key}:pending"
        self.epoch_key = epoch_key(checkpoint_key)  # the [ha] lease's fencing epoch (:mod:`.lease`)
        self._watch = _pack([b"WATCH", self.epoch_key.encode()]) + _pack([b"GET", self.epoch_key.encode()])
        self._watching = False     # the open MULTI began with WATCH and GET of the epoch key, replies owed
        self._streams: dict = {}   # (schema, table) -> (stream name, its XADD's packed head, its staging XADD's
        #                            packed head), its type checked
        self._buf: list = []       # the pieces written since the last commit, not staged
        self._buf_bytes = 0
        self._staged = 0           # entries staged for the open commit and confirmed
        self._staging = 0          # entries of the piece staged last, whose replies are owed
        self._undecided = False    # the open commit goes to staging (written to since the last decided commit)
        self._queued = 0           # replies owed for the open MULTI (its +OK and one +QUEUED per XADD); 0: none open
        self._written: set = set()  # streams written in the open MULTI
        self._inflight = 0         # replies owed for the commit sent last and not yet confirmed (before its EXEC's)
        self._r = self._conn = self._rx = None
        self._conn_id = 0          # the writes' connection's CLIENT ID

    async def _connect(self) -> None:
        from redis import asyncio as aioredis
        from redis.exceptions import ResponseError

        self._buf, self._buf_bytes, self._staged, self._streams, self._queued = [], 0, 0, {}, 0
        self._inflight, self._written, self._staging, self._undecided = 0, set(), 0, False
        self._watching = False
        self._r = aioredis.from_url(self.url, socket_timeout=WAIT_SECONDS, socket_connect_timeout=10,
                                    retry_on_timeout=False)
        await self._r.ping()
        kind = await self._r.type(self.checkpoint_key)
        if kind not in (b"none", b"string"):
            raise SinkError(f"{self.name}: key {self.checkpoint_key} exists and is a {kind.decode()}, not the "
                            "checkpoint string (sink.redis.checkpoint_key)", fatal=True, exit_code=EXIT_MISCONFIGURED)
        await self._finish_decided()
        raw = await self._r.get(self.checkpoint_key)
        try:
            checkpoint = Checkpoint.parse(raw) if raw else None
        except ValueError as exc:
            raise SinkError(f"{self.name}: key {self.checkpoint_key} is not a binlogd checkpoint: {exc}",
                            fatal=True, exit_code=EXIT_CHECKPOINT) from None
        self._conn = await self._r.connection_pool.get_connection()  # the writes' own, held until _disconnect
        await self._conn.send_command("CLIENT", "ID")
        try:
            self._conn_id = await self._conn.read_response()
        except ResponseError:  # not allowed to this user (ACL): close waits a moment instead
            self._conn_id = 0
        self._rx = _Replies(self._conn._reader)
        self._use_checkpoint(checkpoint)

    async def _finish_decided(self) -> None:
        """Complete the move of a commit decided before a crash or an error (its pending key is set), or
        delete staging that was never decided. Raises the client's errors (a staged entry whose stream is
        of another type: ResponseError WRONGTYPE)."""
        keys = [self.staging_key, self.pending_key, self.checkpoint_key]
        if not await self._r.exists(self.pending_key):
            await self._r.eval(_DROP, 2, *keys[:2])  # uncommitted entries of a stopped run
            return
        staged = await self._r.xlen(self.staging_key)
        while await self._r.eval(_MOVE, 3, *keys, MOVE_ENTRIES, MOVE_BYTES) > 0:
            pass
        log.info("%s: finished moving the %d staged entries left of a commit decided before the last stop",
                 self.name, staged)

    async def _stream_of(self, meta: tuple) -> tuple:
        """(stream name, its XADD's packed head, its staging XADD's packed head) of a block (its ``meta``): the
        stream of its table, or of its kind for an event beyond rows (row0 a str); its type checked once.

        Raises:
            SinkError: (fatal, exit 6) the key exists and is not a stream.
        """
        if meta[4].__class__ is str:
            key, name = meta[6], self.events[KINDS[meta[6]]]
            what = f"{KINDS[meta[6]]} events"
        else:
            key, name = meta[:2], self.stream.format(schema=meta[0], table=meta[1])
            what = f"{meta[0]}.{meta[1]}"
        if key not in self._streams:
            name = name.encode()
            kind = await self._r.type(name)
            if kind not in (b"none", b"stream"):
                raise SinkError(f"{self.name}: key {name.decode()} (for {what}) exists and is a "
                                f"{kind.decode()}, not a stream", fatal=True, exit_code=EXIT_MISCONFIGURED)
            staging = self.staging_key.encode()
            self._streams[key] = (name, b"*5\r\n$4\r\nXADD\r\n$%d\r\n%b\r\n$1\r\n*\r\n$6\r\nchange\r\n"
                                  % (len(name), name),
                                  b"*7\r\n$4\r\nXADD\r\n$%d\r\n%b\r\n$1\r\n*\r\n$1\r\ns\r\n$%d\r\n%b\r\n"
                                  b"$6\r\nchange\r\n" % (len(staging), staging, len(name), name))
        return self._streams[key]

    async def _write(self, piece: list) -> None:
        if self._undecided:
            await self._stage(piece)
            return
        streams, written, last = self._streams, self._written, None
        out = [] if self._queued else [self._opening()]
        size = rows = 0
        for meta, lines, n in piece:
            stream = streams.get(meta[:2] if meta[4].__class__ is int else meta[6]) or await self._stream_of(meta)
            if stream is not last:
                written.add(stream[0])
                last = stream
            out.append(redis_xadds(stream[1], lines, n))
            size += len(lines) - n
            rows += n
        self._buf.append(piece)
        self._buf_bytes += size
        if self._buf_bytes >= STAGE_BYTES:  # a big transaction: to the staging stream
            await self._discard()
            buf, self._buf, self._buf_bytes, self._written = self._buf, [], 0, set()
            for each in buf:
                await self._stage(each)
            return
        await self._conn.send_packed_command(b"".join(out), check_health=False)
        self._queued += rows + (0 if self._queued else 1)

    async def _replies(self, n: int) -> None:
        """Read the open MULTI's ``n`` replies (its +OK, then +QUEUED each). Raises SinkError at the first
        other reply (the connection is then out of step: the sink is reopened)."""
        other = await self._rx.queued(n)
        if other is not None:
            raise SinkError(f"{self.name}: Redis refused a queued command: {other}")

    async def _reply(self):
        """The next reply; raises it if it is an error (ResponseError)."""
        value = await self._rx.reply()
        if isinstance(value, Exception):
            raise value
        return value

    def _opening(self) -> bytes:
        """A MULTI's opening. With an epoch (``[ha]``), WATCH and GET of the epoch key first: the commit's EXEC then
        runs nothing if the epoch changes after the WATCH, and is not sent if it had changed before (:meth:`_fence`)."""
        if self.epoch is None:
            return b"*1\r\n$5\r\nMULTI\r\n"
        self._watching = True
        return self._watch + b"*1\r\n$5\r\nMULTI\r\n"

    async def _watched(self) -> bytes | None:
        """Read the open MULTI's WATCH and GET replies if owed; returns the epoch the GET read (None: not owed)."""
        if not self._watching:
            return None
        self._watching = False
        await self._reply()
        return await self._reply() or b""

    async def _fence(self, n: int) -> None:
        """Before the EXEC of the open MULTI (``n`` replies owed): raise, and DISCARD it, if the epoch read after its
        WATCH is not ours. Raises SinkError (retryable; the daemon then finds the lease lost)."""
        held = await self._watched()
        if held is None or held == b"%d" % self.epoch:
            return
        self._queued, self._written, self._buf, self._buf_bytes = 0, set(), [], 0
        await self._conn.send_packed_command(b"*1\r\n$7\r\nDISCARD\r\n", check_health=False)
        await self._replies(n)
        await self._reply()
        raise SinkError(f"{self.name}: fenced: epoch {self.epoch} was taken over ({self.epoch_key} is "
                        f"{held.decode(errors='replace')}); nothing of this commit was written")

    def _epoch_arg(self) -> bytes:
        return b"" if self.epoch is None else b"%d" % self.epoch

    async def _discard(self) -> None:
        """Drop the open MULTI (its XADDs stay in the buffer)."""
        await self._settle()
        await self._watched()
        if self._queued:
            n, self._queued = self._queued, 0
            self._written = set()
            await self._conn.send_packed_command(b"*1\r\n$7\r\nDISCARD\r\n", check_health=False)
            await self._replies(n)
            await self._reply()

    async def _stage(self, piece: list) -> None:
        """Send the piece's entries to the staging stream in a MULTI/EXEC of their own (one append to the
        AOF), then read the replies of the piece staged before it. Raises the first error among those
        (ResponseError)."""
        await self._settle()
        self._undecided = True
        out, rows = [b"*1\r\n$5\r\nMULTI\r\n"], 0
        for meta, lines, n in piece:
            stream = self._streams.get(meta[:2] if meta[4].__class__ is int else meta[6]) or await self._stream_of(meta)
            out.append(redis_xadds(stream[2], lines, n))
            rows += n
        out.append(b"*1\r\n$4\r\nEXEC\r\n")
        await self._conn.send_packed_command(b"".join(out), check_health=False)
        await self._staged_replies()
        self._staging = rows

    async def _staged_replies(self) -> None:
        """Read the replies of the piece staged last, if they are owed. Raises its error."""
        if self._staging:
            rows, self._staging = self._staging, 0
            await self._replies(rows + 1)
            results = await self._reply()
            if results is None:
                raise SinkError(f"{self.name}: EXEC aborted")
            for result in results:
                if isinstance(result, Exception):
                    raise result
            self._staged += rows

    async def _commit(self, checkpoint: bytes | None) -> bool | None:
        if self._undecided:
            await self._staged_replies()
            await self._eval(_DECIDE, [self.staging_key, self.pending_key, self.epoch_key],
                             [checkpoint or b"", b"%d" % self._staged, self._epoch_arg()])
            self._staged, self._undecided = 0, False
            keys = [self.staging_key, self.pending_key, self.checkpoint_key]
            bounds = [b"%d" % MOVE_ENTRIES, b"%d" % MOVE_BYTES]
            while (left := await self._eval(_MOVE, keys, bounds)) > 0:
                pass
            if left < 0:
                raise SinkError(f"{self.name}: key {self.pending_key} vanished while its commit was moved")
            return None
        if not self._queued:
            await self._settle()
            if checkpoint is not None:
                await self._eval(_SAVE, [self.checkpoint_key, self.epoch_key], [checkpoint, self._epoch_arg()])
            return None
        n, written = self._queued, sorted(self._written)
        if self.epoch is not None:  # the epoch read after the MULTI's WATCH, before its EXEC goes
            await self._settle()
            await self._fence(n)
        keys = [self.checkpoint_key.encode(), self.epoch_key.encode(), *written]
        parts = [b"EVAL", _SAVE, b"%d" % len(keys), *keys, checkpoint or b"", self._epoch_arg()]
        await self._conn.send_packed_command(_pack(parts) + b"*1\r\n$4\r\nEXEC\r\n", check_health=False)
        self._queued, self._written, self._buf, self._buf_bytes = 0, set(), [], 0
        await self._settle()  # the commit before this one
        self._inflight = n + 1  # MULTI's, the XADDs', the EVAL's, then EXEC's
        return False

    async def _settle(self) -> None:
        """Read the replies of the commit in flight, if any. Raises its error (an entry refused in EXEC:
        ResponseError; the checkpoint was then not moved)."""
        if self._inflight:
            n, self._inflight = self._inflight, 0
            await self._replies(n)
            results = await self._reply()
            if results is None:  # only a WATCH aborts an EXEC: the epoch key changed
                raise SinkError(f"{self.name}: fenced: epoch {self.epoch} was taken over while its commit was "
                                "queued (EXEC aborted); nothing of it was written")
            for result in results:
                if isinstance(result, Exception):
                    raise result

    _confirm = _settle

    async def _eval(self, script: bytes, keys: list, args: list):
        """EVAL ``script``, packed here (redis-py's packing costs more than the rest of the sink), on the
        writes' connection; returns its reply. Raises the client's errors (a script error: ResponseError)."""
        await self._conn.send_packed_command(_pack([b"EVAL", script, b"%d" % len(keys),
                                                    *(k.encode() for k in keys), *args]), check_health=False)
        return await self._reply()

    async def _disconnect(self) -> None:
        staged, self._undecided = self._undecided, False
        self._buf, self._buf_bytes, self._queued, self._written, self._inflight = [], 0, 0, set(), 0
        self._staged = self._staging = 0
        self._watching = False
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.disconnect()  # an open MULTI dies with it
        if staged and self._r is not None:  # undecided staging is deleted; a decided commit's, left to open
            try:
                await asyncio.wait_for(self._drop_staging(), 3)
            except Exception:  # noqa: BLE001 (closing: the next open deletes it)
                pass
        if self._r is not None:
            r, self._r = self._r, None
            await r.aclose()

    async def _drop_staging(self) -> None:
        """Delete the staging stream unless its commit is decided, once Redis has let go of the writes'
        connection (so no staged XADD it still holds lands after the delete). Raises the client's errors."""
        from redis.exceptions import ResponseError

        try:
            while self._conn_id and await self._r.execute_command("CLIENT", "LIST", "ID", self._conn_id):
                await asyncio.sleep(0.01)
        except ResponseError:  # CLIENT LIST not allowed to this user (ACL)
            self._conn_id = 0
        if not self._conn_id:
            await asyncio.sleep(0.2)
        await self._r.eval(_DROP, 2, self.staging_key, self.pending_key)

    def _error_of(self, exc: Exception) -> SinkError:
        from redis import exceptions as rx

        if isinstance(exc, rx.AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
            return SinkError(f"{self.name}: authentication failed: {exc}", fatal=True, exit_code=EXIT_AUTH)
        if isinstance(exc, rx.ResponseError) and "WRONGTYPE" in str(exc):
            return SinkError(f"{self.name}: {exc}", fatal=True, exit_code=EXIT_MISCONFIGURED)
        if isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError)):
            return SinkError(f"{self.name}: unreachable: {exc}", exit_code=EXIT_UNREACHABLE)
        return SinkError(f"{self.name}: {exc}")
