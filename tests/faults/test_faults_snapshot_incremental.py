"""SIGKILL the daemon during an incremental snapshot (``[snapshot] signal_table``), under a write load; restart.

The snapshot must resume after the last chunk it committed (the checkpoint's ``incremental`` object: never from
the table's start), the sink's uncommitted tail is cut back, and the sink replayed (reads as upserts, then the
changes in order) equals each table's SELECT, with no key read twice. MINIMAL row metadata.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.integration.test_snapshot_incremental import make_signal_table, overrides, signal
from tests.support.daemon import DaemonProcess, read_changes, read_checkpoint, wait_caught_up
from tests.support.snapshots import WriteLoad, check_against_server, make_tables

pytestmark = pytest.mark.server


def test_sigkill_during_incremental_snapshot(mariadb_minimal, tmp_path):
    server, db = mariadb_minimal, f"incrk_{uuid.uuid4().hex[:10]}"
    rows = 4000
    make_tables(server, db, rows)
    make_signal_table(server, db)
    checkpoint = tmp_path / "checkpoint.json"
    settings = overrides(server, tmp_path, db, chunk_rows=10)
    load = WriteLoad(server, db, rows).start()
    logs = []
    try:
        d = DaemonProcess(settings)
        try:
            d.wait_streaming(timeout=30)
            signal(server, db, "execute-snapshot", {"data-collections": [f"{db}.big", f"{db}.comp"],
                                                    "type": "incremental"})
            deadline, at = time.monotonic() + 30, None
            while time.monotonic() < deadline:  # killed once a few chunks of big are committed
                state = (read_checkpoint(checkpoint) or {}).get("incremental") or {}
                if state.get("rows", 0) >= 100 and state["tables"][0][1] == "big":
                    d.kill()
                    at = state
                    break
                assert d.running, d.stderr
                assert "incremental snapshot: done" not in d.stderr, "the snapshot ended before the kill"
                time.sleep(0.005)
            assert at is not None, f"no incremental snapshot progress within 30s; stderr:\n{d.stderr}"
        finally:
            if d.running:
                d.kill()
        logs.append(d.stderr)
        after_kill = read_checkpoint(checkpoint)["incremental"]
        assert after_kill["tables"][0][1] == "big" and after_kill["rows"] >= at["rows"], after_kill
        d = DaemonProcess(settings)
        try:
            line = d.wait_for_line(r"incremental snapshot: resuming ", timeout=30)
            assert f"{db}.big after key [" in line, line
            d.wait_for_line(r"incremental snapshot: done", timeout=80)
            assert load.stop() > 20
            wait_caught_up(server, checkpoint, daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        logs.append(d.stderr)
        assert "incremental" not in read_checkpoint(checkpoint)
        changes = read_changes(tmp_path / "sink")
        reads = check_against_server(server, db, changes, tables=("big", "comp"))
        assert sum(1 for k in reads if k[0] == "big") >= rows * 0.8
        first_run = [c for c in changes if c["op"] == "read" and c["table"] == "big"][:after_kill["rows"]]
        assert [c["source"]["row"] for c in first_run] == list(range(after_kill["rows"]))
        assert all(" ERROR " not in log for log in logs), "\n---\n".join(logs)
    finally:
        load.done.set()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
