"""Redis Streams sink: one entry (field ``change``) per change in the stream ``binlogd:{schema}.{table}``,
committed with the checkpoint by one Lua script (atomic, like MULTI/EXEC, and one command to send).

Between two commits the entries wait in the worker's buffer; past ``STAGE_BYTES`` (a big transaction)
they go to a staging stream (``<checkpoint_key>:staging``, fields ``s`` = target stream and ``change``)
instead, and the commit is one Lua script that moves the staged entries to their streams, deletes the
staging stream and sets the checkpoint, atomically. ``open`` deletes a staging stream left by a crash:
it was never committed.
"""

from __future__ import annotations

from binlogd.library.checkpointfile import Checkpoint

from .base import SinkError
from .bus import EXIT_AUTH, EXIT_CHECKPOINT, EXIT_MISCONFIGURED, EXIT_UNREACHABLE, WAIT_SECONDS, BusSink

STAGE_BYTES = 32 << 20  # entries buffered for one commit before they go to the staging stream

# KEYS[1] = checkpoint key; ARGV[1] = checkpoint ('' keeps it); then stream, payload pairs: XADD each
_ADD = b"""
for i = 2, #ARGV, 2 do
  redis.call('XADD', ARGV[i], '*', 'change', ARGV[i + 1])
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
        self._streams: dict = {}   # (schema, table) -> stream name, its type checked
        self._buf: list = []       # stream, payload, stream, payload… written since the last commit, not staged
        self._buf_bytes = 0
        self._staged = False
        self._r = None

    async def _connect(self) -> None:
        from redis import asyncio as aioredis

        self._buf, self._buf_bytes, self._staged, self._streams = [], 0, False, {}
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
        self._use_checkpoint(checkpoint)

    async def _stream_of(self, schema: str, table: str) -> str:
        key = (schema, table)
        name = self._streams.get(key)
        if name is None:
            name = self.stream.format(schema=schema, table=table).encode()
            kind = await self._r.type(name)
            if kind not in (b"none", b"stream"):
                raise SinkError(f"{self.name}: key {name.decode()} (for {schema}.{table}) exists and is a "
                                f"{kind.decode()}, not a stream", fatal=True, exit_code=EXIT_MISCONFIGURED)
            self._streams[key] = name
        return name

    async def _write(self, piece: list) -> None:
        buf, streams = self._buf, self._streams
        for meta, payload in piece:
            name = streams.get(meta[:2]) or await self._stream_of(meta[0], meta[1])
            buf += (name, payload)
            self._buf_bytes += len(payload)
        if self._buf_bytes >= STAGE_BYTES:
            await self._stage()

    async def _stage(self) -> None:
        await self._eval(_STAGE, [self.staging_key], self._buf)
        self._buf, self._buf_bytes, self._staged = [], 0, True

    async def _commit(self, checkpoint: bytes | None) -> None:
        if self._staged:
            if self._buf:
                await self._stage()
            await self._eval(_MOVE, [self.staging_key, self.checkpoint_key], [checkpoint or b""])
            self._staged = False
            return
        if not self._buf and checkpoint is None:
            return
        await self._eval(_ADD, [self.checkpoint_key], [checkpoint or b"", *self._buf])
        self._buf, self._buf_bytes = [], 0

    async def _eval(self, script: bytes, keys: list, args: list) -> None:
        """EVAL ``script``, packed here (redis-py's packing costs more than the rest of the sink): one command
        on a connection of the client's pool. Raises the client's errors (a script error: ResponseError)."""
        parts = [b"EVAL", script, b"%d" % len(keys), *(k.encode() for k in keys), *args]
        packed = b"".join([b"*%d\r\n" % len(parts), *[b"$%d\r\n%b\r\n" % (len(p), p) for p in parts]])
        pool = self._r.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(packed)
            await conn.read_response()
        finally:
            await pool.release(conn)

    async def _disconnect(self) -> None:
        self._buf, self._buf_bytes = [], 0
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
