"""The NATS sink's checkpoint in its stream, on a private nats-server (tests.support.brokers), through the sink's
own API (the daemon's resume rule is tested end to end in tests/faults/test_faults_snapshot_sinks.py):

- each commit ends with the checkpoint on ``_binlogd.checkpoint.<stream>``, only the newest kept, and ``open``
  reads it back as the broker's committed checkpoint; change readers never see it;
- a commit cut short (its messages stored, its checkpoint not): an initial snapshot's rows are deleted at open,
  streamed changes are skipped when sent again, so every change id is stored once.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from binlogd.daemon.sinks.nats import NatsSink
from tests.support.brokers import NatsServer, require
from tests.support.busread import read_nats
from tests.support.sinks import commit_changes


@pytest.fixture
def nats_server():
    require("nats")
    with NatsServer() as server:
        yield server


def _change(change_id: str, n: int) -> dict:
    file, pos, _inner, row = change_id.rsplit(":", 3)
    return {"op": "read" if file == "snapshot" else "insert", "schema": "d", "table": "t", "before": None,
            "after": {"id": n}, "ts": 1, "source": {"server_id": 1, "file": file, "pos": 4 if file == "snapshot"
                                                    else int(pos), "gtid": None, "row": int(row), "id": change_id}}




def _stored(url: str, want: int) -> int:
    """Wait until the stream's last sequence is at least ``want`` (the worker publishes in its thread)."""
    import nats

    async def last() -> int:
        nc = await nats.connect(url)
        try:
            return (await nc.jetstream().stream_info("BINLOGD")).state.last_seq
        finally:
            await nc.close()

    deadline = time.monotonic() + 10
    while (seq := asyncio.run(last())) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return seq


def _snapshot_ids(first: int, n: int) -> list:
    return [f"snapshot:0:0:{i}" for i in range(first, first + n)]


def test_commits_carry_the_checkpoint_and_open_reads_it_back(nats_server):
    sink = NatsSink(nats_server.url)
    sink.open(None)
    try:
        assert sink.remote_checkpoint() is None
        commit_changes(sink, [_change(i, n) for n, i in enumerate(_snapshot_ids(0, 5))], 100)
        last = commit_changes(sink, [_change(f"b.000001:{200 + n}:0:0", n) for n in range(5)], 300)
    finally:
        sink.close()
    sink.open({"bus": "nats"})
    try:
        assert sink.remote_checkpoint().to_bytes() == last
    finally:
        sink.close()
    changes = read_nats(nats_server.url)
    assert [c["source"]["id"] for c in changes] == _snapshot_ids(0, 5) + [f"b.000001:{200 + n}:0:0" for n in range(5)]


def test_a_snapshot_commit_cut_short_is_deleted_at_open(nats_server):
    sink = NatsSink(nats_server.url)
    sink.open(None)
    try:
        first = commit_changes(sink, [_change(i, n) for n, i in enumerate(_snapshot_ids(0, 10))], 100)
        for n, i in enumerate(_snapshot_ids(10, 10)):  # the next chunk, stored without its checkpoint
            sink.change(_change(i, 10 + n))
        sink.flush()
        assert _stored(nats_server.url, 21) == 21  # 10 + its checkpoint + 10
    finally:
        sink.close()
    sink.open({"bus": "nats"})
    try:
        assert sink.remote_checkpoint().to_bytes() == first
        # the chunk read again after the restart: another run's rows
        last = commit_changes(sink, [_change(f"snapshot:0:1:{10 + n}", 100 + n) for n in range(10)], 100)
    finally:
        sink.close()
    changes = read_nats(nats_server.url)
    assert [c["after"]["id"] for c in changes] == list(range(10)) + list(range(100, 110))
    sink.open({"bus": "nats"})
    try:
        assert sink.remote_checkpoint().to_bytes() == last
    finally:
        sink.close()


def test_a_streamed_commit_cut_short_is_skipped_when_sent_again(nats_server):
    streamed = [_change(f"b.000001:{300 + n // 3}:{n % 3 * 40}:0", n) for n in range(12)]  # payload's inner events
    sink = NatsSink(nats_server.url)
    sink.open(None)
    try:
        commit_changes(sink, streamed[:3], 301)  # the payload at 300, its boundary at 301
        for change in streamed[3:8]:  # a commit cut short after five of its changes
            sink.change(change)
        sink.flush()
        assert _stored(nats_server.url, 9) == 9
    finally:
        sink.close()
    sink.open({"bus": "nats"})
    try:
        commit_changes(sink, streamed[3:], 400)  # the same changes read again from the checkpoint
    finally:
        sink.close()
    changes = read_nats(nats_server.url)
    assert [c["after"]["id"] for c in changes] == list(range(12))
    assert len({c["source"]["id"] for c in changes}) == 12
