"""The bus sinks' handling of the events beyond rows, without a broker: the block ``BusSink.meta`` makes (a str row,
the id's word), the order keys that place it among the changes, skipping what the broker holds, the size limit,
NATS's Python HPUB (the headers the C framing gives a change) and PostgreSQL's COPY line."""

from __future__ import annotations

import pytest

from binlogd.daemon.sinks import SinkError
from binlogd.daemon.sinks.frames import py_nats_hpubs
from binlogd.daemon.sinks.nats import NatsSink
from binlogd.daemon.sinks.postgres import meta_text
from binlogd.daemon.sinks.redis import RedisSink
from binlogd.library import identity, metaevents
from binlogd.library.identity import order_key

EVENTS = {"transaction": "T", "schema": "S", "heartbeat": "H"}


def source(event_id: str, pos: int = 120) -> dict:
    return {"server_id": 7, "file": "b.000001", "pos": pos, "gtid": "0-1-5", "id": event_id}


def test_ids_sort_around_their_transactions_rows():
    begin, commit = identity.begin_id("b.000001", 100), identity.commit_id("b.000001", 300)
    rows = [f"{identity.stream_prefix('b.000001', 200)}:{r}" for r in (0, 1, 2)]
    beat = identity.heartbeat_id("b.000001", 400, 99)
    after = identity.begin_id("b.000001", 400)
    ids = [begin, *rows, commit, beat, after]
    assert sorted(ids, key=order_key) == ids
    assert identity.boundary_key("b.000001", 100) < order_key(begin)
    assert identity.boundary_key("b.000001", 400) < order_key(beat) < order_key(after)


def test_meta_block_skip_and_limit():
    sink = RedisSink("redis://127.0.0.1:1/0", events=EVENTS, max_change_bytes=300)
    begin = metaevents.begin("0-1-5", source("b.000001:100:0:begin", 100), 3)
    sink._skip = order_key("b.000001:200:0:1")        # the broker holds up to this change
    sink.meta(begin)
    assert sink._piece == [] and sink._skip is not None
    commit = metaevents.commit("0-1-5", source("b.000001:300:0:commit", 300), 3, {"s.a": 2})
    sink.meta(commit)
    (meta, line, n), = sink._piece
    assert sink._skip is None and n == 1 and line.endswith(b"\n") and line.count(b"\n") == 1
    assert meta[4] == "commit" and meta[6] == "commit" and meta[8] == "b.000001:300:0"
    big = metaevents.ddl("s", "a", "ALTER TABLE a ADD c " + "x" * 400, source("b.000001:500:0:ddl.0", 500), 3, None)
    with pytest.raises(SinkError) as err:
        sink.meta(big)
    assert err.value.fatal and err.value.exit_code == 7 and "ddl.0" in str(err.value)


def test_meta_of_a_kind_without_destination_is_refused():
    sink = RedisSink("redis://127.0.0.1:1/0", events={"schema": "S"})
    with pytest.raises(SinkError) as err:
        sink.meta(metaevents.heartbeat(source("b.000001:120:h5:heartbeat"), 3))
    assert err.value.fatal and "heartbeat" in str(err.value)


def test_nats_meta_hpub_has_a_changes_headers():
    sink = NatsSink("nats://127.0.0.1:1", events=EVENTS)
    got = sink._hpub(b"T", "7:b.000001:100:0:begin", 41, b'{"op":"begin"}')
    # the reference framing of a change with the same prefix, its row (5 digits) replaced by the word (5 letters)
    row = py_nats_hpubs(b"T", 7, b"b.000001:100:0", 12345, 41, b'{"op":"begin"}\n', 1)
    assert got == row.replace(b"12345", b"begin")
    assert b"Nats-Msg-Id: 7:b.000001:100:0:begin\r\n" in got and b"Nats-Expected-Last-Sequence: 41\r\n" in got


def test_postgres_meta_copy_line():
    meta = ("s", "a", "b.000001", 500, "ddl.0", "0-1-5", "ddl", 7, "b.000001:500:0")
    line = meta_text(meta, b'{"ddl":"x\\\\y"}\n')
    assert line == b'{"ddl":"x\\\\\\\\y"}\tb.000001:500:0:ddl.0\tddl\tb.000001\t500\t0-1-5\ts\ta\t7\n'
    beat = ("", "", "b.000001", 4, "heartbeat", None, "heartbeat", None, "b.000001:4:h9")
    assert meta_text(beat, b"{}\n") == b"{}\tb.000001:4:h9:heartbeat\theartbeat\tb.000001\t4\t\\N\t\\N\t\\N\t\\N\n"


def test_nats_meta_hpub_joins_the_ha_chain():
    sink = NatsSink("nats://127.0.0.1:1", events=EVENTS)
    sink.epoch, sink._last_id = 3, "7:b.000001:90:0:4"
    got = sink._hpub(b"T", "7:b.000001:100:0:begin", 41, b"{}")
    assert b"Nats-Expected-Last-Msg-Id: 7:b.000001:90:0:4\r\n\r\n{}" in got
    assert sink._last_id == "7:b.000001:100:0:begin"
