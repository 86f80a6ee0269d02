"""The private brokers of tests/support/brokers.py: each starts on a port of its own (never the machine's
6379/4222/5432), takes a write and reads it back with the asyncio client the sinks use, keeps it over a
SIGKILL and restart, and leaves no temp dir behind."""

from __future__ import annotations

import pytest

from tests.support.brokers import (
    SYSTEM_PORTS,
    BrokerError,
    NatsServer,
    PostgresServer,
    RedisServer,
    nats_server,  # noqa: F401  (fixtures)
    postgres_server,  # noqa: F401
    redis_server,  # noqa: F401
    require,
)


async def test_redis_stream_survives_kill():
    require("redis")
    import redis.asyncio as aioredis

    with RedisServer() as server:
        assert server.port not in SYSTEM_PORTS and f":{server.port}/0" in server.url
        client = aioredis.from_url(server.url)
        entry_id = await client.xadd("binlogd:t", {"k": "v"})
        assert [e for e, _ in await client.xrange("binlogd:t")] == [entry_id]
        await client.aclose()

        server.kill()
        assert not server.running
        server.start()
        client = aioredis.from_url(server.url)
        assert await client.xrange("binlogd:t") == [(entry_id, {b"k": b"v"})]
        await client.aclose()
        tmp = server.dir
    assert not tmp.exists() and not server.running


async def test_nats_jetstream_dedup_survives_kill():
    require("nats")
    import nats
    from nats.js.api import StorageType

    with NatsServer() as server:
        assert server.port not in SYSTEM_PORTS and server.url.endswith(f":{server.port}")

        async def publish_twice(nc) -> tuple:
            js = nc.jetstream()
            acks = [await js.publish("cdc.t", b"row", headers={"Nats-Msg-Id": "f:4:1"}) for _ in range(2)]
            return acks, await js.stream_info("CDC")

        nc = await nats.connect(server.url)
        await nc.jetstream().add_stream(name="CDC", subjects=["cdc.>"], storage=StorageType.FILE)
        (first, again), info = await publish_twice(nc)
        assert (first.duplicate, again.duplicate, info.state.messages) == (None, True, 1)
        await nc.close()

        server.kill()
        server.start()
        nc = await nats.connect(server.url)
        (after, _), info = await publish_twice(nc)
        assert after.duplicate and info.state.messages == 1  # message and dedup window both kept
        assert (await nc.jetstream().get_msg("CDC", 1)).data == b"row"
        await nc.close()
        tmp = server.dir
    assert not tmp.exists()


async def test_postgres_transaction_survives_kill():
    require("postgres")
    import psycopg

    with PostgresServer() as server:
        assert server.port not in SYSTEM_PORTS
        assert server.url == f"postgresql://binlogd@127.0.0.1:{server.port}/binlogd"
        async with await psycopg.AsyncConnection.connect(server.url) as conn:
            async with conn.transaction():
                await conn.execute("CREATE TABLE t (k int PRIMARY KEY, v text)")
                await conn.execute("INSERT INTO t VALUES (1, 'one')")
            assert await (await conn.execute("SELECT k, v FROM t")).fetchall() == [(1, "one")]

        server.kill()
        server.start()
        async with await psycopg.AsyncConnection.connect(server.url) as conn:
            assert await (await conn.execute("SELECT k, v FROM t")).fetchall() == [(1, "one")]
        tmp = server.dir
    assert not tmp.exists()


@pytest.mark.parametrize("redis_server", [{"password": "s3cret"}], indirect=True)
async def test_redis_password(redis_server):  # noqa: F811
    import redis.asyncio as aioredis

    assert redis_server.url == f"redis://:s3cret@127.0.0.1:{redis_server.port}/0"
    client = aioredis.from_url(redis_server.url)
    assert await client.ping()
    await client.aclose()
    anonymous = aioredis.from_url(f"redis://127.0.0.1:{redis_server.port}/0")
    with pytest.raises(aioredis.AuthenticationError):
        await anonymous.ping()
    await anonymous.aclose()


@pytest.mark.parametrize("nats_server", [{"user": "cdc", "password": "s3cret"}], indirect=True)
async def test_nats_password(nats_server):  # noqa: F811
    import nats

    nc = await nats.connect(nats_server.url)
    await nc.close()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(f"nats://cdc:wrong@127.0.0.1:{nats_server.port}", allow_reconnect=False,
                           max_reconnect_attempts=0, connect_timeout=2)


@pytest.mark.parametrize("postgres_server", [{"user": "cdc", "password": "s3cret", "database": "sink"}],
                         indirect=True)
async def test_postgres_password(postgres_server):  # noqa: F811
    import psycopg

    assert postgres_server.url == f"postgresql://cdc:s3cret@127.0.0.1:{postgres_server.port}/sink"
    async with await psycopg.AsyncConnection.connect(postgres_server.url) as conn:
        assert await (await conn.execute("SELECT current_user, current_database()")).fetchone() == ("cdc", "sink")
    with pytest.raises(psycopg.OperationalError, match="password"):
        await psycopg.AsyncConnection.connect(f"postgresql://cdc:wrong@127.0.0.1:{postgres_server.port}/sink")


def test_failed_start_reports_log_and_cleans_up():
    require("redis", client=False)
    server = RedisServer(args=["--no-such-directive", "1"])
    tmp = server.dir
    with pytest.raises(BrokerError, match="no-such-directive"):
        with server:
            pass
    assert not tmp.exists()
