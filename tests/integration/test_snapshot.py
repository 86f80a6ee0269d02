"""The initial snapshot (``[snapshot] mode = "initial"``) on the real MariaDB servers, MINIMAL row metadata.

- under a write load of inserts, updates and deletes, tables with a BIGINT key, a composite INT + VARCHAR key
  (case-insensitive collation), no key, and an empty one: reads replayed as upserts, then the stream, equal
  each table's SELECT, and no key is read twice;
- every value of a many-type row reads as the stream gives the same row (an INSERT … SELECT of it streamed
  after the snapshot);
- a table created and a column added while the snapshot runs;
- the checkpoint holds no snapshot object once it is done (tests/faults/test_faults_snapshot.py reads it while
  it runs); metrics; the Debezium format.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid

import pytest

from tests.support import servers
from tests.support.daemon import (
    base_overrides,
    read_changes,
    running_daemon,
    table_rows,
    wait_caught_up,
)
from tests.support.flavour import skip_unless_flavour
from tests.support.snapshots import WriteLoad, check_against_server, make_tables, replay_upsert

pytestmark = [pytest.mark.server, servers.cross_compression()]  # also [mysql-9.7-compressed]

DONE = re.compile(r"snapshot: done")


SNAP_USER, SNAP_PASSWORD = "snap", "snappass"


def _overrides(server, tmp_path, db: str, chunk_rows: int = 40, **extra) -> dict:
    """The daemon's settings; on MySQL an account with RELOAD, whose snapshot opens its view under FLUSH TABLES
    WITH READ LOCK (without RELOAD: test_snapshot_locked_view's lock-free fallback)."""
    if server.flavor == "mysql":
        server.sql(f"CREATE USER IF NOT EXISTS '{SNAP_USER}'@'127.0.0.1' IDENTIFIED BY '{SNAP_PASSWORD}'")
        server.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD ON *.* TO '{SNAP_USER}'@'127.0.0.1'")
        extra = {"source.user": SNAP_USER, "source.password": SNAP_PASSWORD, **extra}
    return base_overrides(server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=chunk_rows,
                          filters__include_schemas=db, **extra)


def _db() -> str:
    return f"snap_{uuid.uuid4().hex[:10]}"


def test_snapshot_under_writes_then_stream(mariadb_minimal, tmp_path):
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 2000)
    server.sql(f"ANALYZE TABLE `{db}`.big")  # its row estimate, which decides the key ranges
    load = WriteLoad(server, db, 2000).start()
    try:
        with running_daemon(_overrides(server, tmp_path, db), wait_streaming=False) as d:
            line = d.wait_for_line(r"snapshot: \d+ tables at ", timeout=30)
            assert "1 without a primary key" in line, line
            d.wait_for_line(DONE, timeout=60)
            d.wait_streaming(timeout=30)
            assert d.count(r"snapshot: .*\.big: \d+ rows .* rows/s") == 1, d.stderr
            assert d.count(r"snapshot: .*\.big: read in 4 key ranges at once") == 1, d.stderr  # MySQL too
            metrics = urllib.request.urlopen(_metrics_url(d), timeout=5).read().decode()
            assert "binlogd_snapshot_state 2.0" in metrics
            assert re.search(rf'binlogd_snapshot_rows_total{{table="{db}.big"}} [1-9]', metrics), metrics
            assert re.search(rf'binlogd_snapshot_chunks_done{{table="{db}.big"}} [1-9]', metrics)
            count = load.stop()
            assert count > 20, "the write load barely ran during the snapshot"
            cp = wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert "snapshot" not in cp, cp
        changes = read_changes(tmp_path / "sink")
        reads = [c for c in changes if c["op"] == "read"]
        assert reads and all(c["source"]["snapshot"] is True and c["before"] is None for c in reads)
        assert all(c["op"] == "read" for c in changes[:len(reads)]), "a stream change came before a read"
        comp = [tuple(c["after"][k] for k in ("a", "b")) for c in reads if c["table"] == "comp"]
        assert len(comp) == len(set(comp))
        check_against_server(server, db, changes)
    finally:
        load.done.set()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _metrics_url(d) -> str:
    line = d.wait_for_line(r"metrics on http://", timeout=10)
    return re.search(r"(http://\S+/metrics)", line).group(1)


TYPES = """(id INT NOT NULL PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(12,4), du DECIMAL(20,0) UNSIGNED, f FLOAT, dbl DOUBLE, dt6 DATETIME(6), dt DATETIME,
  ts TIMESTAMP(3) NULL DEFAULT NULL, dd DATE, tm TIME(2), y YEAR, b BIT(10), vc VARCHAR(40), ch CHAR(5),
  l1 VARCHAR(10) CHARACTER SET latin1, bl BLOB, vb VARBINARY(8), e ENUM('red','green','blue'),
  st SET('a','b','c'), j JSON, tx TEXT) CHARACTER SET utf8mb4"""
TYPE_ROWS = [
    "(1, -128, 255, -9223372036854775808, 18446744073709551615, '-123.4500', '99999999999999999999', 1.1, "
    "3.141592653589793, '2026-11-27 12:34:56.123456', '1999-12-31 23:59:59', '2026-11-27 01:02:03.456', "
    "'2026-02-28', '-838:59:59.00', 2026, b'1010101010', 'héllo 😀', 'ab', 'ça', x'00ff10', x'0102', 'green', "
    "'a,c', '{\"k\": [1, 2.5, \"x\"]}', 'text')",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, 0, 0, 0, 0, '0.0000', '0', -0.5, 1e300, '1000-01-01 00:00:00.000001', '2038-01-19 03:14:07', "
    "'1970-01-01 00:00:01.000', '9999-12-31', '00:00:00.01', 1901, b'0', '', '', '', '', '', 'red', '', "
    "'[]', '')",
    "(4, 127, 1, 1, 1, '1.0000', '1', 123456789, -1.5e-7, '2026-01-01 00:00:00', '2026-01-01 00:00:00', "
    "'2026-01-01 00:00:00.001', '2026-01-01', '100:00:00', 0, b'1111111111', 'ctl \\t\\n\\\\ \\\" \x01', "
    "'x  ', 'ÿ', x'ff', x'00', 'blue', 'a,b,c', '{\"a\": {\"b\": null}}', REPEAT('é', 300))",
]


def test_snapshot_values_equal_the_streamed_form(mariadb_minimal, tmp_path):
    """A row's read ``after`` equals the streamed ``after`` of the same values (INSERT … SELECT after the snapshot)."""
    server, db = mariadb_minimal, _db()
    server.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    try:
        server.sql(f"CREATE TABLE types {TYPES}", database=db)
        server.sql(f"CREATE TABLE twin {TYPES}", database=db)
        server.sql("INSERT INTO types VALUES " + ", ".join(TYPE_ROWS), database=db)
        with running_daemon(_overrides(server, tmp_path, db, chunk_rows=2), wait_streaming=False) as d:
            d.wait_for_line(DONE, timeout=60)
            d.wait_streaming(timeout=30)
            server.sql("INSERT INTO twin SELECT * FROM types", database=db)
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
        changes = read_changes(tmp_path / "sink")
        reads = {c["after"]["id"]: c["after"] for c in changes if c["op"] == "read" and c["table"] == "types"}
        streamed = {c["after"]["id"]: c["after"] for c in changes if c["op"] == "insert" and c["table"] == "twin"}
        assert sorted(reads) == [1, 2, 3, 4] and sorted(streamed) == [1, 2, 3, 4], changes
        for key in reads:
            assert json.dumps(reads[key], sort_keys=True) == json.dumps(streamed[key], sort_keys=True), \
                (key, {k: (reads[key][k], streamed[key].get(k)) for k in reads[key]
                       if reads[key][k] != streamed[key].get(k)})
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_snapshot_with_ddl_and_a_new_table(mariadb_minimal, tmp_path):
    """While the snapshot waits to read ``big`` (held by LOCK TABLES WRITE), ``big`` is altered (a copying ALTER:
    its rows are then unreadable in the snapshot's view) and updated, and a table is created and filled: the
    snapshot renews its view and ends, and the replay equals the tables; the new table comes from the stream."""
    # MySQL opens its view under FLUSH TABLES WITH READ LOCK, which waits for the LOCK TABLES below
    skip_unless_flavour(mariadb_minimal, "mariadb", "a read view opened without a lock (Binlog_snapshot_position)")
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 3000)
    holder = server.connect(database=db)
    try:
        with holder.cursor() as cur:
            cur.execute("LOCK TABLES big WRITE")
        with running_daemon(_overrides(server, tmp_path, db, chunk_rows=20), wait_streaming=False) as d:
            d.wait_for_line(r"snapshot: .*\.nokey: \d+ rows", timeout=30)  # read first; big waits for the lock
            server.sql("CREATE TABLE late (id INT PRIMARY KEY, v VARCHAR(10))", database=db)
            server.sql("INSERT INTO late VALUES (1, 'a'), (2, 'b')", database=db)
            with holder.cursor() as cur:
                cur.execute("ALTER TABLE big ADD COLUMN extra INT NOT NULL DEFAULT 5, ALGORITHM=COPY")
                cur.execute("UPDATE big SET extra = n % 7 + 10 WHERE id % 2 = 0")
                cur.execute("UNLOCK TABLES")
            holder.commit()
            d.wait_for_line(DONE, timeout=60)
            d.wait_streaming(timeout=30)
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert d.count(r"big changed definition after the read view opened: renewing the view") == 1, d.stderr
        changes = read_changes(tmp_path / "sink")
        check_against_server(server, db, changes)
        state, _ = replay_upsert(changes, db, {"late": ("id",)})
        assert state["late"] == {(1,): {"id": 1, "v": "a"}, (2,): {"id": 2, "v": "b"}}
        assert not [c for c in changes if c["table"] == "late" and c["op"] == "read"]
        views = {c["source"]["pos"] for c in changes if c["op"] == "read" and c["table"] == "big"}
        first = {c["source"]["pos"] for c in changes if c["op"] == "read" and c["table"] == "nokey"}
        assert len(views) == 1 and views != first, "big was not read in a renewed view"
    finally:
        holder.close()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_snapshot_of_empty_tables_and_no_snapshot_on_restart(mariadb_minimal, tmp_path):
    """Only an empty table: the snapshot ends at once; a restart (checkpoint present) does not snapshot again."""
    server, db = mariadb_minimal, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    try:
        server.sql("CREATE TABLE `empty` (id INT PRIMARY KEY)", database=db)
        overrides = _overrides(server, tmp_path, db)
        with running_daemon(overrides, wait_streaming=False) as d:
            d.wait_for_line(r"snapshot: .*\.empty: 0 rows", timeout=30)
            d.wait_for_line(DONE, timeout=30)
            d.wait_streaming(timeout=30)
        server.sql("INSERT INTO `empty` VALUES (7)", database=db)
        with running_daemon(overrides) as d:
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert not d.count("snapshot: "), d.stderr
        changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == db]
        assert [c["op"] for c in changes] == ["insert"]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_snapshot_in_debezium_format(mariadb_minimal, tmp_path):
    """With ``sink.format = "debezium"`` rows go through PyMySQL and the sink's own envelope: op "r", each key
    once, chunked (chunk_rows 3) and the values of the server's SELECT."""
    server, db = mariadb_minimal, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    try:
        server.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), d DECIMAL(6,2))", database=db)
        server.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}', '{i}.50')" for i in range(1, 11)), database=db)
        with running_daemon(_overrides(server, tmp_path, db, chunk_rows=3, sink__format="debezium"),
                            wait_streaming=False) as d:
            d.wait_for_line(DONE, timeout=60)
            d.wait_streaming(timeout=30)
        lines = [json.loads(line) for p in sorted((tmp_path / "sink").glob("changes-*.jsonl"))
                 for line in p.read_text().splitlines()]
        reads = [c for c in lines if c.get("op") == "r"]
        assert [c["after"]["id"] for c in reads] == list(range(1, 11))
        assert {c["source"]["snapshot"] for c in reads} <= {"true", "last", "first"}
        want = {k[0] if isinstance(k, tuple) else k: v for k, v in table_rows(server, db, "t").items()}
        assert {c["after"]["id"]: c["after"]["v"] for c in reads} == {k: v["v"] for k, v in want.items()}
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_one_reader_reads_in_key_order(mariadb_minimal, tmp_path):
    """``readers = 1``: no key ranges; the table's rows arrive in key order, from one view."""
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 900)
    server.sql(f"ANALYZE TABLE `{db}`.big")
    try:
        with running_daemon(_overrides(server, tmp_path, db, chunk_rows=7, snapshot__readers=1)) as d:
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert d.count("snapshot: read view at") == 1, d.stderr
        changes = read_changes(tmp_path / "sink")
        check_against_server(server, db, changes)
        ids = [c["after"]["id"] for c in changes if c["op"] == "read" and c["table"] == "big"]
        assert ids == sorted(ids) and len(ids) == 900
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_no_key_ranges_without_full_row_images(mariadb_minimal, tmp_path):
    """With ``binlog_row_image`` not FULL a row moved between two ranges' views would come back partial: each
    table is then read on one connection, in key order, and the log says why once."""
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 900)
    server.sql(f"ANALYZE TABLE `{db}`.big")
    server.sql("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with running_daemon(_overrides(server, tmp_path, db, chunk_rows=7)) as d:
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert d.count("binlog_row_image is MINIMAL, not FULL: each table is read on one connection") == 1, \
                d.stderr
        ids = [c["after"]["id"] for c in read_changes(tmp_path / "sink") if c["op"] == "read" and c["table"] == "big"]
        assert ids == sorted(ids) and len(ids) == 900
    finally:
        server.sql("SET GLOBAL binlog_row_image = 'FULL'")
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
