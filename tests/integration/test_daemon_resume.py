"""MariaDB resume modes: GTID (``start=current``) and file/pos (``start=file:<first binlog>:4``).

In each mode: stream a first batch, stop with SIGTERM, write while stopped, ``FLUSH BINARY LOGS``
twice (with writes between and a rotate right at the checkpointed end of a file), restart from the
checkpoint, rotate and write again while streaming, stop, restart once more with nothing new. The sink
must hold every transaction exactly once: each (table, pk, op) once, each transaction's GTID in one
contiguous run with its expected row count, no (file, pos, row) twice, and the replay equals the
tables.
"""

from __future__ import annotations

from collections import Counter

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import (
    assert_sink_matches,
    base_overrides,
    read_changes,
    read_checkpoint,
    replay,
    running_daemon,
    wait_caught_up,
)

pytestmark = pytest.mark.server


@pytest.fixture
def own_server(server_binaries):
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries)
    try:
        srv.start()
        yield srv
    finally:
        srv.cleanup()


class Writer:
    """Transactions with known content: transaction k inserts rows k*100+1.. into ``a`` and one
    marker row k into ``m``; every third also updates, every fifth deletes an earlier row."""

    def __init__(self, server, db: str):
        self.conn = server.connect(database=db)
        self.k = 0
        self.expected: dict[int, int] = {}      # transaction k -> number of row changes
        self.live: list[int] = []
        self.updated: set[int] = set()

    def transaction(self) -> None:
        self.k += 1
        k, n = self.k, 0
        cur = self.conn.cursor()
        cur.execute("BEGIN")
        ids = [k * 100 + i for i in range(1, 1 + (k % 4) + 1)]
        cur.executemany("INSERT INTO a (id, v) VALUES (%s, %s)", [(i, f"v{i}") for i in ids])
        n += len(ids)
        cur.execute("INSERT INTO m (id) VALUES (%s)", (k,))
        n += 1
        if k % 3 == 0:
            target = next((i for i in self.live if i not in self.updated), None)
            if target is not None:
                cur.execute("UPDATE a SET v = CONCAT(v, '+') WHERE id = %s", (target,))
                self.updated.add(target)
                n += 1
        if k % 5 == 0 and self.live:
            victim = self.live.pop(0)
            cur.execute("DELETE FROM a WHERE id = %s", (victim,))
            n += 1
        cur.execute("COMMIT")
        self.live.extend(ids)
        self.expected[k] = n

    def batch(self, count: int) -> None:
        for _ in range(count):
            self.transaction()

    def close(self) -> None:
        self.conn.close()


@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_resume_after_stop_and_rotate(own_server, tmp_path, mode):
    srv = own_server
    srv.sql("CREATE DATABASE r CHARACTER SET utf8mb4")
    srv.sql("CREATE TABLE r.a (id INT PRIMARY KEY, v VARCHAR(40))")
    srv.sql("CREATE TABLE r.m (id INT PRIMARY KEY)")
    first = srv.binlog_files()[0].name
    start = "current" if mode == "gtid" else f"file:{first}:4"
    overrides = base_overrides(srv, tmp_path, **{"source.start": start})
    cp_path = tmp_path / "checkpoint.json"
    w = Writer(srv, "r")
    try:
        # 1. first run
        with running_daemon(overrides) as d:
            w.batch(10)
            wait_caught_up(srv, cp_path, daemon=d)
        cp = read_checkpoint(cp_path)
        assert cp["source"]["resume"] == mode, cp
        if mode == "gtid":  # MariaDB's GTID list, MySQL's GTID set
            assert cp["position"]["gtid_set" if srv.flavor == "mysql" else "gtid_list"], cp

        # 2. stopped: rotate at the checkpointed end, write, rotate, write
        srv.sql("FLUSH BINARY LOGS")
        w.batch(5)
        srv.sql("FLUSH BINARY LOGS")
        w.batch(5)
        srv.sql("FLUSH BINARY LOGS")
        w.batch(3)

        # 3. resume; rotate and write while streaming
        with running_daemon(overrides) as d:
            line = d.wait_streaming()
            assert ("GTID" in line) == (mode == "gtid"), line
            w.batch(4)
            srv.sql("FLUSH BINARY LOGS")
            w.batch(4)
            wait_caught_up(srv, cp_path, daemon=d)
        cp = read_checkpoint(cp_path)
        assert cp["source"]["resume"] == mode, cp

        # 4. resume with nothing new, then one more rotate and a last batch
        with running_daemon(overrides) as d:
            srv.sql("FLUSH BINARY LOGS")
            w.batch(2)
            wait_caught_up(srv, cp_path, daemon=d)
    finally:
        w.close()

    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == "r"]
    # every (table, pk, op) once
    counts = Counter((c["table"], (c["after"] or c["before"])["id"], c["op"]) for c in changes)
    dups = {k: v for k, v in counts.items() if v > 1}
    print(f"{mode}: {len(changes)} changes, {len(w.expected)} transactions, {len(dups)} duplicated (table, pk, op)")
    assert not dups, f"{len(dups)} (table, pk, op) more than once, e.g. {sorted(dups.items())[:5]}"
    positions = Counter((c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes)
    assert max(positions.values()) == 1, "a (file, pos, row) appears twice"
    # every transaction once, whole, contiguous: find each by its marker row
    runs: list[tuple[str, list[dict]]] = []
    for c in changes:
        g = c["source"]["gtid"]
        if runs and runs[-1][0] == g:
            runs[-1][1].append(c)
        else:
            runs.append((g, [c]))
    run_gtids = Counter(g for g, _ in runs)
    assert max(run_gtids.values()) == 1, f"a GTID in two separate runs: {[g for g, n in run_gtids.items() if n > 1]}"
    by_marker = {}
    for g, cs in runs:
        markers = [c["after"]["id"] for c in cs if c["table"] == "m" and c["op"] == "insert"]
        if markers:
            assert len(markers) == 1, f"transaction {g} holds markers {markers}"
            assert markers[0] not in by_marker, f"marker {markers[0]} in two transactions"
            by_marker[markers[0]] = len(cs)
    assert set(by_marker) == set(w.expected), (f"missing transactions {sorted(set(w.expected) - set(by_marker))}, "
                                               f"unexpected {sorted(set(by_marker) - set(w.expected))}")
    wrong = {k: (by_marker[k], n) for k, n in w.expected.items() if by_marker[k] != n}
    assert not wrong, f"transactions with the wrong number of changes (sink, written): {wrong}"
    state = replay(changes, schemas=["r"])
    assert_sink_matches(srv, "r", ["a", "m"], state)
