"""The daemon's schema history on real servers (``binlogd run`` as a subprocess).

The oracle is the server that logs FULL row metadata (every name in its TABLE_MAPs) running the same
statements; the daemon follows the MINIMAL server (no names, compressed events) and must give the
same change events. The daemon is started after the DDL ran, with no history: the names come from the
DDL it reads in the stream. ``binlogd dump`` and Spark with the daemon's history file must name the
MINIMAL server's files as the daemon did.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid

from binlogd.library.schema import read_history
from binlogd.library.schema.history import position_key
from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    master_status,
    metric,
    parse_metrics,
    read_changes,
    running_daemon,
    scrape,
    wait_caught_up,
)
from tests.support.flavour import skip_unless_flavour
from tests.support.schema_workload import WORKLOAD, dump_changes, positional, run, workload

METRICS_LINE = re.compile(r"metrics on http://[^ ]*:(\d+)/metrics")


def _db(tag: str) -> str:
    return f"shd_{tag}_{uuid.uuid4().hex[:8]}"


def _changes(workdir, db: str, strict: bool = True) -> list[tuple]:
    return [(c["op"], c["schema"], c["table"], c["before"], c["after"])
            for c in read_changes(workdir / "sink", strict=strict) if c["schema"] == db]


def _follow(server, workdir, db: str, start: str) -> list[tuple]:
    """Run the daemon from ``start`` until it caught up with the server; its change events of ``db``."""
    overrides = base_overrides(server, workdir, **{"source.start": start, "filters.include_schemas": db})
    with running_daemon(overrides) as daemon:
        wait_caught_up(server, workdir / "checkpoint.json", daemon=daemon)
        assert "cannot parse DDL" not in daemon.stderr, daemon.stderr
    return _changes(workdir, db)


def test_daemon_on_minimal_metadata_gives_the_full_servers_change_events(mariadb, mariadb_minimal, tmp_path):
    db = _db("eq")
    full_files = run(mariadb, db, WORKLOAD)
    files = run(mariadb_minimal, db, WORKLOAD)     # all the DDL ran before the daemon starts
    full = _follow(mariadb, tmp_path / "full", db, f"{full_files[0].name}:4")
    minimal = _follow(mariadb_minimal, tmp_path / "minimal", db, f"{files[0].name}:4")
    assert len(full) == 18 and not any(positional(c) for c in full)
    assert minimal == full
    history = tmp_path / "minimal" / "checkpoint.schema-history.jsonl"
    entries = read_history(history)
    assert {e.table for e in entries if e.schema == db and e.source == "ddl"} >= {"t", "t2", "t3", "ttmp"}
    # dump over the same files, from the daemon's history (the first file's start: the seed is all it has there)
    dumped, _ = dump_changes(files, "--schema-history", str(history), schema=db)
    assert dumped == minimal


def test_late_start_names_are_right_or_positional(mariadb, mariadb_minimal, tmp_path):
    """Started after a table's CREATE TABLE with no history, across ALTERs that keep its column types:
    no name may be wrong; a table no DDL touched since the start is named from the seed; once past the
    server's position at the seed, every table is named."""
    db = _db("late")
    before = ["CREATE TABLE other (id INT PRIMARY KEY, note VARCHAR(10))", "INSERT INTO other VALUES (1, 'a')",
              "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), n INT)", "INSERT INTO t VALUES (1, 'x', 1)"]
    after = ["ALTER TABLE t ADD COLUMN b INT FIRST", "INSERT INTO t VALUES (7, 2, 'y', 2)",
             "ALTER TABLE t RENAME COLUMN a TO a2, RENAME COLUMN n TO n2", "INSERT INTO t VALUES (8, 3, 'z', 3)",
             "INSERT INTO other VALUES (2, 'b')"]
    full, _ = dump_changes(run(mariadb, db, before + after), schema=db)
    conn = mariadb_minimal.connect()
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{db}`")
        for sql in before:
            cur.execute(sql)
        file, pos = master_status(mariadb_minimal)
        for sql in after:
            cur.execute(sql)
    conn.close()
    overrides = base_overrides(mariadb_minimal, tmp_path, **{"source.start": f"{file}:{pos}",
                                                              "filters.include_schemas": db})
    with running_daemon(overrides) as daemon:
        wait_caught_up(mariadb_minimal, tmp_path / "checkpoint.json", daemon=daemon)
        mariadb_minimal.sql(f"INSERT INTO `{db}`.t VALUES (4, 9, 'w', 4)")      # past the seed's position
        wait_caught_up(mariadb_minimal, tmp_path / "checkpoint.json", daemon=daemon)
        port = int(METRICS_LINE.search(daemon.wait_for_line(METRICS_LINE))[1])
        _, text = scrape(port)
    got = _changes(tmp_path, db)
    expected = full[2:] + [("insert", db, "t", None, {"b": 4, "id": 9, "a2": "w", "n2": 4})]
    assert len(got) == len(expected)
    for change, right in zip(got, expected):
        assert positional(change) or change == right, (change, right)
    assert [c for c in got if c[2] == "other"] == [c for c in expected if c[2] == "other"]   # named from the seed
    assert got[-1] == expected[-1]
    assert any(positional(c) for c in got)         # the ALTERed table's rows before the seed's position
    assert metric(parse_metrics(text), "binlogd_schema_mismatch_total", schema=db, table="t") >= 1


def test_unparseable_ddl_never_stops_the_daemon(mariadb_minimal, tmp_path):
    skip_unless_flavour(mariadb_minimal, "mariadb", "SYSTEM VERSIONING (the DDL the parser does not read)")
    db = _db("bad")
    mariadb_minimal.sql(f"CREATE DATABASE `{db}`")
    overrides = base_overrides(mariadb_minimal, tmp_path, **{"filters.include_schemas": db})
    with running_daemon(overrides) as daemon:
        for sql in ("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(5))", "INSERT INTO u VALUES (1, 'a')",
                    "ALTER TABLE u ADD COLUMN w INT, ADD SYSTEM VERSIONING", "INSERT INTO u (id, v, w) VALUES (2, 'b', 3)",
                    "CREATE TABLE k (id INT PRIMARY KEY)", "INSERT INTO k VALUES (5)"):
            mariadb_minimal.sql(sql, database=db)
        wait_caught_up(mariadb_minimal, tmp_path / "checkpoint.json", daemon=daemon, fail_on=None)
        assert daemon.running and daemon.count("cannot parse DDL") == 1
    got = _changes(tmp_path, db)
    assert got[0] == ("insert", db, "u", None, {"id": 1, "v": "a"})
    assert positional(got[1])                                    # never a wrong name
    assert got[2] == ("insert", db, "k", None, {"id": 5})


def test_sigkill_in_the_middle_of_ddl_keeps_history_and_checkpoint_consistent(mariadb, mariadb_minimal, tmp_path):
    db = _db("kill")
    statements = workload("r0") + workload("r1") + workload("r2")
    full, _ = dump_changes(run(mariadb, db, statements), schema=db)
    mariadb_minimal.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    overrides = base_overrides(mariadb_minimal, tmp_path, **{"filters.include_schemas": db})
    rnd = random.Random(15)
    daemon = DaemonProcess(overrides)
    daemon.wait_streaming()
    kills = 0
    try:
        for i in range(0, len(statements), 5):
            for sql in statements[i:i + 5]:
                mariadb_minimal.sql(sql, database=db)
            time.sleep(rnd.uniform(0.0, 0.4))
            daemon.kill()
            kills += 1
            daemon = DaemonProcess(overrides)
        daemon.wait_streaming()
        checkpoint = wait_caught_up(mariadb_minimal, tmp_path / "checkpoint.json", daemon=daemon)
        assert daemon.terminate() == 0, daemon.stderr
    finally:
        if daemon.running:
            daemon.kill()
    assert kills >= 10 and len(full) == 3 * 18
    assert _changes(tmp_path, db) == full                 # exactly once, every name right
    entries = read_history(tmp_path / "checkpoint.schema-history.jsonl")
    keys = [(e.file, e.pos, e.schema, e.table, e.source) for e in entries]
    assert len(keys) == len(set(keys)), "an entry was written twice"
    end = checkpoint["position"]
    assert all(position_key(e.file, e.pos) <= position_key(end["file"], int(end["pos"])) for e in entries)


# ---------------------------------------------------------------------- Spark, with the daemon's history


def test_spark_and_dump_name_archived_minimal_files_as_the_daemon_did(mariadb_minimal, spark, tmp_path):
    db = _db("spark")
    files = run(mariadb_minimal, db, WORKLOAD)
    daemon = _follow(mariadb_minimal, tmp_path, db, f"{files[0].name}:4")
    history = tmp_path / "checkpoint.schema-history.jsonl"
    rows = (spark.read.format("binlog").option("shape", "changes").option("schemaHistory", str(history))
            .load([str(f) for f in files]).where(f"schema = '{db}'").orderBy("file", "pos", "row").collect())
    got = [(r["op"], r["schema"], r["table"], json.loads(r["before"]) if r["before"] else None,
            json.loads(r["after"]) if r["after"] else None) for r in rows]
    assert got == daemon and not any(positional(c) for c in got)
    dumped, _ = dump_changes(files, "--schema-history", str(history), schema=db)
    assert dumped == daemon
