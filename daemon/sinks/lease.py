"""The lease of ``[ha] mode = "lease"``: which of several binlogd instances is the active one, and its fencing epoch.

The lease lives in the sink's own broker, beside the checkpoint: a Redis key, a NATS KV bucket, a PostgreSQL row
(the PostgreSQL sink's ``<table>_lease``, the mirror's ``binlogd_mirror_lease``).
Taking it gives a new *epoch*, a number larger than every earlier one. The active instance renews the lease; a
standby takes it once it was not renewed for ``lease_seconds``, measured by the broker's clock (Redis ``PX``,
PostgreSQL ``now()``) or, for NATS, by the standby's own monotonic clock watching one KV revision stay unchanged.
Clocks decide only how soon a standby takes over. Safety rests on the epoch alone: the sink's every commit checks
its epoch inside the broker's own atomic step (``BusSink.epoch``: Redis WATCH/GET and the commit scripts,
PostgreSQL and the mirror ``SELECT ... FOR SHARE`` of the lease row in the rows' transaction (:func:`check_fence`),
NATS a fence message that breaks the older writer's expected-last-sequence chain), so an instance whose lease was
taken can never commit again.

Each lease has a connection of its own, on the daemon's event loop (the sink's worker thread keeps its own).
"""

from __future__ import annotations

import asyncio
import os
import re
import time

from binlogd.daemon.sinks.base import SinkError

EXIT_AUTH = 3  # README, "Exit codes"

# KEYS[1] = lease key, KEYS[2] = epoch key; ARGV[1] = holder, ARGV[2] = lease ms. {epoch, ''} when taken, else
# {0, the holder's value}. A missing epoch key starts at the broker's time in ms, so an epoch never repeats one
# that a Redis which lost its data had given.
_TAKE = b"""
local held = redis.call('GET', KEYS[1])
if held then return {0, held} end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], epoch .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {epoch, ''}
"""
# KEYS as _TAKE; ARGV[1] = epoch, ARGV[2] = holder, ARGV[3] = lease ms. 1: renewed; 0: the epoch moved on
_RENEW = b"""
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return 1
"""
# KEYS as _TAKE; ARGV[1] = epoch: the lease is dropped if it is still this epoch's
_RELEASE = b"""
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


class Lease:
    """One instance's view of the lease (subclasses: one per broker).

    Args:
        holder: this instance's name (``ha.name``).
        seconds: ``ha.lease_seconds``.
    Fields:
        epoch: the epoch held (None while not held).
        other: who held it at the last refused :meth:`take` ("" when unknown).
        where: what holds the lease, for messages.
    """

    where = "the lease"

    def __init__(self, holder: str, seconds: float):
        self.holder, self.seconds = holder, seconds
        self.epoch: int | None = None
        self.other = ""

    async def take(self) -> bool:
        """One attempt to take the lease (a standby's poll). Returns True when it is now held (``epoch`` set).
        Raises the client's errors (the broker unreachable)."""
        raise NotImplementedError

    async def renew(self) -> bool:
        """Extend the lease held. Returns False when another instance took it (a newer epoch). Raises the client's
        errors (the broker unreachable: nothing is known)."""
        raise NotImplementedError

    async def release(self) -> None:
        """Give the lease up now (a clean stop), if it is still this epoch's; ``epoch`` becomes None."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close the lease's connection (the lease itself is left as it is)."""

    def auth_error(self, exc: Exception) -> SinkError | None:
        """The fatal SinkError (exit 3) when ``exc`` is the broker refusing our credentials, else None."""
        text = str(exc)
        if any(word in text for word in ("WRONGPASS", "NOAUTH", "authorization", "Authorization",
                                          "password authentication failed", "no password supplied")):
            return SinkError(f"{self.where}: authentication failed: {text}", fatal=True, exit_code=EXIT_AUTH)
        return None


class RedisLease(Lease):
    """The lease as the key ``<checkpoint_key>:lease`` (``<epoch> <holder>``, expiring after ``seconds``) and the
    epoch counter ``<checkpoint_key>:epoch`` (never expires; the Redis sink's commits check it).

    Args:
        url, checkpoint_key: as ``[sink.redis]``.
    """

    def __init__(self, url: str, checkpoint_key: str, holder: str, seconds: float):
        super().__init__(holder, seconds)
        self.url, self.keys = url, (f"{checkpoint_key}:lease", epoch_key(checkpoint_key))
        self.where = f"the lease {self.keys[0]} in Redis"
        self._r = None

    async def _client(self):
        if self._r is None:
            from redis import asyncio as aioredis

            self._r = aioredis.from_url(self.url, socket_timeout=max(2.0, self.seconds), socket_connect_timeout=5)
        return self._r

    async def take(self) -> bool:
        r = await self._client()
        epoch, held = await r.eval(_TAKE, 2, *self.keys, self.holder, int(self.seconds * 1000))
        if not epoch:
            self.other = held.decode(errors="replace").partition(" ")[2]
            return False
        self.epoch = int(epoch)
        return True

    async def renew(self) -> bool:
        r = await self._client()
        return bool(await r.eval(_RENEW, 2, *self.keys, self.epoch, self.holder, int(self.seconds * 1000)))

    async def release(self) -> None:
        epoch, self.epoch = self.epoch, None
        if epoch is not None:
            await (await self._client()).eval(_RELEASE, 2, *self.keys, epoch)

    async def close(self) -> None:
        if self._r is not None:
            r, self._r = self._r, None
            await r.aclose()


def epoch_key(checkpoint_key: str) -> str:
    """The Redis key of the fencing epoch beside ``checkpoint_key``."""
    return f"{checkpoint_key}:epoch"


class PostgresLease(Lease):
    """The lease as the one row of ``<table>_lease`` (``epoch``, ``holder``, ``expires`` by the server's
    ``now()``); the PostgreSQL sink's commits lock it ``FOR SHARE`` and check the epoch.

    Args:
        url, table: as ``[sink.postgres]``.
    """

    def __init__(self, url: str, table: str, holder: str, seconds: float):
        super().__init__(holder, seconds)
        self.url, self.table = url, lease_table(table)
        self.where = f"the lease row of {self.table} in PostgreSQL"
        self._conn = None

    async def _query(self, sql: str, args: tuple = ()):
        """Run ``sql`` (``{l}``: the lease table) in autocommit; returns the first row or None."""
        import psycopg
        from psycopg import sql as q

        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=5, autocommit=True)
            # a commit holds the row FOR SHARE for a moment (or until idle_in_transaction_session_timeout ends
            # a paused instance's transaction): wait for it at most this long, then try again later
            await self._conn.execute(f"SET lock_timeout = {int(max(1.0, self.seconds / 3) * 1000)}")
            schema, _, name = self.table.rpartition(".")
            self._ident = q.Identifier(*([schema] if schema else []), name)
            await self._conn.execute(q.SQL("CREATE TABLE IF NOT EXISTS {l} (id boolean PRIMARY KEY DEFAULT true "
                                           "CHECK (id), epoch bigint NOT NULL, holder text NOT NULL, "
                                           "expires timestamptz NOT NULL)").format(l=self._ident))
            await self._conn.execute(q.SQL("INSERT INTO {l} VALUES (true, 0, '', '-infinity') "
                                           "ON CONFLICT DO NOTHING").format(l=self._ident))
        cur = await self._conn.execute(q.SQL(sql).format(l=self._ident), args)
        return await cur.fetchone()

    async def take(self) -> bool:
        row = await self._query("UPDATE {l} SET epoch = epoch + 1, holder = %s, expires = now() + "
                                "make_interval(secs => %s) WHERE id AND expires < now() RETURNING epoch",
                                (self.holder, self.seconds))
        if row is None:
            held = await self._query("SELECT holder FROM {l} WHERE id")
            self.other = held[0] if held else ""
            return False
        self.epoch = int(row[0])
        return True

    async def renew(self) -> bool:
        row = await self._query("UPDATE {l} SET expires = now() + make_interval(secs => %s) "
                                "WHERE id AND epoch = %s RETURNING epoch", (self.seconds, self.epoch))
        return row is not None

    async def release(self) -> None:
        epoch, self.epoch = self.epoch, None
        if epoch is not None:
            await self._query("UPDATE {l} SET expires = '-infinity' WHERE id AND epoch = %s RETURNING epoch",
                              (epoch,))

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()


def lease_table(table: str) -> str:
    """The lease table's ``[schema.]name`` beside the PostgreSQL sink's ``table``."""
    return f"{table}_lease"


MIRROR = "binlogd_mirror"  # the mirror's lease table is binlogd_mirror_lease, beside binlogd_mirror_checkpoint
FENCE_IDLE_MS = 3000  # [ha]: the server ends a transaction idle this long (the commit's fence lock released)


async def fence_session(conn) -> None:
    """``[ha]``: set ``idle_in_transaction_session_timeout`` on ``conn`` (a psycopg AsyncConnection, not in
    autocommit) and commit, so a paused instance cannot hold the lease row FOR SHARE for long."""
    await conn.execute(f"SET idle_in_transaction_session_timeout = {FENCE_IDLE_MS}")
    await conn.commit()


def fence_query(table: str):
    """The psycopg query that locks the lease row beside ``table`` (as :class:`PostgresLease`) FOR SHARE and reads
    its epoch."""
    from psycopg import sql

    schema, _, name = lease_table(table).rpartition(".")
    return sql.SQL("SELECT epoch FROM {l} WHERE id FOR SHARE").format(
        l=sql.Identifier(*([schema] if schema else []), name))


async def check_fence(conn, query, epoch: int, who: str) -> None:
    """In a commit's open transaction on ``conn``, just before COMMIT: run ``query`` (:func:`fence_query`) and check
    that the lease row holds ``epoch``. The row stays locked until the COMMIT, so no take slips in between.

    Raises:
        SinkError: (retryable) another instance took the lease (``who``: the sink, for the message); the
            transaction is rolled back.
    """
    async with conn.cursor() as cur:
        await cur.execute(query)
        row = await cur.fetchone()
    if row is None or row[0] != epoch:
        await conn.rollback()
        raise SinkError(f"{who}: fenced: epoch {epoch} was taken over (the lease row holds epoch "
                        f"{row[0] if row else 'none'}); nothing of this commit was written")


class NatsLease(Lease):
    """The lease as the key ``lease`` of the KV bucket ``binlogd_lease_<stream>``: its value the holder, its epoch
    the revision that took it. A standby that sees one revision unchanged for ``seconds`` (its own monotonic
    clock) takes it with an update expecting that revision; the active renews with an update expecting its own.
    The NATS sink fences at open: its first message breaks every older writer's expected-last-sequence chain.

    Args:
        url, stream: as ``[sink.nats]``.
    """

    KEY = "lease"

    def __init__(self, url: str, stream: str, holder: str, seconds: float):
        super().__init__(holder, seconds)
        self.url, self.bucket = url, "binlogd_lease_" + re.sub(r"[^A-Za-z0-9_-]", "_", stream)
        self.where = f"the lease in the NATS KV bucket {self.bucket}"
        self._nc = self._kv = None
        self._rev = 0                   # the revision this instance wrote last (held)
        self._seen = (0, 0.0)           # (revision, monotonic time it was first seen) while standing by
        self._value = b""               # what this instance writes: the holder and a token of this take
        self._lock = asyncio.Lock()     # one renewal at a time (each expects the revision the last one wrote)

    async def _bucket(self):
        if self._kv is None or self._nc.is_closed:
            import nats
            from nats.js.errors import BucketNotFoundError

            async def quiet(exc):
                pass

            if self._nc is not None:
                await self.close()
            self._nc = await nats.connect(self.url, connect_timeout=5, allow_reconnect=False,
                                          max_reconnect_attempts=1, error_cb=quiet)
            js = self._nc.jetstream(timeout=max(2.0, self.seconds))
            try:
                self._kv = await js.key_value(self.bucket)
            except BucketNotFoundError:
                from nats.js.api import KeyValueConfig, StorageType

                self._kv = await js.create_key_value(KeyValueConfig(bucket=self.bucket, history=1,
                                                                    storage=StorageType.FILE))
        return self._kv

    async def take(self) -> bool:
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        kv = await self._bucket()
        try:
            entry = await kv.get(self.KEY)
        except KeyNotFoundError:  # never taken, or released
            entry = None
        value = f"{self.holder}\n{os.urandom(8).hex()}".encode()
        try:
            if entry is None:
                rev = await kv.create(self.KEY, value)
            else:
                now = time.monotonic()
                if entry.revision != self._seen[0]:
                    self._seen = (entry.revision, now)
                if now - self._seen[1] < self.seconds:
                    self.other = (entry.value or b"").decode(errors="replace").partition("\n")[0]
                    return False
                rev = await kv.update(self.KEY, value, last=entry.revision)
        except KeyWrongLastSequenceError:  # another standby was quicker
            return False
        self.epoch = self._rev = int(rev)
        self._value = value
        return True

    async def renew(self) -> bool:
        """As :meth:`Lease.renew`; an update refused because our own earlier one landed unanswered (a timeout) is
        recognised by the take's token in the value."""
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        async with self._lock:
            kv = await self._bucket()
            try:
                self._rev = int(await kv.update(self.KEY, self._value, last=self._rev))
            except KeyWrongLastSequenceError:
                try:
                    entry = await kv.get(self.KEY)
                except KeyNotFoundError:
                    return False
                if entry.value != self._value:
                    return False
                self._rev = entry.revision
            return True

    async def release(self) -> None:
        epoch, self.epoch = self.epoch, None
        if epoch is not None:
            from nats.js.errors import KeyWrongLastSequenceError

            try:
                await (await self._bucket()).delete(self.KEY, last=self._rev)
            except KeyWrongLastSequenceError:  # taken meanwhile
                pass

    async def close(self) -> None:
        if self._nc is not None:
            nc, self._nc, self._kv = self._nc, None, None
            try:
                await nc.close()
            except Exception:  # noqa: BLE001 (closing: a dead broker must not keep us)
                pass


def lease_for(sink, holder: str, seconds: float) -> Lease:
    """The lease in the broker of ``sink`` (a ``[sink]`` config of kind redis, nats, postgres or mirror).

    Raises:
        ValueError: another sink kind (the config refuses it first).
    """
    if sink.kind == "redis":
        return RedisLease(sink.redis.url, sink.redis.checkpoint_key, holder, seconds)
    if sink.kind == "nats":
        return NatsLease(sink.nats.url, sink.nats.stream, holder, seconds)
    if sink.kind == "postgres":
        return PostgresLease(sink.postgres.url, sink.postgres.table, holder, seconds)
    if sink.kind == "mirror":
        return PostgresLease(sink.mirror.url, MIRROR, holder, seconds)
    raise ValueError(f"no lease for sink kind {sink.kind!r}")


__all__ = ["FENCE_IDLE_MS", "MIRROR", "Lease", "NatsLease", "PostgresLease", "RedisLease", "check_fence", "epoch_key",
           "fence_query", "fence_session", "lease_for", "lease_table"]
