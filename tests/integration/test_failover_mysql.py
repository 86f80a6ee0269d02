"""Failover's MySQL flavour (issue 14, test 5): GTID_SUBSET, purged sets and tagged GTIDs.

No MySQL server runs here, so the servers are the protocol-level fake primary (tests/support/fakeprimary.py),
which evaluates ``GTID_SUBSET``/``GTID_SUBTRACT`` on its own GTID-set code, serving a real MySQL 9.6 binlog
with tagged GTIDs (``mytag``). Its ``@@gtid_executed`` is the file's PREVIOUS_GTIDS plus its GTIDs
(``UTAG:1-13:mytag:1-3``) and its ``@@gtid_purged`` the PREVIOUS_GTIDS (``UTAG:1-13:mytag:1-2``). The same
probe checks run against a real MySQL 8.4 (``mysql84``) where Docker exists.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from binlogd.cli.localserver import free_port
from binlogd.daemon.config import load_config
from binlogd.daemon.replication.failover import DIVERGED, PURGED, REFUSED, UNREACHABLE, USABLE, judge, probe
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.position import Position
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import (
    FENUM,
    FTAG,
    HB,
    PASSWORD,
    SERVER_ID,
    UENUM,
    UOTHER,
    UTAG,
    Running,
    binlog,
    checkpoint,
    gtid_reaches,
    heartbeats,
    metric,
    sink_rows,
)

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
async def test_a_server_whose_history_holds_the_delivered_set_is_usable(delivered):
    v, primary = await asyncio.wait_for(verdict({"server_uuid": UOTHER, "server_id": 7}, delivered), 90)
    assert (v.kind, v.writable, v.info.server_uuid, v.info.server_id) == (USABLE, True, UOTHER, 7)
    queries = primary.connections[0].queries
    assert any("GTID_SUBSET(" in q for q in queries) and not primary.dumps   # SQL only: no dump on MySQL


async def test_tagged_gtids_it_lacks_make_it_diverged():
    v, _ = await asyncio.wait_for(verdict({}, f"{UTAG}:1-13:mytag:1-5:other:1"), 90)
    assert (v.kind, v.missing) == (DIVERGED, f"{UTAG}:mytag:4-5:other:1")
    assert f"lacks {UTAG}:mytag:4-5:other:1" in v.reason


async def test_a_server_of_another_history_is_diverged():
    v, _ = await asyncio.wait_for(verdict({}, f"{UOTHER}:1-3"), 90)
    assert (v.kind, v.missing) == (DIVERGED, f"{UOTHER}:1-3")


async def test_purged_transactions_not_yet_delivered_make_it_purged():
    v, _ = await asyncio.wait_for(verdict({}, f"{UTAG}:1-10"), 90)
    assert v.kind == PURGED and f"{UTAG}:11-13:mytag:1-2" in v.reason
    v, _ = await asyncio.wait_for(verdict({"check_purged": False}, f"{UTAG}:1-10"), 90)   # nothing purged there
    assert v.kind == USABLE


async def test_read_only_is_reported():
    v, _ = await asyncio.wait_for(verdict({"read_only": True}, f"{UTAG}:1-13:mytag:1-2"), 90)
    assert (v.kind, v.writable) == (USABLE, False)


@pytest.mark.parametrize("primary_kw,expect", [
    ({"gtid_mode": False}, "gtid_mode is OFF"),
    ({"binlog_format": "STATEMENT"}, "binlog_format=STATEMENT"),
    ({"log_bin": 0}, "binary logging off"),
    ({"password": "not-the-one"}, "authentication failed"),
])
async def test_servers_that_cannot_serve_are_refused_with_the_reason(primary_kw, expect):
    v, _ = await asyncio.wait_for(verdict(primary_kw, f"{UTAG}:1-13:mytag:1-2"), 90)
    assert v.kind == REFUSED and expect in v.reason


async def test_a_closed_port_is_unreachable():
    async def go():
        where = ("127.0.0.1", free_port())
        return judge(await probe(source(), where, Position("b.000001", 4, gtid_set=f"{UTAG}:1"), SERVER_ID),
                     Position("b.000001", 4, gtid_set=f"{UTAG}:1"))
    v = await asyncio.wait_for(go(), 90)
    assert v.kind == UNREACHABLE and "cannot connect" in v.reason


async def test_real_mysql84_same_rules(mysql84):
    executed = mysql84.sql("SELECT @@global.gtid_executed")[0][0].replace("\n", "")
    cfg = source(**{"source.password": mysql84.repl_password, "source.tls.mode": "required"})
    where = (mysql84.host, mysql84.port)

    async def go(delivered: str):
        position = Position("binlog.000001", 4, gtid_set=delivered)
        return judge(await probe(cfg, where, position, SERVER_ID), position)

    assert (await asyncio.wait_for(go(executed), 90)).kind == USABLE
    v = await asyncio.wait_for(go(f"{executed},{UOTHER}:1-3:mytag:1" if executed else f"{UOTHER}:1-3:mytag:1"), 90)
    assert (v.kind, v.missing) == (DIVERGED, f"{UOTHER}:1-3:mytag:1")


# --------------------------------------------------------------------------- the daemon across two fake primaries
def hosts_config(tmp_path, ports, start: str, **extra):
    overrides = {"source.hosts": ",".join(f"127.0.0.1:{p}" for p in ports), "source.user": "repl",
                 "source.password": PASSWORD, "source.server_id": str(SERVER_ID), "source.start": start,
                 "source.heartbeat_seconds": str(HB), "source.connect_timeout": "5",
                 "checkpoint.path": str(tmp_path / "state" / "checkpoint.json"), "sink.kind": "jsonl",
                 "sink.path": str(tmp_path / "changes"), "sink.fsync": "false", "metrics.listen": "",
                 "schema.source": "none", "reconnect.initial_seconds": "0.05", "reconnect.max_seconds": "0.2",
                 "reconnect.jitter": "0", **extra}
    return load_config(None, env={}, overrides=overrides)


class Logged(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        logging.getLogger("binlogd").addHandler(self)
        logging.getLogger("binlogd").setLevel(logging.INFO)

    def emit(self, record):
        self.lines.append(record.getMessage())

    def close(self):
        logging.getLogger("binlogd").removeHandler(self)
        super().close()


@pytest.fixture
def logged():
    handler = Logged()
    yield handler
    handler.close()


DELIVERED = f"{UTAG}:1-13:mytag:1-3"
START = f"gtid:{UTAG}:1-13:mytag:1-2"


async def test_follows_a_second_server_by_gtid_set(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, server_id=2, server_uuid=UOTHER) as b:
            async with Running(hosts_config(tmp_path, [a.port, b.port], START), a) as d:
                await d.wait(gtid_reaches(tmp_path, DELIVERED), 20, "mytag:3 delivered by a")
                await a.close()                       # the first server is gone
                await d.wait(lambda: b.dumps, 20, "a dump from b")
                await d.wait(lambda: metric(d.daemon, "binlogd_failovers_total") == 1, 20, "the failover counted")
                await d.wait(heartbeats(b, 2), 20, "b streaming")
                info = metric(d.daemon, "binlogd_source_info", host=f"127.0.0.1:{b.port}", server_id="2",
                              server_uuid=UOTHER, version="8.0.31-fake")
                assert await d.stop() == 0
            return a, b, info
    a, b, info = await asyncio.wait_for(go(), 90)
    assert MysqlGtidSet.parse(str(b.dumps[-1].gtid_set)) == MysqlGtidSet.parse(DELIVERED)  # b skips mytag:3
    assert info == 1
    rows = [r for r in sink_rows(tmp_path) if r["source"]["gtid"] == f"{UTAG}:mytag:3"]
    assert [r["op"] for r in rows] == ["insert"]                 # once, from a
    assert [ln for ln in logged.lines if ln.startswith("failover from")] == [
        f"failover from 127.0.0.1:{a.port} to 127.0.0.1:{b.port} at GTID {MysqlGtidSet.parse(DELIVERED)}"]
    facts = checkpoint(tmp_path).source
    assert (facts["host"], facts["server_uuid"], facts["server_id"]) == (f"127.0.0.1:{b.port}", UOTHER, 2)


async def test_a_server_of_another_history_ends_it_with_exit_9(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD) as a, \
                FakePrimary(binlog(FENUM), password=PASSWORD, server_id=2, server_uuid=UENUM) as b:
            cfg = hosts_config(tmp_path, [a.port, b.port], START, **{"source.failover_timeout_seconds": "1"})
            async with Running(cfg, a) as d:
                await d.wait(gtid_reaches(tmp_path, DELIVERED), 20, "mytag:3 delivered by a")
                before = sink_rows(tmp_path)
                await a.close()
                return await d.exit_code(30), before, b
    rc, before, b = await asyncio.wait_for(go(), 90)
    assert rc == 9
    assert sink_rows(tmp_path) == before and not b.dumps
    (last,) = [ln for ln in logged.lines if ln.startswith("no usable source")][-1:]
    assert f"diverged: lacks {MysqlGtidSet.parse(DELIVERED)}" in last and "GTID_SUBSET" in last


async def test_err_1236_on_one_server_moves_to_the_next(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD, err_1236=True) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, server_id=2, server_uuid=UOTHER) as b:
            async with Running(hosts_config(tmp_path, [a.port, b.port], START), b) as d:
                await d.wait(gtid_reaches(tmp_path, DELIVERED), 20, "mytag:3 delivered by b")
                assert await d.stop() == 0
            return a, b
    a, b = await asyncio.wait_for(go(), 90)
    assert len(a.dumps) == 1 and len(b.dumps) == 1
    assert any(ln.startswith(f"source 127.0.0.1:{a.port} skipped: purged: refused a dump") for ln in logged.lines)


async def test_err_1236_on_every_server_exits_5(tmp_path):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD, err_1236=True) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, err_1236=True, server_uuid=UOTHER) as b:
            async with Running(hosts_config(tmp_path, [a.port, b.port], START)) as d:
                return await d.exit_code(30), a, b
    rc, a, b = await asyncio.wait_for(go(), 90)
    assert rc == 5 and len(a.dumps) == len(b.dumps) == 1


async def test_prefers_a_writable_server_and_leaves_one_that_turns_read_only(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD, read_only=True) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, server_id=2, server_uuid=UOTHER) as b:
            async with Running(hosts_config(tmp_path, [a.port, b.port], START), b) as d:
                await d.wait(gtid_reaches(tmp_path, DELIVERED), 20, "mytag:3 delivered")
                assert not a.dumps and len(b.dumps) == 1            # b is writable: taken first
                a.read_only, b.read_only = False, True            # a planned switchover, b idle
                await d.wait(lambda: a.dumps, 20, "a dump from a")
                await d.wait(lambda: metric(d.daemon, "binlogd_failovers_total") == 1, 20, "the failover counted")
                assert await d.stop() == 0
            return a, b
    a, b = await asyncio.wait_for(go(), 90)
    assert any(ln.startswith(f"failover from 127.0.0.1:{b.port} to 127.0.0.1:{a.port} at GTID")
               for ln in logged.lines)
    assert MysqlGtidSet.parse(str(a.dumps[-1].gtid_set)) == MysqlGtidSet.parse(DELIVERED)
    assert [r["op"] for r in sink_rows(tmp_path) if r["source"]["gtid"] == f"{UTAG}:mytag:3"] == ["insert"]


async def test_a_file_position_checkpoint_with_several_hosts_exits_2(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, server_uuid=UOTHER) as b:
            single = hosts_config(tmp_path, [a.port], f"file:{binlog(FTAG).name}:4")
            async with Running(single, a) as d:
                await d.wait(lambda: checkpoint(tmp_path) and checkpoint(tmp_path).position.file == "binlog.000005",
                             20, "the file read to its ROTATE")
                assert await d.stop() == 0
            async with Running(hosts_config(tmp_path, [a.port, b.port], "current")) as d:
                return await d.exit_code(20), a, b
    rc, a, b = await asyncio.wait_for(go(), 90)
    assert rc == 2 and len(a.dumps) == 1 and not b.dumps
    assert any("resumes by binlog file and position, and positions differ between servers" in ln
               for ln in logged.lines)


async def test_a_checkpoint_written_before_failover_existed_still_resumes(tmp_path, logged):
    async def go():
        async with FakePrimary(binlog(FTAG), password=PASSWORD) as a, \
                FakePrimary(binlog(FTAG), password=PASSWORD, server_uuid=UOTHER) as b:
            async with Running(hosts_config(tmp_path, [a.port], START), a) as d:
                await d.wait(gtid_reaches(tmp_path, DELIVERED), 20, "mytag:3 delivered")
                assert await d.stop() == 0
            path = tmp_path / "state" / "checkpoint.json"
            saved = json.loads(path.read_text())
            saved["source"] = {k: saved["source"][k] for k in ("flavor", "server_id", "server_uuid", "resume")}
            path.write_text(json.dumps(saved))                   # no host, no version: an older checkpoint
            async with Running(hosts_config(tmp_path, [b.port, a.port], "current"), b) as d:
                await d.wait(lambda: b.dumps, 20, "a dump from b")
                assert await d.stop() == 0
            return b
    b = await asyncio.wait_for(go(), 90)
    assert MysqlGtidSet.parse(str(b.dumps[-1].gtid_set)) == MysqlGtidSet.parse(DELIVERED)
    assert not [ln for ln in logged.lines if ln.startswith("failover from")]
    assert checkpoint(tmp_path).source["host"] == f"127.0.0.1:{b.port}"
