"""The bus sinks under faults, each under a write load on a real MariaDB; the broker's contents, read back
independently, replay to the tables' final contents, with no transaction and no (file, pos, row) delivered
twice:

- ``binlogd run`` SIGKILLed twice, the broker SIGKILLed and restarted once;
- the broker stalled (SIGSTOP) while over 100 MB of changes arrive: the daemon waits with bounded memory, the
  checkpoint's age shows the stall, nothing fails, everything arrives after SIGCONT; past the sink's 60 s
  wait (``--runslow``) a retryable sink error, shown in the metrics and /readyz, and the same end.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus, write_jsonl
from tests.support.daemon import DaemonProcess, base_overrides, scrape, wait_caught_up, wait_until
from tests.support.faults import (
    SCHEMA,
    Writer,
    check_exactly_once,
    create_tables,
    local_server,
    metrics_port,
    scrape_metric,
)

pytestmark = pytest.mark.server


def bus_overrides(srv, tmp_path, kind: str, broker) -> dict:
    """The daemon's settings: ``srv``'s schema SCHEMA from its current position into the ``kind`` sink."""
    return base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": SCHEMA,
                                            "sink.kind": kind, f"sink.{kind}.url": broker.url})


def read_back_once(srv, kind: str, broker, writer, tmp_path, total: int) -> None:
    """Read the broker back: no change twice (NATS: no message id twice), and the replay equal to the tables."""
    changes = read_bus(kind, broker.url)
    assert max(Counter(c["_id"] for c in changes).values()) == 1
    if kind == "nats":
        msg_ids = Counter(c["_id"][1] for c in changes)
        assert max(msg_ids.values()) == 1, [m for m, n in msg_ids.items() if n > 1][:5]
    stats = check_exactly_once(srv, write_jsonl(changes, tmp_path / "readback"), writer, f"bus {kind}")
    assert stats["in_sink"] >= total - 5


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_bus_sink_sigkill_and_broker_restart(tmp_path, kind):
    require(kind)
    total = 900
    with KINDS[kind]() as broker, local_server() as srv:
        create_tables(srv)
        o = bus_overrides(srv, tmp_path, kind, broker)
        daemon = DaemonProcess(o)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=7)
        try:
            daemon.wait_streaming(timeout=60)
            writer.start()
            for mark in (total // 5, 2 * total // 5):  # two daemon crashes
                writer.wait_count(mark, timeout=120)
                assert daemon.running, daemon.stderr
                daemon.kill()
                time.sleep(0.2)
                daemon = DaemonProcess(o)
                daemon.wait_streaming(timeout=60)
            writer.wait_count(3 * total // 5, timeout=120)
            port = metrics_port(daemon)
            broker.kill()                      # the broker crashes while the load goes on
            # the metrics and /readyz show it: a sink error, not streaming, not ready
            wait_until(lambda: scrape_metric(port, "binlogd_errors_total", kind="sink") >= 1
                       and scrape_metric(port, "binlogd_up") == 0, timeout=30, what="sink error in the metrics")
            assert scrape(port, "/readyz")[0] != 200
            time.sleep(1.0)
            broker.start()
            writer.wait_count(total, timeout=120)
            writer.stop()
            wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon, fail_on=None)
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc}:\n{daemon.stderr}"
            assert "retrying" in daemon.stderr, "the broker's crash was not noticed"
            read_back_once(srv, kind, broker, writer, tmp_path, total)
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


STALL_ROWS = 1000  # big transactions written while the broker is stopped: ~120 MB


def _stalled_broker(tmp_path, kind: str, stall: float, longest: float) -> tuple[dict, str]:
    """Run the load, stall the broker in the middle for ``stall`` seconds and until STALL_ROWS transactions were
    written meanwhile (however fast this machine writes them), or ``longest`` seconds at most; then check the
    read-back. Returns what was seen during the stall (RSS growth, checkpoint age, sink errors, /readyz,
    transactions written, seconds) and the daemon's log."""
    require(kind)
    total = 2400
    with KINDS[kind]() as broker, local_server() as srv:
        create_tables(srv)
        o = bus_overrides(srv, tmp_path, kind, broker)
        daemon = DaemonProcess(o)
        writer = Writer(srv, total=total, rate=150, big_every=1, seed=11)  # 120 KB each: ~18 MB/s
        seen = {"ready": [], "errors": 0.0}
        try:
            daemon.wait_streaming(timeout=60)
            port = metrics_port(daemon)
            writer.start()
            writer.wait_count(200, timeout=120)
            assert daemon.running, daemon.stderr
            rss0 = _rss_mb(daemon.pid)
            broker.pause()
            try:
                start, before = time.monotonic(), writer.count
                peak = rss0
                while time.monotonic() - start < longest and (
                        time.monotonic() - start < stall or writer.count - before < STALL_ROWS):
                    time.sleep(0.5)
                    peak = max(peak, _rss_mb(daemon.pid))
                    seen["ready"].append(scrape(port, "/readyz")[0])
                seen["age"] = scrape_metric(port, "binlogd_checkpoint_age_seconds")
                seen["errors"] = scrape_metric(port, "binlogd_errors_total", kind="sink")
                seen["growth"] = peak - rss0
                seen["written"], seen["seconds"] = writer.count - before, time.monotonic() - start
            finally:
                broker.resume()
            writer.wait_count(total, timeout=180)
            writer.stop()
            wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=120, daemon=daemon, fail_on=None)
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc}:\n{daemon.stderr}"
            read_back_once(srv, kind, broker, writer, tmp_path, total)
            return seen, daemon.stderr
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()


# one broker in CI (the wait is bus.py's, the same for each); --runslow stalls the other two
@pytest.mark.parametrize("kind", [pytest.param("redis", marks=pytest.mark.slow), pytest.param("nats", marks=pytest.mark.slow),
                                  "postgres"])
def test_bus_sink_waits_for_a_stalled_broker(tmp_path, kind):
    seen, log = _stalled_broker(tmp_path, kind, stall=10, longest=45)  # well within the sink's 60 s wait
    assert seen["written"] >= STALL_ROWS, seen  # the load went on: ~120 MB arrived while the broker was stopped
    assert seen["growth"] < 100, seen          # at most 32 MB wait for the worker; the rest stays in the server
    assert seen["age"] >= 8, seen              # the checkpoint stood still
    assert seen["errors"] == 0, (seen, log)    # a slow broker is waited for, not failed
    assert "retrying" not in log


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_bus_sink_past_the_wait_for_a_stalled_broker(tmp_path, kind):
    seen, log = _stalled_broker(tmp_path, kind, stall=75, longest=90)
    assert seen["errors"] >= 1, seen           # the sink's 60 s wait ran out: retryable, shown
    assert 503 in seen["ready"], seen
    assert "retrying" in log
