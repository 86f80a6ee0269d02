"""The bus sinks' pieces: config subsections, position keys, URL redaction, COPY text, the checks made
before connecting; and the Redis sink's commit paths (MULTI/EXEC, staging, a refused entry) on a private
redis-server (tests.support.brokers)."""

from __future__ import annotations

import asyncio
import time

import pytest

from binlogd.daemon.config import ConfigError, load_config
from binlogd.daemon.sinks import SinkError, make_sink
from binlogd.daemon.sinks.bus import BusSink, redact
from binlogd.daemon.sinks.postgres import copy_text
from binlogd.library.identity import order_key
from tests.support.sinks import commit_changes


def test_config_subsections_and_env_overrides():
    cfg = load_config(None, env={"BINLOGD_SINK__KIND": "redis", "BINLOGD_SINK__REDIS__URL": "redis://:pw@h:1/2",
                                 "BINLOGD_SINK__NATS__STREAM": "S", "BINLOGD_SINK__POSTGRES__TABLE": "cdc.changes"})
    assert cfg.sink.kind == "redis" and cfg.sink.redis.url == "redis://:pw@h:1/2"
    assert cfg.sink.redis.stream == "binlogd:{schema}.{table}"
    assert (cfg.sink.nats.stream, cfg.sink.nats.subject) == ("S", "binlogd.{schema}.{table}")
    assert cfg.sink.postgres.table == "cdc.changes"
    sink = make_sink(cfg.sink)
    assert sink.KIND == "redis" and "pw" not in sink.name


@pytest.mark.parametrize("key, value", [("sink.nats.subject", "{schema}.{table}"),
                                        ("sink.nats.subject", "a.>.{table}"),
                                        ("sink.postgres.table", "drop table; x"),
                                        ("sink.redis.max_change_bytes", "0")])
def test_config_rejects(key, value):
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, overrides={key: value})
    assert key in str(err.value)


def test_order_key_orders_files_then_positions_then_inner_events_then_rows():
    assert order_key("b.000009:999999:0:5") < order_key("b.000010:4:0:0")
    assert order_key("b.000010:4:0:0") < order_key("b.000010:4:0:1") < order_key("b.000010:4:7:0")
    assert order_key("b.000010:4:7:9") < order_key("b.000010:5:0:0")


def test_redact():
    assert redact("redis://:secret@127.0.0.1:1/0") == "redis://:***@127.0.0.1:1/0"
    assert redact("postgresql://u:p%40ss@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_copy_text_escapes():
    meta = ("s\tx", "t\\y", "b.000001", 120, 3, None, "insert", 7, "b.000001:120:0")
    text = copy_text([(meta, b'{"a":"q\\"\\\\n"}\n{}\n', 2),
                      (meta[:4] + (9, "g", "delete", None, "b.000001:120:0"), b"[]\n", 1)])
    assert text == (b'{"a":"q\\\\"\\\\\\\\n"}\tb.000001\t120\t3\t\\N\ts\\tx\tt\\\\y\tinsert\t7\n'
                    b'{}\tb.000001\t120\t4\t\\N\ts\\tx\tt\\\\y\tinsert\t7\n'
                    b'[]\tb.000001\t120\t9\tg\ts\\tx\tt\\\\y\tdelete\t\\N\n')


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_open_refuses_another_sinks_state(kind):
    sink = make_sink(load_config(None, env={}, overrides={"sink.kind": kind}).sink)
    with pytest.raises(SinkError) as err:
        sink.open({"file": "changes-000001.jsonl", "offset": 10})
    assert err.value.fatal and err.value.exit_code == 8 and "not a" in str(err.value)


# ---------------------------------------------------------------- the Redis sink's commits, on a real redis-server
def _change(table: str, i: int, size: int = 200) -> dict:
    return {"schema": "d", "table": table, "op": "insert", "after": {"id": i, "v": "x" * size},
            "source": {"file": "b.000001", "pos": 1000 + i, "row": 0, "server_id": 1, "gtid": None,
                       "id": f"b.000001:{1000 + i}:0:0"}}




@pytest.fixture
def redis_server():
    """A private redis-server (tests.support.brokers.RedisServer), closed after."""
    from tests.support.brokers import RedisServer, require

    require("redis")
    with RedisServer() as server:
        yield server


def _ids(client, stream: str) -> list:
    import json

    return [json.loads(fields[b"change"])["after"]["id"] for _, fields in client.xrange(stream)]


def test_redis_sink_multi_then_staged_then_multi(redis_server, monkeypatch):
    """Small commits go in one MULTI/EXEC; one over STAGE_BYTES (several pieces) is discarded from its
    MULTI, staged and moved; every entry arrives once, in order, with the checkpoint."""
    import redis

    from binlogd.daemon.sinks import bus
    from binlogd.daemon.sinks import redis as redis_sink

    monkeypatch.setattr(bus, "PIECE_BYTES", 20_000)
    monkeypatch.setattr(redis_sink, "STAGE_BYTES", 100_000)
    client = redis.Redis.from_url(redis_server.url)
    sink = redis_sink.RedisSink(redis_server.url)
    sink.open(None)
    try:
        commit_changes(sink, [_change("a", i) for i in range(10)], 2000)
        assert client.get("binlogd:checkpoint:binlogd") is not None and client.xlen("binlogd:d.a") == 10
        big = [_change("a" if i % 3 else "b", i) for i in range(10, 1010)]  # ~230 kB: staged
        commit_changes(sink, big, 3000)
        last = commit_changes(sink, [_change("b", i) for i in range(1010, 1020)], 4000)
    finally:
        sink.close()
    assert _ids(client, "binlogd:d.a") == [i for i in range(1010) if i < 10 or i % 3]
    assert _ids(client, "binlogd:d.b") == [i for i in range(10, 1020) if i >= 1010 or i % 3 == 0]
    assert client.get("binlogd:checkpoint:binlogd") == last
    assert not client.exists("binlogd:checkpoint:binlogd:staging")


def test_redis_sink_refused_entry_keeps_checkpoint(redis_server):
    """An XADD refused inside EXEC (the stream became a string after the sink checked it) stops the
    commit's checkpoint: the key keeps the previous one, and the error is fatal (exit 6)."""
    import redis

    from binlogd.daemon.sinks.redis import RedisSink

    client = redis.Redis.from_url(redis_server.url)
    sink = RedisSink(redis_server.url)
    sink.open(None)
    try:
        first = commit_changes(sink, [_change("a", 0)], 2000)
        client.delete("binlogd:d.a")
        client.set("binlogd:d.a", "not a stream")
        with pytest.raises(SinkError) as err:
            commit_changes(sink, [_change("b", 1), _change("a", 2)], 3000)
    finally:
        sink.close()
    assert err.value.fatal and err.value.exit_code == 6 and "WRONGTYPE" in str(err.value)
    assert client.get("binlogd:checkpoint:binlogd") == first


# ---------------------------------------------------------------- backpressure, awaited on the event loop
class _StuckSink(BusSink):
    """A bus sink whose broker takes nothing: every write waits until the sink closes."""

    KIND = "stuck"

    async def _connect(self) -> None:
        self._never = asyncio.Event()

    async def _write(self, piece: list) -> None:
        await self._never.wait()

    async def _commit(self, checkpoint: bytes | None) -> None:
        await self._never.wait()


def test_a_stuck_broker_never_blocks_the_event_loop(monkeypatch):
    """Handing changes over never waits, however much the broker owes: past PENDING_BYTES the caller awaits
    room(), the event loop runs on meanwhile, and room() ends in a retryable SinkError once WAIT_SECONDS pass (the
    worker's own wait for the broker may end first: the same error, retried)."""
    from binlogd.daemon.sinks import bus

    monkeypatch.setattr(bus, "PENDING_BYTES", 1 << 20)
    monkeypatch.setattr(bus, "WAIT_SECONDS", 0.5)
    sink = _StuckSink("stuck://x", 1 << 20)

    async def go():
        await asyncio.to_thread(sink.open, None)
        try:
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            ticker = asyncio.ensure_future(tick())
            began = time.monotonic()
            for i in range(40):  # 40 changes of 100 KB: four times what may wait for the broker
                sink.change({"schema": "d", "table": "t", "op": "insert", "after": {"v": "x" * 100_000},
                             "source": {"file": "b.000001", "pos": 4 + i, "row": 0, "id": f"b.000001:{4 + i}:0:0"}})
            sink.flush()
            handed = time.monotonic() - began
            assert sink.over()
            with pytest.raises(SinkError) as err:
                await sink.room()
            ticker.cancel()
            assert not err.value.fatal and "stuck sink" in str(err.value)  # no answer / took no writes: retried
            assert handed < 0.2 and ticks >= 20, (handed, ticks)
        finally:
            await asyncio.to_thread(sink.close)

    asyncio.run(go())


# ---------------------------------------------------------------- snapshot rows as lines: the same messages as dicts
def _reads(n: int, first: int = 0, table: str = "t", last: bool = False) -> list:
    """n snapshot reads of ``d.<table>`` as the snapshot's change dicts (ids ``snapshot:0:1:<row>``)."""
    source = {"server_id": 7, "file": "b.000003", "pos": 1234, "gtid": "0-7-55", "snapshot": True}
    out = [{"op": "read", "schema": "d", "table": table, "before": None,
            "after": {"id": i, "v": "x\\\t\"é" * (i % 4), "n": None}, "ts": 1700000000,
            "source": {**source, "row": i, "id": f"snapshot:0:1:{i}"}} for i in range(first, first + n)]
    if last and out:
        out[-1]["source"]["snapshot"] = "last"
    return out


def _lines_of(changes: list) -> memoryview:
    from binlogd.library.serialize import dumps

    return memoryview(bytearray(b"".join(dumps(c) + b"\n" for c in changes)))


class _Recording(BusSink):
    """A bus sink whose broker is a list: the blocks each piece brought, in order."""

    KIND = "recording"

    async def _connect(self) -> None:
        self.blocks = []

    async def _write(self, piece: list) -> None:
        self.blocks.extend(piece)

    async def _commit(self, checkpoint: bytes | None) -> None:
        return None


def _per_message(blocks: list) -> list:
    """Each message of the blocks with the fields its broker request is made of (meta, the row for row0)."""
    out = []
    for meta, lines, n in blocks:
        for i, line in enumerate(lines.split(b"\n")[:n]):
            out.append((*meta[:4], meta[4] + i, *meta[5:], line))
    return out


@pytest.mark.parametrize("fmt, takes", [("binlogd", True), ("debezium", False)])
def test_change_lines_make_the_messages_change_makes(fmt, takes):
    """Lines of the "binlogd" format go to the broker as the same messages, with the same table, position,
    row, gtid, op, server id and id prefix as the change dicts (resume and de-duplication rest on them); in
    another format the sink declines them and takes nothing."""
    changes = _reads(30, 5, last=True) + _reads(3, 0, table="u")
    by_dict, by_lines = _Recording("rec://a", 1 << 20, format=fmt), _Recording("rec://b", 1 << 20, format=fmt)
    for sink in (by_dict, by_lines):
        sink.open(None)
    try:
        for change in changes:
            by_dict.change(change)
        took = [by_lines.change_lines(_lines_of(changes[:30]), count=30, prefix="snapshot:0:1", first=5,
                                      schema="d", table="t"),
                by_lines.change_lines(_lines_of(changes[30:]), count=3, prefix="snapshot:0:1", first=0,
                                      schema="d", table="u"),
                by_lines.change_lines(memoryview(b""), count=0, prefix="snapshot:0:1", first=3, schema="d",
                                      table="u")]
        for sink in (by_dict, by_lines):
            commit_changes(sink, [], 4)
    finally:
        for sink in (by_dict, by_lines):
            sink.close()
    assert took == [takes] * 3
    if takes:
        assert _per_message(by_lines.blocks) == _per_message(by_dict.blocks) and len(by_dict.blocks) == 33
    else:
        assert _per_message(by_lines.blocks) == [] and len(by_dict.blocks) == 33


def test_change_lines_over_the_size_limit_take_nothing():
    sink = _Recording("rec://a", 300)
    sink.open(None)
    try:
        big = _reads(3)
        big[1]["after"]["v"] = "y" * 400
        with pytest.raises(SinkError) as err:
            sink.change_lines(_lines_of(big), count=3, prefix="snapshot:0:1", first=0, schema="d", table="t")
        assert err.value.fatal and err.value.exit_code == 7 and "id snapshot:0:1:1" in str(err.value)
    finally:
        sink.close()


def _broker_content(kind: str, url: str, name: str) -> list:
    """What the broker holds of sink ``name`` (see _bus_sink), each message as its bytes and fields."""
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(url)
        try:
            return [(key.decode().partition(":")[2], sorted(fields.items())) for key in
                    sorted(client.scan_iter(match=f"{name}:d.*")) for _, fields in client.xrange(key)]
        finally:
            client.close()
    if kind == "postgres":
        import psycopg

        with psycopg.connect(url) as conn:
            return conn.execute(f"SELECT change::text, source_file, source_pos, source_row, gtid, schema_name, "
                                f"table_name, op, server_id FROM {name}_changes ORDER BY seq").fetchall()

    async def read():
        import nats
        from nats.js.errors import NotFoundError

        nc = await nats.connect(url)
        try:
            js, out = nc.jetstream(), []
            info = await js.stream_info(name.upper())
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    msg = await js.get_msg(name.upper(), seq)
                except NotFoundError:  # a checkpoint message rolled up by the next
                    continue
                if not msg.subject.startswith("_binlogd."):
                    out.append((msg.subject.partition(".")[2], sorted((msg.headers or {}).items()), msg.data))
            return out
        finally:
            await nc.close()

    return asyncio.run(read())


def _bus_sink(kind: str, url: str, name: str):
    from binlogd.daemon.sinks.nats import NatsSink
    from binlogd.daemon.sinks.postgres import PostgresSink
    from binlogd.daemon.sinks.redis import RedisSink

    if kind == "redis":
        return RedisSink(url, stream=name + ":{schema}.{table}", checkpoint_key=f"{name}:checkpoint")
    if kind == "nats":
        return NatsSink(url, stream=name.upper(), subject=name + ".{schema}.{table}")
    return PostgresSink(url, table=f"{name}_changes")


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_snapshot_lines_give_the_broker_what_dicts_give(kind):
    """On each real broker, a snapshot's rows handed over as lines (one block per chunk, the last chunk's
    last row "last") leave exactly the messages their change dicts leave: payload bytes, stream or subject,
    Nats-Msg-Id / Binlogd-Source headers, the PostgreSQL columns."""
    from tests.support.brokers import broker_for

    chunks = [_reads(40, 0), _reads(40, 40), _reads(7, 80, last=True)]
    with broker_for(kind) as broker:
        by_dict, by_lines = _bus_sink(kind, broker.url, "dicts"), _bus_sink(kind, broker.url, "lines")
        for sink in (by_dict, by_lines):
            sink.open(None)
        try:
            for pos, chunk in enumerate(chunks, 10):
                commit_changes(by_dict, chunk, pos)
                assert by_lines.change_lines(_lines_of(chunk), count=len(chunk), prefix="snapshot:0:1",
                                             first=chunk[0]["source"]["row"], schema="d", table="t")
                commit_changes(by_lines, [], pos)
        finally:
            for sink in (by_dict, by_lines):
                sink.close()
        got, want = _broker_content(kind, broker.url, "lines"), _broker_content(kind, broker.url, "dicts")
    assert len(want) == 87 and got == want
