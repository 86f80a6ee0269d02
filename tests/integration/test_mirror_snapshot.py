"""The PostgreSQL mirror's initial snapshot (``[snapshot] mode = "initial"``) of tables that exist before the
daemon, on a MINIMAL-metadata MariaDB under a transfer load: the mirrored tables get the source's primary keys
(from the schema history), every row equal to the source at the end, and a reader polling the accounts' sum
from the moment the stream passed every snapshot view never saw it broken. The daemon runs in process."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from binlogd.daemon.config import load_config
from tests.integration.test_mirror import assert_equal
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import InProcessDaemon, base_overrides, captured_log, wait_caught_up, wait_until

pytestmark = pytest.mark.server
ACCOUNTS, TOTAL = 400, 400 * 1000


def setup_source(srv, db) -> None:
    srv.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    srv.sql(f"CREATE TABLE `{db}`.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL, note VARCHAR(20))")
    srv.sql(f"INSERT INTO `{db}`.accounts VALUES " + ",".join(f"({n}, 1000, 'n{n}')" for n in range(1, ACCOUNTS + 1)))
    srv.sql(f"CREATE TABLE `{db}`.loose (a INT, b TEXT)")
    srv.sql(f"INSERT INTO `{db}`.loose VALUES " + ",".join(f"({n % 7}, '{'b' * (n % 5)}')" for n in range(1, 301)))


def snapshot_account(srv) -> dict:
    """``--set`` values of an account that can open a snapshot's view: on MySQL one with RELOAD (FLUSH TABLES WITH
    READ LOCK; without it a keyless table is not read at all), else the suite's replication account."""
    if srv.flavor != "mysql":
        return {}
    srv.sql("CREATE USER IF NOT EXISTS 'mirrorsnap'@'127.0.0.1' IDENTIFIED BY 'mirrorsnappass'")
    srv.sql("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD ON *.* TO 'mirrorsnap'@'127.0.0.1'")
    return {"source.user": "mirrorsnap", "source.password": "mirrorsnappass"}


def transfers(srv, db, stop: threading.Event, done: list, loose: bool = True, rate: float = 400) -> None:
    """Money moved between accounts, one transfer a transaction, at most ``rate`` a second, until ``stop``; with
    ``loose`` every tenth also inserts a row into the keyless table. ``done`` gets the number of transfers."""
    conn = srv.connect(database=db, autocommit=False)
    i, began = 0, time.monotonic()
    while not stop.is_set():
        with conn.cursor() as cur:
            a, b = i % ACCOUNTS + 1, (i * 7 + 3) % ACCOUNTS + 1
            cur.execute("UPDATE accounts SET balance = balance - 3 WHERE id = %s", (a,))
            cur.execute("UPDATE accounts SET balance = balance + 3 WHERE id = %s", (b,))
            if loose and i % 10 == 0:
                cur.execute("INSERT INTO loose VALUES (%s, 'x')", (i,))
        conn.commit()
        i += 1
        ahead = i / rate - (time.monotonic() - began)
        if ahead > 0:
            stop.wait(ahead)
    conn.close()
    done.append(i)


def sum_reader(pg, db, stop: threading.Event, armed: threading.Event, broken: list, reads: list) -> None:
    import psycopg

    armed.wait()
    while not stop.is_set():
        try:
            with psycopg.connect(pg.url, autocommit=True) as conn:
                while not stop.is_set():
                    total = conn.execute(f'SELECT sum(balance), count(*) FROM "{db}".accounts').fetchone()
                    reads.append(1)
                    if total[0] != TOTAL:
                        broken.append(total)
                    time.sleep(0.01)
        except psycopg.Error:
            time.sleep(0.1)  # the table is not there yet


def test_initial_snapshot_under_load(mariadb_minimal, tmp_path):
    require("postgres")
    srv, db = mariadb_minimal, f"mirror_snap_{uuid.uuid4().hex[:8]}"
    setup_source(srv, db)
    stop, armed, done, broken, reads = threading.Event(), threading.Event(), [], [], []
    try:
        with PostgresServer() as pg, captured_log(f"binlogd.test.{db}") as (log, lines):
            config = load_config(None, env={}, overrides=base_overrides(
                srv, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=50, filters__include_schemas=db,
                sink__kind="mirror", sink__mirror__url=pg.url, **snapshot_account(srv)))
            threads = [threading.Thread(target=transfers, args=(srv, db, stop, done, False), daemon=True),
                       threading.Thread(target=sum_reader, args=(pg, db, stop, armed, broken, reads), daemon=True)]
            for t in threads:
                t.start()
            runner = InProcessDaemon(config, log=log)
            runner.start()
            try:
                wait_until(lambda: any("snapshot: done" in line for line in lines), timeout=90, what="snapshot done")
                # Parallel range readers read in views opened after P1, which the stream from P1 overtakes: the
                # invariant holds from the position the binlog had once every view was open.
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60)
                armed.set()
                time.sleep(2)
                stop.set()
                for t in threads:
                    t.join(10)
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60)
            finally:
                assert runner.stop() == 0, "\n".join(lines)
            assert done and done[0] > 20, "the write load barely ran"
            assert len(reads) > 10 and not broken, f"a reader saw part of a transfer: {broken[:3]}"
            assert_equal(srv, pg, db, "accounts")
            import psycopg

            with psycopg.connect(pg.url) as conn:
                key = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'p' AND "
                                   "conrelid = %s::regclass", (f'"{db}".accounts',)).fetchall()
                assert key == [("PRIMARY KEY (id)",)]
                src = sorted(srv.sql(f"SELECT a, b FROM `{db}`.loose"))
                assert sorted(conn.execute(f'SELECT a, b FROM "{db}".loose').fetchall()) == src
    finally:
        stop.set()
        srv.sql(f"DROP DATABASE IF EXISTS `{db}`")
