"""The failover decisions of daemon/replication/failover.py (issue 14), from what servers answer to the exit message;
and the two failover metrics. Each case states the servers' answers the way the probe collects them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.connection import ServerInfo, SourceError
from binlogd.daemon.replication.failover import (
    DIVERGED,
    PURGED,
    REFUSED,
    RETRIES,
    UNREACHABLE,
    USABLE,
    Facts,
    Verdict,
    choose,
    give_up,
    judge,
    mariadb_lacking,
    no_source,
)
from binlogd.protocol.position import Position

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "6a1f0c3e-0000-11ee-8000-000000000002"
MYSQL = ServerInfo("mysql", (8, 4, 3), "8.4.3", 2, U2, True, "CRC32")
MARIADB = ServerInfo("mariadb", (10, 11, 19), "10.11.19-MariaDB", 2, "", True, "CRC32")
AT_MYSQL = Position("binlog.000003", 900, gtid_set=f"{U1}:1-100")
AT_MARIADB = Position("binlog.000003", 900, gtid_list="0-1-100")
NOT_IN_BINLOG = ("binlog dump: the primary cannot send the requested binlog (error 1236: Error: connecting slave "
                 "requested to start from GTID 0-1-100, which is not in the master's binlog. Since the master's "
                 "binlog contains GTIDs with higher sequence numbers, it probably means that the slave has diverged "
                 "due to executing extra erroneous transactions)")
PURGED_REFUSAL = ("binlog dump: the primary cannot send the requested binlog (error 1236: Could not find GTID state "
                  "requested by slave in any binlog files. Probably the slave state is too old and required binlog "
                  "files have been purged.)")


def mysql(**kw) -> Facts:
    return Facts("db2:3306", info=kw.pop("info", MYSQL), **kw)


def mariadb(**kw) -> Facts:
    kw.setdefault("binlog_state", "0-1-100,0-2-130")
    return Facts("db2:3306", info=MARIADB, **kw)


# -- one server --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,verdict", [("connection", UNREACHABLE), ("timeout", UNREACHABLE),
                                          ("unreachable", UNREACHABLE), ("auth", REFUSED), ("tls", REFUSED),
                                          ("misconfigured", REFUSED)])
def test_a_server_that_cannot_be_asked_is_skipped_with_the_reason(kind, verdict):
    failure = SourceError(kind, f"{kind} trouble at db2:3306", fatal=kind != "connection")
    v = judge(Facts("db2:3306", failure=failure), AT_MYSQL)
    assert (v.kind, v.reason, v.usable, v.info) == (verdict, f"{kind} trouble at db2:3306", False, None)


def test_mysql_server_holding_every_delivered_transaction_is_usable():
    v = judge(mysql(subset=True), AT_MYSQL)
    assert (v.kind, v.usable, v.writable, v.info, v.missing) == (USABLE, True, True, MYSQL, "")
    assert not judge(mysql(subset=True, read_only=True), AT_MYSQL).writable


def test_mysql_server_lacking_delivered_transactions_is_diverged_naming_them():
    lacking = f"{U1}:98-100,{U1}:blue:1-2"   # tagged GTIDs (MySQL 8.4) pass through as the server prints them
    v = judge(mysql(subset=False, lacking=lacking), AT_MYSQL)
    assert (v.kind, v.usable, v.missing) == (DIVERGED, False, lacking)
    assert lacking in v.reason and "GTID_SUBSET" in v.reason


def test_mysql_server_that_purged_undelivered_transactions_cannot_send_them():
    v = judge(mysql(subset=True, purged_unsent=f"{U1}:101-120"), AT_MYSQL)
    assert (v.kind, v.usable) == (PURGED, False) and f"{U1}:101-120" in v.reason


def test_mysql_without_gtids_or_with_a_mariadb_position_is_refused():
    off = ServerInfo("mysql", (8, 0, 36), "8.0.36", 2, U2, False, "CRC32")
    assert judge(mysql(info=off), AT_MYSQL).kind == REFUSED
    assert "gtid_mode is OFF" in judge(mysql(info=off), AT_MYSQL).reason
    assert judge(mysql(), AT_MARIADB).kind == REFUSED


def test_mariadb_server_accepting_the_position_is_usable():
    v = judge(mariadb(), AT_MARIADB)
    assert (v.kind, v.usable, v.writable) == (USABLE, True, True)
    assert judge(mariadb(), Position("", 4)).usable   # nothing delivered yet


def test_mariadb_refusal_not_in_binlog_is_divergence_not_purge():
    v = judge(mariadb(binlog_state="0-1-95,0-2-130", refusal=NOT_IN_BINLOG), AT_MARIADB)
    assert (v.kind, v.missing) == (DIVERGED, "0-1-100 (has 0-1-95)")
    assert "which is not in the master's binlog" in v.reason and "lacks 0-1-100 (has 0-1-95)" in v.reason


def test_mariadb_refusal_naming_a_gtid_its_state_seems_to_have_is_still_divergence():
    v = judge(mariadb(refusal=NOT_IN_BINLOG), AT_MARIADB)
    assert (v.kind, v.missing) == (DIVERGED, "0-1-100")


def test_mariadb_accepting_a_domain_it_never_saw_is_divergence():
    # MariaDB accepts a connect state in a domain absent from its binlog (the multi-master rule).
    v = judge(mariadb(binlog_state="0-1-100"), Position("b.000001", 4, gtid_list="0-1-100,5-1-7"))
    assert (v.kind, v.missing) == (DIVERGED, "5-1-7 (nothing from server 1 in domain 5)")


def test_mariadb_other_refusal_is_a_purge():
    v = judge(mariadb(refusal=PURGED_REFUSAL), AT_MARIADB)
    assert (v.kind, v.usable) == (PURGED, False) and "purged" in v.reason and "0-1-100" in v.reason


def test_mariadb_with_a_mysql_set_is_refused():
    assert judge(mariadb(), AT_MYSQL).kind == REFUSED


@pytest.mark.parametrize("delivered,state,lacking", [
    ("0-1-100", "0-1-100", []),
    ("0-1-100", "0-1-101,0-2-90", []),
    ("0-1-100", "0-1-99", ["0-1-100 (has 0-1-99)"]),
    ("0-1-100", "0-2-200", ["0-1-100 (nothing from server 1 in domain 0)"]),
    ("0-1-100,1-3-7", "0-1-100,1-3-6,1-4-9", ["1-3-7 (has 1-3-6)"]),
    ("", "0-1-5", []),
    ("0-1-1", "", ["0-1-1 (nothing from server 1 in domain 0)"]),
])
def test_mariadb_lacking(delivered, state, lacking):
    assert mariadb_lacking(delivered, state) == lacking


# -- choosing among servers --------------------------------------------------------------------------------

def v(endpoint: str, kind: str, writable: bool = True, missing: str = "") -> Verdict:
    return Verdict(endpoint, kind, f"{kind} because", writable=writable, missing=missing)


def test_choose_prefers_a_writable_server_then_keeps_the_order():
    a, b, c = v("a:1", USABLE, writable=False), v("b:1", USABLE), v("c:1", USABLE)
    assert choose([a, b, c]) is b
    assert choose([a, v("b:1", DIVERGED)]) is a
    assert choose([v("a:1", DIVERGED), c, b]) is c
    assert choose([v("a:1", UNREACHABLE), v("b:1", PURGED)]) is None
    assert choose([]) is None


@pytest.mark.parametrize("kinds,waited,expect", [
    ([PURGED, PURGED], 0, PURGED),                      # ERR 1236 everywhere: exit 5 at once
    ([PURGED, UNREACHABLE], 100, None),                 # the one that is down may come back
    ([DIVERGED, UNREACHABLE], 59.9, None),              # within failover_timeout_seconds: keep looking
    ([DIVERGED, UNREACHABLE], 60, DIVERGED),            # then exit 9
    ([DIVERGED, PURGED], 60, DIVERGED),
    ([UNREACHABLE, UNREACHABLE], 1000, None),           # all down: retry with backoff, as with one host
    ([REFUSED, UNREACHABLE], 1000, None),
])
def test_give_up(kinds, waited, expect):
    assert give_up([v(f"h{i}:1", k) for i, k in enumerate(kinds)], waited, 60.0) == expect


def test_no_source_names_each_host_and_what_it_lacks():
    verdicts = [judge(Facts("db1:3306", failure=SourceError("connection", "cannot connect to db1:3306: refused")),
                      AT_MARIADB),
                judge(mariadb(binlog_state="0-1-95", refusal=NOT_IN_BINLOG), AT_MARIADB)]
    text = no_source(verdicts, 60.2)
    assert text.startswith("no usable source after 60s: db1:3306 cannot connect to db1:3306: refused; db2:3306 ")
    assert "lacks 0-1-100 (has 0-1-95)" in text and "\n" not in text


# -- metrics -----------------------------------------------------------------------------------------------

def test_source_info_names_the_current_source_only_and_failovers_count():
    m = Metrics()
    assert m.registry.get_sample_value("binlogd_failovers_total") == 0
    m.source("db1:3306", 1, "", "10.11.19-MariaDB")
    labels = {"host": "db1:3306", "server_id": "1", "server_uuid": "", "version": "10.11.19-MariaDB"}
    assert m.registry.get_sample_value("binlogd_source_info", labels) == 1
    m.source("db2:3306", 2, U2, "8.4.3")
    m.failover()
    assert m.registry.get_sample_value("binlogd_source_info", labels) is None
    assert m.registry.get_sample_value("binlogd_source_info", {
        "host": "db2:3306", "server_id": "2", "server_uuid": U2, "version": "8.4.3"}) == 1
    assert m.registry.get_sample_value("binlogd_failovers_total") == 1
    assert b"binlogd_source_info{" in m.exposition()


# -- the daemon's side: which server each session uses (probes stubbed with the facts servers give) ---------

class Answers:
    """Stands in for failover.probe: the facts each host gives, and the hosts asked, per call."""

    def __init__(self, facts: dict[str, Facts]):
        self.facts, self.asked = facts, []

    async def __call__(self, source, endpoint, delivered, server_id):
        where = f"{endpoint[0]}:{endpoint[1]}"
        self.asked.append(where)
        return self.facts[where]


def failover(monkeypatch, facts: dict[str, Facts], last: str | None = None, **extra):
    from binlogd.daemon.config import load_config
    from binlogd.daemon.replication import failover as module

    answers = Answers(facts)
    monkeypatch.setattr(module, "probe", answers)
    cfg = load_config(None, env={}, overrides={"source.hosts": ",".join(facts), **extra})
    return module.Failover(cfg.source, logging.getLogger("test"), Metrics(), last), answers


def up(where: str, read_only: bool = False, binlog_state: str = "0-1-100") -> Facts:
    return Facts(where, info=MARIADB, read_only=read_only, binlog_state=binlog_state)


def down(where: str) -> Facts:
    return Facts(where, failure=SourceError("connection", f"cannot connect to {where}"))


async def test_the_lost_source_is_retried_alone_then_every_host_writable_first(monkeypatch):
    f, answers = failover(monkeypatch, {"a:1": down("a:1"), "b:1": up("b:1", read_only=True), "c:1": up("c:1")},
                          last="a:1")
    for _ in range(RETRIES):
        with pytest.raises(SourceError) as ei:
            await f.pick(AT_MARIADB)
        assert ei.value.kind == "connection" and not ei.value.fatal
    assert answers.asked == ["a:1"] * RETRIES
    assert (await f.pick(AT_MARIADB)).endpoint == "c:1"       # writable beats the order
    assert answers.asked[RETRIES:] == ["a:1", "b:1", "c:1"]
    assert f.streaming("c:1", AT_MARIADB) and f.current == "c:1"
    assert f.metrics.registry.get_sample_value("binlogd_failovers_total") == 1
    assert not f.streaming("c:1", AT_MARIADB)


async def test_only_diverged_hosts_after_the_timeout_is_exit_9(monkeypatch):
    diverged = up("b:1", binlog_state="0-1-90")
    f, _ = failover(monkeypatch, {"a:1": down("a:1"), "b:1": diverged},
                    **{"source.failover_timeout_seconds": "0.2"})
    with pytest.raises(SourceError) as ei:
        await f.pick(AT_MARIADB)
    assert (ei.value.kind, ei.value.fatal) == ("no_source", False)
    await asyncio.sleep(0.25)
    with pytest.raises(SourceError) as ei:
        await f.pick(AT_MARIADB)
    assert (ei.value.kind, ei.value.fatal) == ("diverged", True)
    assert "b:1 diverged: lacks 0-1-100 (has 0-1-90)" in str(ei.value) and "a:1 cannot connect" in str(ei.value)


async def test_a_host_that_refused_the_dump_is_purged_while_the_position_stays(monkeypatch):
    f, _ = failover(monkeypatch, {"a:1": up("a:1"), "b:1": up("b:1")})
    assert (await f.pick(AT_MARIADB)).endpoint == "a:1"
    error = f.refused("a:1", SourceError("binlog_missing", "error 1236: Could not find GTID state", fatal=True))
    assert (error.kind, error.fatal) == ("binlog_missing", False)
    assert (await f.pick(AT_MARIADB)).endpoint == "b:1"
    f.refused("b:1", SourceError("binlog_missing", "error 1236: gone", fatal=True))
    with pytest.raises(SourceError) as ei:
        await f.pick(AT_MARIADB)
    assert (ei.value.kind, ei.value.fatal) == ("binlog_missing", True)    # ERR 1236 everywhere: exit 5
    assert (await f.pick(Position("b.000002", 4, gtid_list="0-1-100"))).endpoint == "a:1"  # a new position: ask again


async def test_every_host_refusing_to_serve_ends_with_its_code(monkeypatch):
    auth = Facts("a:1", failure=SourceError("auth", "authentication failed for user 'repl' at a:1", fatal=True))
    f, _ = failover(monkeypatch, {"a:1": auth, "b:1": Facts("b:1", failure=SourceError("auth", "denied", True))})
    with pytest.raises(SourceError) as ei:
        await f.pick(None)
    assert (ei.value.kind, ei.value.fatal) == ("auth", True)


def test_what_a_candidate_must_hold(monkeypatch):
    f, _ = failover(monkeypatch, {"a:1": up("a:1"), "b:1": up("b:1")}, **{"source.start": "gtid:0-1-7"})
    assert f.delivered(None) == Position("", 4, gtid_list="0-1-7")
    durable = type("Durable", (), {"position": AT_MARIADB})()
    assert f.delivered(durable) is AT_MARIADB
    g, _ = failover(monkeypatch, {"a:1": up("a:1"), "b:1": up("b:1")})
    assert g.delivered(None) is None     # start = "current": nothing delivered yet
