"""Failover's MySQL flavour (issue 14, test 5): GTID_SUBSET, purged sets and tagged GTIDs.

No MySQL server runs here, so the servers are the protocol-level fake primary (tests/support/fakeprimary.py),
which evaluates ``GTID_SUBSET``/``GTID_SUBTRACT`` on its own GTID-set code, serving a real MySQL 9.6 binlog
with tagged GTIDs (``mytag``). Its ``@@gtid_executed`` is the file's PREVIOUS_GTIDS plus its GTIDs
(``UTAG:1-13:mytag:1-3``) and its ``@@gtid_purged`` the PREVIOUS_GTIDS (``UTAG:1-13:mytag:1-2``). The same
probe checks run against a real MySQL 8.4 (``mysql84``) where Docker exists.
"""

from __future__ import annotations

import pytest
from binlogd.daemon.config import load_config
from binlogd.daemon.failover import DIVERGED, PURGED, REFUSED, UNREACHABLE, USABLE, judge, probe
from binlogd.protocol.position import Position

from binlogd.localserver import free_port
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import FTAG, PASSWORD, SERVER_ID, UOTHER, UTAG, binlog, run

pytestmark = pytest.mark.server


def source(**extra):
    overrides = {"source.user": "repl", "source.password": PASSWORD, "source.connect_timeout": "5",
                 "source.heartbeat_seconds": "1", "metrics.listen": ""}
    overrides.update(extra)
    return load_config(None, env={}, overrides=overrides).source


async def verdict(primary_kw: dict, delivered: str, **source_kw):
    async with FakePrimary(binlog(FTAG), **{"password": PASSWORD, **primary_kw}) as primary:
        facts = await probe(source(**source_kw), ("127.0.0.1", primary.port),
                            Position("binlog.000001", 4, gtid_set=delivered), SERVER_ID)
        return judge(facts, Position("binlog.000001", 4, gtid_set=delivered)), primary


@pytest.mark.parametrize("delivered", [f"{UTAG}:1-13:mytag:1-3", f"{UTAG}:1-13:mytag:1-2", f"{UTAG}:1-13:MYTAG:1-2"])
def test_a_server_whose_history_holds_the_delivered_set_is_usable(delivered):
    v, primary = run(verdict({"server_uuid": UOTHER, "server_id": 7}, delivered))
    assert (v.kind, v.writable, v.info.server_uuid, v.info.server_id) == (USABLE, True, UOTHER, 7)
    queries = primary.connections[0].queries
    assert any("GTID_SUBSET(" in q for q in queries) and not primary.dumps   # SQL only: no dump on MySQL


def test_tagged_gtids_it_lacks_make_it_diverged():
    v, _ = run(verdict({}, f"{UTAG}:1-13:mytag:1-5:other:1"))
    assert (v.kind, v.missing) == (DIVERGED, f"{UTAG}:mytag:4-5:other:1")
    assert f"lacks {UTAG}:mytag:4-5:other:1" in v.reason


def test_a_server_of_another_history_is_diverged():
    v, _ = run(verdict({}, f"{UOTHER}:1-3"))
    assert (v.kind, v.missing) == (DIVERGED, f"{UOTHER}:1-3")


def test_purged_transactions_not_yet_delivered_make_it_purged():
    v, _ = run(verdict({}, f"{UTAG}:1-10"))
    assert v.kind == PURGED and f"{UTAG}:11-13:mytag:1-2" in v.reason
    v, _ = run(verdict({"check_purged": False}, f"{UTAG}:1-10"))   # nothing purged there
    assert v.kind == USABLE


def test_read_only_is_reported():
    v, _ = run(verdict({"read_only": True}, f"{UTAG}:1-13:mytag:1-2"))
    assert (v.kind, v.writable) == (USABLE, False)


@pytest.mark.parametrize("primary_kw,expect", [
    ({"gtid_mode": False}, "gtid_mode is OFF"),
    ({"binlog_format": "STATEMENT"}, "binlog_format=STATEMENT"),
    ({"log_bin": 0}, "binary logging off"),
    ({"password": "not-the-one"}, "authentication failed"),
])
def test_servers_that_cannot_serve_are_refused_with_the_reason(primary_kw, expect):
    v, _ = run(verdict(primary_kw, f"{UTAG}:1-13:mytag:1-2"))
    assert v.kind == REFUSED and expect in v.reason


def test_a_closed_port_is_unreachable():
    async def go():
        where = ("127.0.0.1", free_port())
        return judge(await probe(source(), where, Position("b.000001", 4, gtid_set=f"{UTAG}:1"), SERVER_ID),
                     Position("b.000001", 4, gtid_set=f"{UTAG}:1"))
    v = run(go())
    assert v.kind == UNREACHABLE and "cannot connect" in v.reason


def test_real_mysql84_same_rules(mysql84):
    executed = mysql84.sql("SELECT @@global.gtid_executed")[0][0].replace("\n", "")
    cfg = source(**{"source.password": mysql84.repl_password, "source.tls.mode": "required"})
    where = (mysql84.host, mysql84.port)

    async def go(delivered: str):
        position = Position("binlog.000001", 4, gtid_set=delivered)
        return judge(await probe(cfg, where, position, SERVER_ID), position)

    assert run(go(executed)).kind == USABLE
    v = run(go(f"{executed},{UOTHER}:1-3:mytag:1" if executed else f"{UOTHER}:1-3:mytag:1"))
    assert (v.kind, v.missing) == (DIVERGED, f"{UOTHER}:1-3:mytag:1")
