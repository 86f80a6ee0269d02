"""daemon.serverschema: the daemon's schema history — seed, late start, DDL entries, repairs — against a fake server.

The fake answers the few statements ServerSchema sends (SHOW CREATE TABLE, SHOW MASTER STATUS, SHOW
BINARY LOGS, SHOW BINLOG EVENTS, information_schema lists); the real-server paths are in
tests/integration/test_schema_history_daemon.py.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import pymysql
import pytest

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.schemaqueries import ServerSchema
from binlogd.daemon.replication.serverschema import DaemonSchema, SchemaHistoryUnusable, history_path
from binlogd.daemon.state import CheckpointError
from binlogd.library.schema import read_history
from binlogd.protocol import events as E
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.tablemap import Column

CREATE_T = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` varchar(5) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n" \
           ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
CREATE_K = "CREATE TABLE `k` (\n  `a` bigint(20) unsigned DEFAULT NULL\n) ENGINE=InnoDB DEFAULT CHARSET=latin1"
T_MAP = (Column(0, T.LONG, 0, False), Column(1, T.VARCHAR, 20, collation=45))


class FakeServer:
    """Answers ServerSchema's statements from plain data; counts them."""

    def __init__(self, creates=None, events=(), now=("b.000002", 900)):
        self.creates = {("d", "t"): CREATE_T, ("d", "k"): CREATE_K} if creates is None else creates
        self.events, self.now = list(events), now
        self.queries: list[str] = []
        self.refuse = False

    async def connect(self):
        return _Conn(self)

    def answer(self, sql: str, args) -> list[tuple]:
        self.queries.append(sql)
        if self.refuse:
            raise pymysql.err.OperationalError(1142, "SELECT command denied")
        m = re.match(r"SHOW CREATE TABLE `(.*)`\.`(.*)`", sql)
        if m:
            if (m[1], m[2]) not in self.creates:
                raise pymysql.err.ProgrammingError(1146, "doesn't exist")
            return [(m[2], self.creates[(m[1], m[2])])]
        if sql == "SHOW MASTER STATUS":
            return [self.now]
        if sql == "SELECT VERSION(), @@version_comment":
            return [("10.11.19-MariaDB", "Debian 12")]
        if sql == "SHOW BINARY LOGS":
            return [("b.000001", 1000), ("b.000002", 900)]
        m = re.match(r"SHOW BINLOG EVENTS IN %s FROM (\d+) LIMIT (\d+), (\d+)", sql)
        if m:
            start, skip, count = map(int, m.groups())
            rows = [e for e in self.events if e[0] == args[0] and e[1] >= start]
            return rows[skip:skip + count]
        if "SCHEMATA" in sql:
            return [("d", "utf8mb4")]
        if "information_schema.TABLES" in sql:
            return sorted(self.creates)
        raise AssertionError(sql)


class _Cursor:
    def __init__(self, server):
        self.server, self.rows = server, []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    async def execute(self, sql, args=None):
        self.rows = self.server.answer(sql, args)

    async def fetchall(self):
        return self.rows


class _Conn:
    def __init__(self, server):
        self.server = server

    def cursor(self):
        return _Cursor(self.server)

    def close(self):
        pass


class FakeDecoder:
    def __init__(self):
        self.calls = []

    def decode(self, raw, pos):
        self.calls.append(pos)
        return "decoded again"


@pytest.fixture
async def make(tmp_path):
    """make(server, selected=...) → (DaemonSchema on tmp_path/h.jsonl, its Metrics); closed after the test."""
    made = []

    def factory(server, selected=lambda s, t: True):
        metrics = Metrics()
        schema = DaemonSchema(tmp_path / "h.jsonl", ServerSchema(server.connect), selected, metrics,
                              logging.getLogger("test"))
        made.append(schema)
        return schema, metrics

    yield factory
    for schema in made:
        await schema.close()


def header(tc, pos, length=40):
    return E.EventHeader(0, tc, 1, length, pos + length, 0, pos)


def table_map(pos, columns=T_MAP, table="t"):
    return E.TableMapEvent(header(ET.TABLE_MAP, pos), 1, 0, "d", table, columns)


def query(sql, pos):
    return E.QueryEvent(header(ET.QUERY, pos), 1, 0, 0, "d", sql, {})


def gtid(pos):
    return E.MariadbGtidEvent(header(ET.MARIADB_GTID, pos), 0, pos, 1)


async def follow(schema, event, file="b.000001", decoder=None):
    return await schema.follow(event, b"x" * event.header.event_length, event.header.pos, file,
                               decoder or FakeDecoder())


def mismatches(metrics, table="t"):
    return metrics.registry.get_sample_value("binlogd_schema_mismatch_total", {"schema": "d", "table": table})


def test_history_path_defaults_beside_the_checkpoint():
    assert str(history_path("", "/var/lib/binlogd/checkpoint.json")) == \
        "/var/lib/binlogd/checkpoint.schema-history.jsonl"
    assert str(history_path("/x/h.jsonl", "/var/lib/binlogd/checkpoint.json")) == "/x/h.jsonl"


async def test_first_start_at_the_current_position_seeds_every_table_there(tmp_path, make):
    server = FakeServer(now=("b.000001", 500))
    schema, _ = make(server)
    await schema.open("b.000001", 500)
    assert schema.lookup("d", "t").names == ("id", "v") and schema.lookup("d", "k").unsigned == (True,)
    saved = read_history(tmp_path / "h.jsonl")
    assert {(e.table, e.file, e.pos, e.source) for e in saved} == {
        (None, "b.000001", 500, "seed"), ("t", "b.000001", 500, "seed"), ("k", "b.000001", 500, "seed")}
    assert not any("BINLOG EVENTS" in q for q in server.queries)   # nothing between start and now to scan


async def test_late_start_seeds_tables_ddl_named_since_only_from_the_current_position(tmp_path, make):
    events = [("b.000001", 300, "Query", 1, 400, "use `d`; ALTER TABLE t ADD COLUMN v VARCHAR(5)"),
              ("b.000002", 4, "Format_desc", 1, 100, "")]
    server = FakeServer(events=events)
    schema, _ = make(server)
    await schema.open("b.000001", 200)
    assert schema.lookup("d", "t") is None                 # its definition now is not the one at the start
    assert schema.lookup("d", "k").names == ("a",)         # no DDL named it: valid from the start
    await follow(schema, gtid(250))
    await follow(schema, query("CREATE TABLE t (id INT PRIMARY KEY)", 260))   # the stream's own DDL names it
    assert schema.lookup("d", "t").names == ("id",)
    await follow(schema, query("ALTER TABLE t ADD COLUMN v VARCHAR(5)", 300))
    assert schema.lookup("d", "t").names == ("id", "v")
    await follow(schema, gtid(40), file="b.000002")
    await follow(schema, gtid(900), file="b.000002")              # the seed's own position
    assert schema.lookup("d", "t").names == ("id", "v")


async def test_ddl_entries_are_written_before_follow_returns_and_a_restart_starts_from_the_file(tmp_path, make):
    schema, _ = make(FakeServer(now=("b.000001", 100)))
    await schema.open("b.000001", 100)
    await follow(schema, gtid(100))
    await follow(schema, query("ALTER TABLE t RENAME COLUMN v TO w", 140))
    assert [e.table for e in read_history(tmp_path / "h.jsonl")][-1] == "t"
    assert schema.lookup("d", "t").names == ("id", "w")
    # a restart (or reconnect) from a checkpoint taken before that DDL: the old names until the stream passes it
    await schema.close()          # (a restart: the history's lock goes with the old process)
    again, _ = make(FakeServer(now=("b.000001", 100)))
    await again.open("b.000001", 100)
    assert again.lookup("d", "t").names == ("id", "v")
    assert await follow(again, query("ALTER TABLE t RENAME COLUMN v TO w", 140)) is not None
    assert again.lookup("d", "t").names == ("id", "w")
    assert len(read_history(tmp_path / "h.jsonl")) == 4      # not written twice


async def test_a_positional_table_map_is_repaired_once_from_the_server_when_it_fits(tmp_path, make):
    server = FakeServer(creates={}, now=("b.000001", 100))
    schema, metrics = make(server)
    await schema.open("b.000001", 100)
    server.creates = {("d", "t"): CREATE_T}
    decoder = FakeDecoder()
    await follow(schema, gtid(200))
    assert await follow(schema, table_map(240), decoder=decoder) == "decoded again" and decoder.calls == [240]
    saved = read_history(tmp_path / "h.jsonl")[-1]
    assert (saved.table, saved.file, saved.pos, saved.source) == ("t", "b.000001", 200, "information_schema")
    assert schema.lookup("d", "t").names == ("id", "v") and mismatches(metrics) is None


async def test_a_definition_that_does_not_fit_stays_positional_and_is_counted_once_per_table_map(tmp_path, make):
    server = FakeServer(now=("b.000001", 100))
    schema, metrics = make(server)
    await schema.open("b.000001", 100)
    stale = (Column(0, T.LONG, 0, False), Column(1, T.VARCHAR, 20, collation=45), Column(2, T.LONG, 0))
    await follow(schema, gtid(200))
    assert isinstance(await follow(schema, table_map(240, stale)), E.TableMapEvent)
    assert isinstance(await follow(schema, table_map(340, stale)), E.TableMapEvent)
    assert mismatches(metrics) == 2
    assert sum(q.startswith("SHOW CREATE TABLE") for q in server.queries) == 3   # 2 seeds + 1 re-read


async def test_a_repair_is_refused_when_ddl_naming_the_table_was_logged_since(tmp_path, make):
    events = [("b.000001", 500, "Query", 1, 600, "use `d`; ALTER TABLE t RENAME COLUMN x TO v")]
    server = FakeServer(creates={}, events=events, now=("b.000001", 100))
    schema, metrics = make(server)
    await schema.open("b.000001", 100)
    server.creates = {("d", "t"): CREATE_T}
    await follow(schema, gtid(200))
    assert isinstance(await follow(schema, table_map(240)), E.TableMapEvent)   # fits, but names may have changed since
    assert schema.lookup("d", "t") is None and mismatches(metrics) == 1


async def test_unselected_tables_are_not_read(tmp_path, make):
    server = FakeServer(creates={}, now=("b.000001", 100))
    schema, metrics = make(server, selected=lambda s, t: t != "t")
    await schema.open("b.000001", 100)
    n = len(server.queries)
    await follow(schema, table_map(240))
    assert len(server.queries) == n and mismatches(metrics) is None


async def test_a_server_that_refuses_the_seed_leaves_an_empty_history(tmp_path, caplog, make):
    server = FakeServer()
    server.refuse = True
    schema, _ = make(server)
    with caplog.at_level(logging.WARNING):
        await schema.open("b.000001", 100)
    assert "cannot seed" in caplog.text and schema.lookup("d", "t") is None


async def test_an_unreadable_history_is_fatal_and_an_unwritable_one_is_retried(tmp_path, monkeypatch, make):
    (tmp_path / "h.jsonl").write_text("{broken}\n")
    schema, _ = make(FakeServer())
    with pytest.raises(SchemaHistoryUnusable, match="line 1") as info:
        await schema.open("b.000001", 100)
    assert info.value.fatal
    (tmp_path / "h.jsonl").unlink()
    schema, _ = make(FakeServer(now=("b.000001", 100)))
    await schema.open("b.000001", 100)
    import binlogd.library.schema.history as history

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(history.os, "fsync", full)
    with pytest.raises(CheckpointError, match="schema history"):
        await follow(schema, query("ALTER TABLE t ADD z INT", 300))


# ---------------------------------------------------------------------- the daemon's lazy seed


class MovingServer(FakeServer):
    """A server that logs ``late`` events while the seed reads its definitions: its position moves from
    ``now`` to ``moved`` after the first SHOW MASTER STATUS."""

    def __init__(self, late, moved, **kwargs):
        super().__init__(**kwargs)
        self.late, self.moved = late, moved

    def answer(self, sql: str, args) -> list[tuple]:
        rows = super().answer(sql, args)
        if sql == "SHOW MASTER STATUS":
            self.now, self.events = self.moved, self.events + self.late
        return rows


async def test_a_lazy_open_asks_the_server_nothing_until_a_table_map_needs_a_definition(tmp_path, make):
    server = FakeServer(now=("b.000001", 900))
    schema, _ = make(server)
    await schema.open("b.000001", 100, lazy=True)
    await follow(schema, gtid(200))
    named = E.TableMapEvent(header(ET.TABLE_MAP, 240), 1, 0, "d", "t", tuple(
        dataclasses.replace(c, name=n) for c, n in zip(T_MAP, ("id", "v"))))
    assert await follow(schema, named) is named          # FULL metadata: the decoder asks for nothing
    assert server.queries == [] and read_history(tmp_path / "h.jsonl") == []
    await follow(schema, gtid(300))
    assert schema.lookup("d", "t") is None               # the decoder asks while decoding the TABLE_MAP
    decoder = FakeDecoder()
    assert await follow(schema, table_map(340), decoder=decoder) == "decoded again" and decoder.calls == [340]
    saved = read_history(tmp_path / "h.jsonl")
    assert {(e.table, e.file, e.pos, e.source) for e in saved} == {
        (None, "b.000001", 300, "seed"), ("t", "b.000001", 300, "seed"), ("k", "b.000001", 300, "seed")}
    assert schema.lookup("d", "t").names == ("id", "v")
    n = len(server.queries)
    assert schema.lookup("d", "nope") is None
    await follow(schema, table_map(440, table="nope"))   # seeded once a session: a repair, not another seed
    assert not any(q == "SHOW MASTER STATUS" for q in server.queries[n:])


async def test_a_lazy_seed_waits_for_a_selected_table_and_is_not_repeated_after_a_restart(tmp_path, make):
    server = FakeServer(now=("b.000001", 900))
    schema, _ = make(server, selected=lambda s, t: t == "k")
    await schema.open("b.000001", 100, lazy=True)
    await follow(schema, gtid(200))
    assert schema.lookup("d", "t") is None
    await follow(schema, table_map(240))
    assert server.queries == []                           # t is not delivered: no seed for it
    assert schema.lookup("d", "k") is None
    await follow(schema, table_map(260, (Column(0, T.LONGLONG, 0),), table="k"))
    assert [(e.table, e.pos) for e in read_history(tmp_path / "h.jsonl")] == [(None, 200), ("k", 200)]
    await schema.close()
    restarted = FakeServer(now=("b.000001", 900))
    again, _ = make(restarted)
    await again.open("b.000001", 100, lazy=True)          # a restart from before the seed's position
    assert again.lookup("d", "k") is None
    await follow(again, gtid(200))
    assert again.lookup("d", "k").names == ("a",)
    await follow(again, table_map(260, (Column(0, T.LONGLONG, 0),), table="k"))
    assert "SHOW MASTER STATUS" not in restarted.queries   # the history holds the seed: it is not run again


async def test_a_seed_leaves_out_a_table_ddl_named_while_its_definitions_were_read(tmp_path, make):
    late = [("b.000001", 600, "Query", 1, 700, "use `d`; ALTER TABLE k ADD COLUMN b INT")]
    server = MovingServer(late, ("b.000001", 700), now=("b.000001", 100))
    schema, _ = make(server)
    await schema.open("b.000001", 100)
    saved = read_history(tmp_path / "h.jsonl")
    assert {(e.table, e.pos) for e in saved} == {(None, 100), ("t", 100)}   # k's definition may be the ALTERed one
    assert schema.lookup("d", "k") is None and schema.lookup("d", "t").names == ("id", "v")
