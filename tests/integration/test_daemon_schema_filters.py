"""Column names from information_schema, and filters.

Schema source (``mariadb_minimal``: binlog_row_metadata=MINIMAL and compressed events, so TABLE_MAP
carries no column names and no ENUM/SET value names, only signedness and charsets):

- ``schema.source=auto`` (and ``information_schema``): change events carry the real column names,
  unsigned integers at their bounds and ENUM/SET value names, and the replay equals the table; after
  ``ALTER TABLE … ADD COLUMN`` in the stream (a compressed QUERY event) later rows carry the new
  column (the cache is dropped by the DDL).
- ``schema.source=none``: columns are ``@1``, ``@2``…, unsigned values are still right (MINIMAL
  logs signedness), ENUM/SET come as their index/bitmask (MINIMAL logs no value names), and
  ``binlogd_columns_unnamed_total`` on /metrics is > 0.

Filters (``mariadb``): include/exclude schema and table patterns and event types; only the selected
changes reach the sink, and the checkpoint still reaches the server's position when the last
transactions are all filtered out.

The daemon runs as ``binlogd run`` (subprocess, ``daemon_following``: SIGTERM, exit 0 asserted).
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tests.support.daemon import (
    assert_sink_matches,
    daemon_following,
    master_status,
    metric,
    parse_metrics,
    read_changes,
    replay,
    scrape,
    table_rows,
    wait_caught_up,
)

pytestmark = pytest.mark.server

DDL_T = """CREATE TABLE t (
  id INT NOT NULL PRIMARY KEY,
  tiu TINYINT UNSIGNED, siu SMALLINT UNSIGNED, iu INT UNSIGNED, biu BIGINT UNSIGNED, bi BIGINT,
  e ENUM('red','green','blue'), st SET('a','b','c','d'), vc VARCHAR(40) CHARACTER SET utf8mb4,
  d DECIMAL(10,2) UNSIGNED, dt DATETIME(3)
) CHARACTER SET utf8mb4"""
T_COLS = ("id", "tiu", "siu", "iu", "biu", "bi", "e", "st", "vc", "d", "dt")
T_ROWS = [
    (1, 255, 65535, 4294967295, 18446744073709551615, -9223372036854775808, "blue", "a,d", "héllo 😀",
     "99999999.99", "2024-02-29 23:59:59.999"),
    (2, 0, 0, 0, 0, 9223372036854775807, "red", "", "", "0.00", "1000-01-01 00:00:00.000"),
    (3, 128, 32768, 2147483648, 9223372036854775808, -1, "green", "b,c", "x", "1.50", None),
    (4, None, None, None, None, None, None, None, None, None, None),
]


@pytest.fixture
def minimal_db(mariadb_minimal):
    name = f"t_minimal_{uuid.uuid4().hex[:10]}"
    mariadb_minimal.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb_minimal.sql(f"DROP DATABASE IF EXISTS `{name}`")


def _write_t(server, db: str) -> None:
    conn = server.connect(database=db, init_command="SET time_zone = '+00:00'")
    try:
        cur = conn.cursor()
        cur.execute(DDL_T)
        cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO t ({', '.join(T_COLS)}) VALUES ({', '.join(['%s'] * len(T_COLS))})", T_ROWS)
        cur.execute("COMMIT")
        cur.execute("UPDATE t SET e = 'red', st = 'a,b,c,d', biu = 18446744073709551614, tiu = 254 WHERE id = 2")
        cur.execute("UPDATE t SET e = NULL, st = 'c', iu = 4294967294 WHERE id = 1")
        cur.execute("DELETE FROM t WHERE id = 3")
    finally:
        conn.close()


def _mine(changes: list[dict], db: str, table: str | None = None) -> list[dict]:
    return [c for c in changes if c["schema"] == db and (table is None or c["table"] == table)]


@pytest.mark.parametrize("source", ["auto", "information_schema"])
def test_schema_source_names_from_information_schema(mariadb_minimal, minimal_db, tmp_path, source):
    server, db = mariadb_minimal, minimal_db
    with daemon_following(server, tmp_path, **{"schema.source": source}) as daemon:
        _write_t(server, db)
        server.sql("CREATE TABLE g (id INT PRIMARY KEY, a VARCHAR(10))", database=db)
        server.sql("INSERT INTO g VALUES (1, 'one'), (2, 'two')", database=db)
        # Caught up before the ALTER: the first sighting of g is read with its pre-ALTER columns.
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=daemon)
        server.sql("ALTER TABLE g ADD COLUMN b INT UNSIGNED NOT NULL DEFAULT 7", database=db)
        server.sql("INSERT INTO g VALUES (3, 'three', 4000000000)", database=db)
        server.sql("UPDATE g SET a = 'uno' WHERE id = 1", database=db)
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=daemon)

    changes = read_changes(tmp_path / "sink")
    t_changes = _mine(changes, db, "t")
    assert len(t_changes) == 4 + 2 + 1, t_changes
    for c in t_changes:
        for image in (c["before"], c["after"]):
            if image is not None:
                assert tuple(image) == T_COLS, f"column names {list(image)} != {list(T_COLS)}: {c}"
    first = t_changes[0]["after"]
    assert first["biu"] == 18446744073709551615 and first["iu"] == 4294967295 and first["tiu"] == 255, first
    assert first["bi"] == -9223372036854775808, first
    assert first["e"] == "blue" and first["st"] == ["a", "d"], first
    state = replay(t_changes)
    assert_sink_matches(server, db, ["t"], state)

    g = _mine(changes, db, "g")
    assert [c["op"] for c in g] == ["insert", "insert", "insert", "update"], g
    assert g[0]["after"] == {"id": 1, "a": "one"} and g[1]["after"] == {"id": 2, "a": "two"}, g[:2]
    assert g[2]["after"] == {"id": 3, "a": "three", "b": 4000000000}, \
        f"after ALTER … ADD COLUMN the new column is not named (schema cache not refreshed?): {g[2]}"
    assert g[3]["before"] == {"id": 1, "a": "one", "b": 7} and g[3]["after"] == {"id": 1, "a": "uno", "b": 7}, g[3]
    assert table_rows(server, db, "g")[3] == g[2]["after"]


def test_schema_source_none_unnamed_columns(mariadb_minimal, minimal_db, tmp_path):
    server, db = mariadb_minimal, minimal_db
    with daemon_following(server, tmp_path, **{"schema.source": "none"}) as daemon:
        port = daemon.metrics_port(timeout=10)
        _write_t(server, db)
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=daemon)
        samples = parse_metrics(scrape(port)[1])

    unnamed = metric(samples, "binlogd_columns_unnamed_total")
    assert unnamed is not None and unnamed > 0, f"binlogd_columns_unnamed_total = {unnamed}"
    t_changes = _mine(read_changes(tmp_path / "sink"), db, "t")
    assert len(t_changes) == 7, t_changes
    labels = tuple(f"@{i}" for i in range(1, len(T_COLS) + 1))
    for c in t_changes:
        for image in (c["before"], c["after"]):
            if image is not None:
                assert tuple(image) == labels, f"columns {list(image)} are not @1..@{len(T_COLS)}: {c}"
    # Positional values: MINIMAL metadata carries signedness, so unsigned bounds are still right;
    # it carries no ENUM/SET value names, so those are the 1-based index and the bitmask.
    by_name = [dict(zip(T_COLS, (c["after"] or c["before"]).values())) for c in t_changes]
    first = by_name[0]
    assert first["id"] == 1 and first["biu"] == 18446744073709551615 and first["iu"] == 4294967295, first
    assert first["tiu"] == 255 and first["siu"] == 65535 and first["bi"] == -9223372036854775808, first
    assert first["e"] == 3, f"ENUM 'blue' without value names: {first['e']!r} (expected its index 3)"
    assert first["st"] == 0b1001, f"SET 'a,d' without value names: {first['st']!r} (expected bitmask 9)"
    assert first["vc"] == "héllo 😀" and first["d"] == "99999999.99", first


# --------------------------------------------------------------------------- filters


@pytest.fixture
def second_db(mariadb, fresh_db):
    name = f"{fresh_db}_b"
    mariadb.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb.sql(f"DROP DATABASE IF EXISTS `{name}`")


TABLES = ("keep_a", "keep_b", "keep_secret", "other")


def _workload(server, dbs: list[str]) -> list[tuple[str, str, str, int]]:
    """Inserts, updates and deletes on every table of every schema; returns each row change as
    (schema, table, op, id). The last transactions touch only ``other`` (filtered out by every case)."""
    out = []
    for db in dbs:
        for t in TABLES:
            server.sql(f"CREATE TABLE `{t}` (id INT PRIMARY KEY, v INT)", database=db)
    conn = server.connect()
    try:
        cur = conn.cursor()
        for k in range(1, 6):
            cur.execute("BEGIN")
            for db in dbs:
                for t in TABLES:
                    cur.execute(f"INSERT INTO `{db}`.`{t}` VALUES ({k}, {k})")
                    out.append((db, t, "insert", k))
                    if k % 2 == 0:
                        cur.execute(f"UPDATE `{db}`.`{t}` SET v = v + 100 WHERE id = {k - 1}")
                        out.append((db, t, "update", k - 1))
                    if k == 5:
                        cur.execute(f"DELETE FROM `{db}`.`{t}` WHERE id = 1")
                        out.append((db, t, "delete", 1))
            cur.execute("COMMIT")
        for k in range(100, 105):  # filtered-only transactions at the end of the stream
            for db in dbs:
                cur.execute(f"INSERT INTO `{db}`.`other` VALUES ({k}, 0)")
                out.append((db, "other", "insert", k))
    finally:
        conn.close()
    return out


FILTER_CASES = {
    # brief's example: tables by pattern, one excluded, inserts only
    "tables_and_types": (
        lambda a, b: {"filters.include_tables": f"{a}.keep*", "filters.exclude_tables": f"{a}.keep_secret",
                      "filters.event_types": "WRITE_ROWS*"},
        lambda a, b, s, t, op: s == a and t in ("keep_a", "keep_b") and op == "insert"),
    # schema patterns (excludes win), updates and deletes only
    "schemas_and_types": (
        lambda a, b: {"filters.include_schemas": f"{a}*", "filters.exclude_schemas": b,
                      "filters.exclude_tables": "*.other", "filters.event_types": "update_rows*,DELETE_ROWS*"},
        lambda a, b, s, t, op: s == a and t != "other" and op in ("update", "delete")),
    # both include lists must pass, and an exclude beats an include; all event types
    "include_both_lists": (
        lambda a, b: {"filters.include_schemas": f"{a},{b}", "filters.include_tables": f"{b}.keep_?,*.keep_secret",
                      "filters.exclude_tables": f"{a}.keep_secret"},
        lambda a, b, s, t, op: s == b and t in ("keep_a", "keep_b", "keep_secret")),
}


@pytest.mark.parametrize("case", sorted(FILTER_CASES))
def test_filters_select_changes_and_checkpoint_advances(mariadb, fresh_db, second_db, tmp_path, case):
    a, b = fresh_db, second_db
    make_overrides, selected = FILTER_CASES[case]
    with daemon_following(mariadb, tmp_path, **make_overrides(a, b)) as daemon:
        written = _workload(mariadb, [a, b])
        cp = wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=daemon)
        file, pos = master_status(mariadb)
        assert (cp["position"]["file"], cp["position"]["pos"]) == (file, pos), \
            f"checkpoint {cp['position']} != server {file}:{pos} after filtered transactions"

    got = Counter((c["schema"], c["table"], c["op"], (c["after"] or c["before"])["id"])
                  for c in read_changes(tmp_path / "sink") if c["schema"] in (a, b))
    want = Counter(w for w in written if selected(a, b, *w[:3]))
    assert want, "the case selects nothing: the test is wrong"
    missing, extra = want - got, got - want
    assert not missing and not extra, (f"filters {make_overrides(a, b)}: missing from sink {sorted(missing)[:10]}, "
                                       f"not filtered out {sorted(extra)[:10]}")
