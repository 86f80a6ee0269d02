"""Change events' ``source.pos`` on a real server: the start of the rows event that carried the row.

MariaDB 11.4+ logs end_log_pos 0 for the events inside a transaction (binlog_legacy_event_pos=OFF,
the default), so the daemon counts positions from the stream. Checked against an independent walk of
the server's own binlog files (event offsets chained by the length field): every change's
``(source.file, source.pos)`` is a rows event's offset, every rows event carried changes, rows are
numbered 0..n-1 within each, and the count is the workload's. Also through a stop and a resume from
the checkpoint (file/pos), which must land on a transaction boundary. Runs on 10.11 and 11.8.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import base_overrides, read_changes, running_daemon, wait_caught_up

pytestmark = pytest.mark.server

# Rows events: v1 (23-25), v2 (30-32), PARTIAL_UPDATE (39), MariaDB compressed v1/v2 (166-171).
ROWS_TYPES = {23, 24, 25, 30, 31, 32, 39, 166, 167, 168, 169, 170, 171}


def walk(path) -> list[tuple[int, int]]:
    """(offset, type code) of every event in a binlog file, chained by the length field."""
    data, out, pos = path.read_bytes(), [], 4
    while pos + 19 <= len(data):
        out.append((pos, data[pos + 4]))
        pos += int.from_bytes(data[pos + 9:pos + 13], "little")
    assert pos == len(data), f"{path.name}: the walk ends at {pos}, the file at {len(data)}"
    return out


def _transactions(srv, start: int, n: int) -> int:
    """``n`` transactions of several statements and several rows events each; returns the rows changed."""
    conn = srv.connect(database="p")
    rows = 0
    try:
        cur = conn.cursor()
        for i in range(start, start + n):
            cur.execute("BEGIN")
            values = ", ".join(f"({i * 1000 + k}, '{'x' * 300}')" for k in range(60))  # > one 8 KiB rows event
            cur.execute(f"INSERT INTO t VALUES {values}")
            cur.execute("UPDATE t SET v = 'u' WHERE id BETWEEN %s AND %s", (i * 1000, i * 1000 + 9))
            cur.execute("DELETE FROM t WHERE id = %s", (i * 1000 + 59,))
            cur.execute("INSERT INTO u (id) VALUES (%s)", (i,))
            cur.execute("COMMIT")
            rows += 60 + 10 + 1 + 1
    finally:
        conn.close()
    return rows


def test_source_pos_is_the_rows_events_offset(tmp_path, server_binaries):
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries)
    try:
        srv.start()
        srv.sql("CREATE DATABASE p")
        srv.sql("CREATE TABLE p.t (id INT PRIMARY KEY, v VARCHAR(400))")
        srv.sql("CREATE TABLE p.u (id INT PRIMARY KEY)")
        first = srv.binlog_files()[0].name
        overrides = base_overrides(srv, tmp_path, **{"sink.kind": "jsonl", "source.start": f"file:{first}:4"})
        cp = tmp_path / "checkpoint.json"
        with running_daemon(overrides) as d:
            rows = _transactions(srv, 1, 15)
            srv.sql("ALTER TABLE p.u ADD COLUMN w INT NULL")
            srv.sql("FLUSH BINARY LOGS")
            rows += _transactions(srv, 16, 15)
            wait_caught_up(srv, cp, daemon=d)
        rows += _transactions(srv, 31, 10)  # while stopped: the restart resumes from the checkpoint
        with running_daemon(overrides) as d:
            rows += _transactions(srv, 41, 10)
            wait_caught_up(srv, cp, daemon=d)

        rows_events = {(p.name, offset) for p in srv.binlog_files() for offset, tc in walk(p) if tc in ROWS_TYPES}
        changes = read_changes(tmp_path / "sink")
        assert len(changes) == rows
        per_event = defaultdict(list)
        for c in changes:
            per_event[(c["source"]["file"], c["source"]["pos"])].append(c["source"]["row"])
        outside = sorted(set(per_event) - rows_events)
        assert not outside, f"{len(outside)} change positions are no rows event's offset, e.g. {outside[:5]}"
        assert set(per_event) == rows_events, "a rows event of the workload carried no change event"
        assert all(indexes == list(range(len(indexes))) for indexes in per_event.values())
        keys = [(c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes]
        assert keys == sorted(keys) and len(set(keys)) == len(keys), "(file, pos, row) must be unique, in order"
        assert sum(1 for _ in itertools.groupby(keys, key=lambda k: k[0])) >= 2, "the workload spans two files"
    finally:
        srv.cleanup()
