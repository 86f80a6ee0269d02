"""Fault suite 3: connections cut mid-event, stalls, one byte at a time and slow links (tests/support/proxy.py).

The load and the exactly-once check are in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    wait_caught_up,
)
from tests.support.faults import (
    SCHEMA,
    SLOW_DROPS,
    SLOW_STALLS,
    Writer,
    check_exactly_once,
    create_tables,
    local_server,
    metrics_port,
    scrape_metric,
)
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.server


# =========================================================================== 3. network faults


@contextlib.contextmanager
def proxied(server, tmp_path: Path, **extra):
    """A FaultProxy in front of ``server`` and a ``binlogd run`` connected through it (TLS off)."""
    with FaultProxy(server.host, server.port) as proxy:
        o = base_overrides(server, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                "filters.include_schemas": SCHEMA, **extra})
        daemon = DaemonProcess(o)
        try:
            daemon.wait_streaming()
            yield proxy, daemon
        finally:
            if daemon.running:
                daemon.kill()


def run_drops(tmp_path: Path, drops: int, seed: int, binaries=None) -> dict:
    rng = random.Random(seed)
    with local_server(binaries=binaries) as srv:
        create_tables(srv)
        writer = Writer(srv, rate=250, big_every=6, seed=seed)
        with proxied(srv, tmp_path) as (proxy, daemon):
            try:
                writer.start()
                kinds = Counter()
                for i in range(drops):
                    conn = proxy.wait_dump(count=i + 1, timeout=60)
                    r = rng.random()
                    n = rng.randint(1, 300) if r < 0.3 else rng.randint(300, 20_000) if r < 0.8 \
                        else rng.randint(20_000, 400_000)
                    align = "packet" if rng.random() < 0.25 else "byte"
                    proxy.drop_after(n, align=align, reset=rng.random() < 0.3)
                    proxy.wait_for(lambda p, c=conn: not c.open, 60, f"drop #{i + 1} after {n} bytes")
                    kinds[conn.cut or conn.closed_by] += 1
                    assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                proxy.wait_dump(count=drops + 1, timeout=60)
                time.sleep(0.5)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon, fail_on=None)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
            c = proxy.counters
            print(f"\n[network drops] {c.drops} cuts: {c.drops_mid_event} inside an event, "
                  f"{c.drops_mid_packet - c.drops_mid_event} inside another packet, {c.drops_at_boundary} between "
                  f"packets; {c.resets} by RST; {c.dumps} dumps over {c.accepted} connections; by cut {dict(kinds)}")
            assert c.drops == drops, c
            assert c.drops_mid_event >= drops // 3, f"too few cuts inside events: {c}"
            assert c.dumps >= drops + 1, c
        stats = check_exactly_once(srv, tmp_path / "sink", writer, "network drops")
        stats.update(drops=c.drops, mid_event=c.drops_mid_event, at_boundary=c.drops_at_boundary, resets=c.resets)
        return stats


def test_proxy_drops_mid_event(tmp_path, server_binaries):
    run_drops(tmp_path, drops=10, seed=81, binaries=server_binaries)


@pytest.mark.slow
def test_proxy_drops_mid_event_slow(tmp_path):
    run_drops(tmp_path, drops=SLOW_DROPS, seed=82)


def run_stalls(tmp_path: Path, stalls: int, heartbeat: float, binaries=None) -> list[float]:
    with local_server(binaries=binaries) as srv:
        create_tables(srv)
        writer = Writer(srv, rate=30, seed=9)
        with proxied(srv, tmp_path, **{"source.heartbeat_seconds": str(heartbeat)}) as (proxy, daemon):
            port = metrics_port(daemon)
            detections, reconnects = [], []
            try:
                for i in range(stalls):
                    if i % 2 == 1 and not writer.is_alive():
                        writer.start()  # odd stalls under load, even ones while idle (heartbeats only)
                    conn = proxy.wait_dump(count=i + 1, timeout=60)
                    time.sleep(0.6 * heartbeat)
                    t_stall = time.monotonic()
                    proxy.stall(3 * heartbeat + 2)
                    proxy.wait_for(lambda p, c=conn: not c.open, 3 * heartbeat + 5, f"stall #{i + 1}: no reconnect")
                    assert conn.closed_by == "client", f"stalled connection closed by {conn.closed_by}"
                    detected = conn.closed_at - max(conn.last_s2c_at or t_stall, conn.dump_at)
                    new = proxy.wait_dump(count=i + 2, timeout=30)
                    detections.append(detected)
                    reconnects.append(new.dump_at - t_stall)
                    assert detected <= 2 * heartbeat + 0.35, \
                        f"stall #{i + 1} detected {detected:.2f}s after the last byte (heartbeat {heartbeat}s)"
                    assert detected >= heartbeat, f"closed after {detected:.2f}s: not the heartbeat timeout?"
                if not writer.is_alive():
                    writer.start()
                time.sleep(0.5)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon, fail_on=None)
                timeouts = scrape_metric(port, "binlogd_errors_total", kind="timeout")
                assert timeouts >= stalls, f"binlogd_errors_total{{kind=timeout}} = {timeouts}"
                assert daemon.count(rf"no packet from the primary for {2 * heartbeat:g}s") >= stalls, daemon.stderr
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
        print(f"\n[stalls] heartbeat {heartbeat}s: silence detected after "
              f"{', '.join(f'{d:.2f}s' for d in detections)} (limit {2 * heartbeat:g}s); streaming again "
              f"{', '.join(f'{r:.2f}s' for r in reconnects)} after the stall began")
        check_exactly_once(srv, tmp_path / "sink", writer, "stalls")
        return detections


def test_proxy_stall_detected_within_two_heartbeats(tmp_path, server_binaries):
    run_stalls(tmp_path, stalls=2, heartbeat=1.0, binaries=server_binaries)


@pytest.mark.slow
def test_proxy_stall_detected_within_two_heartbeats_slow(tmp_path):
    run_stalls(tmp_path, stalls=SLOW_STALLS, heartbeat=1.0)


def test_proxy_bytes_one_at_a_time(tmp_path, server_binaries):
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        with FaultProxy(srv.host, srv.port) as proxy:
            proxy.one_byte = True  # from the handshake on
            o = base_overrides(srv, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                 "filters.include_schemas": SCHEMA})
            writer = Writer(srv, total=60, rate=40, seed=5)
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming(timeout=60)
                writer.start()
                writer.wait_count(30, timeout=60)
                rc = daemon.terminate()  # and resume, still one byte at a time
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
                daemon = DaemonProcess(o)
                daemon.wait_streaming(timeout=60)
                writer.wait_count(60, timeout=60)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
                if daemon.running:
                    daemon.kill()
            c = proxy.counters
            print(f"\n[one byte at a time] {c.bytes_s2c} server bytes in {c.s2c_sends} sends, "
                  f"{c.s2c_packets} packets, {c.dumps} dumps")
            assert c.s2c_sends == c.bytes_s2c and c.bytes_s2c > 10_000, c
            assert daemon.count(r"reconnect") == 0, f"one-byte delivery caused reconnects:\n{daemon.stderr}"
        check_exactly_once(srv, tmp_path / "sink", writer, "one byte at a time")


def test_proxy_slow_link_large_event(tmp_path, server_binaries):
    """Bytes keep coming, but one event takes longer than 2 × heartbeat to arrive.

    The connection is alive (MySQL's own replica applies slave_net_timeout to each socket read, not to a
    whole packet), so the daemon must not give up on it and start over, which would repeat forever.
    """
    heartbeat = 0.5
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        with FaultProxy(srv.host, srv.port) as proxy:
            o = base_overrides(srv, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                 "filters.include_schemas": SCHEMA,
                                                 "source.heartbeat_seconds": str(heartbeat)})
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming()
                proxy.s2c_rate = 50_000  # bytes/s: each ~120 KB row event below takes ~2.4 s > 2 × 0.5 s
                conn = srv.connect(database=SCHEMA)
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO b (id, mk, note) VALUES (1, 1, 'big')")
                    cur.execute("INSERT INTO a (id, mk, v, big) VALUES (4, 1, 'x', %s), (5, 1, 'y', %s)",
                                ("p" * 120_000, "q" * 120_000))
                conn.close()
                caught_up = None
                try:
                    wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=15, daemon=daemon, fail_on=None)
                except AssertionError as exc:
                    caught_up = exc
                timeouts = daemon.count("no packet from the primary")
                print(f"\n[slow link] {proxy.counters.dumps} dumps, {timeouts} heartbeat timeouts, "
                      f"{proxy.counters.bytes_s2c} bytes delivered, caught up: {caught_up is None}")
                assert timeouts == 0 and caught_up is None, (
                    f"a live but slow connection was declared dead {timeouts} times over {proxy.counters.dumps} "
                    f"dumps ({proxy.counters.bytes_s2c} bytes delivered); caught up: {caught_up or 'yes'}\n"
                    + "\n".join(daemon.lines[-6:]))
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                if daemon.running:
                    daemon.kill()


