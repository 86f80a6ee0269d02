"""The replication pair of tests/support/replication.py does what the failover tests rely on.

Each check reads both servers: table contents and ``@@gtid_binlog_pos`` (the replica logs what it applies,
under the primary's server id, because of ``log_slave_updates``); on MySQL ``@@gtid_executed``, whose GTIDs
name the server UUID that first committed them.
"""

from __future__ import annotations

import pytest

from tests.support.flavour import is_mysql
from tests.support.replication import Pair, gtid_pos, slave_status

pytestmark = pytest.mark.server


@pytest.fixture
def pair(server_binaries):
    with Pair(server_binaries) as p:
        p.primary.sql("CREATE DATABASE r")
        p.primary.sql("CREATE TABLE r.t (id INT PRIMARY KEY, v INT)")
        yield p


def rows(server) -> list[tuple]:
    return [tuple(r) for r in server.sql("SELECT id, v FROM r.t ORDER BY id")]


def test_replica_follows_by_gtid_and_logs_what_it_applies(pair):
    pair.primary.sql("INSERT INTO r.t VALUES (1, 1), (2, 2)")
    pair.wait_replica()
    assert rows(pair.replica) == rows(pair.primary) == [(1, 1), (2, 2)]
    assert gtid_pos(pair.replica) == gtid_pos(pair.primary)
    status = slave_status(pair.replica)
    assert int(pair.replica.sql("SELECT @@global.read_only")[0][0]) == 1
    if is_mysql(pair.primary):
        uuid = pair.primary.sql("SELECT @@server_uuid")[0][0]
        assert gtid_pos(pair.primary).startswith(f"{uuid}:1-")
        assert status["Auto_Position"] == 1
    else:
        assert gtid_pos(pair.primary).startswith("0-1-")
        assert status["Using_Gtid"] == "Slave_Pos"
        assert int(pair.replica.sql("SELECT @@global.gtid_strict_mode")[0][0]) == 1


def test_diverged_replica_lacks_what_the_primary_commits_after(pair):
    pair.primary.sql("INSERT INTO r.t VALUES (1, 1)")
    pair.wait_replica()
    before = gtid_pos(pair.replica)
    pair.diverge()
    pair.primary.sql("INSERT INTO r.t VALUES (2, 2)")
    ahead = gtid_pos(pair.primary)
    with pytest.raises(AssertionError, match="not"):
        pair.wait_replica(timeout=1)
    assert gtid_pos(pair.replica) == before != ahead
    assert rows(pair.replica) == [(1, 1)]


def test_promotion_after_a_crash_makes_the_replica_a_writable_primary(pair):
    pair.primary.sql("INSERT INTO r.t VALUES (1, 1)")
    pair.wait_replica()
    old = pair.primary
    old.kill()
    new = pair.promote()
    assert pair.primary is new and pair.replica is old
    assert slave_status(new) == {}
    new.sql("INSERT INTO r.t VALUES (2, 2)")
    assert rows(new) == [(1, 1), (2, 2)]
    if is_mysql(new):  # the new primary's own GTIDs name its UUID, next to the old primary's
        uuid = new.sql("SELECT @@server_uuid")[0][0]
        assert f"{uuid}:1" in gtid_pos(new).split(",")
    else:
        domain, server_id, seq = gtid_pos(new).split("-")
        assert (domain, server_id) == ("0", "2") and int(seq) > 1


def test_switchover_makes_the_old_primary_a_replica_of_the_new(pair):
    pair.primary.sql("INSERT INTO r.t VALUES (1, 1)")
    old = pair.primary
    new = pair.switchover()
    assert int(old.sql("SELECT @@global.read_only")[0][0]) == 1
    assert int(new.sql("SELECT @@global.read_only")[0][0]) == 0
    new.sql("INSERT INTO r.t VALUES (2, 2)")
    pair.wait_replica()
    assert rows(old) == rows(new) == [(1, 1), (2, 2)]
    assert gtid_pos(old) == gtid_pos(new)
    assert slave_status(old)["Master_Port"] == new.port
