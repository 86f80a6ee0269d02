"""Helpers for the snapshot tests: the tables, a write load, and the replay of reads as upserts.

- :func:`make_tables`: in a new database, ``big`` (BIGINT key), ``comp`` (INT + VARCHAR key in a
  case-insensitive collation: 'aB' and 'Ab' sort as the server says), ``nokey`` (no primary key) and
  ``empty``, filled with ``rows`` rows each (``nokey`` fewer).
- :class:`WriteLoad`: a thread of inserts, updates and deletes on ``big`` and ``comp`` (and inserts on
  ``nokey``) until stopped, each its own transaction.
- :func:`replay_upsert`: reads as upserts, then the changes in order, by primary key (a multiset for a table
  without one); counts each key's reads.
- :func:`check_against_server`: the replay equals each table's ``SELECT``, and no key was read twice;
- :func:`stop_when` and :func:`finish`: a daemon process stopped at a point of its snapshot, and the last run
  taken to the end;
- :func:`reload_account`: on MySQL, an account whose initial snapshot opens its view under FTWRL.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from tests.support.daemon import DaemonProcess, read_checkpoint, table_rows, wait_caught_up

PKS = {"big": ("id",), "comp": ("a", "b"), "empty": ("id",), "nokey": ()}
_WORDS = ["alpha", "Beta", "gamma", "DELTA", "épsilon", "zeta", "Eta", "theta"]


def reload_account(server) -> dict[str, str]:
    """``--set`` values for an account with RELOAD on MySQL (its initial snapshot opens its view under FLUSH TABLES
    WITH READ LOCK; the suite's replication account has none: the lock-free fallback); none on MariaDB."""
    if server.flavor != "mysql":
        return {}
    server.sql("CREATE USER IF NOT EXISTS 'snapreload'@'127.0.0.1' IDENTIFIED BY 'snapreload'")
    server.sql("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD ON *.* TO 'snapreload'@'127.0.0.1'")
    return {"source.user": "snapreload", "source.password": "snapreload"}


def comp_key(n: int) -> tuple[int, str]:
    """A composite key whose string part mixes case (ordered by the collation, not by bytes)."""
    word = _WORDS[n % len(_WORDS)]
    return n // 7, (word.upper() if n % 3 == 0 else word.lower()) + str(n % 5)


def make_tables(server, db: str, rows: int) -> None:
    """Create and fill the four tables in ``db`` (created here)."""
    server.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    conn = server.connect(database=db)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE big (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR(40), n INT, "
                        "d DECIMAL(10,3), t DATETIME(3))")
            cur.execute("CREATE TABLE comp (a INT NOT NULL, b VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, "
                        "v INT, PRIMARY KEY (a, b))")
            cur.execute("CREATE TABLE nokey (x INT, y VARCHAR(20))")
            cur.execute("CREATE TABLE `empty` (id INT NOT NULL PRIMARY KEY, v INT)")  # EMPTY is reserved in MySQL
            cur.executemany("INSERT INTO big VALUES (%s, %s, %s, %s, %s)",
                            [(i * 3 + 1_000_000_000_000, f"v{i}", i, f"{i}.{i % 1000:03d}",
                              f"2026-01-01 00:00:{i % 60:02d}.{i % 1000:03d}") for i in range(rows)])
            seen = set()
            comp = []
            for i in range(rows):
                k = comp_key(i)
                if (k[0], k[1].lower()) not in seen:
                    seen.add((k[0], k[1].lower()))
                    comp.append((*k, i))
            cur.executemany("INSERT INTO comp VALUES (%s, %s, %s)", comp)
            cur.executemany("INSERT INTO nokey VALUES (%s, %s)", [(i % 17, f"y{i}") for i in range(rows // 10)])
        conn.commit()
    finally:
        conn.close()


class WriteLoad:
    """Inserts, updates and deletes on ``db``'s tables in a thread, one transaction each, until :meth:`stop`."""

    def __init__(self, server, db: str, rows: int, seed: int = 7):
        self.server, self.db, self.rows = server, db, rows
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.count = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="write-load")
        self.next_id = 2_000_000_000_000

    def start(self) -> WriteLoad:
        self.thread.start()
        return self

    def stop(self) -> int:
        """Stop and join; returns the number of transactions; re-raises the thread's error."""
        self.done.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error
        return self.count

    def _run(self) -> None:
        conn = self.server.connect(database=self.db)
        try:
            with conn.cursor() as cur:
                while not self.done.is_set():
                    self._one(cur)
                    conn.commit()
                    self.count += 1
                    self.done.wait(0.002)
        except BaseException as exc:  # noqa: BLE001 (re-raised by stop())
            self.error = exc
        finally:
            conn.close()

    def _one(self, cur) -> None:
        rng, n = self.rng, self.rows
        what = rng.random()
        big_id = rng.randrange(n) * 3 + 1_000_000_000_000
        if what < 0.25:
            self.next_id += 1
            cur.execute("INSERT INTO big VALUES (%s, 'new', 1, '1.500', '2026-02-02 00:00:00.000') "
                        "ON DUPLICATE KEY UPDATE n = n + 100",
                        (rng.choice([self.next_id, big_id + 1]),))  # new keys at the end and between old ones
        elif what < 0.5:
            cur.execute("UPDATE big SET n = n + 1, v = CONCAT('u', n) WHERE id = %s", (big_id,))
        elif what < 0.6:
            cur.execute("DELETE FROM big WHERE id = %s", (big_id,))
        elif what < 0.8:
            a, b = comp_key(rng.randrange(n))
            cur.execute("UPDATE comp SET v = v + 1 WHERE a = %s AND b = %s", (a, b))
        elif what < 0.9:
            a, b = comp_key(rng.randrange(n))
            cur.execute("INSERT INTO comp VALUES (%s, %s, 0) ON DUPLICATE KEY UPDATE v = v - 1",
                        (a, b.swapcase() + "x"))
        elif what < 0.95:
            a, b = comp_key(rng.randrange(n))
            cur.execute("DELETE FROM comp WHERE a = %s AND b = %s", (a, b))
        else:
            cur.execute("INSERT INTO nokey VALUES (%s, 'load')", (rng.randrange(100),))


def _key(row: dict, cols: tuple[str, ...]):
    return tuple(row[c] for c in cols)


def replay_upsert(changes, db: str, pks: dict = PKS) -> tuple[dict, Counter]:
    """``({table: {key: row}}, reads)``: reads as upserts, then the changes in order; a table without a key
    as a list of rows (a delete or update takes out one equal row). ``reads`` counts (table, key) reads."""
    state: dict[str, object] = {}
    reads: Counter = Counter()
    for c in changes:
        if c["schema"] != db:
            continue
        table, op = c["table"], c["op"]
        cols = pks.get(table)
        if cols is None:
            continue
        if not cols:
            rows = state.setdefault(table, [])
            if op in ("update", "delete") and c["before"] in rows:
                rows.remove(c["before"])
            if op in ("read", "insert", "update"):
                rows.append(c["after"])
            continue
        rows = state.setdefault(table, {})
        if op == "read":
            reads[(table, _key(c["after"], cols))] += 1
        if op in ("update", "delete"):
            rows.pop(_key(c["before"], cols), None)
        if op in ("read", "insert", "update"):
            rows[_key(c["after"], cols)] = c["after"]
    return state, reads


def check_against_server(server, db: str, changes, tables=("big", "comp", "nokey", "empty")) -> Counter:
    """Assert the replay equals each table's SELECT and that no key was read twice; returns the read counts."""
    state, reads = replay_upsert(changes, db)
    twice = [k for k, n in reads.items() if n > 1]
    assert not twice, f"keys read more than once: {twice[:5]}"
    for table in tables:
        cols = PKS[table]
        want = table_rows(server, db, table, cols or ("x",))
        if cols:
            got = state.get(table, {})
            want = {(k if isinstance(k, tuple) else (k,)): v for k, v in want.items()}
            missing = sorted(set(want) - set(got), key=repr)[:5]
            extra = sorted(set(got) - set(want), key=repr)[:5]
            differ = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]
            assert got == want, f"{table}: missing {missing}, extra {extra}, differ {differ}"
        else:
            conn = server.connect(database=db)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT x, y FROM `{table}`")
                    rows = sorted((int(x), y) for x, y in cur.fetchall())
            finally:
                conn.close()
            got = sorted((r["x"], r["y"]) for r in state.get(table, []))
            assert got == rows, f"{table}: {len(got)} rows replayed, {len(rows)} in the table"
    return reads


def stop_when(d: DaemonProcess, checkpoint, ready, what: str, stop=DaemonProcess.kill, timeout: float = 30.0):
    """SIGKILL ``d`` (or ``stop(d)``) as soon as ``ready(checkpoint)`` (the checkpoint file's JSON, or None) gives
    something true, before its snapshot is done; returns that. Fails when ``d`` exits, its snapshot ends, or
    nothing comes within ``timeout`` seconds (``what``: what was waited for)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ready(read_checkpoint(checkpoint))
        if got:
            stop(d)
            return got
        assert d.running, f"binlogd exited (rc={d.proc.returncode}); stderr:\n{d.stderr}"
        assert "snapshot: done" not in d.stderr, f"the snapshot ended before the kill; stderr:\n{d.stderr}"
        time.sleep(0.003)
    d.kill()
    raise AssertionError(f"no {what} within {timeout}s; stderr:\n{d.stderr}")


def finish(d: DaemonProcess, server, checkpoint, load: WriteLoad, first: str, *then: str,
           streaming: bool = True) -> str:
    """Take ``d``'s run to the end: wait for log lines ``first`` then each of ``then`` (regexes), for streaming
    (``streaming``), stop ``load`` (it must have run), wait until ``d`` is caught up, SIGTERM it (exit 0; killed
    on a failure). Returns the line ``first`` matched."""
    try:
        line = d.wait_for_line(first, timeout=30)
        for pattern in then:
            d.wait_for_line(pattern, timeout=80)
        if streaming:
            d.wait_streaming(timeout=30)
        assert load.stop() > 20
        wait_caught_up(server, checkpoint, daemon=d)
        assert d.terminate() == 0, d.stderr
    finally:
        if d.running:
            d.kill()
    return line
