"""Failover with tagged GTIDs on MySQL 9.7: a primary and its GTID replica (``SOURCE_AUTO_POSITION=1``,
tests/support/replication.py), both writing transactions with ``SET gtid_next = 'AUTOMATIC:<tag>'``.

The daemon follows both (``source.hosts``); the primary is SIGKILLed after the replica has everything, the replica
is promoted and writes more under the same tag and another: the daemon moves to it by GTID, its checkpoint's GTID
set is the new primary's ``gtid_executed`` (both servers' tagged GTIDs), and the sink replays to the new primary's
table, every change once.
"""

from __future__ import annotations

import pytest

from binlogd.protocol.gtid import MysqlGtidSet
from tests.support import servers
from tests.support.daemon import assert_sink_matches, daemon_following, read_changes, replay, wait_until
from tests.support.replication import FAILOVER, Pair, gtid_pos, wait_gtids

pytestmark = pytest.mark.server


@pytest.fixture
def pair():
    try:
        bins = servers.binaries(servers.MYSQL)
    except servers.Unavailable as exc:
        pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
    with Pair(bins) as p:
        p.primary.sql("CREATE DATABASE tg")
        p.primary.sql("CREATE TABLE tg.t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
        p.wait_replica()
        yield p


def write(server, first: int, count: int, tag: str) -> None:
    """``count`` tagged transactions: an insert, and an update of the row before it."""
    conn = server.connect(database="tg", autocommit=False)
    try:
        with conn.cursor() as cur:
            for k in range(first, first + count):
                cur.execute(f"SET gtid_next = 'AUTOMATIC:{tag}'")
                cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (k, f"{tag}{k}", k))
                cur.execute("UPDATE t SET n = n + 1000 WHERE id = %s", (k - 1,))
                conn.commit()
    finally:
        conn.close()


def test_failover_with_tagged_gtids(pair, tmp_path) -> None:
    old, new = pair.primary, pair.replica
    old_uuid, new_uuid = (s.sql("SELECT @@server_uuid")[0][0] for s in (old, new))
    with daemon_following([old.port, new.port], tmp_path, stop="none",
                          **{"filters.include_schemas": "tg", "source.failover_timeout_seconds": "30"}) as d:
        write(old, 1, 20, "orders")
        pair.wait_replica()
        wait_gtids(old, d.checkpoint, daemon=d)
        old.kill()
        pair.promote()
        write(new, 21, 10, "orders")
        write(new, 31, 5, "refunds")
        wait_until(lambda: d.count(FAILOVER.pattern), 60, what="the failover")
        cp = wait_gtids(new, d.checkpoint, timeout=90, daemon=d)
        assert d.terminate() == 0, d.stderr
    held = MysqlGtidSet.parse(gtid_pos(new))
    assert MysqlGtidSet.parse(cp["position"]["gtid_set"]) == held
    assert {f"{old_uuid}:orders", f"{new_uuid}:orders", f"{new_uuid}:refunds"} <= {
        f"{sid}:{tag}" for sid, tag, _ in held.items() if tag}
    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == "tg"]
    tagged = {c["source"]["gtid"].rsplit(":", 1)[0] for c in changes}
    assert tagged == {f"{old_uuid}:orders", f"{new_uuid}:orders", f"{new_uuid}:refunds"}, tagged
    assert_sink_matches(new, "tg", ["t"], replay(changes))
