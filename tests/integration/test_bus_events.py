"""``[sink] transaction_events``, ``schema_events`` and ``heartbeat_seconds`` through ``binlogd run`` into the bus
sinks (Redis Streams, NATS JetStream, PostgreSQL), both formats, against real brokers and a real MariaDB.

Each broker is read back here, independently of binlogd's sink code: every change stream/subject/table and the
events' own ones (one per kind, named in config). The events and changes are put in one order by their ids
(:func:`library.identity.order_key`, the order the README gives consumers) and checked against the load and an
independent walk of the server's binlog files: begin/commit around each transaction with the right counts, one
schema event with the new column in its place, heartbeats whose position moves through filtered-out traffic, and
after SIGKILLs mid-load no begin without its commit and no event twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from binlogd.library.identity import order_key
from tests.support.brokers import KINDS, require
from tests.support.busread import redis_checkpoint
from tests.support.daemon import base_overrides, read_checkpoint, running_daemon, wait_caught_up, wait_until
from tests.support.eventload import SHAPES, kill_three_times, load, walk

pytestmark = pytest.mark.server
ALL = ["redis", "nats", "postgres"]


@pytest.fixture(scope="module", params=ALL)
def bus(request):
    """(kind, started broker), one broker per kind for the module; each test names its own streams."""
    require(request.param)
    with KINDS[request.param]() as broker:
        yield request.param, broker


class Names:
    """A test's own stream/subject/table names on a shared broker (``tag``: unique), as config and to read."""

    def __init__(self, kind: str):
        self.kind, tag = kind, "e" + uuid.uuid4().hex[:8]
        if kind == "redis":
            self.changes = f"{tag}:*"
            self.events = {"transaction": f"{tag}.transaction", "schema": tag, "heartbeat": f"__debezium-heartbeat.{tag}"}
            self.config = {"sink.redis.stream": f"{tag}:{{schema}}.{{table}}", "sink.redis.checkpoint_key": f"{tag}-cp"}
        elif kind == "nats":
            self.stream = tag.upper()
            self.events = {"transaction": f"{tag}.transaction", "schema": tag, "heartbeat": f"__debezium-heartbeat.{tag}"}
            self.config = {"sink.nats.stream": self.stream, "sink.nats.subject": f"{tag}.{{schema}}.{{table}}"}
        else:
            self.changes = f"{tag}_changes"
            self.events = {"transaction": f"{tag}_transaction", "schema": tag, "heartbeat": f"{tag}_heartbeat"}
            self.config = {"sink.postgres.table": self.changes}
        suffix = {"redis": "stream", "nats": "subject", "postgres": "table"}[kind]
        self.config.update({f"sink.{kind}.{k}_{suffix}": v for k, v in self.events.items()})


def overrides(kind, broker, names: Names, srv, tmp_path, db: str, **extra) -> dict:
    o = base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
    o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url, **names.config})
    o.update({k.replace("__", "."): str(v) for k, v in extra.items()})
    return o


# ---------------------------------------------------------------------------------------------- reading back
def read_all(kind: str, url: str, names: Names) -> tuple[list, dict]:
    """(every change message, {event kind: its messages in broker order}), each a parsed dict."""
    return {"redis": _read_redis, "nats": _read_nats, "postgres": _read_postgres}[kind](url, names)


def _read_redis(url: str, names: Names) -> tuple[list, dict]:
    import redis

    r = redis.Redis.from_url(url)
    try:
        def entries(key) -> list:
            out = []
            for _entry, fields in r.xrange(key):
                assert set(fields) == {b"change"}, fields
                out.append(json.loads(fields[b"change"]))
            return out

        changes = [c for key in r.scan_iter(match=names.changes) if r.type(key) == b"stream" for c in entries(key)]
        return changes, {k: entries(v) for k, v in names.events.items()}
    finally:
        r.close()


def _read_nats(url: str, names: Names) -> tuple[list, dict]:
    import nats
    from nats.js.errors import NotFoundError

    async def go():
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(names.stream)
            changes, events = [], {k: [] for k in names.events}
            kinds = {v: k for k, v in names.events.items()}
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    msg = await js.get_msg(names.stream, seq)
                except NotFoundError:
                    continue
                if msg.subject.startswith("_binlogd."):
                    continue
                value = json.loads(msg.data)
                assert (msg.headers or {}).get("Binlogd-Source") == value["source"]["id"], (seq, msg.headers)
                (events[kinds[msg.subject]] if msg.subject in kinds else changes).append(value)
            return changes, events
        finally:
            await nc.close()

    return asyncio.run(go())


def _read_postgres(url: str, names: Names) -> tuple[list, dict]:
    import psycopg

    with psycopg.connect(url) as conn:
        changes = [json.loads(t) for (t,) in conn.execute(f"SELECT change::text FROM {names.changes} ORDER BY seq")]
        events = {}
        for kind, table in names.events.items():
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
            rows = conn.execute(f"SELECT event::text, id, op FROM {table} ORDER BY seq").fetchall() if exists else []
            events[kind] = []
            for text, event_id, op in rows:
                value = json.loads(text)
                assert (value["source"]["id"], word(value)) == (event_id, op), (table, event_id, op, value)
                events[kind].append(value)
    return changes, events


def remote_position(kind, broker, names: Names, tmp_path) -> tuple:
    """The committed position the broker holds (NATS: the local checkpoint's)."""
    if kind == "redis":
        cp = redis_checkpoint(broker.url, names.config["sink.redis.checkpoint_key"])
    elif kind == "postgres":
        import psycopg

        with psycopg.connect(broker.url) as conn:
            cp = json.loads(conn.execute(f"SELECT checkpoint::text FROM {names.changes}_checkpoint").fetchone()[0])
    else:
        cp = read_checkpoint(tmp_path / "checkpoint.json")
    return cp["position"]["file"], int(cp["position"]["pos"])


# ---------------------------------------------------------------------------------------------- checks
def word(event: dict) -> str:
    """begin, commit, ddl, heartbeat or change, in either format."""
    if "status" in event:
        return {"BEGIN": "begin", "END": "commit"}[event["status"]]
    if "tableChanges" in event:
        return "ddl"
    if event.get("op") in ("begin", "commit", "ddl", "heartbeat"):
        return event["op"]
    return "heartbeat" if "op" not in event else "change"


def in_order(changes: list, events: dict) -> list:
    """Everything, by id, after checking each destination holds its messages in id order and no id twice."""
    for name, items in [("changes", sorted(changes, key=lambda c: order_key(c["source"]["id"]))), *events.items()]:
        keys = [order_key(e["source"]["id"]) for e in items]
        assert keys == sorted(keys), f"the {name} messages are out of order"
    every = changes + [e for items in events.values() for e in items]
    ids = [e["source"]["id"] for e in every]
    assert len(ids) == len(set(ids)), f"an event was delivered twice: {[i for i in ids if ids.count(i) > 1][:5]}"
    return sorted(every, key=lambda e: order_key(e["source"]["id"]))


def transactions(stream: list) -> list:
    """(begin, changes, commit) of each transaction in ``stream`` (by id); asserts they nest."""
    out, current = [], None
    for e in stream:
        w = word(e)
        if w == "begin":
            assert current is None, f"a begin inside a transaction: {e}"
            current = (e, [])
        elif w == "commit":
            assert current is not None, f"a commit without its begin: {e}"
            out.append((current[0], current[1], e))
            current = None
        elif w == "change":
            assert current is not None, f"a change outside begin/commit: {e}"
            current[1].append(e)
    assert current is None, "a begin without its commit"
    return out


def table_of(change: dict) -> str:
    src = change["source"]
    return f"{src['db']}.{src['table']}" if "db" in src else f"{change['schema']}.{change['table']}"


def counts(commit: dict) -> dict:
    if "status" in commit:
        return {d["data_collection"]: d["event_count"] for d in commit["data_collections"]}
    return commit["tables"]


# ---------------------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_transactions_and_schema_changes(bus, fmt, mariadb, fresh_db, tmp_path):
    kind, broker = bus
    db, names = fresh_db, Names(kind)
    o = overrides(kind, broker, names, mariadb, tmp_path, db, sink__format=fmt, sink__transaction_events="true",
                  sink__schema_events="true")
    with running_daemon(o) as daemon:
        load(mariadb, db)
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    changes, events = read_all(kind, broker.url, names)
    assert events["heartbeat"] == []
    assert {word(e) for e in events["transaction"]} == {"begin", "commit"}
    assert {word(e) for e in events["schema"]} == {"ddl"}
    found = transactions(in_order(changes, events))
    walked, ddls = walk(mariadb, db)
    assert [(b["source"]["id"], c["source"]["id"]) for b, _, c in found] == [(b, c) for b, c, _ in walked]
    expected = [{f"{db}.b": 10}] + [{t: n for t, n in ((f"{db}.a", k), (f"{db}.b", m)) if n} for k, m in SHAPES] \
        + [{f"{db}.a": 1}]
    assert [counts(c) for _, _, c in found] == expected
    for begin, chs, commit in found:
        per = {}
        for ch in chs:
            per[table_of(ch)] = per.get(table_of(ch), 0) + 1
        assert per == counts(commit) and list(per) == list(counts(commit))
        if fmt == "debezium":
            assert begin["id"] == commit["id"] and commit["event_count"] == len(chs)
            assert [ch["transaction"]["id"] for ch in chs] == [begin["id"]] * len(chs)
            assert [ch["transaction"]["total_order"] for ch in chs] == list(range(1, len(chs) + 1))
        else:
            assert begin["transaction"] == commit["transaction"] and commit["events"] == len(chs)
    alter = [d for d in ddls if d[2].upper().startswith("ALTER")]
    assert len(alter) == 1
    schema = [e for e in events["schema"] if e["ddl"] == alter[0][2]]
    assert len(schema) == 1 and schema[0]["source"]["id"] == f"{alter[0][0]}:{alter[0][1]}:0:ddl.0"
    if fmt == "debezium":
        change = schema[0]["tableChanges"][0]
        assert schema[0]["databaseName"] == db and change["id"] == f'"{db}"."a"' and change["type"] == "ALTER"
        assert [(c["name"], c["position"]) for c in change["table"]["columns"]] == [("id", 1), ("c2", 2), ("v", 3)]
    else:
        assert (schema[0]["schema"], schema[0]["table"]) == (db, "a")
        assert [c["name"] for c in schema[0]["columns"]] == ["id", "c2", "v"]
    creates = sorted(e["ddl"].split()[2].strip("`") for e in events["schema"] if e["ddl"].upper().startswith("CREATE"))
    assert creates == ["a", "b"]


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_heartbeats_follow_filtered_traffic(bus, fmt, mariadb, fresh_db, tmp_path):
    kind, broker = bus
    db, names = fresh_db, Names(kind)
    mariadb.sql(f"CREATE TABLE `{db}`.quiet (id INT PRIMARY KEY)")
    mariadb.sql(f"CREATE TABLE `{db}`.busy (id INT PRIMARY KEY)")
    o = overrides(kind, broker, names, mariadb, tmp_path, db, sink__format=fmt, sink__heartbeat_seconds="1",
                  filters__include_tables=f"{db}.quiet")

    def beats() -> list:
        return read_all(kind, broker.url, names)[1]["heartbeat"]

    def position(beat) -> tuple:
        src = beat["source"]
        return src["file"], src["pos"]

    with running_daemon(o) as daemon:
        wait_until(beats, timeout=20, what="a first heartbeat")
        first = position(beats()[-1])
        for i in range(5):
            mariadb.sql(f"INSERT INTO `{db}`.busy VALUES ({i})")   # filtered out: no change is written
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
        wait_until(lambda: position(beats()[-1]) != first, timeout=20, what="a heartbeat at the new position")
    changes, events = read_all(kind, broker.url, names)
    assert changes == [] and events["transaction"] == events["schema"] == []
    stream = in_order(changes, events)
    assert [word(e) for e in stream] == ["heartbeat"] * len(stream)
    positions = [position(b) for b in stream]
    assert positions == sorted(positions, key=lambda p: (int(p[0].rpartition(".")[2]), p[1]))
    for b in stream:
        assert b["source"]["id"].startswith(f"{b['source']['file']}:{b['source']['pos']}:h")
        assert b["ts_ms" if fmt == "debezium" else "ts"] > 0
    last, committed = positions[-1], remote_position(kind, broker, names, tmp_path)
    assert (int(last[0].rpartition(".")[2]), last[1]) <= (int(committed[0].rpartition(".")[2]), committed[1])


def test_sigkill_leaves_whole_transactions(bus, mariadb, fresh_db, tmp_path):
    kind, broker = bus
    db, names = fresh_db, Names(kind)
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v INT)")
    o = overrides(kind, broker, names, mariadb, tmp_path, db, sink__transaction_events="true", sink__schema_events="true",
                  sink__heartbeat_seconds="0.3")
    conn = mariadb.connect(database=db)
    cur = conn.cursor()
    try:
        inserted = kill_three_times(cur, o)
        cur.execute("ALTER TABLE a ADD COLUMN w INT")
        with running_daemon(o) as daemon:
            wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    finally:
        conn.close()
    changes, events = read_all(kind, broker.url, names)
    found = transactions(in_order(changes, events))   # also: no id twice, no begin without its commit
    assert len(found) == 40 * 3 and all(counts(c) == {f"{db}.a": 3} for _, _, c in found)
    assert sorted(ch["after"]["id"] for _, chs, _ in found for ch in chs) == list(range(inserted))
    assert [e["ddl"] for e in events["schema"]] == ["ALTER TABLE a ADD COLUMN w INT"]
