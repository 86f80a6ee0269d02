"""``binlogd run`` with ``[sink] format = "debezium"`` into the JSON-lines sink, against a real MariaDB.

The server's writes (inserts, updates including a primary-key change and NULL <-> value, deletes, in
multi-statement and autocommit transactions, on two tables, one with a two-column key) go through the
daemon; every line must be Debezium's MySQL envelope, its ``source`` must name a rows event of the
right kind, table, time and server in the server's own binlog files (read with the file decoder), and
replaying the envelopes by primary key must give the tables' ``SELECT``.
"""

from __future__ import annotations

import random
import time

import pytest

from binlogd.cli.filetools import dump_events
from binlogd.library import debezium
from tests.support.daemon import (
    assert_sink_matches,
    base_overrides,
    read_changes,
    replay,
    running_daemon,
    wait_caught_up,
)

pytestmark = pytest.mark.server

DDL_T = """CREATE TABLE t (
  id INT NOT NULL PRIMARY KEY, n BIGINT UNSIGNED, d DECIMAL(12,4), dt DATETIME(6), dd DATE,
  vc VARCHAR(60) CHARACTER SET utf8mb4, bl BLOB, e ENUM('red','green','blue'), st SET('a','b','c'), j JSON,
  dbl DOUBLE
) CHARACTER SET utf8mb4"""
DDL_U = "CREATE TABLE u (k1 INT NOT NULL, k2 VARCHAR(20) NOT NULL, v TEXT, PRIMARY KEY (k1, k2)) CHARACTER SET utf8mb4"
COLS = ("id", "n", "d", "dt", "dd", "vc", "bl", "e", "st", "j", "dbl")
SOURCE_KEYS = ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns", "table",
               "server_id", "gtid", "file", "pos", "row", "id", "thread", "query"]
OPS = {"c": "insert", "u": "update", "d": "delete"}


def _row(rng: random.Random, id_: int) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.2 else v

    return (id_, maybe(rng.choice([0, 2**64 - 1, rng.randint(0, 2**64 - 1)])),
            maybe(f"{rng.randint(-99999999, 99999999)}.{rng.randint(0, 9999):04d}"),
            maybe(f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                  f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"),
            maybe(f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
            maybe(rng.choice(["plain", "héllo", "emoji 😀", "quote ' \" \\", "tab\tnl\n"]) + str(id_)),
            maybe(rng.randbytes(rng.randint(0, 80))),
            maybe(rng.choice(["red", "green", "blue"])),
            maybe(",".join(sorted(rng.sample("abc", rng.randint(0, 3))))),
            maybe(rng.choice(['{"a": 1, "b": [true, null]}', "[1, 2.5]", '"s"', "{}"])),
            maybe(rng.choice([0.0, -1.5, 3.141592653589793, 1e300])))


def _rows_events(server, db: str) -> dict:
    """(file, pos) -> (op, table, rows in the event, timestamp, server_id) of every rows event of ``db`` in the
    server's binlog files, read with the file decoder."""
    out = {}
    for path in server.binlog_files():
        for ev in dump_events(path):
            if hasattr(ev, "kind") and getattr(ev, "schema", None) == db:
                out[(path.name, ev.header.pos)] = (ev.kind, ev.table, len(ev.rows), ev.header.timestamp,
                                                   ev.header.server_id)
    return out


def _write_load(server, db: str, rng: random.Random) -> int:
    """Inserts, updates and deletes on t and u; returns the number of transactions."""
    conn = server.connect(database=db, init_command="SET time_zone = '+00:00'")
    n_tx = 0
    try:
        cur = conn.cursor()
        cur.execute(DDL_T)
        cur.execute(DDL_U)
        insert = f"INSERT INTO t ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})"
        live, next_id = set(), 1
        for round_ in range(25):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 5)):
                cur.execute(insert, _row(rng, next_id))
                live.add(next_id)
                next_id += 1
            if rng.random() < 0.7:
                victim = rng.choice(sorted(live))
                new = _row(rng, victim)
                cur.execute(f"UPDATE t SET {', '.join(f'{c} = %s' for c in COLS[1:])} WHERE id = %s", (*new[1:], victim))
            if rng.random() < 0.3:
                victim = rng.choice(sorted(live))
                cur.execute("DELETE FROM t WHERE id = %s", (victim,))
                live.discard(victim)
            cur.execute("INSERT INTO u VALUES (%s, %s, %s)", (round_, f"k{round_ % 3}", rng.choice(["x", None, "ü"])))
            cur.execute("COMMIT")
            n_tx += 1
            if round_ % 6 == 2:  # autocommit statements touching many rows, NULL <-> value
                cur.execute("UPDATE t SET vc = CONCAT(IFNULL(vc, ''), '✓'), bl = NULL WHERE MOD(id, 3) = 0")
                cur.execute("UPDATE u SET v = NULL WHERE MOD(k1, 2) = 0")
                n_tx += 2
        cur.execute("UPDATE t SET id = id + 1000 WHERE MOD(id, 4) = 0")  # primary-key change
        cur.execute("DELETE FROM t WHERE MOD(id, 7) = 0")
        cur.execute("DELETE FROM u WHERE k1 < 4")
        n_tx += 3
    finally:
        conn.close()
    return n_tx


def test_debezium_envelopes_replay_to_the_tables(mariadb, fresh_db, tmp_path):
    db = fresh_db
    started_ms = time.time_ns() // 10**6
    overrides = base_overrides(mariadb, tmp_path, sink__format="debezium", sink__server_name="dbserver1")
    with running_daemon(overrides) as daemon:
        n_tx = _write_load(mariadb, db, random.Random(2828))
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
    # running_daemon sent SIGTERM and asserted exit code 0
    ended_ms = time.time_ns() // 10**6

    envelopes = read_changes(tmp_path / "sink")
    mine = [e for e in envelopes if e["source"]["db"] == db]
    assert mine, f"the sink holds no change of {db}: {envelopes[:3]}"
    by_pos = _rows_events(mariadb, db)
    seen = set()
    for env in mine:
        assert list(env) == ["before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"], env
        src = env["source"]
        assert list(src) == SOURCE_KEYS, env
        assert (src["connector"], src["name"], src["version"], src["snapshot"]) == (
            "mysql", "dbserver1", debezium.version(), "false"), env
        assert (src["sequence"], src["thread"], src["query"], env["transaction"]) == (None, None, None, None), env
        assert env["op"] in OPS, env
        # source names the rows event that carried the row, as the server's own binlog files have it
        ev = by_pos.get((src["file"], src["pos"]))
        assert ev is not None, f"no rows event of {db} at {src['file']}:{src['pos']} in the server's files: {env}"
        kind, table, nrows, ts, server_id = ev
        assert (kind, table, ts * 1000, server_id) == (OPS[env["op"]], src["table"], src["ts_ms"],
                                                       src["server_id"]), (ev, env)
        assert 0 <= src["row"] < nrows and src["id"] not in seen, env
        assert src["id"] == f"{src['file']}:{src['pos']}:0:{src['row']}", env
        seen.add(src["id"])
        assert isinstance(src["gtid"], str) and src["gtid"], env
        assert started_ms <= env["ts_ms"] <= ended_ms, env  # processing time
        assert (env["before"] is None) == (env["op"] == "c") and (env["after"] is None) == (env["op"] == "d"), env
    ops = {op: sum(1 for e in mine if e["op"] == op) for op in "cud"}
    assert all(ops.values()), ops
    gtids = {e["source"]["gtid"] for e in mine}
    assert len(gtids) >= n_tx - 3, f"{len(gtids)} GTIDs for {n_tx} transactions"  # an UPDATE may touch no row
    # a consumer of Debezium events rebuilds the tables: the same rows as the server's SELECT
    changes = [{"op": OPS[e["op"]], "schema": e["source"]["db"], "table": e["source"]["table"],
                "before": e["before"], "after": e["after"], "source": e["source"]} for e in mine]
    state = replay(changes, pk={(db, "t"): ("id",), (db, "u"): ("k1", "k2")})
    assert_sink_matches(mariadb, db, ["t"], state, pk="id")
    assert_sink_matches(mariadb, db, ["u"], state, pk=("k1", "k2"))
    print(f"debezium round trip: {len(mine)} envelopes {ops}, {len(gtids)} transactions")
