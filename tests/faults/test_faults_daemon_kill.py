"""Fault suite 1: SIGKILL ``binlogd run`` at random points (also during its start), restart; nothing lost or repeated.

The load and the exactly-once check are in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    read_checkpoint,
    wait_caught_up,
)
from tests.support.faults import (
    SCHEMA,
    SLOW_CRASH_KILLS,
    SLOW_CRASH_TX,
    Writer,
    check_exactly_once,
    create_tables,
    local_server,
)

pytestmark = pytest.mark.server


# =========================================================================== 1. daemon crashes


def run_daemon_crashes(tmp_path: Path, total: int, kills: int, mode: str, rate: float | None, seed: int,
                       binaries=None) -> dict:
    rng = random.Random(seed)
    with local_server(binaries=binaries) as srv:
        create_tables(srv)
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        o = base_overrides(srv, tmp_path, **{"source.start": start, "filters.include_schemas": SCHEMA})
        cp_path = tmp_path / "checkpoint.json"
        daemon = DaemonProcess(o)
        writer = Writer(srv, total=total, rate=rate, big_every=25, seed=seed)
        early = before_streaming = tails = 0
        try:
            daemon.wait_streaming()
            writer.start()
            marks = sorted(rng.sample(range(max(1, total // 20), max(2, total * 19 // 20)), kills))
            early_next = False
            for i, mark in enumerate(marks):
                if early_next:
                    # a kill during the start: checkpoint load, sink truncation, connect, first events
                    time.sleep(rng.uniform(0.0, 0.4))
                    early += 1
                    before_streaming += daemon.count("streaming from") == 0
                else:
                    writer.wait_count(mark, timeout=600)
                    time.sleep(rng.uniform(0.0, 0.2))
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                daemon.kill()
                cp = read_checkpoint(cp_path)
                if cp is not None and cp["sink"]:
                    f = tmp_path / "sink" / cp["sink"]["file"]
                    if f.exists() and f.stat().st_size > cp["sink"]["offset"]:
                        tails += 1  # rows written past the checkpoint: a transaction cut by the kill
                assert writer.error is None, writer.error
                daemon = DaemonProcess(o)
                early_next = i < len(marks) - 1 and rng.random() < 0.25
                if not early_next:
                    daemon.wait_streaming(timeout=60)
            writer.wait_count(total, timeout=900)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=120, daemon=daemon)
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            stats = check_exactly_once(srv, tmp_path / "sink", writer, f"daemon crashes, {mode}")
            stats.update(kills=kills, kills_during_start=early, kills_before_streaming=before_streaming,
                         kills_with_uncommitted_tail=tails)
            print(f"[daemon crashes, {mode}] {kills} SIGKILLs ({early} within 0.4 s of a restart, {before_streaming} "
                  f"of them before it streamed; {tails} with an uncommitted sink tail) over "
                  f"{len(writer.committed)} transactions")
            return stats
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()


def test_daemon_sigkill_random_points(tmp_path, server_binaries):
    run_daemon_crashes(tmp_path, total=3000, kills=5, mode="gtid", rate=600, seed=70, binaries=server_binaries)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_daemon_sigkill_random_points_slow(tmp_path, mode):
    run_daemon_crashes(tmp_path, total=SLOW_CRASH_TX, kills=SLOW_CRASH_KILLS, mode=mode, rate=None,
                       seed=620 + (mode == "file"))


