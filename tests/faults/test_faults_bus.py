"""The bus sinks under faults: a write load on a real MariaDB, ``binlogd run`` SIGKILLed twice, the broker
SIGKILLed and restarted once; the broker's contents, read back independently, replay to the tables' final
contents, with no transaction and no (file, pos, row) delivered twice.
"""

from __future__ import annotations

import time
from collections import Counter

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


def bus_overrides(kind: str, broker) -> dict:
    return {"sink.kind": kind, f"sink.{kind}.url": broker.url}


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_bus_sink_sigkill_and_broker_restart(tmp_path, kind):
    require(kind)
    total = 900
    with KINDS[kind]() as broker, local_server() as srv:
        create_tables(srv)
        o = base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": SCHEMA},
                           **bus_overrides(kind, broker))
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
            changes = read_bus(kind, broker.url)
            ids = Counter(c["_id"] for c in changes)
            assert max(ids.values()) == 1
            if kind == "nats":  # every message id once
                msg_ids = Counter(c["_id"][1] for c in changes)
                assert max(msg_ids.values()) == 1, [m for m, n in msg_ids.items() if n > 1][:5]
            stats = check_exactly_once(srv, write_jsonl(changes, tmp_path / "readback"), writer, f"bus {kind}")
            assert stats["in_sink"] >= total - 5
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()
