"""Fault suite 2: SIGKILL the primary and start it again during the load; backoff, resume, exactly once.

The load and the exactly-once check are in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from tests.support.daemon import daemon_following, halting, wait_caught_up
from tests.support.faults import (
    SCHEMA,
    SLOW_SERVER_KILLS,
    SLOW_SERVER_TX,
    Writer,
    _file_index,
    check_exactly_once,
    create_tables,
    local_server,
    scrape_metric,
)
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.server


# =========================================================================== 2. primary crashes

_BACKOFF = re.compile(r"reconnecting in (\d+(?:\.\d+)?)s")


def run_primary_crashes(tmp_path: Path, total: int | None, kills: int, mode: str, seed: int,
                        binaries=None) -> dict:
    rng = random.Random(seed)
    with local_server(binaries=binaries) as srv:
        create_tables(srv)
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        writer = Writer(srv, total=total, rate=None if total else 300, big_every=40, seed=seed)
        backoffs: list[list[float]] = []
        with daemon_following(srv, tmp_path, stop="none", **{
                "source.start": start, "filters.include_schemas": SCHEMA, "reconnect.initial_seconds": "0.1",
                "reconnect.max_seconds": "0.8"}) as daemon, halting(writer):
            cp_path = daemon.checkpoint
            port = daemon.metrics_port()
            writer.start()
            per_kill = (total or 0) // (kills + 1)
            for i in range(kills):
                if total:
                    writer.wait_count(per_kill * (i + 1), timeout=900)
                else:
                    time.sleep(rng.uniform(0.8, 1.5))
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                before = srv.binlog_files()[-1].name
                mark = len(daemon.lines)
                srv.kill()  # a crash: the daemon's socket closes mid-stream
                time.sleep(rng.uniform(1.0, 1.6))  # down: the daemon retries with a growing delay
                srv.restart()  # same port, same data: crash recovery
                after = srv.binlog_files()[-1].name
                assert _file_index(after) > _file_index(before), f"no new binlog after the restart: {after}"
                daemon.wait_streaming(timeout=60, nth=i + 2)
                delays = [float(m.group(1)) for ln in daemon.lines[mark:] if (m := _BACKOFF.search(ln))]
                backoffs.append(delays)
                # A daemon that lags notices the crash only when it has consumed what it had received,
                # maybe after the server is back: then it reconnects at once, with no retries to check.
                # (The first logged delay of an outage is checked by test_backoff_delays_as_logged.)
                assert all(b >= a for a, b in zip(delays[1:], delays[2:])), f"backoff not growing: {delays}"
                assert max(delays, default=0) <= 0.8, f"backoff over reconnect.max_seconds: {delays}"
            assert any(len(d) >= 3 for d in backoffs), f"no outage saw several retries: {backoffs}\n{daemon.stderr}"
            if total:
                writer.wait_count(total, timeout=900)
            else:
                time.sleep(1.0)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=120, daemon=daemon)
            reconnects = scrape_metric(port, "binlogd_reconnects_total")
            assert reconnects >= kills, f"binlogd_reconnects_total = {reconnects}"
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            stats = check_exactly_once(srv, tmp_path / "sink", writer, f"primary crashes, {mode}")
            assert stats["binlog_files"] >= kills + 1, f"the sink's changes come from {stats['binlog_files']} files"
            stats.update(server_kills=kills, reconnects=reconnects, backoffs=backoffs)
            print(f"[primary crashes, {mode}] {kills} server SIGKILLs, reconnects_total={reconnects:g}, "
                  f"backoff delays per outage {backoffs}")
            return stats


def test_primary_sigkill_restart_new_binlog(tmp_path, server_binaries):
    run_primary_crashes(tmp_path, total=None, kills=2, mode="file", seed=71, binaries=server_binaries)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_primary_sigkill_restart_new_binlog_slow(tmp_path, mode):
    run_primary_crashes(tmp_path, total=SLOW_SERVER_TX, kills=SLOW_SERVER_KILLS, mode=mode,
                        seed=720 + (mode == "file"))


def test_backoff_delays_as_logged(mariadb, tmp_path):
    """Reconnect delays double up to the cap, start over after a session that streamed, and the
    "reconnecting in Xs" line states the delay really waited (jitter 0; attempts timed at the proxy)."""
    with FaultProxy(mariadb.host, mariadb.port) as proxy, daemon_following(mariadb, tmp_path, stop="none", **{
            "source.port": str(proxy.port), "source.tls.mode": "disabled", "reconnect.initial_seconds": "0.1",
            "reconnect.max_seconds": "0.8", "reconnect.jitter": "0",
            # the replication connection only: no schema lookups through the proxy
            "schema.source": "none"}) as daemon:
        report = []
        for outage in range(2):
            mark, first = len(daemon.lines), len(proxy.conns)
            streaming = proxy.wait_dump(count=outage + 1)
            refused0 = proxy.counters.refused
            proxy.refuse = True
            proxy.close_all()
            proxy.wait_for(lambda p, r=refused0: p.counters.refused >= r + 5, 30, "five refused attempts")
            proxy.refuse = False
            daemon.wait_streaming(nth=outage + 2)
            logged = [float(m.group(1)) for ln in daemon.lines[mark:] if (m := _BACKOFF.search(ln))]
            attempts = proxy.conns[first:]
            failed_at = [streaming.closed_at] + [c.closed_at for c in attempts[:-1]]
            actual = [round(c.opened_at - f, 2) for c, f in zip(attempts, failed_at)]
            report.append((logged, actual))
        print(f"\n[backoff] (logged, waited) per outage: {report}")
        for _logged, actual in report:  # the backoff itself
            for want, got in zip([0.1, 0.2, 0.4, 0.8, 0.8], actual):
                assert want - 0.05 <= got <= want + 0.25, \
                    f"the delays waited do not double from 0.1 s to the 0.8 s cap: (logged, waited) {report}"
        for logged, actual in report:  # what the log says about it
            for i, (want, got) in enumerate(zip(logged, actual)):
                assert want - 0.05 <= got <= want + 0.25, (
                    f"retry #{i + 1}: logged 'reconnecting in {want}s' but waited {got}s; "
                    f"(logged, waited) per outage: {report}")


