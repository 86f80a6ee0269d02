"""The ``[ha]`` lease and its fencing, on real brokers (Redis, NATS JetStream, PostgreSQL), sink by sink (the
PostgreSQL mirror too):

- one instance takes the lease (renewals at the same moment all succeed); another cannot while it is renewed, and can once it was not renewed for
  ``lease_seconds``, with a larger epoch; the first one's renewal then says it lost it; a released lease is taken
  at once;
- fencing: an instance whose lease was taken over can never commit again. Redis, PostgreSQL and the mirror: a
  commit whose changes went to the broker *before* the takeover (queued in a MULTI after its WATCH, or written
  into the open transaction) fails at its commit and leaves nothing; NATS: the taker's open fences the stream, and every later
  publish of the old writer is refused. The broker then holds the first commit and the new active's, nothing else.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus
from tests.support.hasupport import commit, mirror_sink, read_mirror_ids, write

pytestmark = pytest.mark.server

LEASE = 1.0
SINKS = ["redis", "nats", "postgres", "mirror"]
PG_LEASE = {"postgres": "binlogd_changes_lease", "mirror": "binlogd_mirror_lease"}


def _pg_lease_row(url: str, table: str) -> tuple:
    """(epoch, holder) of the lease row in ``table``."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT epoch, holder FROM {table} WHERE id").fetchone()


def _broker(kind: str):
    """A started broker for ``kind`` (the mirror's is PostgreSQL)."""
    kind = "postgres" if kind == "mirror" else kind
    require(kind)
    return KINDS[kind]()


def _lease(kind: str, url: str, name: str):
    from binlogd.daemon.config import load_config
    from binlogd.daemon.sinks.lease import lease_for

    cfg = load_config(None, env={}, overrides={"sink.kind": kind, f"sink.{kind}.url": url})
    return lease_for(cfg.sink, name, LEASE)


def _sink(kind: str, url: str, epoch: int):
    from binlogd.daemon.sinks.nats import NatsSink
    from binlogd.daemon.sinks.postgres import PostgresSink
    from binlogd.daemon.sinks.redis import RedisSink

    sink = mirror_sink(url) if kind == "mirror" else {"redis": RedisSink, "nats": NatsSink,
                                                      "postgres": PostgresSink}[kind](url)
    sink.epoch = epoch
    sink.open(None)
    return sink


def _ids(kind: str, url: str) -> list[int]:
    if kind == "mirror":
        return read_mirror_ids(url)
    changes = read_bus(kind, url)
    return [c["after"]["id"] for c in changes]


async def _take_after_expiry(lease, deadline: float = 10.0) -> float:
    """Poll ``take`` as a standby does until it succeeds; returns the seconds it took."""
    start = time.monotonic()
    while not await lease.take():
        assert time.monotonic() - start < deadline, "the lease was never taken"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.parametrize("kind", SINKS)
def test_lease_taken_only_once_expired_with_a_larger_epoch(kind):
    with _broker(kind) as broker:
        async def go():
            a, b, c = (_lease(kind, broker.url, name) for name in "abc")
            try:
                assert await a.take()
                first = a.epoch
                assert await asyncio.gather(*(a.renew() for _ in range(3))) == [True] * 3  # at once: all ours
                for _ in range(6):  # renewed three times a lease: b never gets it
                    assert not await b.take()
                    assert b.other == "a"
                    assert await a.renew()
                    await asyncio.sleep(LEASE / 3)
                waited = await _take_after_expiry(b)  # a stopped renewing
                assert LEASE * 0.5 <= waited <= LEASE + 1.0, waited
                assert b.epoch > first
                assert not await a.renew()  # a learns it lost the lease
                await b.release()
                assert await c.take()  # released: taken at once
                assert c.epoch > first
                if kind in PG_LEASE:  # the row README names
                    assert _pg_lease_row(broker.url, PG_LEASE[kind]) == (c.epoch, "c")
            finally:
                for lease in (a, b, c):
                    await lease.close()

        asyncio.run(go())


@pytest.mark.parametrize("kind", SINKS)
def test_a_taken_over_instance_never_commits_again(kind):
    from binlogd.daemon.sinks import SinkError

    with _broker(kind) as broker:
        a_lease, b_lease = _lease(kind, broker.url, "a"), _lease(kind, broker.url, "b")

        async def take_and_close(lease):
            try:
                assert await lease.take()
            finally:
                await lease.close()

        asyncio.run(take_and_close(a_lease))
        a = _sink(kind, broker.url, a_lease.epoch)
        b = None
        try:
            write(a, 0, 10)
            commit(a, 10)
            if kind != "nats":  # the old active's changes reach the broker before the takeover, uncommitted
                write(a, 10, 10)
                time.sleep(0.3)

            async def take_over():
                try:
                    await _take_after_expiry(b_lease)
                finally:
                    await b_lease.close()

            asyncio.run(take_over())
            b = _sink(kind, broker.url, b_lease.epoch)  # NATS: its open fences the stream
            assert b.remote_checkpoint().position.pos == 1010
            if kind == "nats":  # the old active wakes up and writes on
                write(a, 10, 10)
            with pytest.raises(SinkError):
                commit(a, 20)
            a.close()
            assert _ids(kind, broker.url) == list(range(10))  # nothing of the fenced commit
            write(b, 10, 15)
            commit(b, 25)
            assert _ids(kind, broker.url) == list(range(25))
            b.close()
            b = _sink(kind, broker.url, b_lease.epoch)
            assert b.remote_checkpoint().position.pos == 1025
        finally:
            a.close()
            if b is not None:
                b.close()


def test_nats_a_takeover_that_dies_before_passing_the_tail_keeps_it_skipped():
    """The old active stored changes past its last checkpoint (a tail) and died; the next one opened (skipping the
    tail), committed once at its resume position and died too. The third one still skips the tail: that first
    commit's checkpoint was not published after the tail (it would have made the tail's changes be sent again,
    and NATS's duplicate window drops them, breaking the expected-sequence chain for ever)."""
    require("nats")
    with KINDS["nats"]() as broker:
        a = _sink("nats", broker.url, 5)
        write(a, 0, 10)
        commit(a, 10)
        write(a, 10, 5)  # the tail: stored, never committed
        time.sleep(0.5)
        a.close()
        b = _sink("nats", broker.url, 9)
        commit(b, 10)  # its first commit, at the position it resumes from: inside the tail
        b.close()
        c = _sink("nats", broker.url, 12)
        try:
            write(c, 10, 15)  # read again from the checkpoint: 10-14 skipped, 15-24 new
            commit(c, 25)
        finally:
            c.close()
        assert _ids("nats", broker.url) == list(range(25))
