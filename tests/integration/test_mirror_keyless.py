"""The PostgreSQL mirror's keyless table read again in a later view than the stream's start: binlogd is
SIGKILLed while the initial snapshot reads a table without a primary key under a write load on that table
(inserts, updates, deletes; and a TRUNCATE while binlogd is down), so the resumed snapshot reads it in a view
P2 later than P1, where the stream starts; SIGKILLed again as the stream starts (the watermark, the view's
position, is then committed with the rows until a checkpoint passes it). At the end the mirrored table holds
the source's rows as a multiset (no row twice, none missing).
"""

from __future__ import annotations

import collections
import re
import threading
import time
import uuid

import pytest

from tests.integration.test_mirror_snapshot import snapshot_account
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import DaemonProcess, base_overrides, wait_caught_up

pytestmark = pytest.mark.server
BASE = 1_000_000  # the load's rows have a = BASE + i; the seeded ones a < 1000


def seed(srv, db: str, doublings: int) -> None:
    """A keyless table of ``2 ** doublings`` rows (many of them equal) and a small keyed one."""
    srv.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    srv.sql(f"CREATE TABLE `{db}`.loose (a INT, b VARCHAR(40))")
    srv.sql(f"CREATE TABLE `{db}`.keyed (id INT PRIMARY KEY, v INT)")
    srv.sql(f"INSERT INTO `{db}`.loose VALUES (1, 'seed')")
    for i in range(doublings):
        srv.sql(f"INSERT INTO `{db}`.loose SELECT (a * 7 + {i}) % 1000, CONCAT('s', b) FROM `{db}`.loose")
    srv.sql(f"INSERT INTO `{db}`.keyed VALUES (1, 0), (2, 0)")


def load(srv, db: str, stop: threading.Event, done: list) -> None:
    """One transaction after another until ``stop``: an insert into the keyless table, every third an update of
    a row inserted before, every seventh a delete of one; and an update of the keyed table."""
    conn = srv.connect(database=db, autocommit=False)
    i = 0
    while not stop.is_set():
        with conn.cursor() as cur:
            cur.execute("INSERT INTO loose VALUES (%s, 'w')", (BASE + i,))
            if i % 3 == 0 and i >= 2:
                cur.execute("UPDATE loose SET b = 'u' WHERE a = %s", (BASE + i - 2,))
            if i % 7 == 0 and i >= 5:
                cur.execute("DELETE FROM loose WHERE a = %s", (BASE + i - 5,))
            cur.execute("UPDATE keyed SET v = v + 1 WHERE id = %s", (i % 2 + 1,))
        conn.commit()
        i += 1
        time.sleep(0.002)
    conn.close()
    done.append(i)


def mirrored(pg, db: str, table: str) -> collections.Counter:
    import psycopg

    with psycopg.connect(pg.url) as conn:
        return collections.Counter(conn.execute(f'SELECT a, b FROM "{db}"."{table}"').fetchall())


def committed(pg) -> tuple[dict, list]:
    """The mirror's committed checkpoint position and its watermarks (as text)."""
    import psycopg

    with psycopg.connect(pg.url) as conn:
        checkpoint = conn.execute("SELECT checkpoint FROM binlogd_mirror_checkpoint").fetchone()[0]
        marks = conn.execute("SELECT mysql_schema, mysql_table, file, pos::text FROM binlogd_mirror_watermarks")
        return checkpoint["position"], marks.fetchall()


def test_keyless_table_resumed_in_a_later_view(mariadb_minimal, tmp_path):
    require("postgres")
    srv, db = mariadb_minimal, f"mirror_keyless_{uuid.uuid4().hex[:8]}"
    seed(srv, db, 17)  # 131,072 rows: long enough to be killed while they are read
    stop, done = threading.Event(), []
    cp = tmp_path / "checkpoint.json"
    d = None
    try:
        with PostgresServer() as pg:
            o = base_overrides(srv, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=500,
                               filters__include_schemas=db, sink__kind="mirror", sink__mirror__url=pg.url,
                               **snapshot_account(srv))
            writer = threading.Thread(target=load, args=(srv, db, stop, done), daemon=True)
            writer.start()
            time.sleep(0.3)
            d = DaemonProcess(o)
            d.wait_for_line(r"loose has no primary key: read in one pass", timeout=60)
            time.sleep(0.3)
            d.kill()                                  # while the keyless table is read: nothing of it committed
            assert "snapshot: done" not in d.stderr, "the keyless table was read before the kill"
            time.sleep(0.2)
            srv.sql(f"TRUNCATE `{db}`.loose")         # the next view holds only rows written after it
            time.sleep(0.5)                           # more writes between P1 and the next view
            d = DaemonProcess(o)
            d.wait_for_line("snapshot: done", timeout=120)
            assert d.count(r"snapshot: resuming at table 1 of 2") == 1, d.stderr
            d.kill()                                  # as the stream starts, before it passed the view
            checkpoint, marks = committed(pg)
            # the run's view: on MySQL the last one logged, where the key range readers' opened with it
            file, pos = re.findall(r"read view (?:of \d+ readers )?at ([^:\s]+):(\d+)", d.stderr)[-1]
            before = (checkpoint["file"], checkpoint["pos"]) < (file, int(pos))  # one binlog file in this test
            assert marks == ([(db, "loose", file, pos)] if before else []), (checkpoint, marks)
            d = DaemonProcess(o)
            d.wait_streaming(timeout=60)
            time.sleep(0.5)
            stop.set()
            writer.join(10)
            wait_caught_up(srv, cp, timeout=90, daemon=d)
            assert d.terminate() == 0, d.stderr
            assert committed(pg)[1] == [], "a watermark stayed after the checkpoint passed it"
            assert "Traceback" not in d.stderr
            assert done and done[0] > 50, "the write load barely ran"
            src = collections.Counter(tuple(r) for r in srv.sql(f"SELECT a, b FROM `{db}`.loose"))
            got = mirrored(pg, db, "loose")
            assert got == src, (f"the mirror holds {sum((got - src).values())} rows the source has not (e.g. "
                                f"{list((got - src).items())[:3]}) and lacks {sum((src - got).values())} (e.g. "
                                f"{list((src - got).items())[:3]})")
            import psycopg

            with psycopg.connect(pg.url) as conn:
                keyed = sorted(conn.execute(f'SELECT id, v FROM "{db}".keyed').fetchall())
            assert keyed == sorted(tuple(r) for r in srv.sql(f"SELECT id, v FROM `{db}`.keyed"))
    finally:
        stop.set()
        if d is not None and d.running:
            d.kill()
        srv.sql(f"DROP DATABASE IF EXISTS `{db}`")
