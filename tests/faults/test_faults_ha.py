"""``[ha] mode = "lease"`` under a write load on a real MariaDB, for each bus sink (Redis, NATS, PostgreSQL, each a
real broker): two ``binlogd run`` processes share one broker, one active, one standing by.

- SIGKILL of the active: the standby takes over within ``lease_seconds`` + a little, and the broker's contents,
  read back independently, replay to the tables' final contents with no transaction twice or missing; the same
  for the PostgreSQL mirror, whose tables then equal the source's value by value.
- SIGSTOP of the active past its lease: the standby takes over; after SIGCONT the old active is fenced (its
  commits fail in the broker's own atomic step), steps down to standby and delivers nothing; exactly once again
  (the mirror too).
- three instances, the active killed twice: each time one standby takes over, exactly once at the end;
- the broker SIGKILLed and restarted while the lease is held: one active at the end, exactly once;
- the active cut off from the broker (a TCP proxy stalls its connections both ways and refuses new ones) past its
  lease, then healed: the standby took over, the old active's held-back commit is refused, it steps down.

Redis runs the last two by default; NATS and PostgreSQL with ``--runslow``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from tests.integration.test_mirror import assert_equal
from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus, write_jsonl
from tests.support.daemon import DaemonProcess, base_overrides, scrape, wait_caught_up
from tests.support.faults import (
    SCHEMA,
    TABLES,
    Writer,
    check_exactly_once,
    create_tables,
    local_server,
    metrics_port,
    scrape_metric,
)

pytestmark = pytest.mark.server

LEASE = 2.0
ACTIVE = r"ha: \S+ is the active instance now \(epoch (\d+)"
STANDS_BY = r"ha: \S+ stands by: .* is held by "


def ha_daemon(srv, workdir, kind: str, broker, name: str, extra: dict | None = None) -> DaemonProcess:
    """``binlogd run`` with its own checkpoint file in ``workdir``, the lease in ``broker`` as ``name``; ``extra``:
    more ``--set`` values."""
    workdir.mkdir(parents=True, exist_ok=True)
    return DaemonProcess(base_overrides(srv, workdir, **{
        "source.start": "current", "filters.include_schemas": SCHEMA, "sink.kind": kind, f"sink.{kind}.url": broker.url,
        "ha.mode": "lease", "ha.lease_seconds": str(LEASE), "ha.name": name, **(extra or {})}))


def broker_of(kind: str):
    """A broker for ``kind``, not started (the mirror's is PostgreSQL)."""
    kind = "postgres" if kind == "mirror" else kind
    require(kind)
    return KINDS[kind]()


def read_back_once(srv, kind: str, broker, writer, tmp_path, total: int) -> None:
    """The broker's contents, read back: no change twice, and their replay equal to the tables (the mirror's
    tables: equal to the source's, value by value)."""
    if kind == "mirror":
        for table in TABLES:
            assert_equal(srv, broker, SCHEMA, table)
        return
    changes = read_bus(kind, broker.url)
    changes = [c for c in changes if c.get("schema") == SCHEMA]
    assert max(Counter(c["source"]["id"] for c in changes).values()) == 1
    stats = check_exactly_once(srv, write_jsonl(changes, tmp_path / "readback"), writer, f"ha {kind}")
    assert stats["in_sink"] >= total - 5


def start_pair(srv, tmp_path, kind, broker, extra: dict | None = None) -> tuple[DaemonProcess, DaemonProcess]:
    """The active "a" (streaming) and the standby "b" (standing by, ready, binlogd_ha_active 0); ``extra``: more
    ``--set`` values for both."""
    a = ha_daemon(srv, tmp_path / "a", kind, broker, "a", extra)
    a.wait_for_line(ACTIVE, timeout=60)
    a.wait_streaming(timeout=60)
    b = ha_daemon(srv, tmp_path / "b", kind, broker, "b", extra)
    b.wait_for_line(STANDS_BY, timeout=60)
    port = metrics_port(b)
    assert scrape_metric(port, "binlogd_ha_active") == 0
    status, body = scrape(port, "/readyz")
    assert status == 200 and "standby" in body, (status, body)
    assert scrape_metric(metrics_port(a), "binlogd_ha_active") == 1
    return a, b


def finish(srv, kind, broker, writer, tmp_path, active: DaemonProcess, total: int, name: str = "b") -> None:
    """The load written, the active ``name`` caught up and stopped (exit 0), the broker read back: exactly once."""
    writer.wait_count(total, timeout=120)
    writer.stop()
    wait_caught_up(srv, tmp_path / name / "checkpoint.json", timeout=60, daemon=active, fail_on=None)
    rc = active.terminate()
    assert rc == 0, f"exit {rc}:\n{active.stderr}"
    read_back_once(srv, kind, broker, writer, tmp_path, total)


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres", "mirror"])
def test_ha_sigkill_active_standby_takes_over(tmp_path, kind):
    total = 600
    with broker_of(kind) as broker, local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=3)
        a, b = start_pair(srv, tmp_path, kind, broker)
        try:
            writer.start()
            writer.wait_count(total // 3, timeout=120)
            a.kill()
            killed = time.monotonic()
            epoch_b = int(b.wait_for_line(ACTIVE, timeout=30).split("epoch ")[1].split(" ")[0].rstrip(")"))
            took = time.monotonic() - killed
            b.wait_streaming(timeout=30)
            print(f"\n[ha {kind}] takeover after SIGKILL: {took:.2f}s (lease {LEASE:g}s), epoch {epoch_b}")
            assert took <= LEASE + 1.5, f"the standby took {took:.1f}s to take over:\n{b.stderr}"
            port = metrics_port(b)
            assert scrape_metric(port, "binlogd_ha_active") == 1
            assert scrape_metric(port, "binlogd_ha_epoch") == epoch_b
            assert scrape_metric(port, "binlogd_ha_takeovers_total") == 1
            finish(srv, kind, broker, writer, tmp_path, b, total)
        finally:
            writer.halt()
            for d in (a, b):
                if d.running:
                    d.kill()


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres", "mirror"])
def test_ha_sigstop_active_is_fenced(tmp_path, kind):
    total = 600
    with broker_of(kind) as broker, local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=5)
        a, b = start_pair(srv, tmp_path, kind, broker)
        try:
            writer.start()
            writer.wait_count(total // 4, timeout=120)
            os.kill(a.pid, signal.SIGSTOP)
            try:
                b.wait_for_line(ACTIVE, timeout=30)
                b.wait_streaming(timeout=30)
                writer.wait_count(total // 2, timeout=120)  # the new active commits while the old one sleeps
            finally:
                os.kill(a.pid, signal.SIGCONT)
            a.wait_for_line(r"ha: a lost the lease \(epoch \d+\) to another instance: stepping down", timeout=30)
            a.wait_for_line(STANDS_BY, timeout=30)
            assert a.running, a.stderr
            assert a.count("streaming from ") == 1, a.stderr
            assert scrape_metric(metrics_port(a), "binlogd_ha_active") == 0
            finish(srv, kind, broker, writer, tmp_path, b, total)
            assert a.terminate() == 0, a.stderr
        finally:
            writer.halt()
            for d in (a, b):
                if d.running:
                    d.kill()


REDIS_FIRST = ["redis", pytest.param("nats", marks=pytest.mark.slow), pytest.param("postgres", marks=pytest.mark.slow)]


def _active(daemons: dict) -> list[str]:
    """The names of the running instances whose binlogd_ha_active is 1."""
    return [name for name, d in daemons.items() if d.running and scrape_metric(metrics_port(d), "binlogd_ha_active")]


@pytest.mark.parametrize("kind", REDIS_FIRST)
def test_ha_three_instances_killed_one_after_another(tmp_path, kind):
    require(kind)
    total = 600
    with KINDS[kind]() as broker, local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=9)
        daemons = {"a": ha_daemon(srv, tmp_path / "a", kind, broker, "a")}
        try:
            daemons["a"].wait_streaming(timeout=60)
            for name in "bc":
                daemons[name] = ha_daemon(srv, tmp_path / name, kind, broker, name)
                daemons[name].wait_for_line(STANDS_BY, timeout=60)
            writer.start()
            for mark in (total // 3, 2 * total // 3):
                writer.wait_count(mark, timeout=120)
                (gone,) = _active(daemons)
                daemons[gone].kill()
                deadline = time.monotonic() + LEASE + 10
                while not (now := _active(daemons)) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert len(now) == 1 and now[0] != gone, (gone, now)
                daemons[now[0]].wait_streaming(timeout=30)
            (last,) = _active(daemons)
            finish(srv, kind, broker, writer, tmp_path, daemons[last], total, name=last)
        finally:
            writer.halt()
            for d in daemons.values():
                if d.running:
                    d.kill()


@pytest.mark.parametrize("kind", REDIS_FIRST)
def test_ha_broker_restart_while_the_lease_is_held(tmp_path, kind):
    require(kind)
    total = 600
    with KINDS[kind]() as broker, local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=13)
        a, b = start_pair(srv, tmp_path, kind, broker)
        daemons = {"a": a, "b": b}
        try:
            writer.start()
            writer.wait_count(total // 3, timeout=120)
            broker.kill()
            time.sleep(1.0)
            broker.start()
            writer.wait_count(2 * total // 3, timeout=120)
            deadline = time.monotonic() + 30
            while len(now := _active(daemons)) != 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(now) == 1, now
            assert a.running and b.running, a.stderr + b.stderr  # the other one stands by
            finish(srv, kind, broker, writer, tmp_path, daemons[now[0]], total, name=now[0])
        finally:
            writer.halt()
            for d in daemons.values():
                if d.running:
                    d.kill()


@pytest.mark.parametrize("kind", REDIS_FIRST)
def test_ha_active_cut_off_from_the_broker_then_healed(tmp_path, kind):
    from tests.support.proxy import FaultProxy

    require(kind)
    total = 600
    with KINDS[kind]() as broker, local_server() as srv, FaultProxy("127.0.0.1", broker.port) as proxy:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=17)
        url = broker.url.replace(f":{broker.port}", f":{proxy.port}")
        a = DaemonProcess({**base_overrides(srv, tmp_path / "a", **{
            "source.start": "current", "filters.include_schemas": SCHEMA, "sink.kind": kind, f"sink.{kind}.url": url,
            "ha.mode": "lease", "ha.lease_seconds": str(LEASE), "ha.name": "a"})})
        b = None
        try:
            a.wait_for_line(ACTIVE, timeout=60)
            a.wait_streaming(timeout=60)
            b = ha_daemon(srv, tmp_path / "b", kind, broker, "b")
            b.wait_for_line(STANDS_BY, timeout=60)
            writer.start()
            writer.wait_count(total // 4, timeout=120)
            proxy.refuse = True
            proxy.stall(LEASE + 4)  # both directions, past the lease
            b.wait_for_line(ACTIVE, timeout=30)
            b.wait_streaming(timeout=30)
            writer.wait_count(total // 2, timeout=120)
            proxy.refuse = False
            a.wait_for_line(r"ha: a lost the lease \(epoch \d+\) to another instance: stepping down", timeout=60)
            a.wait_for_line(STANDS_BY, timeout=30)
            assert a.count("streaming from ") == 1, a.stderr
            finish(srv, kind, broker, writer, tmp_path, b, total)
        finally:
            writer.halt()
            for d in (a, b):
                if d is not None and d.running:
                    d.kill()

