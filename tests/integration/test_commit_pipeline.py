"""The daemon's commits against the fake primary: the sink's sync and the checkpoint save run in a
worker thread while the consumer goes on, and the checkpoint never moves past what the sink made durable.

Each commit flushes the sink on the consumer, then a worker thread syncs it and saves the checkpoint,
one sync at a time. Here a sync is held (or made to fail) to show that (1) the consumer keeps reading,
writing and flushing later transactions meanwhile, (2) the checkpoint only moves once the sync is done,
and the next sync covers everything flushed in between, and (3) a failed sync leaves the checkpoint
where it was, and the transactions after it are delivered again exactly once.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from binlogd.daemon.delivery import consumer
from binlogd.daemon.sinks import SinkError
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import (
    F57,
    FENUM,
    PASSWORD,
    U57,
    UENUM,
    Running,
    at_pos,
    binlog,
    by_gtid,
    checkpoint,
    config,
    gtid_reaches,
    sink_rows,
    within,
)

pytest.importorskip("aiomysql")
pytestmark = pytest.mark.usefixtures("corpus")

END = ("mysql-bin.000057", 1283)   # F57 ends after GTID :13; its rows: :12 insert, :13 update + insert
ROWS = {f"{U57}:12": ["insert"], f"{U57}:13": ["update", "insert"]}


def _start(tmp_path, primary):
    return Running(config(tmp_path, primary.port, "file:mysql-bin.000057:4"), primary)


async def test_consumer_goes_on_while_a_sync_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(consumer, "COMMIT_EVERY", 1)  # commit at every boundary the last sync allows
    release, held = threading.Event(), threading.Event()

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary:
            running = _start(tmp_path, primary)
            d = running.daemon
            flush, sync, flushed, synced = d.sink.flush, d.sink.sync, [], []

            def flush_at():
                flushed.append(d.tracker.committed.pos)  # the position this commit's checkpoint holds
                return flush()

            def slow_sync():
                synced.append(len(flushed))
                if len(synced) == 2:  # the first one after the start: hold it
                    held.set()
                    assert release.wait(20), "the test never released the sync"
                sync()

            d.sink.flush, d.sink.sync = flush_at, slow_sync
            async with running:
                await running.wait(held.is_set, 10, "the held sync")
                held_at = flushed[1]
                # The consumer reads the rest of the file and writes it to the sink meanwhile...
                await running.wait(lambda: d.tracker.committed.pos == END[1], 10, "the end of the file")
                # ...but the checkpoint stays behind the sync that is held.
                await asyncio.sleep(0.2)
                cp = checkpoint(tmp_path)
                assert cp is not None and cp.position.pos < held_at < END[1]
                assert flushed[-1] == END[1], "later transactions must be flushed (readable) meanwhile"
                assert len(synced) == 2, "no sync may start while another runs"
                release.set()
                await running.wait(at_pos(tmp_path, *END), 10, "the checkpoint at the end")
                assert len(synced) == 3, "one sync must cover every commit flushed while the last one ran"
                assert await running.stop() == 0

    try:
        await within(main())
    finally:
        release.set()
    assert by_gtid(sink_rows(tmp_path)) == ROWS


async def test_failed_sync_keeps_the_checkpoint_and_delivers_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(consumer, "COMMIT_EVERY", 1)
    seen: list[int] = []

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary:
            running = _start(tmp_path, primary)
            d = running.daemon
            sync = d.sink.sync

            def failing_sync():
                seen.append(d.committer.durable.position.pos if d.committer.durable else 0)
                if len(seen) == 3:
                    raise SinkError("disk on fire")
                sync()

            d.sink.sync = failing_sync
            async with running:
                await running.wait(at_pos(tmp_path, *END), 20, "the checkpoint at the end")
                assert len(primary.connections) == 2, "the failed sync must end the session"
                assert await running.stop() == 0
            return d

    d = await within(main())
    assert len(seen) >= 4
    said = [r.getMessage() for r in caplog.records if "disk on fire" in r.getMessage()]
    assert said == [f"disk on fire; checkpoint stays at mysql-bin.000057:{seen[2]}, retrying in 0.1s"]
    assert seen[2] < END[1]
    assert d.metrics.registry.get_sample_value("binlogd_errors_total", {"kind": "sink"}) == 1
    assert by_gtid(sink_rows(tmp_path)) == ROWS  # the rows after the failed sync: written again, once


async def test_reconnect_does_not_wait_for_a_sync_but_the_sink_reopens_after_it(tmp_path, monkeypatch):
    """The primary closes the connection while a sync runs: the daemon reconnects at once, and reopens
    the sink (then dumps) only when that sync has ended."""
    monkeypatch.setattr(consumer, "COMMIT_EVERY", 1)
    release, held = threading.Event(), threading.Event()

    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD, close_after=12) as primary:
            running = Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2"), primary)
            d = running.daemon
            sync, opened, calls = d.sink.sync, [], []
            reopen = d.sink.open

            def slow_sync():
                calls.append(1)
                if len(calls) == 2:
                    held.set()
                    assert release.wait(20), "the test never released the sync"
                sync()

            d.sink.sync = slow_sync
            d.sink.open = lambda state: (opened.append(release.is_set()), reopen(state))[1]
            async with running:
                await running.wait(held.is_set, 10, "the held sync")
                await running.wait(lambda: len(primary.connections) == 2, 10, "a new connection")
                await asyncio.sleep(0.3)
                assert len(primary.dumps) == 1 and opened == [False], "the sink was reopened during the sync"
                release.set()
                await running.wait(gtid_reaches(tmp_path, f"{UENUM}:1-5"), 20, "all GTIDs")
                assert await running.stop() == 0
            return primary, opened

    try:
        primary, opened = await within(main())
    finally:
        release.set()
    assert primary.connections[0].closed_by == "fault" and len(primary.dumps) == 2
    assert opened == [False, True]
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:3": ["insert"], f"{UENUM}:4": ["update"],
                                           f"{UENUM}:5": ["delete"]}


async def test_stop_during_a_reopen_closes_the_sink_after_the_open(tmp_path, monkeypatch):
    """A stop while the new session reopens the sink (in its thread, which a cancel cannot cut short): the sink
    closes once that open has ended, never beside it, and the daemon ends at once after."""
    monkeypatch.setattr(consumer, "COMMIT_EVERY", 1)
    calls: list[tuple[str, float]] = []
    reopening = threading.Event()

    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD, close_after=12) as primary:
            running = Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2"), primary)
            d = running.daemon
            opener, closer = d.sink.open, d.sink.close

            def slow_open(state):
                calls.append(("open", time.monotonic()))
                if len(calls) > 2:  # the reopen: the first open, then the reopen's close, came before it
                    reopening.set()
                    time.sleep(1.0)
                opener(state)
                calls.append(("opened", time.monotonic()))

            d.sink.open = slow_open
            d.sink.close = lambda: (calls.append(("close", time.monotonic())), closer())[1]
            async with running:
                await running.wait(reopening.is_set, 10, "the reopen")
                began = time.monotonic()
                assert await running.stop() == 0
                return time.monotonic() - began

    took = await within(main())
    names = [name for name, _ in calls]
    assert names[-3:] == ["open", "opened", "close"], f"the close ran beside the open: {names}"
    assert took < 5, f"the stop took {took:.1f}s"
