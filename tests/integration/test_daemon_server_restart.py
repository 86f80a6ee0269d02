"""The primary goes away during the stream: a crash (SIGKILL) and a clean restart, writes continuing.

A writer thread keeps committing small transactions (reconnecting when the server is down); the
server is killed and started again on the same port, later restarted cleanly. The daemon must log a
reconnect, count it in ``binlogd_reconnects_total``, stream again, and in the end its sink replayed
must equal the tables, with no change twice. Both resume modes: GTID (``start=current``) and
file/pos (``start=file:<first>:4``; after the crash the server continues in a new file).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pymysql
import pytest

from binlogd.cli.localserver import LocalServer, free_port
from tests.support.daemon import (
    DaemonProcess,
    assert_sink_matches,
    base_overrides,
    metric,
    parse_metrics,
    read_changes,
    read_checkpoint,
    replay,
    scrape,
    wait_caught_up,
)

pytestmark = pytest.mark.server


class FlakyWriter(threading.Thread):
    """Commits transactions until stopped; rides over a server that is down."""

    def __init__(self, server):
        super().__init__(daemon=True, name="flaky-writer")
        self.server = server
        self.stop_flag = threading.Event()
        self.ok = 0
        self.failed = 0

    def run(self) -> None:
        k = 0
        conn = None
        while not self.stop_flag.is_set():
            try:
                if conn is None:
                    conn = self.server.connect(database="s", connect_timeout=2)
                k += 1
                cur = conn.cursor()
                cur.execute("BEGIN")
                cur.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (k, f"row {k}"))
                cur.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (-k, "pair"))
                cur.execute("UPDATE t SET v = CONCAT(v, '*') WHERE id = %s", (k - 1,))
                cur.execute("COMMIT")
                self.ok += 1
                time.sleep(0.005)
            except (pymysql.err.Error, OSError):
                self.failed += 1
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                conn = None
                self.stop_flag.wait(0.1)
        if conn is not None:
            conn.close()


def _run_for(seconds: float, writer: FlakyWriter, daemon: DaemonProcess) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert writer.is_alive()
        assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_server_crash_and_restart_during_stream(tmp_path, mode, server_binaries):
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries)
    writer = daemon = None
    try:
        srv.start()
        srv.sql("CREATE DATABASE s CHARACTER SET utf8mb4")
        srv.sql("CREATE TABLE s.t (id INT PRIMARY KEY, v VARCHAR(100))")
        port = free_port()
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        overrides = base_overrides(srv, tmp_path, **{"metrics.listen": f"127.0.0.1:{port}", "source.start": start})
        daemon = DaemonProcess(overrides)
        daemon.wait_streaming()
        writer = FlakyWriter(srv)
        writer.start()
        _run_for(1.0, writer, daemon)

        srv.kill()                 # crash: the daemon's socket closes mid-stream
        ok_at_kill = writer.ok
        _run_for(1.0, writer, daemon)  # the daemon retries against a closed port meanwhile
        srv.restart()              # same port, same data (crash recovery)
        daemon.wait_streaming(timeout=60, nth=2)
        _run_for(1.0, writer, daemon)
        assert writer.ok > ok_at_kill, "no write went through after the crash"

        srv.restart()              # clean shutdown and start
        daemon.wait_streaming(timeout=60, nth=3)
        _run_for(1.0, writer, daemon)
        writer.stop_flag.set()
        writer.join(30)
        assert not writer.is_alive()

        wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon)
        status, body = scrape(port)
        assert status == 200
        samples = parse_metrics(body)
        reconnects = metric(samples, "binlogd_reconnects_total")
        assert reconnects is not None and reconnects >= 2, f"binlogd_reconnects_total = {reconnects}"
        assert metric(samples, "binlogd_up") == 1.0
        assert daemon.count(r"reconnect") >= 2, daemon.stderr
        assert read_checkpoint(tmp_path / "checkpoint.json")["source"]["resume"] == mode
        rc = daemon.terminate()
        assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"

        changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == "s"]
        positions = Counter((c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes)
        print(f"server restart ({mode}): {writer.ok} transactions committed, {writer.failed} failed attempts, "
              f"{len(changes)} changes, reconnects {reconnects:g}")
        assert max(positions.values()) == 1, "a (file, pos, row) appears twice"
        state = replay(changes, schemas=["s"])
        assert_sink_matches(srv, "s", ["t"], state)
    finally:
        if writer is not None:
            writer.stop_flag.set()
            writer.join(30)
        if daemon is not None and daemon.running:
            daemon.kill()
        srv.cleanup()
