"""The PostgreSQL mirror under faults, as ``binlogd run`` runs it: an initial snapshot of tables that exist
before the daemon, SIGKILLed in the middle of the snapshot and again while streaming, PostgreSQL SIGKILLed and
restarted, under a transfer load with DDL in the middle; at the end every table equals the source value by
value, and a reader polling the accounts' sum (from the moment the stream passed every snapshot view) never saw
it broken. Rows go into the keyless table all along: a resumed snapshot reads it again in a view later than the
stream's start, and its watermark keeps the rows inserted in between from being mirrored twice.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.integration.test_mirror import assert_equal
from tests.integration.test_mirror_snapshot import ACCOUNTS, TOTAL, setup_source, sum_reader, transfers
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import DaemonProcess, base_overrides, wait_caught_up

pytestmark = pytest.mark.server


def test_mirror_kills_during_snapshot_and_stream_and_pg_crash(mariadb_minimal, tmp_path):
    require("postgres")
    srv, db = mariadb_minimal, f"mirror_kill_{uuid.uuid4().hex[:8]}"
    setup_source(srv, db)
    srv.sql(f"INSERT INTO `{db}`.loose SELECT seq, REPEAT('c', seq % 50) FROM `{db}`.seq_1_to_20000")
    stop, armed, done, broken, reads = threading.Event(), threading.Event(), [], [], []
    cp = tmp_path / "checkpoint.json"
    d = None
    try:
        with PostgresServer() as pg:
            o = base_overrides(srv, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=20,
                               filters__include_schemas=db, sink__kind="mirror", sink__mirror__url=pg.url)
            threads = [threading.Thread(target=transfers, args=(srv, db, stop, done), daemon=True),
                       threading.Thread(target=sum_reader, args=(pg, db, stop, armed, broken, reads), daemon=True)]
            for t in threads:
                t.start()
            d = DaemonProcess(o)
            d.wait_for_line("snapshot: .* tables at", timeout=60)
            time.sleep(0.1)
            d.kill()                                       # in the middle of the snapshot (when it was not done)
            finished = "snapshot: done" in d.stderr
            d = DaemonProcess(o)
            if finished:  # a fast machine read it all first: the next start streams
                d.wait_streaming(timeout=60)
            else:
                d.wait_for_line("snapshot: done", timeout=90)
            srv.sql(f"ALTER TABLE `{db}`.accounts ADD COLUMN extra INT DEFAULT 5 AFTER id")
            time.sleep(0.5)
            d.kill()                                       # while streaming
            d = DaemonProcess(o)
            d.wait_streaming(timeout=60)
            wait_caught_up(srv, cp, timeout=60, daemon=d)
            armed.set()
            pg.kill()                                      # PostgreSQL crashes under the load
            pg.start()
            srv.sql(f"ALTER TABLE `{db}`.accounts MODIFY note VARCHAR(40) FIRST")
            time.sleep(2)
            stop.set()
            for t in threads:
                t.join(10)
            wait_caught_up(srv, cp, timeout=90, daemon=d, fail_on=None)
            assert d.terminate() == 0, d.stderr
            assert "Traceback" not in d.stderr
            assert done and done[0] > 50 and len(reads) > 10
            assert not broken, f"a reader saw part of a transfer: {broken[:3]}"
            assert_equal(srv, pg, db, "accounts")
            import psycopg

            with psycopg.connect(pg.url) as conn:
                src = sorted(srv.sql(f"SELECT a, b FROM `{db}`.loose"))
                assert sorted(conn.execute(f'SELECT a, b FROM "{db}".loose').fetchall()) == src
            assert ACCOUNTS * 1000 == TOTAL
    finally:
        stop.set()
        if d is not None and d.running:
            d.kill()
        srv.sql(f"DROP DATABASE IF EXISTS `{db}`")
