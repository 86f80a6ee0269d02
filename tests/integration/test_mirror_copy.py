"""The PostgreSQL mirror's fast paths against a real MariaDB and a real PostgreSQL (``binlogd run`` processes):

- an initial snapshot's chunks go in by one COPY each, from the server's text where every column's type allows
  (table ``plain``), else from their JSON lines (``types``, with BIT, SET and JSON): every type at its edges, zero
  dates in some chunks and not in others, a text holding ``,"ts":``, tabs, CR, LF and backslashes; every row
  equal to the source value by value;
- the stream's batches: a transaction bigger than a batch (applied in parts before its commit) is never seen in
  part by a reader; a key updated twice, deleted and inserted again, and updates that change keys, all in one
  transaction, end as the source;
- a NUL in a snapshot's text stops the daemon (exit 7) naming the table, column and change.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.integration.test_mirror import TYPES, assert_equal, overrides
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import DaemonProcess, run_to_exit, wait_caught_up

pytestmark = pytest.mark.server
BIG = 25_000  # rows of the big transaction: more than daemon.sinks.mirror.BATCH_ROWS


@pytest.fixture
def db(mariadb):
    name = f"mirror_copy_{uuid.uuid4().hex[:8]}"
    mariadb.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb.sql(f"DROP DATABASE IF EXISTS `{name}`")


def fill_types(srv, db) -> None:
    """Rows 1-2 with zero dates (and YEAR 0), 3-8 without (chunks of 2: the first chunk has zero dates, the
    others not)."""
    srv.sql("SET GLOBAL sql_mode = ''")
    srv.sql(TYPES.format(db=db))
    deep = "[" * 30 + "1" + "]" * 30
    srv.sql(f"""INSERT INTO `{db}`.types VALUES
      (1, 18446744073709551615, -9223372036854775808, 255, '-99999999999999999999999999999999999.{"9" * 30}',
       3.4e38, -1.7976931348623157e308, '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999',
       '0000-00-00', '838:59:59', 2155, b'1111111111', 'b c', 'x,z', '{deep}', x'00ff00', x'', '😀 ü', 'ab'),
      (2, 0, 0, 0, 0, 0, 0, '0000-00-00 00:00:00', NULL, '2020-02-29', '-838:59:59.000000', 0, b'0', 'a',
       '', '{{"k": [1, 2.50, "s", null, true], "ts": 1}}', NULL, NULL, NULL, NULL)""")
    srv.sql(f"""INSERT INTO `{db}`.types SELECT seq, seq, -seq, seq, seq / 7, seq / 4, seq / 8,
      '2024-02-29 12:00:00' + INTERVAL seq SECOND, '2001-01-01 00:00:00' + INTERVAL seq DAY, '1999-12-31',
      '-12:00:01', 1999 + seq, seq, 'a', 'y', '{{"ts": "x"}}', x'0a0d09', 'tab\\there', CONCAT('a,"ts":', seq),
      CONCAT('\\\\', seq) FROM `{db}`.seq_3_to_8""")
    # the same rows without the BIT, SET and JSON columns: every column's COPY text made from the server's text
    srv.sql(f"CREATE TABLE `{db}`.plain (PRIMARY KEY (id)) AS SELECT id, u, s, ti, d, f, g, dt, ts, da, tm, y, e, "
            f"vb, bl, tx, c FROM `{db}`.types")
    srv.sql(f"UPDATE `{db}`.plain SET tx = CONCAT(tx, '\\r\\n\\t\\\\.') WHERE id = 1")


def test_snapshot_copy_every_type(mariadb, db, tmp_path):
    require("postgres")
    srv = mariadb
    fill_types(srv, db)
    with PostgresServer() as pg:
        o = overrides(pg, srv, tmp_path, db, snapshot__mode="initial", snapshot__chunk_rows=2)
        d = DaemonProcess(o)
        try:
            d.wait_for_line("snapshot: done", timeout=90)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        assert "Traceback" not in d.stderr, d.stderr[-4000:]
        assert_equal(srv, pg, db, "types")
        assert_equal(srv, pg, db, "plain")


def test_batches_keep_transactions_whole_and_in_order(mariadb, db, tmp_path):
    require("postgres")
    import psycopg

    srv = mariadb
    with PostgresServer() as pg:
        o = overrides(pg, srv, tmp_path, db)
        d = DaemonProcess(o)
        stop, seen = threading.Event(), set()

        def reader():
            while not stop.is_set():
                try:
                    with psycopg.connect(pg.url, autocommit=True) as conn:
                        while not stop.is_set():
                            seen.add(conn.execute(f'SELECT count(*), sum(v) FROM "{db}".big').fetchone())
                except psycopg.Error:
                    time.sleep(0.05)  # the table is not there yet

        t = threading.Thread(target=reader, daemon=True)
        try:
            d.wait_streaming(timeout=60)
            srv.sql(f"CREATE TABLE `{db}`.big (id INT PRIMARY KEY, v INT NOT NULL)")
            srv.sql(f"CREATE TABLE `{db}`.ord (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
            srv.sql(f"INSERT INTO `{db}`.ord SELECT seq, seq, 's' FROM `{db}`.seq_1_to_200")
            wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=d)
            t.start()
            conn = srv.connect(database=db, autocommit=False)
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO big SELECT seq, 1 FROM seq_1_to_{BIG}")
                cur.execute("UPDATE big SET v = 2")
                conn.commit()
                cur.execute("UPDATE ord SET v = v + 1000")  # a run of distinct keys: set-wise
                cur.execute("UPDATE ord SET v = -1 WHERE id = 5")  # the same key again
                cur.execute("DELETE FROM ord WHERE id = 7")
                cur.execute("INSERT INTO ord VALUES (7, 77, 'again')")
                cur.execute("UPDATE ord SET id = id + 1000 WHERE id > 190")  # keys change
                cur.execute("DELETE FROM ord WHERE id BETWEEN 100 AND 180")  # a run of deletes: set-wise
                cur.execute("UPDATE ord SET s = 'last' WHERE id = 7")
                conn.commit()
            conn.close()
            wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=90, daemon=d)
            time.sleep(0.3)
            stop.set()
            t.join(10)
            assert d.terminate() == 0, d.stderr
        finally:
            stop.set()
            if d.running:
                d.kill()
        assert "Traceback" not in d.stderr, d.stderr[-4000:]
        assert_equal(srv, pg, db, "big")
        assert_equal(srv, pg, db, "ord")
        assert seen <= {(0, None), (BIG, 2 * BIG)} and (BIG, 2 * BIG) in seen, sorted(seen)[:5]


def test_nul_in_snapshot_text(mariadb, db, tmp_path):
    require("postgres")
    srv = mariadb
    srv.sql(f"CREATE TABLE `{db}`.n (id INT PRIMARY KEY, v TEXT)")
    srv.sql(f"INSERT INTO `{db}`.n VALUES (1, 'a'), (2, 'a\\0b'), (3, 'c')")
    with PostgresServer() as pg:
        rc, err = run_to_exit(overrides(pg, srv, tmp_path, db, snapshot__mode="initial"), timeout=90)
        assert rc == 7, err
        errors = [line for line in err.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and all(w in errors[0] for w in (f"{db}.n", "column 'v'", "NUL")), err
        assert "Traceback" not in err



def test_sigterm_at_the_snapshots_end_closes_every_reader(mariadb, db, tmp_path):
    """A SIGTERM right at "snapshot: done" (spare key-range readers still opening, the views being ended): every
    connection is closed before the loop is, so none is collected after it with an "Event loop is closed"
    traceback. The SIGTERM lands at a slightly different step in each run."""
    require("postgres")
    fill_types(mariadb, db)
    for run in range(3):
        with PostgresServer() as pg:
            d = DaemonProcess(overrides(pg, mariadb, tmp_path / str(run), db, snapshot__mode="initial",
                                        snapshot__chunk_rows=2))
            try:
                d.wait_for_line("snapshot: done", timeout=90)
                assert d.terminate() == 0, d.stderr
            finally:
                if d.running:
                    d.kill()
            assert "Traceback" not in d.stderr and "Exception ignored" not in d.stderr, d.stderr
