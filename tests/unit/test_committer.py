"""The Committer's rules: one sync in flight, ``durable`` moves only when a sync ends, a token is synced once,
a failed sync is raised once and drops what waited behind it. The sink's sync is held on a threading.Event
so each state can be looked at while a sync runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.delivery.committer import Committer
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.sinks import Sink, SinkError
from binlogd.daemon.state import ResumeState
from binlogd.protocol.position import Position


class HeldSink(Sink):
    """Counts flushes; each sync waits for ``release`` and records which flushes it covered."""

    def __init__(self):
        self.flushes = 0
        self.handed = 0          # flushes handed to the next sync by begin_sync
        self.synced: list[int] = []
        self.release = threading.Event()
        self.fail_next = False
        self._taken = 0

    def flush(self) -> dict:
        self.flushes += 1
        return {"flushes": self.flushes}

    def begin_sync(self) -> None:
        self._taken = self.flushes

    def sync(self) -> None:
        assert self.release.wait(10), "the test never released the sync"
        if self.fail_next:
            self.fail_next = False
            raise SinkError("disk on fire")
        self.synced.append(self._taken)


def state(pos: int) -> ResumeState:
    return ResumeState(Position("b.000001", pos), False, None, {"flavor": "mariadb"})


def make(tmp_path) -> tuple[Committer, HeldSink, CheckpointStore]:
    sink, store = HeldSink(), CheckpointStore(tmp_path / "checkpoint.json", lock=False)
    return Committer(sink, store, Metrics(), None), sink, store


async def until(predicate, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_one_sync_in_flight_and_the_latest_waiting_token_wins(tmp_path):
    async def main():
        committer, sink, store = make(tmp_path)
        committer.sync(committer.flush(state(100)))          # starts at once
        await asyncio.sleep(0.05)
        committer.sync(committer.flush(state(200)))          # waits
        committer.sync(committer.flush(state(300)))          # replaces 200
        await asyncio.sleep(0.05)
        assert committer.durable is None and store.load() is None  # nothing durable while the first is held
        sink.release.set()
        await committer.settle()
        return committer, sink, store

    committer, sink, store = await main()
    assert sink.synced == [1, 3], "two syncs: the first, then one covering every flush made while it ran"
    assert committer.durable.position.pos == 300 and committer.durable.sink == {"flushes": 3}
    saved = store.load()
    assert saved.position.pos == 300 and saved.sink == {"flushes": 3} and saved.source["resume"] == "file"


async def test_a_token_is_synced_once_and_only_the_last_flush(tmp_path):
    async def main():
        committer, sink, _ = make(tmp_path)
        sink.release.set()
        old = committer.flush(state(100))
        new = committer.flush(state(200))
        with pytest.raises(ValueError):
            committer.sync(old)
        committer.sync(new)
        with pytest.raises(ValueError):
            committer.sync(new)
        await committer.settle()
        return committer

    assert (await main()).durable.position.pos == 200


async def test_a_failed_sync_is_raised_once_keeps_durable_and_drops_the_waiting_token(tmp_path):
    async def main():
        committer, sink, store = make(tmp_path)
        sink.release.set()
        committer.sync(committer.flush(state(100)))
        await committer.settle()
        sink.release.clear()
        sink.fail_next = True
        committer.sync(committer.flush(state(200)))
        await asyncio.sleep(0.05)
        committer.sync(committer.flush(state(300)))  # waits behind the one that will fail
        sink.release.set()
        await until(lambda: committer.failed, "the failed sync")
        with pytest.raises(SinkError, match="disk on fire"):
            await committer.settle()
        assert not committer.failed
        await committer.settle()  # raised once: nothing left in flight
        return committer, sink, store

    committer, sink, store = await main()
    assert committer.durable.position.pos == 100 and store.load().position.pos == 100
    assert sink.synced == [1], "the token waiting behind the failed sync must not be made durable"


async def test_drain_swallows_a_failed_sync(tmp_path):
    async def main():
        committer, sink, _ = make(tmp_path)
        sink.fail_next = True
        sink.release.set()
        committer.sync(committer.flush(state(100)))
        await committer.drain()
        return committer

    assert (await main()).durable is None


def test_resume_state_round_trips_through_a_checkpoint():
    resume = ResumeState(Position("b.000002", 77, gtid_list="0-1-5"), True, {"file": "x", "offset": 3},
                         {"flavor": "mariadb", "server_id": 1, "server_uuid": ""}, 1700000000.0)
    checkpoint = resume.checkpoint()
    assert checkpoint.source == {"flavor": "mariadb", "server_id": 1, "server_uuid": "", "resume": "gtid",
                                 "skip_before": 1700000000.0}
    assert ResumeState.from_checkpoint(checkpoint) == resume
    plain = ResumeState(Position("b.000002", 77), False, None, {})
    assert plain.checkpoint().source == {"resume": "file"} and ResumeState.from_checkpoint(plain.checkpoint()) \
        == ResumeState(Position("b.000002", 77), False, {}, {})
