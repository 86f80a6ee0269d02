"""Issue 26 on real servers: a planned switchover to a replica while the old primary stays up, read-only and stale.

A MINIMAL-metadata MariaDB primary (server id 1, binlog ``db1-bin``) and its GTID replica (server id 2, ``db2-bin``)
on 10.11 and 11.8; ``binlogd run`` follows both (``source.hosts``) into the JSON-lines sink. ``d.t`` is
``(id INT PK, a INT, b INT)``. Rows are written on the primary; the switchover turns it read-only and promotes the
replica, and the old primary is never re-pointed: it stays up, reachable, with the old definition. On the new
primary: ``MODIFY b INT AFTER id`` (the same types in another order: a TABLE_MAP cannot tell), rows, then
``MODIFY COLUMN IF EXISTS a INT``, a DDL the stream's parser does not read (``Unparsed``: the history marks the
table unknown, so the next TABLE_MAP is repaired from ``SHOW CREATE TABLE``), then rows. (The re-anchor at the
failover also leaves ``d.t`` unknown, its CREATE being in the new primary's binlog since the resume GTID, so the
first TABLE_MAP after the reorder seeds the history from the server: two server-side look-ups in all.)

The oracle is the new primary's own rows (SELECT) by primary key: the named changes, replayed by id, equal them,
or a row's columns are positional (``@1`` …) with ``binlogd_schema_mismatch_total`` counting them. Never a wrong
name. A seed or repair asked of the old primary (the admin connection not moved to the session's server) reads
``(id, a, b)``, which agrees with the TABLE_MAP's three INTs, and names ``b``'s values ``a``: this test fails then.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from tests.support.daemon import (
    DaemonProcess,
    following_overrides,
    master_status,
    read_changes,
    replay,
    wait_until,
)
from tests.support.faults import metrics_port, scrape_metric
from tests.support.flavour import skip_unless_flavour
from tests.support.replication import FAILOVER, MINIMAL, Pair, gtid_pos, slave_status, wait_gtids

pytestmark = pytest.mark.server

REPAIR = re.compile(r"schema history: d\.t from the server at (\S+):(\d+)$")
DB = "d"
UNREADABLE = f"ALTER TABLE {DB}.t MODIFY COLUMN IF EXISTS a INT"   # read_ddl: Unparsed naming d.t


def _columns(server) -> list[str]:
    """``d.t``'s columns in the server's own order."""
    return [r[0] for r in server.sql("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'd' "
                                     "AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION")]


def _rows(server) -> dict:
    """The server's own rows of ``d.t``: id → {column: value}, names from the server."""
    with contextlib.closing(server.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {DB}.t")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def _create(server) -> None:
    server.sql(f"CREATE DATABASE {DB}")
    server.sql(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, a INT, b INT)")


def _positional(row: dict) -> bool:
    return any(k.startswith("@") for k in row)


def _row_id(row: dict):
    return row.get("id", row.get("@1"))


def _seq(gtid: str) -> int:
    """The sequence number of a MariaDB GTID ``domain-server-seq`` (domain 0: the only one here)."""
    return int(gtid.rsplit("-", 1)[1])


@pytest.mark.parametrize("seeded_before", [False, True], ids=["seed-after-switchover", "seeded-before"])
def test_planned_switchover_old_primary_up_read_only_and_stale(server_binaries, tmp_path, seeded_before):
    """``seeded_before``: d.t exists before the daemon starts, so the history is seeded from the old primary,
    and the new primary rotates its binlog before its promotion, so the re-anchor reads d.t from the server
    (no DDL since the resume GTID's file); the repair after the unreadable DDL is then the one server-side
    look-up that differs between the two servers. Otherwise the stream's CREATE defines d.t, the re-anchor
    leaves it unknown, and the new primary seeds the history at the first TABLE_MAP after the reorder."""
    skip_unless_flavour(server_binaries, "mariadb", "MODIFY COLUMN IF EXISTS (the DDL the parser does not read)")
    with Pair(server_binaries, extra_args=(MINIMAL,)) as pair:
        old, new = pair.primary, pair.replica
        overrides = following_overrides([old.port, new.port], tmp_path, **{"filters.include_schemas": DB})
        checkpoint = tmp_path / "checkpoint.json"
        if seeded_before:
            _create(old)
        daemon = DaemonProcess(overrides)
        try:
            daemon.wait_streaming()
            if not seeded_before:
                _create(old)
            old.sql(f"INSERT INTO {DB}.t VALUES (1, 11, 12), (2, 21, 22)")
            old.sql(f"UPDATE {DB}.t SET a = 23 WHERE id = 2")
            wait_gtids(old, checkpoint, daemon=daemon)

            # planned switchover; the old primary stays up, read-only, and is never re-pointed
            old.sql("SET GLOBAL read_only = ON")
            pair.wait_replica()
            if seeded_before:
                new.sql("FLUSH BINARY LOGS")
            assert pair.promote() is new
            wait_until(lambda: daemon.count(FAILOVER.pattern) >= 1, 60, what="the failover")
            (line,) = [ln for ln in daemon.lines if FAILOVER.search(ln)]
            assert FAILOVER.search(line).groups() == (f"127.0.0.1:{old.port}", f"127.0.0.1:{new.port}"), line

            new.sql(f"ALTER TABLE {DB}.t MODIFY b INT AFTER id")            # (id, b, a): the same types
            new.sql(f"INSERT INTO {DB}.t (id, a, b) VALUES (3, 31, 32)")
            new.sql(f"UPDATE {DB}.t SET b = 13 WHERE id = 1")
            new.sql(UNREADABLE)                                              # the history: d.t unknown
            unreadable, after_ddl = _seq(gtid_pos(new)), master_status(new)
            new.sql(f"INSERT INTO {DB}.t (id, a, b) VALUES (4, 41, 42), (5, 51, 52)")
            new.sql(f"UPDATE {DB}.t SET a = 34 WHERE id = 3")
            new.sql(f"DELETE FROM {DB}.t WHERE id = 2")
            wait_gtids(new, checkpoint, daemon=daemon)
            mismatches = scrape_metric(metrics_port(daemon), "binlogd_schema_mismatch_total", schema=DB, table="t")
            assert daemon.terminate() == 0, daemon.stderr
        finally:
            if daemon.running:
                daemon.kill()

        # the trap was set: the old primary is up, read-only, no replica, and holds the old column order
        assert int(old.sql("SELECT @@global.read_only")[0][0]) == 1
        assert slave_status(old) == {} and gtid_pos(old) != gtid_pos(new)
        assert _columns(old) == ["id", "a", "b"] and _columns(new) == ["id", "b", "a"]
        rows = _rows(new)

    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == DB and c["table"] == "t"]
    positional = [c for c in changes if any(_positional(img) for img in (c["before"], c["after"]) if img)]
    # the oracle: the named changes replayed by id (each before image the row as the previous change left it)
    # equal the new primary's own rows; an id with a positional change is left out (counted below)
    left_out = {_row_id(img) for c in positional for img in (c["before"], c["after"]) if img}
    state = replay([c for c in changes if _row_id(c["after"] or c["before"]) not in left_out])
    assert state.get((DB, "t"), {}) == {k: v for k, v in rows.items() if k not in left_out}, daemon.stderr
    assert daemon.count("re-anchored on mariadb server_id 2") == 1, daemon.stderr
    assert daemon.count(r"schema history seeded from the server") == 1, daemon.stderr
    if seeded_before:
        assert daemon.count(r"re-anchored .*: 1 tables read from it, 0 positional") == 1, daemon.stderr
    # after the unreadable DDL, d.t was read from the session's server (the repair), not left positional
    repairs = [(m[1], int(m[2])) for ln in daemon.lines if (m := REPAIR.search(ln))]
    assert any(at >= after_ddl for at in repairs), (repairs, after_ddl, daemon.stderr)
    after_switch = [c for c in changes if c["source"]["server_id"] == 2]
    assert after_switch and all(c["source"]["file"].startswith("db2-bin.") for c in after_switch)
    assert len(positional) <= mismatches, (positional, mismatches)
    # the repair from the session's server named the rows after the unreadable DDL (not left positional)
    late = [c for c in changes if _seq(c["source"]["gtid"]) > unreadable]
    assert len(late) == 4 and not any(c in positional for c in late), late
    assert sorted(_row_id(c["after"]) for c in changes if c["op"] == "insert") == [1, 2, 3, 4, 5]

