"""Incremental snapshots while streaming (``[snapshot] signal_table``), on the real MariaDB servers, MINIMAL row
metadata.

- a signal row (Debezium's ``execute-snapshot``) for a BIGINT-keyed and a composite-keyed table (INT + VARCHAR,
  case-insensitive collation), under a write load of inserts, updates and deletes: the sink replayed (reads as
  upserts, changes in order) equals each table's SELECT, no key is read twice, the reads say
  ``"snapshot": "incremental"``; the signal table, not selected, is read but its rows are not delivered;
- signals for a table that does not exist, one without a primary key and one not selected: one clear log line
  each, and the stream goes on;
- ``stop-snapshot`` in the middle of a table: it stops there, the checkpoint forgets it, the stream goes on.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid

import pytest

from tests.support.daemon import (
    base_overrides,
    captured_log,
    read_changes,
    read_checkpoint,
    running_daemon,
    table_rows,
    wait_caught_up,
)
from tests.support.snapshots import WriteLoad, check_against_server, make_tables

pytestmark = pytest.mark.server

DONE = re.compile(r"incremental snapshot: done")


def _db() -> str:
    return f"incr_{uuid.uuid4().hex[:10]}"


def make_signal_table(server, db: str) -> None:
    """Debezium's signal table shape, in ``db``."""
    server.sql("CREATE TABLE signals (id VARCHAR(64) NOT NULL PRIMARY KEY, type VARCHAR(32) NOT NULL, "
               "data VARCHAR(2048) NULL)", database=db)


def signal(server, db: str, kind: str, data: dict | None) -> None:
    """INSERT one signal row."""
    conn = server.connect(database=db)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO signals VALUES (%s, %s, %s)",
                        (uuid.uuid4().hex, kind, None if data is None else json.dumps(data)))
        conn.commit()
    finally:
        conn.close()


def overrides(server, tmp_path, db: str, chunk_rows: int = 50, **extra) -> dict:
    """Streaming ``db`` without its signal table (excluded: it is read all the same), signals from it."""
    return base_overrides(server, tmp_path, snapshot__chunk_rows=chunk_rows, snapshot__signal_table=f"{db}.signals",
                          filters__include_schemas=db, filters__exclude_tables=f"{db}.signals", **extra)


def _metrics(d) -> str:
    line = d.wait_for_line(r"metrics on http://", timeout=10)
    return urllib.request.urlopen(re.search(r"(http://\S+/metrics)", line).group(1), timeout=5).read().decode()


def test_incremental_snapshot_under_writes(mariadb_minimal, tmp_path):
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 3000)
    make_signal_table(server, db)
    load = None
    try:
        with running_daemon(overrides(server, tmp_path, db, chunk_rows=40)) as d:
            load = WriteLoad(server, db, 3000).start()
            time.sleep(0.3)
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.big", f"{db}.comp"],
                                                    "type": "incremental"})
            d.wait_for_line(rf"incremental snapshot: signal \w+: queued {db}\.big, {db}\.comp", timeout=20)
            cp = None
            for _ in range(400):  # while it runs, the checkpoint names the tables to go and the last key written
                cp = read_checkpoint(tmp_path / "checkpoint.json")
                if cp and (cp.get("incremental") or {}).get("last") is not None or DONE.search(d.stderr):
                    break
                time.sleep(0.02)
            d.wait_for_line(DONE, timeout=60)
            assert d.count(rf"incremental snapshot: {db}\.big: \d+ rows .* rows/s") == 1, d.stderr
            assert d.count(rf"incremental snapshot: {db}\.comp: \d+ rows .* rows/s") == 1, d.stderr
            metrics = _metrics(d)
            assert re.search(rf'binlogd_snapshot_rows_total{{table="{db}.big"}} [1-9]', metrics), metrics
            assert re.search(rf'binlogd_snapshot_chunks_done{{table="{db}.comp"}} [1-9]', metrics), metrics
            assert "binlogd_snapshot_state 2.0" in metrics
            count = load.stop()
            assert count > 20, "the write load barely ran during the snapshot"
            cp = wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert "incremental" not in cp, cp
            assert " ERROR " not in d.stderr, d.stderr
        changes = read_changes(tmp_path / "sink")
        reads = [c for c in changes if c["op"] == "read"]
        assert reads and all(c["source"]["snapshot"] == "incremental" and c["before"] is None for c in reads)
        assert not [c for c in changes if c["table"] == "signals"], "the signal table's rows were delivered"
        assert [c for c in changes if c["op"] != "read" and c["table"] in ("big", "comp")], "no streamed changes"
        counts = check_against_server(server, db, changes, tables=("big", "comp"))
        assert sum(1 for k in counts if k[0] == "big") >= 2500 and sum(1 for k in counts if k[0] == "comp") > 100
    finally:
        if load is not None:
            load.done.set()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_incremental_snapshot_refusals(mariadb_minimal, tmp_path):
    """A table that does not exist, one without a key, one not selected: one log line each, the stream goes on;
    the empty table is done at once; the checkpoint forgets the snapshot."""
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 50)
    make_signal_table(server, db)
    server.sql(f"CREATE DATABASE `{db}_other`")
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", database=f"{db}_other")
    try:
        with running_daemon(overrides(server, tmp_path, db)) as d:
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.nosuch", f"{db}.nokey",
                                                                         f"{db}_other.t", f"{db}.empty"]})
            d.wait_for_line(DONE, timeout=30)
            server.sql("INSERT INTO big VALUES (1, 'after', 1, '1.000', '2026-01-01 00:00:00.000')", database=db)
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            lines = d.stderr
            assert len(re.findall(rf"{db}\.nosuch does not exist: refused", lines)) == 1, lines
            assert len(re.findall(rf"{db}\.nokey has no primary key: refused", lines)) == 1, lines
            assert len(re.findall(rf"{db}_other\.t is not selected by \[filters\]: refused", lines)) == 1, lines
            assert re.search(rf"incremental snapshot: {db}\.empty: 0 rows", lines), lines
            assert "Traceback" not in lines
            assert "incremental" not in read_checkpoint(tmp_path / "checkpoint.json")
        changes = read_changes(tmp_path / "sink")
        assert not [c for c in changes if c["op"] == "read"], changes
        assert [c for c in changes if c["op"] == "insert" and c["table"] == "big" and c["after"]["id"] == 1]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
        server.sql(f"DROP DATABASE IF EXISTS `{db}_other`")


def test_stop_snapshot(mariadb_minimal, tmp_path):
    """``stop-snapshot`` (no data-collections: all) in the middle of a table: no more reads, the checkpoint
    forgets it, the stream goes on; each key read once at most."""
    server, db = mariadb_minimal, _db()
    rows = 4000
    make_tables(server, db, rows)
    make_signal_table(server, db)
    try:
        with running_daemon(overrides(server, tmp_path, db, chunk_rows=1)) as d:
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.big"], "type": "incremental"})
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                cp = read_checkpoint(tmp_path / "checkpoint.json") or {}
                if (cp.get("incremental") or {}).get("rows", 0) >= 5:
                    break
                assert not DONE.search(d.stderr), "the snapshot ended before the stop"
                time.sleep(0.01)
            signal(server, db, "stop-snapshot", None)
            d.wait_for_line(rf"incremental snapshot: signal \w+: stopped {db}\.big \(0 tables to go\)", timeout=20)
            server.sql("UPDATE big SET n = -1 WHERE id = 1000000000000", database=db)
            cp = wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
            assert "incremental" not in cp, cp
        changes = read_changes(tmp_path / "sink")
        reads = [c["after"]["id"] for c in changes if c["op"] == "read"]
        assert 5 <= len(reads) < rows, len(reads)
        assert len(reads) == len(set(reads)) and reads == sorted(reads), "keys read twice or out of key order"
        assert [c for c in changes if c["op"] == "update" and c["after"]["n"] == -1]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_incremental_values_equal_the_streamed_form(mariadb_minimal, tmp_path):
    """A row's incremental read ``after`` equals the streamed ``after`` of the same values (INSERT … SELECT)."""
    from tests.integration.test_snapshot import TYPE_ROWS, TYPES

    server, db = mariadb_minimal, _db()
    server.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    try:
        make_signal_table(server, db)
        server.sql(f"CREATE TABLE types {TYPES}", database=db)
        server.sql(f"CREATE TABLE twin {TYPES}", database=db)
        server.sql("INSERT INTO types VALUES " + ", ".join(TYPE_ROWS), database=db)
        with running_daemon(overrides(server, tmp_path, db, chunk_rows=2)) as d:
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.types"]})
            d.wait_for_line(DONE, timeout=30)
            server.sql("INSERT INTO twin SELECT * FROM types", database=db)
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
        changes = read_changes(tmp_path / "sink")
        reads = {c["after"]["id"]: c["after"] for c in changes if c["op"] == "read" and c["table"] == "types"}
        streamed = {c["after"]["id"]: c["after"] for c in changes if c["op"] == "insert" and c["table"] == "twin"}
        ids = list(range(1, len(TYPE_ROWS) + 1))
        assert sorted(reads) == ids and sorted(streamed) == ids, changes
        for key in reads:
            assert json.dumps(reads[key], sort_keys=True) == json.dumps(streamed[key], sort_keys=True), \
                (key, {k: (reads[key][k], streamed[key].get(k)) for k in reads[key]
                       if reads[key][k] != streamed[key].get(k)})
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_incremental_watermarks_without_a_view_position(mariadb_minimal, tmp_path, monkeypatch):
    """Where the server does not tell its read view's binlog position (Oracle MySQL), the high watermark is the
    binlog end read after the SELECT: the streamed changes inside the window must win. Here on MariaDB, that
    position withheld and the window widened (a pause before the high watermark is read), under writes."""
    import asyncio

    from binlogd.daemon.config import load_config
    from binlogd.daemon.snapshot import incremental
    from binlogd.daemon.snapshot.views import query
    from tests.support.daemon import InProcessDaemon, wait_until

    async def no_position(conn):
        await query(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        return None

    binlog_end = incremental.binlog_end

    async def late_end(conn):
        await asyncio.sleep(0.02)
        return await binlog_end(conn)

    monkeypatch.setattr(incremental, "consistent_snapshot", no_position)
    monkeypatch.setattr(incremental, "binlog_end", late_end)
    server, db = mariadb_minimal, _db()
    make_tables(server, db, 1500)
    make_signal_table(server, db)
    load = None
    with captured_log(f"binlogd.test.{db}") as (log, lines):
        try:
            config = load_config(None, env={}, overrides=overrides(server, tmp_path, db, chunk_rows=10))
            runner = InProcessDaemon(config, log=log).start()
            try:
                runner.wait_streaming(timeout=30)
                load = WriteLoad(server, db, 1500).start()
                signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.big", f"{db}.comp"]})
                wait_until(lambda: any("incremental snapshot: done" in line for line in lines), timeout=60,
                           what="incremental snapshot: done")
                assert load.stop() > 20
                wait_caught_up(server, tmp_path / "checkpoint.json")
            finally:
                assert runner.stop() == 0, "\n".join(lines)
            changes = read_changes(tmp_path / "sink")
            reads = check_against_server(server, db, changes, tables=("big", "comp"))
            assert sum(1 for k in reads if k[0] == "big") >= 1000, len(reads)
        finally:
            if load is not None:
                load.done.set()
            server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_incremental_snapshot_across_a_ddl(mariadb_minimal, tmp_path):
    """``ALTER TABLE … ADD COLUMN`` (then updates) in the middle of the table's incremental snapshot: the chunks
    read after it carry the new column; the replay, with the column's default given to rows read or streamed
    before it, equals the table."""
    from tests.support.snapshots import replay_upsert

    server, db = mariadb_minimal, _db()
    make_tables(server, db, 3000)
    make_signal_table(server, db)
    try:
        with running_daemon(overrides(server, tmp_path, db, chunk_rows=3)) as d:
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.big"]})
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if ((read_checkpoint(tmp_path / "checkpoint.json") or {}).get("incremental") or {}).get("rows", 0) \
                        >= 30:
                    break
                time.sleep(0.005)
            server.sql("ALTER TABLE big ADD COLUMN extra INT NOT NULL DEFAULT 5", database=db)
            server.sql("UPDATE big SET extra = n % 7 WHERE id % 5 = 0", database=db)
            d.wait_for_line(DONE, timeout=60)
            wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
        changes = read_changes(tmp_path / "sink")
        reads = [c["after"] for c in changes if c["op"] == "read"]
        assert any("extra" in r for r in reads) and any("extra" not in r for r in reads), \
            "the ALTER did not land in the middle of the snapshot"
        state, counts = replay_upsert(changes, db)
        assert max(counts.values()) == 1
        got = {k: {"extra": 5, **row} for k, row in state["big"].items()}
        want = {(k,): v for k, v in table_rows(server, db, "big").items()}
        assert got == want, [k for k in want if got.get(k) != want[k]][:5]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
