"""The events beyond rows (``[sink] transaction_events``, ``schema_events``, ``heartbeat_seconds``) crossed with
what users run them with, on the bus sinks (real brokers), read back independently
(:func:`tests.integration.test_bus_events.read_all`):

- ``[ha] mode = "lease"``: the active instance SIGKILLed under a write load, the standby takes over; the changes
  are exactly once (the HA tests' read-back), every begin has its commit around its transaction's changes, with
  their counts, and no event id appears twice; the same when the active is killed while the broker holds part of a
  big commit (its begin among it: NATS's messages past the checkpoint, Redis's staging, PostgreSQL's open COPY);
- MySQL 9.7 with binlog_transaction_compression=ON: begin/commit around each transaction with the load's counts,
  the commit's id at its offset inside the TRANSACTION_PAYLOAD, no id twice, the schema event of the DDL;
- an initial snapshot (Redis; the snapshot writes its reads to any sink the same way, without the consumer that
  writes the events): the reads get no begin/commit (binlogd format: no ``transaction``; Debezium: ``null``), the
  stream after it has whole begin/commit pairs, and no heartbeat is written before the snapshot's last read.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from types import SimpleNamespace

import pytest

from binlogd.cli.localserver import LocalServer
from binlogd.library.identity import order_key
from tests.faults.test_faults_bus_events import ROWS, kill_inside_a_big_commit
from tests.faults.test_faults_ha import ACTIVE, LEASE, finish, start_pair
from tests.integration.test_bus_events import Names, counts, in_order, overrides, read_all, table_of, transactions
from tests.support import servers
from tests.support.brokers import KINDS, require
from tests.support.daemon import running_daemon, wait_caught_up
from tests.support.eventload import SHAPES, load
from tests.support.faults import SCHEMA, Writer, create_tables, local_server
from tests.support.snapshots import reload_account

pytestmark = pytest.mark.server
ALL = ["redis", "nats", "postgres"]
EVENTS = {"sink.transaction_events": "true", "sink.schema_events": "true"}


@pytest.fixture(scope="module", params=ALL)
def bus(request):
    """(kind, started broker), one broker per kind for the module."""
    require(request.param)
    with KINDS[request.param]() as broker:
        yield request.param, broker


def default_names(kind: str) -> SimpleNamespace:
    """The default change and event destinations of ``kind`` (README "Events beyond rows"), as
    :func:`read_all` takes them."""
    if kind == "postgres":
        events = {"transaction": "binlogd_transaction", "schema": "binlogd", "heartbeat": "__debezium_heartbeat_binlogd"}
    else:
        events = {"transaction": "binlogd.transaction", "schema": "binlogd", "heartbeat": "__debezium-heartbeat.binlogd"}
    return SimpleNamespace(kind=kind, changes={"redis": "binlogd:*", "postgres": "binlogd_changes"}.get(kind),
                           stream="BINLOGD", events=events,
                           config={"sink.redis.checkpoint_key": "binlogd:checkpoint:binlogd"})


def whole(changes: list, events: dict) -> list:
    """The (begin, changes, commit) of every transaction, after checking no id twice, each destination in id
    order, every change inside its begin/commit, and each commit's counts equal to its changes, table by table."""
    found = transactions(in_order(changes, events))
    for begin, chs, commit in found:
        per: dict[str, int] = {}
        for ch in chs:
            per[table_of(ch)] = per.get(table_of(ch), 0) + 1
        assert per == counts(commit), (begin, commit, per)
        assert begin["transaction"] == commit["transaction"] and commit["events"] == len(chs)
    return found


# ---------------------------------------------------------------------------------------------- [ha] lease
def test_ha_sigkill_with_events(bus, tmp_path):
    kind, broker = bus
    total = 300
    with local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, total=total, rate=150, big_every=25, seed=21)
        a, b = start_pair(srv, tmp_path, kind, broker, EVENTS)
        try:
            writer.start()
            writer.wait_count(total // 3, timeout=60)
            a.kill()
            b.wait_for_line(ACTIVE, timeout=LEASE + 10)
            b.wait_streaming(timeout=30)
            finish(srv, kind, broker, writer, tmp_path, b, total)   # the changes: exactly once
        finally:
            writer.halt()
            for d in (a, b):
                if d.running:
                    d.kill()
    changes, events = read_all(kind, broker.url, default_names(kind))
    changes = [c for c in changes if c["schema"] == SCHEMA]
    found = whole(changes, events)
    for begin, chs, _ in found:
        assert {c["source"]["gtid"] for c in chs} == {begin["transaction"]}, begin
    assert len(found) == len({c["source"]["gtid"] for c in changes})
    assert events["schema"] == [] and events["heartbeat"] == []   # the tables were made before the start


@pytest.mark.parametrize("kind", ALL)
def test_ha_sigkill_inside_a_big_commit(kind, tmp_path):
    """The active killed while the broker holds part of a big commit (its begin among it), the standby goes on."""
    require(kind)
    with KINDS[kind]() as broker, local_server() as srv:
        names = default_names(kind)
        srv.sql(f"CREATE DATABASE {SCHEMA}")
        srv.sql(f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v TEXT)")
        a, b = start_pair(srv, tmp_path, kind, broker, {**EVENTS, "sink.heartbeat_seconds": "0.5"})
        try:
            for i in range(5):
                srv.sql(f"INSERT INTO {SCHEMA}.t VALUES ({i}, 'small')")
            wait_caught_up(srv, tmp_path / "a" / "checkpoint.json", timeout=60, daemon=a)
            kill_inside_a_big_commit(srv, SCHEMA, kind, broker, names, a)
            b.wait_for_line(ACTIVE, timeout=LEASE + 10)
            b.wait_streaming(timeout=30)
            for i in range(5, 10):
                srv.sql(f"INSERT INTO {SCHEMA}.t VALUES ({i}, 'after')")
            wait_caught_up(srv, tmp_path / "b" / "checkpoint.json", timeout=120, daemon=b, fail_on=None)
            assert b.terminate() == 0, b.stderr
        finally:
            for d in (a, b):
                if d.running:
                    d.kill()
        changes, events = read_all(kind, broker.url, names)
    found = whole(changes, events)   # no id twice, no begin without its commit
    assert [sum(counts(c).values()) for _, _, c in found] == [1] * 5 + [ROWS] + [1] * 5
    ids = sorted(ch["after"]["id"] for _, chs, _ in found for ch in chs)
    assert ids == list(range(10)) + list(range(1000, 1000 + ROWS))


# ---------------------------------------------------------------------------------------------- compressed MySQL
@pytest.fixture(scope="module")
def mysql_compressed():
    """MySQL 9.7 with binlog_transaction_compression=ON (every transaction one TRANSACTION_PAYLOAD event)."""
    try:
        bins = servers.binaries(servers.MYSQL_COMPRESSED)
    except servers.Unavailable as exc:
        pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
    server = LocalServer(binaries=bins, extra_args=["--binlog-row-metadata=FULL"])
    try:
        yield server.start()
    finally:
        server.cleanup()


def test_compressed_transactions_with_events(bus, mysql_compressed, tmp_path):
    kind, broker = bus
    srv, db, names = mysql_compressed, f"cx_{uuid.uuid4().hex[:10]}", Names(kind)
    srv.sql(f"CREATE DATABASE `{db}`")
    o = overrides(kind, broker, names, srv, tmp_path, db, source__tls__mode="disabled", **{
        k.replace(".", "__"): v for k, v in EVENTS.items()})
    with running_daemon(o) as daemon:
        load(srv, db)
        wait_caught_up(srv, tmp_path / "checkpoint.json", daemon=daemon)
    changes, events = read_all(kind, broker.url, names)
    found = whole(changes, events)
    expected = [{f"{db}.b": 10}] + [{t: n for t, n in ((f"{db}.a", k), (f"{db}.b", m)) if n} for k, m in SHAPES] \
        + [{f"{db}.a": 1}]
    assert [counts(c) for _, _, c in found] == expected
    for begin, chs, commit in found:
        file, pos, inner, _ = commit["source"]["id"].split(":")
        assert int(inner) > 0, f"a commit not inside its transaction's payload: {commit['source']['id']}"
        assert {c["source"]["id"].rsplit(":", 2)[0] for c in chs} == {f"{file}:{pos}"}, (commit, chs)
        assert order_key(begin["source"]["id"]) < order_key(chs[0]["source"]["id"])
    alter = [e for e in events["schema"] if e["ddl"].upper().startswith("ALTER")]
    assert len(alter) == 1 and [c["name"] for c in alter[0]["columns"]] == ["id", "c2", "v"]


# ---------------------------------------------------------------------------------------------- initial snapshot
def redis_entries(url: str, key: str) -> list[tuple[int, dict]]:
    """(the ms of the entry's Redis id, the parsed event) of each entry of stream ``key``."""
    import redis

    r = redis.Redis.from_url(url)
    try:
        return [(int(entry.split(b"-")[0]), json.loads(fields[b"change"])) for entry, fields in r.xrange(key)]
    finally:
        r.close()


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_initial_snapshot_with_events(fmt, mariadb, fresh_db, tmp_path):
    require("redis")
    db, rows = fresh_db, 2000
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20))")
    mariadb.sql(f"INSERT INTO `{db}`.a VALUES " + ", ".join(f"({i}, 'x')" for i in range(1, rows + 1)))
    with KINDS["redis"]() as broker:
        names = Names("redis")
        o = overrides("redis", broker, names, mariadb, tmp_path, db, sink__format=fmt, snapshot__mode="initial",
                      snapshot__chunk_rows=10, sink__heartbeat_seconds="0.05", **{
                          k.replace(".", "__"): v for k, v in EVENTS.items()})
        o.update(reload_account(mariadb))
        with running_daemon(o) as daemon:
            line = daemon.wait_for_line(r"snapshot: done.* streaming from \S+:\d+", timeout=60)
            start = re.search(r"streaming from (\S+):(\d+)", line).groups()
            conn = mariadb.connect(database=db)
            try:
                for i in range(3):
                    conn.cursor().execute("BEGIN")
                    conn.cursor().execute(f"UPDATE a SET v = 'y{i}' WHERE id <= {i + 2}")
                    conn.cursor().execute("COMMIT")
            finally:
                conn.close()
            wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
            time.sleep(0.5)   # a heartbeat or two after the load
        changes, events = read_all("redis", broker.url, names)
        entries = redis_entries(broker.url, f"{names.changes[:-2]}:{db}.a")
        beats = redis_entries(broker.url, names.events["heartbeat"])
    reads = [c for c in changes if c["source"]["id"].startswith("snapshot:")]
    assert sorted(c["after"]["id"] for c in reads) == list(range(1, rows + 1))
    assert all(c["op"] == ("r" if fmt == "debezium" else "read") for c in reads)
    assert all(c["transaction"] is None for c in reads) if fmt == "debezium" else \
        all("transaction" not in c for c in reads)
    stream = [c for c in changes if c not in reads]
    found = transactions(in_order(stream, {k: v for k, v in events.items() if k != "heartbeat"}))
    assert [sum(counts(c).values()) for _, _, c in found] == [2, 3, 4]
    assert all(order_key(b["source"]["id"]) > order_key(r["source"]["id"]) for b, _, _ in found for r in reads)
    last_read = max(ms for ms, c in entries if c["source"]["id"].startswith("snapshot:"))
    first_read = min(ms for ms, c in entries if c["source"]["id"].startswith("snapshot:"))
    assert last_read - first_read > 100, "the snapshot was too short to show a heartbeat during it"
    assert beats, "no heartbeat"
    for ms, beat in beats:
        assert ms >= last_read, f"a heartbeat during the snapshot: {beat}"
        src = beat["source"]
        assert (int(src["file"].rpartition(".")[2]), src["pos"]) >= (int(start[0].rpartition(".")[2]), int(start[1]))
    assert events["schema"] == []   # the table was made before the snapshot's position
