"""A table read in key ranges at once (``[snapshot] readers``), with the daemon SIGKILLed twice while its ranges
are half read, then SIGTERMed, under a write load; restarted until it streams.

Each range must go on after its own checkpointed key (a range done stays done), the rows of the ranges must
arrive interleaved (read at once, each in its own view), and the sink replayed (reads as upserts, then the
changes in order) must equal each table's SELECT with no key read twice. MINIMAL row metadata. On MySQL (an account
with RELOAD) the readers' views open together inside one FLUSH TABLES WITH READ LOCK.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.daemon import DaemonProcess, base_overrides, read_changes, read_checkpoint, wait_caught_up
from tests.support.snapshots import WriteLoad, check_against_server, finish, make_tables, reload_account, stop_when

pytestmark = pytest.mark.server

READERS = 3


def _ranges(cp: dict | None) -> list | None:
    return ((cp or {}).get("snapshot") or {}).get("ranges")


def _rows(cp: dict | None) -> int:
    return ((cp or {}).get("snapshot") or {}).get("rows", 0)


def _in_ranges(beyond: int):
    """``ready`` for :func:`stop_when`: the ranges, once the table is read in key ranges with more than
    ``beyond`` rows read and every range under way."""
    def ready(cp):
        ranges = _ranges(cp)
        if ranges and _rows(cp) > beyond and all(r["last"] is not None for r in ranges) and \
                not all(r["done"] for r in ranges):
            return ranges
        return None
    return ready


def test_sigkill_twice_while_key_ranges_are_read(mariadb_minimal, tmp_path):
    server, db = mariadb_minimal, f"snapr_{uuid.uuid4().hex[:10]}"
    rows = 9000
    make_tables(server, db, rows)
    server.sql(f"ANALYZE TABLE `{db}`.big")   # the row estimate decides the split
    checkpoint = tmp_path / "checkpoint.json"
    overrides = base_overrides(server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=7,
                               snapshot__readers=READERS, filters__include_schemas=db,
                               **reload_account(server))
    load = WriteLoad(server, db, rows).start()
    logs, seen = [], []
    try:
        beyond = 0
        for _ in range(2):
            d = DaemonProcess(overrides)
            seen.append(stop_when(d, checkpoint, _in_ranges(beyond), f"key ranges under way beyond {beyond} rows"))
            logs.append(d.stderr)
            after = read_checkpoint(checkpoint)["snapshot"]
            beyond = after["rows"]
            for was, now in zip(seen[-1], after["ranges"]):   # each range only moved on
                assert now["upto"] == was["upto"] and (now["done"] or not was["done"])
        assert len(seen[0]) == READERS and seen[0][-1]["upto"] is None
        d = DaemonProcess(overrides)   # then a SIGTERM while the ranges are read: exit 0 at once, each range kept
        seen.append(stop_when(d, checkpoint, _in_ranges(beyond), f"key ranges under way beyond {beyond} rows",
                              stop=lambda d: d.proc.terminate()))
        assert d.wait(20) == 0, d.stderr
        logs.append(d.stderr)
        for was, now in zip(seen[-1], read_checkpoint(checkpoint)["snapshot"]["ranges"]):
            assert now["upto"] == was["upto"] and (now["done"] or not was["done"])
        d = DaemonProcess(overrides)
        finish(d, server, checkpoint, load, r"snapshot: resuming at table \d+ of 4 in key ranges", r"snapshot: done")
        logs.append(d.stderr)
        assert "ranges" not in (read_checkpoint(checkpoint).get("snapshot") or {})
        changes = read_changes(tmp_path / "sink")
        reads = check_against_server(server, db, changes)
        assert sum(1 for k in reads if k[0] == "big") >= rows * 0.8
        big = [c for c in changes if c["op"] == "read" and c["table"] == "big"]
        ids = [c["after"]["id"] for c in big]
        assert ids != sorted(ids), "the key ranges were not read at once"
        views = {(c["source"]["file"], c["source"]["pos"], c["source"]["gtid"]) for c in big}
        assert len(views) >= 3, "big was read in fewer views than runs"
        for file, pos, gtid in views if server.flavor == "mariadb" else ():
            # each view's GTID position is the server's for its binlog position
            assert gtid == server.sql(f"SELECT BINLOG_GTID_POS('{file}', {pos})")[0][0], (file, pos)
    finally:
        load.done.set()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")



def test_a_reader_refused_leaves_fewer_readers(mariadb_minimal, tmp_path, monkeypatch):
    """A key range reader's connection refused (as ``max_user_connections`` refuses it, error 1226): the ranges
    are read by the readers there are, one warning says so, and the replay still equals the tables."""
    import pymysql

    from binlogd.daemon.config import load_config
    from binlogd.daemon.snapshot import readers
    from tests.support.daemon import InProcessDaemon, captured_log, wait_until

    real, calls = readers.Readers.connect, []

    async def refused_once(self):  # the main reader's connection, then the first key range reader's
        calls.append(1)
        if len(calls) == 2:
            raise pymysql.err.OperationalError(1226, "User has exceeded the 'max_user_connections' resource")
        return await real(self)

    monkeypatch.setattr(readers.Readers, "connect", refused_once)
    server, db = mariadb_minimal, f"snapf_{uuid.uuid4().hex[:10]}"
    make_tables(server, db, 3000)
    server.sql(f"ANALYZE TABLE `{db}`.big")
    try:
        with captured_log(f"binlogd.test.{db}") as (log, lines):
            config = load_config(None, env={}, overrides=base_overrides(
                server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=7, snapshot__readers=READERS,
                filters__include_schemas=db, **reload_account(server)))
            runner = InProcessDaemon(config, log=log).start()
            try:
                wait_until(lambda: any("snapshot: done" in line for line in lines), timeout=60, what="snapshot done")
                wait_caught_up(server, tmp_path / "checkpoint.json")
            finally:
                assert runner.stop() == 0, "\n".join(lines)
            warned = [line for line in lines if "no connection for another key range reader" in line]
            assert len(warned) == 1 and "max_user_connections" in warned[0], lines
        changes = read_changes(tmp_path / "sink")
        check_against_server(server, db, changes)
        big = [c for c in changes if c["op"] == "read" and c["table"] == "big"]
        assert len(big) == 3000
        ids = [c["after"]["id"] for c in big]
        assert ids != sorted(ids), "the key ranges were not read at once"
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_resume_with_every_range_done(mariadb_minimal, tmp_path):
    """Killed between the commit of the last range's last chunk (every range done) and the table's own commit:
    the restart marks the table done and goes on to the next one (here the checkpoint is edited to that
    state after a SIGKILL in the ranges)."""
    import json

    server, db = mariadb_minimal, f"snapd_{uuid.uuid4().hex[:10]}"
    make_tables(server, db, 3000)
    server.sql(f"ANALYZE TABLE `{db}`.big")
    checkpoint = tmp_path / "checkpoint.json"
    overrides = base_overrides(server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=7,
                               snapshot__readers=READERS, filters__include_schemas=db,
                               **reload_account(server))
    try:
        stop_when(DaemonProcess(overrides), checkpoint, _in_ranges(0), "key ranges under way")
        cp = json.loads(checkpoint.read_text())
        table = cp["snapshot"]["tables"][cp["snapshot"]["done"]]
        cp["snapshot"]["ranges"] = [dict(r, done=True) for r in cp["snapshot"]["ranges"]]
        checkpoint.write_text(json.dumps(cp))
        d = DaemonProcess(overrides)
        try:
            d.wait_for_line(rf"snapshot: {db}\.{table[1]}: \d+ rows", timeout=30)
            d.wait_for_line(r"snapshot: done", timeout=60)
            d.wait_streaming(timeout=30)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        assert [t for t in ("comp", "empty") if f"snapshot: {db}.{t}: " not in d.stderr] == [], d.stderr
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
