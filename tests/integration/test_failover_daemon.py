"""Failover by GTID with real servers (issue 14, tests 1-4): a MariaDB primary and its GTID replica
(tests/support/replication.py), on 10.11 and 11.8, and ``binlogd run`` with ``source.hosts`` naming both.

1. The primary is SIGKILLed during a load of multi-statement transactions (tests/support/faults.py's
   Writer); the replica is promoted and takes more writes; binlogd follows by itself and the sink holds
   every transaction exactly once, replaying to the new primary's tables (check_exactly_once). binlogd
   reads the primary through a proxy, frozen just before the kill once the replica has everything binlogd
   was sent: binlogd is behind the replica, as a failover that loses nothing needs. (When it is not, the
   replica has diverged: test 3.)
2. Planned switchovers back and forth under load: the primary turns read-only and stops advancing,
   binlogd moves to the writable new primary; the old one becomes a replica of it.
3. A diverged replica (its IO thread stopped while binlogd received more): exit 9 naming the GTIDs it
   lacks, and nothing more in the sink or the checkpoint.
4. Every host down for longer than failover_timeout_seconds: binlogd keeps retrying with backoff (only a
   diverged server ends it), then resumes from the one that comes back, without loss.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.support.daemon import daemon_following, halting, read_changes, read_checkpoint, wait_until
from tests.support.faults import (
    SCHEMA,
    SLOW_SERVER_KILLS,
    Writer,
    check_exactly_once,
    create_tables,
    scrape_metric,
)
from tests.support.proxy import FaultProxy
from tests.support.replication import Pair, gtid_pos, wait_gtids

pytestmark = pytest.mark.server

FAILOVER = re.compile(r"failover from (\S+) to (\S+) at GTID (\S+)")
_BACKOFF = re.compile(r"reconnecting in (\d+(?:\.\d+)?)s")


@pytest.fixture
def pair(server_binaries):
    with Pair(server_binaries) as p:
        create_tables(p.primary)
        p.wait_replica()
        yield p


def writer_on(pair: Pair, **kw) -> Writer:
    """A Writer that always writes to the pair's current primary as an application (read_only stops it; it
    reconnects after a failure)."""
    return Writer(pair.primary, connect=lambda: pair.app_connect(
        database=SCHEMA, autocommit=False, connect_timeout=3, read_timeout=10, write_timeout=10), **kw)


def address(port: int) -> str:
    return f"127.0.0.1:{port}"


def sink_state(tmp_path) -> tuple:
    files = sorted((tmp_path / "sink").glob("*"))
    return tuple((f.name, f.read_bytes()) for f in files), read_checkpoint(tmp_path / "checkpoint.json")["position"]


# =========================================================================== 1. crash + promotion
def run_crash_and_promotion(pair: Pair, tmp_path, seed: int) -> dict:
    old, replica = pair.primary, pair.replica
    writer = writer_on(pair, rate=200, big_every=50, seed=seed)
    with FaultProxy("127.0.0.1", old.port) as proxy, daemon_following(
            [proxy.port, replica.port], tmp_path, stop="none",
            **{"source.heartbeat_seconds": "5", "filters.include_schemas": SCHEMA}) as daemon, halting(writer):
        port = daemon.metrics_port()
        writer.start()
        writer.wait_count(300, timeout=120)
        wait_until(lambda: len(read_changes(tmp_path / "sink", strict=False)) > 500, 60, what="changes")
        proxy.refuse = True          # binlogd gets nothing more from the old primary ...
        proxy.stall(120)
        seen = gtid_pos(old)         # ... than this, which the replica must have before the crash
        pair.wait_replica(seen)
        old.kill()                   # the writer is committing: some of its transactions die with it
        new = pair.promote()
        writer.wait_count(writer.count + 300, timeout=120)
        writer.stop()
        cp = wait_gtids(new, tmp_path / "checkpoint.json", timeout=120, daemon=daemon)
        (line,) = [ln for ln in daemon.lines if FAILOVER.search(ln)]
        source, target, at = FAILOVER.search(line).groups()
        assert (source, target) == (address(proxy.port), address(new.port))
        assert scrape_metric(port, "binlogd_failovers_total") == 1
        assert scrape_metric(port, "binlogd_source_info", host=address(new.port), server_id="2") == 1
        assert cp["source"]["host"] == address(new.port) and cp["source"]["server_id"] == 2
        assert daemon.terminate() == 0, daemon.stderr
    return check_exactly_once(new, tmp_path / "sink", writer, f"failover after a primary crash, at GTID {at}")


def test_primary_killed_during_load_replica_promoted(pair, tmp_path):
    run_crash_and_promotion(pair, tmp_path, seed=141)


@pytest.mark.slow
def test_primary_killed_during_load_replica_promoted_repeated(server_binaries, tmp_path):
    for i in range(SLOW_SERVER_KILLS):
        with Pair(server_binaries) as p:
            create_tables(p.primary)
            p.wait_replica()
            run_crash_and_promotion(p, tmp_path / f"round{i}", seed=1410 + i)


# =========================================================================== 2. planned switchover
def run_switchovers(pair: Pair, tmp_path, rounds: int) -> dict:
    writer = writer_on(pair, rate=150, seed=142)
    with daemon_following([pair.primary.port, pair.replica.port], tmp_path, stop="none",
                          **{"filters.include_schemas": SCHEMA}) as daemon, halting(writer):
        port = daemon.metrics_port()
        writer.start()
        for i in range(rounds):
            writer.wait_count(writer.count + 200, timeout=120)
            old = pair.primary

            def moved(n=i + 1):
                try:
                    wait_until(lambda: sum(1 for ln in daemon.lines if FAILOVER.search(ln)) >= n, 60)
                except AssertionError:
                    raise AssertionError(f"no failover #{n} within 60s; stderr:\n{daemon.stderr}") from None

            new = pair.switchover(between=moved)
            line = [ln for ln in daemon.lines if FAILOVER.search(ln)][i]
            assert FAILOVER.search(line).groups()[:2] == (address(old.port), address(new.port))
        writer.wait_count(writer.count + 200, timeout=120)
        writer.stop()
        wait_gtids(pair.primary, tmp_path / "checkpoint.json", timeout=120, daemon=daemon)
        assert scrape_metric(port, "binlogd_failovers_total") == rounds
        assert daemon.terminate() == 0, daemon.stderr
    stats = check_exactly_once(pair.primary, tmp_path / "sink", writer, f"{rounds} switchovers")
    assert not stats["acked_lost_by_server"]
    return stats


def test_planned_switchover_back_and_forth(pair, tmp_path):
    run_switchovers(pair, tmp_path, rounds=2)


@pytest.mark.slow
def test_planned_switchover_many(pair, tmp_path):
    run_switchovers(pair, tmp_path, rounds=10)


# =========================================================================== 3. diverged replica
def test_diverged_replica_exits_9_naming_the_missing_gtids(pair, tmp_path):
    old, replica = pair.primary, pair.replica
    with daemon_following([old.port, replica.port], tmp_path, stop="none",
                          **{"source.failover_timeout_seconds": "4"}) as daemon:
        old.sql(f"INSERT INTO {SCHEMA}.b VALUES (1, 1, 'both have it')")
        pair.wait_replica()
        replica_has = gtid_pos(replica)
        pair.diverge()
        for mk in range(2, 5):
            old.sql(f"INSERT INTO {SCHEMA}.b VALUES ({mk}, {mk}, 'only the old primary')")
        key = "gtid_set" if old.flavor == "mysql" else "gtid_list"  # MySQL's GTID set, MariaDB's GTID list
        delivered = wait_gtids(old, tmp_path / "checkpoint.json", daemon=daemon)["position"][key]
        assert delivered == gtid_pos(old) != replica_has
        before = sink_state(tmp_path)
        old.kill()
        pair.promote()
        replica.sql(f"INSERT INTO {SCHEMA}.b VALUES (100, 100, 'written after the promotion')")
        rc = daemon.wait(timeout=90)
    assert rc == 9, daemon.stderr
    last = daemon.lines[-1]
    assert "no usable source after" in last
    assert f"{address(old.port)} cannot connect" in last
    if replica.flavor == "mysql":  # the GTIDs it lacks, as the server subtracts them
        missing = replica.sql(f"SELECT GTID_SUBTRACT('{delivered}', '{replica_has}')")[0][0]
        assert f"{address(replica.port)} diverged: lacks {missing} (GTID_SUBSET of the checkpoint's set and " \
               "@@gtid_executed is false)" in last, last
    else:
        assert f"{address(replica.port)} diverged: lacks {delivered} (has {replica_has})" in last
        assert "not in the master's binlog" in last
    assert sink_state(tmp_path) == before, "something reached the sink or the checkpoint after the crash"
    assert not [c for c in read_changes(tmp_path / "sink") if c["after"] and c["after"].get("id") == 100]
    assert daemon.count(r"failover from") == 0


# =========================================================================== 4. every host down
def test_all_hosts_down_then_one_back(pair, tmp_path):
    old, replica = pair.primary, pair.replica
    writer = writer_on(pair, total=150, seed=144)
    second = writer
    with daemon_following([old.port, replica.port], tmp_path, stop="none", **{
            "source.failover_timeout_seconds": "2", "reconnect.initial_seconds": "0.1", "reconnect.max_seconds": "0.8",
            "reconnect.jitter": "0", "filters.include_schemas": SCHEMA}) as daemon, halting(writer):
        writer.start()
        writer.wait_count(150, timeout=120)
        writer.stop()
        pair.wait_replica()
        wait_gtids(old, tmp_path / "checkpoint.json", daemon=daemon)
        mark = len(daemon.lines)
        replica.kill()
        old.kill()
        time.sleep(6)   # three times failover_timeout_seconds: all down is not divergence
        assert daemon.running, daemon.stderr
        delays = [float(m.group(1)) for ln in daemon.lines[mark:] if (m := _BACKOFF.search(ln))]
        assert len(delays) >= 4 and delays == sorted(delays) and max(delays) == 0.8, delays
        assert daemon.count("no usable source") >= 2
        replica.restart()
        new = pair.promote()
        second = writer_on(pair, total=100, seed=145)
        second.next_mk = 10_000
        second.start()
        second.wait_count(100, timeout=120)
        second.stop()
        wait_gtids(new, tmp_path / "checkpoint.json", timeout=120, daemon=daemon)
        assert daemon.count(rf"failover from {address(old.port)} to {address(new.port)} at GTID") == 1
        assert daemon.terminate() == 0, daemon.stderr
    second.committed.update(writer.committed)
    stats = check_exactly_once(new, tmp_path / "sink", second, "every host down, then one back")
    assert stats["in_sink"] == 250
