"""``[sink] transaction_events``, ``schema_events`` and ``heartbeat_seconds`` through ``binlogd run`` into the
JSON-lines sink, against a real server, in both formats.

Transactions of known shape (k inserts into one table, m updates of another) and a DDL between them go through
the daemon. Every begin/commit and schema event is checked against an independent walk of the server's own binlog
files (the GTID that opens each transaction, the XID that ends it, the DDL's QUERY event), and against the load:
the counts per table, the new column's place, one event per id. An idle daemon writes heartbeats whose position
moves when filtered-out traffic arrives. SIGKILLs leave no begin without its commit and no event twice.
"""

from __future__ import annotations

import time

import pytest

from binlogd.library.identity import order_key
from tests.support.daemon import base_overrides, read_changes, running_daemon, wait_caught_up, wait_until
from tests.support.eventload import SHAPES, kill_three_times, load, walk

pytestmark = pytest.mark.server

def _transactions(events: list[dict]) -> list[tuple[dict, list[dict], dict]]:
    """(begin, changes, commit) of each transaction in ``events`` (the binlogd format); asserts they nest."""
    out, current = [], None
    for e in events:
        if e["op"] == "begin":
            assert current is None, f"a begin inside a transaction: {e}"
            current = (e, [])
        elif e["op"] == "commit":
            assert current is not None, f"a commit without its begin: {e}"
            out.append((current[0], current[1], e))
            current = None
        elif e["op"] in ("insert", "update", "delete"):
            assert current is not None, f"a change outside begin/commit: {e}"
            current[1].append(e)
    assert current is None, "a begin without its commit"
    return out


def test_transactions_and_schema_changes_match_the_servers_log(mariadb, fresh_db, tmp_path):
    db = fresh_db
    overrides = base_overrides(mariadb, tmp_path, sink__transaction_events="true", sink__schema_events="true",
                               filters__include_schemas=db)
    with running_daemon(overrides) as daemon:
        load(mariadb, db)
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    events = read_changes(tmp_path / "sink")
    ids = [e["source"]["id"] for e in events]
    assert len(ids) == len(set(ids)) and ids == sorted(ids, key=order_key), "ids repeat or are out of order"
    found = _transactions(events)
    walked, ddls = walk(mariadb, db)
    assert [(b["source"]["id"], c["source"]["id"], b["source"]["gtid"]) for b, _, c in found] == walked
    # the load's shapes: the seed of b, then SHAPES (a transaction of no change has no begin/commit), then one
    expected = [{f"{db}.b": 10}] + [{k: n for k, n in ((f"{db}.a", k), (f"{db}.b", m)) if n}
                                    for k, m in SHAPES] + [{f"{db}.a": 1}]
    assert [c["tables"] for _, _, c in found] == expected
    for begin, changes, commit in found:
        assert commit["events"] == len(changes) == sum(commit["tables"].values())
        assert begin["transaction"] == commit["transaction"] == begin["source"]["gtid"]
        assert {ch["source"]["gtid"] for ch in changes} == {begin["source"]["gtid"]}
    schema_events = [e for e in events if e["op"] == "ddl"]
    alter = [d for d in ddls if d[2].upper().startswith("ALTER")]
    assert len(alter) == 1 and len([e for e in schema_events if e["ddl"] == alter[0][2]]) == 1, schema_events
    event = next(e for e in schema_events if e["ddl"] == alter[0][2])
    assert (event["schema"], event["table"]) == (db, "a")
    assert event["source"]["id"] == f"{alter[0][0]}:{alter[0][1]}:0:ddl.0"
    assert [c["name"] for c in event["columns"]] == ["id", "c2", "v"]
    assert event["columns"][0].get("primary_key") and event["columns"][1]["nullable"] is True
    creates = [e for e in schema_events if e["ddl"].upper().startswith("CREATE TABLE")]
    assert sorted(e["table"] for e in creates) == ["a", "b"]
    # each schema event comes after every change before its statement and before every change after it
    place = {e["source"]["id"]: i for i, e in enumerate(events)}
    after = next(ch for _, chs, _ in found for ch in chs if ch["after"] and ch["after"].get("v") == "after")
    assert place[event["source"]["id"]] < place[after["source"]["id"]]
    assert after["after"] == {"id": 100, "c2": 7, "v": "after"}


def test_debezium_transaction_metadata(mariadb, fresh_db, tmp_path):
    db = fresh_db
    overrides = base_overrides(mariadb, tmp_path, sink__format="debezium", sink__transaction_events="true",
                               sink__schema_events="true", filters__include_schemas=db)
    with running_daemon(overrides) as daemon:
        load(mariadb, db)
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    events = read_changes(tmp_path / "sink")
    walked, _ = walk(mariadb, db)
    assert len(walked) == len(SHAPES) + 2
    statuses = [e for e in events if "status" in e]
    assert [e["status"] for e in statuses] == ["BEGIN", "END"] * len(walked)
    assert [e["source"]["id"] for e in statuses] == [i for b, c, _ in walked for i in (b, c)]
    current, orders = None, []
    for e in events:
        if e.get("status") == "BEGIN":
            current, orders = e["id"], []
        elif e.get("status") == "END":
            assert e["id"] == current and e["event_count"] == len(orders)
            per = {}
            for table, _ in orders:
                per[table] = per.get(table, 0) + 1
            assert e["data_collections"] == [{"data_collection": t, "event_count": n} for t, n in per.items()]
            assert [o for _, o in orders] == [(i, sum(1 for t, _ in orders[:i] if t == orders[i - 1][0]))
                                              for i in range(1, len(orders) + 1)]
        elif "op" in e:
            block = e["transaction"]
            assert block["id"] == current
            orders.append((f"{e['source']['db']}.{e['source']['table']}",
                           (block["total_order"], block["data_collection_order"])))
        elif "tableChanges" in e:
            assert e["databaseName"] == db and e["source"]["db"] == db
            change = e["tableChanges"][0]
            if e["ddl"].upper().startswith("ALTER"):
                assert change["type"] == "ALTER" and change["id"] == f'"{db}"."a"'
                assert [(c["name"], c["position"]) for c in change["table"]["columns"]] == [
                    ("id", 1), ("c2", 2), ("v", 3)]
                assert change["table"]["primaryKeyColumnNames"] == ["id"]


def test_heartbeats_carry_the_committed_position(mariadb, fresh_db, tmp_path):
    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.quiet (id INT PRIMARY KEY)")
    mariadb.sql(f"CREATE TABLE `{db}`.busy (id INT PRIMARY KEY)")
    overrides = base_overrides(mariadb, tmp_path, sink__heartbeat_seconds="1",
                               filters__include_tables=f"{db}.quiet")
    with running_daemon(overrides) as daemon:
        wait_until(lambda: _heartbeats(tmp_path), timeout=20, what="a first heartbeat")
        first = _heartbeats(tmp_path)[-1]
        for i in range(5):
            mariadb.sql(f"INSERT INTO `{db}`.busy VALUES ({i})")   # filtered out: no change is written
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
        time.sleep(0.5)
        wait_until(lambda: _heartbeats(tmp_path)[-1]["source"]["pos"] != first["source"]["pos"], timeout=20,
                   what="a heartbeat at the new position")
    events = read_changes(tmp_path / "sink")
    assert all(e["op"] == "heartbeat" for e in events), "a filtered-out change was written"
    beats = _heartbeats(tmp_path)
    positions = [(b["source"]["file"], b["source"]["pos"]) for b in beats]
    assert positions == sorted(positions) and len(set(b["source"]["id"] for b in beats)) == len(beats)
    last = beats[-1]["source"]
    from tests.support.daemon import read_checkpoint

    checkpoint = read_checkpoint(tmp_path / "checkpoint.json")["position"]
    assert (last["file"], last["pos"]) <= (checkpoint["file"], checkpoint["pos"])
    assert last["id"].startswith(f"{last['file']}:{last['pos']}:h")
    gaps = [b["ts"] - a["ts"] for a, b in zip(beats, beats[1:])]
    assert all(g >= 0 for g in gaps), gaps


def _heartbeats(workdir) -> list[dict]:
    return [e for e in read_changes(workdir / "sink", strict=False) if e["op"] == "heartbeat"]


def test_sigkill_leaves_whole_transactions(mariadb, fresh_db, tmp_path):
    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v INT)")
    overrides = base_overrides(mariadb, tmp_path, sink__transaction_events="true", filters__include_schemas=db)
    conn = mariadb.connect(database=db)
    cur = conn.cursor()
    try:
        inserted = kill_three_times(cur, overrides)
        with running_daemon(overrides) as daemon:
            wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    finally:
        conn.close()
    events = read_changes(tmp_path / "sink")
    ids = [e["source"]["id"] for e in events]
    assert len(ids) == len(set(ids)), "an event was delivered twice"
    found = _transactions(events)
    assert len(found) == 40 * 3 and all(c["events"] == 3 for _, _, c in found)
    assert sorted(ch["after"]["id"] for _, chs, _ in found for ch in chs) == list(range(inserted))
