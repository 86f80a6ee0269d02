"""Redis Streams sink: one entry (field ``change``) per change in the stream ``binlogd:{schema}.{table}``,
committed with the checkpoint in one MULTI/EXEC transaction.

Each piece's XADDs go to Redis as the piece arrives, queued in a MULTI (so Redis parses them while binlogd
reads on); a mark sends a small Lua script, which checks that every stream written is a stream (an XADD
that failed in EXEC leaves its key as it was) and only then sets the checkpoint, and EXEC. Entries and
checkpoint appear together or not at all; a failed XADD never lets the checkpoint pass it.

The entries of the open MULTI are also kept in the worker's buffer; past ``STAGE_BYTES`` (a big
transaction) the MULTI is discarded and they go to a staging stream (``<checkpoint_key>:staging``, fields
``s`` = target stream and ``change``) instead, and the commit is one Lua script that moves the staged
entries to their streams, deletes the staging stream and sets the checkpoint, atomically. ``open`` deletes a
staging stream left by a crash: it was never committed.
"""

from __future__ import annotations

from binlogd.library.checkpointfile import Checkpoint

from .base import SinkError
from .bus import EXIT_AUTH, EXIT_CHECKPOINT, EXIT_MISCONFIGURED, EXIT_UNREACHABLE, WAIT_SECONDS, BusSink
from .frames import redis_xadds

STAGE_BYTES = 32 << 20  # entries buffered for one commit before they go to the staging stream

# Last in a commit's MULTI. KEYS[1] = checkpoint key, then the streams written; ARGV[1] = checkpoint ('' keeps it)
_SAVE = b"""
for i = 2, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'stream' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' is a ' .. kind .. ', not a stream: checkpoint not moved')
  end
end
if ARGV[1] ~= '' then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""
# KEYS[1] = staging stream; ARGV: stream, payload pairs
_STAGE = b"""
for i = 1, #ARGV, 2 do
  redis.call('XADD', KEYS[1], '*', 's', ARGV[i], 'change', ARGV[i + 1])
end
return 1
"""
# KEYS[1] = staging stream, KEYS[2] = checkpoint key; ARGV[1] = checkpoint: move the staged entries
_MOVE = b"""
local last = '-'
while true do
  local batch = redis.call('XRANGE', KEYS[1], last, '+', 'COUNT', 1000)
  if #batch == 0 then break end
  for _, entry in ipairs(batch) do
    local f = entry[2]
    redis.call('XADD', f[2], '*', 'change', f[4])
  end
  last = '(' .. batch[#batch][1]
end
redis.call('DEL', KEYS[1])
if ARGV[1] ~= '' then redis.call('SET', KEYS[2], ARGV[1]) end
return 1
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
        max_change_bytes, format, server_name: as :class:`~.bus.BusSink`.
    """

    KIND = "redis"

    def __init__(self, url: str, stream: str = "binlogd:{schema}.{table}",
                 checkpoint_key: str = "binlogd:checkpoint:binlogd", max_change_bytes: int = 512 << 20, **kw):
        super().__init__(url, max_change_bytes, **kw)
        self.stream, self.checkpoint_key = stream, checkpoint_key
        self.staging_key = f"{checkpoint_key}:staging"
        self._streams: dict = {}   # (schema, table) -> (stream name, its XADD's packed head), its type checked
        self._buf: list = []       # the pieces written since the last commit, not staged
        self._buf_bytes = 0
        self._staged = False
        self._queued = 0           # replies owed for the open MULTI (its +OK and one +QUEUED per XADD); 0: none open
        self._written: set = set()  # streams written in the open MULTI
        self._inflight = 0         # replies owed for the commit sent last and not yet confirmed (before its EXEC's)
        self._r = self._conn = self._rx = None

    async def _connect(self) -> None:
        from redis import asyncio as aioredis

        self._buf, self._buf_bytes, self._staged, self._streams, self._queued = [], 0, False, {}, 0
        self._inflight, self._written = 0, set()
        self._r = aioredis.from_url(self.url, socket_timeout=WAIT_SECONDS, socket_connect_timeout=10,
                                    retry_on_timeout=False)
        await self._r.ping()
        kind = await self._r.type(self.checkpoint_key)
        if kind not in (b"none", b"string"):
            raise SinkError(f"{self.name}: key {self.checkpoint_key} exists and is a {kind.decode()}, not the "
                            "checkpoint string (sink.redis.checkpoint_key)", fatal=True, exit_code=EXIT_MISCONFIGURED)
        raw = await self._r.get(self.checkpoint_key)
        try:
            checkpoint = Checkpoint.parse(raw) if raw else None
        except ValueError as exc:
            raise SinkError(f"{self.name}: key {self.checkpoint_key} is not a binlogd checkpoint: {exc}",
                            fatal=True, exit_code=EXIT_CHECKPOINT) from None
        await self._r.delete(self.staging_key)  # uncommitted entries of a crashed run
        self._conn = await self._r.connection_pool.get_connection()  # the writes' own, held until _disconnect
        self._rx = _Replies(self._conn._reader)
        self._use_checkpoint(checkpoint)

    async def _stream_of(self, schema: str, table: str) -> tuple:
        key = (schema, table)
        name = self._streams.get(key)
        if name is None:
            name = self.stream.format(schema=schema, table=table).encode()
            kind = await self._r.type(name)
            if kind not in (b"none", b"stream"):
                raise SinkError(f"{self.name}: key {name.decode()} (for {schema}.{table}) exists and is a "
                                f"{kind.decode()}, not a stream", fatal=True, exit_code=EXIT_MISCONFIGURED)
            self._streams[key] = (name, b"*5\r\n$4\r\nXADD\r\n$%d\r\n%b\r\n$1\r\n*\r\n$6\r\nchange\r\n"
                                  % (len(name), name))
        return self._streams[key]

    async def _write(self, piece: list) -> None:
        streams, written, last = self._streams, self._written, None
        out = [] if self._queued else [b"*1\r\n$5\r\nMULTI\r\n"]
        size = rows = 0
        for meta, lines, n in piece:
            stream = streams.get(meta[:2]) or await self._stream_of(meta[0], meta[1])
            if stream is not last:
                written.add(stream[0])
                last = stream
            out.append(redis_xadds(stream[1], lines, n))
            size += len(lines) - n
            rows += n
        self._buf.append(piece)
        self._buf_bytes += size
        if self._staged:
            if self._buf_bytes >= STAGE_BYTES:
                await self._stage()
            return
        if self._buf_bytes >= STAGE_BYTES:  # a big transaction: to the staging stream
            await self._discard()
            await self._stage()
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

    async def _discard(self) -> None:
        """Drop the open MULTI (its XADDs stay in the buffer)."""
        await self._settle()
        if self._queued:
            n, self._queued = self._queued, 0
            self._written = set()
            await self._conn.send_packed_command(b"*1\r\n$7\r\nDISCARD\r\n", check_health=False)
            await self._replies(n)
            await self._reply()

    async def _stage(self) -> None:
        await self._settle()
        streams, args = self._streams, []
        for piece in self._buf:
            for meta, lines, n in piece:
                name = streams[meta[:2]][0]
                for payload in lines.split(b"\n")[:n]:
                    args += (name, payload)
        await self._eval(_STAGE, [self.staging_key], args)
        self._buf, self._buf_bytes, self._staged, self._written = [], 0, True, set()

    async def _commit(self, checkpoint: bytes | None) -> bool | None:
        if self._staged:
            if self._buf:
                await self._stage()
            await self._settle()
            await self._eval(_MOVE, [self.staging_key, self.checkpoint_key], [checkpoint or b""])
            self._staged, self._written = False, set()
            return None
        if not self._queued:
            await self._settle()
            if checkpoint is not None:
                await self._eval(_SAVE, [self.checkpoint_key], [checkpoint])
            return None
        n, written = self._queued, sorted(self._written)
        keys = [self.checkpoint_key.encode(), *written]
        parts = [b"EVAL", _SAVE, b"%d" % len(keys), *keys, checkpoint or b""]
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
            if results is None:
                raise SinkError(f"{self.name}: EXEC aborted")
            for result in results:
                if isinstance(result, Exception):
                    raise result

    _confirm = _settle

    async def _eval(self, script: bytes, keys: list, args: list) -> None:
        """EVAL ``script``, packed here (redis-py's packing costs more than the rest of the sink), on the
        writes' connection. Raises the client's errors (a script error: ResponseError)."""
        await self._conn.send_packed_command(_pack([b"EVAL", script, b"%d" % len(keys),
                                                    *(k.encode() for k in keys), *args]), check_health=False)
        await self._reply()

    async def _disconnect(self) -> None:
        self._buf, self._buf_bytes, self._queued, self._written, self._inflight = [], 0, 0, set(), 0
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.disconnect()  # an open MULTI dies with it
        if self._r is not None:
            r, self._r = self._r, None
            await r.aclose()

    def _error_of(self, exc: Exception) -> SinkError:
        from redis import exceptions as rx

        if isinstance(exc, rx.AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
            return SinkError(f"{self.name}: authentication failed: {exc}", fatal=True, exit_code=EXIT_AUTH)
        if isinstance(exc, rx.ResponseError) and "WRONGTYPE" in str(exc):
            return SinkError(f"{self.name}: {exc}", fatal=True, exit_code=EXIT_MISCONFIGURED)
        if isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError)):
            return SinkError(f"{self.name}: unreachable: {exc}", exit_code=EXIT_UNREACHABLE)
        return SinkError(f"{self.name}: {exc}")
