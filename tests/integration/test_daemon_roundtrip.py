"""Round trip: the server's writes → ``binlogd run`` (JSON-lines sink) → replay == the tables' SELECT.

Two tables with many column types (signed/unsigned integers at their bounds, DECIMAL, DATETIME(6),
TIMESTAMP(3), DATE, TIME, utf8mb4 VARCHAR with emoji, BLOB, ENUM, SET, MariaDB JSON (a LONGTEXT),
NULLs), one with a two-column primary key; inserts, updates (including a primary-key change and
NULL ↔ value), deletes across many transactions, multi-statement and single-statement. The daemon is
stopped with SIGTERM (exit 0) once its checkpoint covers ``SHOW MASTER STATUS``.
"""

from __future__ import annotations

import random

import pytest

from binlogd.cli.filetools import dump_events
from tests.support import servers
from tests.support.daemon import (
    assert_sink_matches,
    base_overrides,
    check_change_shape,
    read_changes,
    replay,
    running_daemon,
    wait_caught_up,
)

pytestmark = [pytest.mark.server, servers.cross_compression()]  # also [mysql-9.7-compressed]

DDL_T = """CREATE TABLE t (
  id INT NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(12,4), du DECIMAL(20,0) UNSIGNED, dt6 DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL,
  dd DATE, tm TIME(2), vc VARCHAR(100) CHARACTER SET utf8mb4, bl BLOB,
  e ENUM('red','green','blue'), st SET('a','b','c','d'), j JSON, dbl DOUBLE
) CHARACTER SET utf8mb4"""

DDL_U = """CREATE TABLE u (
  k1 INT UNSIGNED NOT NULL, k2 VARCHAR(20) NOT NULL, n BIGINT, txt TEXT, PRIMARY KEY (k1, k2)
) CHARACTER SET utf8mb4"""

COLS = ("id", "ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu", "d", "du", "dt6", "ts", "dd",
        "tm", "vc", "bl", "e", "st", "j", "dbl")

BOUNDS = [
    (-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0),
    (127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,
     18446744073709551615),
]
TEXTS = ["plain", "héllo wörld", "emoji 😀🎉👍🏽", "中文字符", "", "quote ' and \" and \\", "tab\tnew\nline"]


def _datetime(rng: random.Random, year_lo: int, year_hi: int, digits: int) -> str:
    return (f"{rng.randint(year_lo, year_hi):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            f".{rng.randint(0, 10**digits - 1):0{digits}d}")


def _row(rng: random.Random, id_: int) -> tuple:
    ints = rng.choice(BOUNDS) if rng.random() < 0.3 else (
        rng.randint(-128, 127), rng.randint(0, 255), rng.randint(-32768, 32767), rng.randint(0, 65535),
        rng.randint(-8388608, 8388607), rng.randint(0, 16777215), rng.randint(-2**31, 2**31 - 1),
        rng.randint(0, 2**32 - 1), rng.randint(-2**63, 2**63 - 1), rng.randint(0, 2**64 - 1))

    def maybe(v):
        return None if rng.random() < 0.15 else v

    return (id_, *[maybe(v) for v in ints],
            maybe(f"{rng.randint(-99999999, 99999999)}.{rng.randint(0, 9999):04d}"),
            maybe(str(rng.randint(0, 10**20 - 1))),
            maybe(_datetime(rng, 1000, 9999, 6)),
            maybe(_datetime(rng, 2000, 2037, 3)),
            maybe(f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
            maybe(f"{rng.choice(['-', ''])}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:"
                  f"{rng.randint(0, 59):02d}.{rng.randint(0, 99):02d}"),
            maybe(rng.choice(TEXTS) + str(id_)),
            maybe(rng.randbytes(rng.randint(0, 300))),
            maybe(rng.choice(["red", "green", "blue"])),
            maybe(",".join(sorted(rng.sample("abcd", rng.randint(0, 4))))),
            maybe(rng.choice(['{"a": 1, "b": [true, null, "x😀"]}', "[1, 2.5, -3]", '"str"', "null", "{}"])),
            maybe(rng.choice([0.0, -1.5, 3.141592653589793, 1e300, -2.2250738585072014e-308])))


def _row_events(server, db: str) -> dict:
    """(file, pos) -> [(op, table, number of rows, timestamp, server_id)] of the rows events of ``db`` in the
    server's binlog files, read with the file decoder; those inside a TRANSACTION_PAYLOAD under the payload's pos."""
    out: dict = {}
    for path in server.binlog_files():
        for ev in dump_events(path):
            for inner in getattr(ev, "events", None) or (ev,):
                if hasattr(inner, "kind") and getattr(inner, "schema", None) == db:
                    out.setdefault((path.name, ev.header.pos), []).append(
                        (inner.kind, inner.table, len(inner.rows), inner.header.timestamp, inner.header.server_id))
    return out


def test_round_trip_all_types(mariadb, fresh_db, tmp_path):
    db = fresh_db
    rng = random.Random(4242)
    overrides = base_overrides(mariadb, tmp_path)
    with running_daemon(overrides) as daemon:
        conn = mariadb.connect(database=db, init_command="SET time_zone = '+00:00'")
        try:
            cur = conn.cursor()
            cur.execute(DDL_T)
            cur.execute(DDL_U)
            placeholders = ", ".join(["%s"] * len(COLS))
            insert_t = f"INSERT INTO t ({', '.join(COLS)}) VALUES ({placeholders})"
            live: set[int] = set()
            next_id = 1
            n_tx = 0
            for round_ in range(40):
                cur.execute("BEGIN")
                for _ in range(rng.randint(1, 6)):
                    cur.execute(insert_t, _row(rng, next_id))
                    live.add(next_id)
                    next_id += 1
                if live and rng.random() < 0.7:
                    victim = rng.choice(sorted(live))
                    new = _row(rng, victim)
                    sets = ", ".join(f"{c} = %s" for c in COLS[1:])
                    cur.execute(f"UPDATE t SET {sets} WHERE id = %s", (*new[1:], victim))
                if live and rng.random() < 0.3:
                    victim = rng.choice(sorted(live))
                    cur.execute("DELETE FROM t WHERE id = %s", (victim,))
                    live.discard(victim)
                cur.execute("INSERT INTO u VALUES (%s, %s, %s, %s)",
                            (round_, rng.choice(TEXTS)[:10] + "k", rng.randint(-2**63, 2**63 - 1), rng.choice(TEXTS)))
                cur.execute("COMMIT")
                n_tx += 1
                if round_ % 7 == 3:  # autocommit single statements between transactions
                    cur.execute("UPDATE t SET vc = CONCAT(IFNULL(vc, ''), '✓'), bl = NULL, j = NULL "
                                "WHERE MOD(id, 3) = 0")
                    cur.execute("UPDATE t SET ts = NULL, dt6 = '2001-02-03 04:05:06.000007', e = NULL, st = '' "
                                "WHERE MOD(id, 5) = 1")
                    cur.execute("UPDATE u SET n = NULL, txt = 'touched' WHERE MOD(k1, 2) = 0")
            # a primary-key change and a multi-row delete
            cur.execute("UPDATE t SET id = id + 100000 WHERE MOD(id, 4) = 0")
            cur.execute("DELETE FROM t WHERE MOD(id, 7) = 0")
            cur.execute("DELETE FROM u WHERE k1 < 5")
        finally:
            conn.close()
        cp = wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
        assert cp["sink"]["file"].startswith("changes-"), cp
    # running_daemon sent SIGTERM and asserted exit code 0

    changes = read_changes(tmp_path / "sink")
    mine = [c for c in changes if c["schema"] == db]
    assert mine, "the sink holds no change of the test schema"
    for c in mine:
        check_change_shape(c)
    gtids = {c["source"]["gtid"] for c in mine}
    assert None not in gtids and len(gtids) >= n_tx, f"{len(gtids)} GTIDs for {n_tx}+ transactions"
    ops = {op: sum(1 for c in mine if c["op"] == op) for op in ("insert", "update", "delete")}
    assert all(ops.values()), ops
    # a change's identity: source.id (inside a compressed transaction every change has the payload's pos)
    ids = [c["source"].get("id") or (c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in mine]
    assert len(ids) == len(set(ids)), "a change's identity appears twice in the sink"
    # source.file/pos name the rows event that carried the row, and source.row indexes into it
    by_pos = _row_events(mariadb, db)
    for c in mine:
        src = c["source"]
        evs = by_pos.get((src["file"], src["pos"]))
        assert evs, f"no rows event of {db} at {src['file']}:{src['pos']} in the server's files: {c}"
        assert any((kind, table, ts, server_id) == (c["op"], c["table"], c["ts"], src["server_id"]) and src["row"] < n
                   for kind, table, n, ts, server_id in evs), (evs, c)
    state = replay(mine, pk={(db, "t"): ("id",), (db, "u"): ("k1", "k2")})
    assert_sink_matches(mariadb, db, ["t"], state, pk="id")
    assert_sink_matches(mariadb, db, ["u"], state, pk=("k1", "k2"))
    print(f"round trip: {len(mine)} change events {ops}, {len(gtids)} transactions")
