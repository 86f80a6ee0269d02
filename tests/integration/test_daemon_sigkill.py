"""SIGKILL the daemon at random moments while multi-statement transactions stream; restart each time.

A writer thread commits transactions of many statements (INSERTs into ``a`` and ``b`` and an UPDATE of
``a``), every row carrying the transaction's marker ``mk``; every 15th transaction is over 1 MiB, so
the sink's file buffer spills part of it before its COMMIT arrives (a kill then leaves an uncommitted
tail past the checkpointed offset, which the restart must cut off). The daemon (``binlogd run`` subprocess) is
SIGKILLed five times at random moments and restarted from its checkpoint; then the writer stops, the
daemon catches up and is stopped with SIGTERM. The sink must hold each committed transaction exactly
once: every marker present, none twice, each with exactly the changes it wrote, and the replay equals
the tables. The writer also rotates the binlog now and then. Both resume modes (GTID, file/pos).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import (
    DaemonProcess,
    assert_sink_matches,
    base_overrides,
    read_changes,
    read_checkpoint,
    replay,
    wait_caught_up,
)

pytestmark = pytest.mark.server

KILLS = 5


class TxWriter(threading.Thread):
    def __init__(self, server, db: str):
        super().__init__(daemon=True, name="tx-writer")
        self.server, self.db = server, db
        self.stop_flag = threading.Event()
        self.committed: dict[int, int] = {}   # marker -> row changes written
        self.error: BaseException | None = None
        self.rng = random.Random(7)

    def run(self) -> None:
        try:
            conn = self.server.connect(database=self.db)
            cur = conn.cursor()
            k = 0
            while not self.stop_flag.is_set():
                k += 1
                n_a = self.rng.randint(3, 12)
                cur.execute("BEGIN")
                big = k % 15 == 0  # now and then > 1 MiB of JSON: part of it reaches the file before COMMIT
                for i in range(n_a):
                    cur.execute("INSERT INTO a (id, mk, v, big) VALUES (%s, %s, %s, %s)",
                                (k * 1000 + i, k, "x" * (i * 7), "y" * 150_000 if big else None))
                cur.execute("INSERT INTO b (id, mk, note) VALUES (%s, %s, %s)", (k, k, f"tx {k}"))
                cur.execute("INSERT INTO b (id, mk, note) VALUES (%s, %s, %s)", (-k, k, "second"))
                updated = cur.execute("UPDATE a SET v = CONCAT(v, '!') WHERE mk = %s AND id %% 2 = 0", (k,))
                cur.execute("UPDATE b SET note = CONCAT(note, ' done') WHERE id = %s", (k,))
                cur.execute("COMMIT")
                self.committed[k] = n_a + 2 + updated + 1
                if k % 10 == 0:
                    time.sleep(0.005)
                if k % 150 == 0:
                    cur.execute("FLUSH BINARY LOGS")  # kills also land around rotations
            conn.close()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc


@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_sigkill_mid_transaction_exactly_once(tmp_path, mode, server_binaries):
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries)
    writer = None
    daemon = None
    try:
        srv.start()
        srv.sql("CREATE DATABASE k CHARACTER SET utf8mb4")
        srv.sql("CREATE TABLE k.a (id INT PRIMARY KEY, mk INT NOT NULL, v VARCHAR(200), big MEDIUMTEXT)")
        srv.sql("CREATE TABLE k.b (id INT PRIMARY KEY, mk INT NOT NULL, note VARCHAR(60))")
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        overrides = base_overrides(srv, tmp_path, **{"source.start": start})
        cp_path = tmp_path / "checkpoint.json"
        rng = random.Random(20261122)

        daemon = DaemonProcess(overrides)
        daemon.wait_streaming()
        writer = TxWriter(srv, "k")
        writer.start()
        tails = 0
        for _ in range(KILLS):
            deadline = time.monotonic() + rng.uniform(0.3, 1.5)
            while time.monotonic() < deadline:
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                time.sleep(0.02)
            daemon.kill()
            cp = read_checkpoint(cp_path)
            if cp is not None:
                sink_file = tmp_path / "sink" / cp["sink"]["file"]
                if sink_file.exists() and sink_file.stat().st_size > cp["sink"]["offset"]:
                    tails += 1  # killed with rows written past the checkpoint: a partial transaction
            assert writer.is_alive() and writer.error is None, writer.error
            daemon = DaemonProcess(overrides)
            daemon.wait_streaming()
        writer.stop_flag.set()
        writer.join(30)
        assert not writer.is_alive() and writer.error is None, writer.error
        wait_caught_up(srv, cp_path, timeout=60, daemon=daemon)
        rc = daemon.terminate()
        assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"

        changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == "k"]
        per_marker = Counter((c["after"] or c["before"])["mk"] for c in changes)
        gtids_of = defaultdict(set)
        for c in changes:
            gtids_of[(c["after"] or c["before"])["mk"]].add(c["source"]["gtid"])
        written = writer.committed
        missing = sorted(set(written) - set(per_marker))
        extra = sorted(set(per_marker) - set(written))
        twice = sorted(m for m, gs in gtids_of.items() if len(gs) > 1)
        wrong = {m: (per_marker[m], written[m]) for m in written if m in per_marker and per_marker[m] != written[m]}
        print(f"sigkill ({mode}): {len(written)} transactions written, {len(per_marker)} in the sink, {len(changes)} "
              f"changes; {KILLS} kills ({tails} with an uncommitted sink tail); missing {len(missing)}, "
              f"extra {len(extra)}, wrong counts {len(wrong)}, in two transactions {len(twice)}")
        assert not missing, f"transactions missing from the sink: {missing[:20]}"
        assert not extra, f"markers in the sink that were never committed: {extra[:20]}"
        assert not twice, f"markers under two GTIDs: {twice[:20]}"
        assert not wrong, f"markers with wrong change counts (sink, written): {dict(list(wrong.items())[:20])}"
        positions = Counter((c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes)
        assert max(positions.values()) == 1, "a (file, pos, row) appears twice"
        state = replay(changes, schemas=["k"])
        assert_sink_matches(srv, "k", ["a", "b"], state)
    finally:
        if writer is not None:
            writer.stop_flag.set()
            writer.join(30)
        if daemon is not None and daemon.running:
            daemon.kill()
        srv.cleanup()
