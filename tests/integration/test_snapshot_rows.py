"""What an initial snapshot's rows carry and how a table without a key is read, on each real server.

- the snapshot's last row carries ``source.snapshot: "last"`` (Debezium's), every other read ``true`` (binlogd
  format) or ``"true"`` (Debezium format), and every read's ``source.id`` is ``snapshot:<table>:<run>:<row>``;
- a table without a primary key bigger than the daemon may hold (about 150 MB of rows) is read with bounded
  memory (the daemon's peak RSS stays far below the table's size), every row once, equal to the table.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from tests.support.daemon import DaemonProcess, base_overrides, read_changes, wait_caught_up
from tests.support.snapshots import reload_account

pytestmark = pytest.mark.server


def _db() -> str:
    return f"snr_{uuid.uuid4().hex[:10]}"


def _run_snapshot(server, tmp_path, db: str, **extra) -> DaemonProcess:
    o = base_overrides(server, tmp_path, snapshot__mode="initial", filters__include_schemas=db, **extra)
    d = DaemonProcess({**o, **reload_account(server)})
    try:
        d.wait_for_line(r"snapshot: done", timeout=120)
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
    except BaseException:
        d.kill()
        raise
    return d


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_the_last_row_says_last(mariadb, tmp_path, fmt):
    server, db = mariadb, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v INT)")
    server.sql(f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, v INT)")
    server.sql(f"INSERT INTO `{db}`.a VALUES " + ", ".join(f"({i}, {i})" for i in range(25)))
    server.sql(f"INSERT INTO `{db}`.b VALUES " + ", ".join(f"({i}, {i})" for i in range(17)))
    try:
        d = _run_snapshot(server, tmp_path, db, snapshot__chunk_rows=4, sink__format=fmt)
        assert d.terminate() == 0, d.stderr
        lines = read_changes(tmp_path / "sink")
        reads = [c for c in lines if c.get("op") in ("read", "r")]
        assert len(reads) == 42
        flags = [c["source"]["snapshot"] for c in reads]
        want = [True] * 41 + ["last"] if fmt == "binlogd" else ["true"] * 41 + ["last"]
        assert flags == want
        ids = [c["source"]["id"] for c in reads]
        assert ids == [f"snapshot:0:0:{i}" for i in range(25)] + [f"snapshot:1:0:{i}" for i in range(17)]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return int(re.search(r"VmHWM:\s+(\d+) kB", fh.read()).group(1)) / 1024


def test_a_keyless_table_is_read_with_bounded_memory(mariadb, tmp_path):
    server, db = mariadb, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.logs (n INT, msg VARCHAR(300))")
    server.sql(f"INSERT INTO `{db}`.logs VALUES " + ", ".join(f"({i}, REPEAT('m', 290))" for i in range(1000)))
    for _ in range(9):  # 512,000 rows, about 150 MB of values
        server.sql(f"INSERT INTO `{db}`.logs SELECT n + (SELECT COUNT(*) FROM `{db}`.logs), msg FROM `{db}`.logs")
    total = int(server.sql(f"SELECT COUNT(*) FROM `{db}`.logs")[0][0])
    try:
        began = time.monotonic()
        d = _run_snapshot(server, tmp_path, db, snapshot__chunk_rows=5000)
        peak = _peak_rss_mb(d.proc.pid)
        assert d.terminate() == 0, d.stderr
        print(f"\n{total} keyless rows in {time.monotonic() - began:.1f}s, the daemon's peak RSS {peak:.0f} MB")
        reads = [c for c in read_changes(tmp_path / "sink") if c["op"] == "read"]
        assert sorted(c["after"]["n"] for c in reads) == list(range(total))
        assert all(len(c["after"]["msg"]) == 290 for c in reads)
        assert peak < 150, f"peak RSS {peak:.0f} MB for a keyless table of ~150 MB: it was held in memory"
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
