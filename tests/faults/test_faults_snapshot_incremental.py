"""SIGKILL the daemon during an incremental snapshot (``[snapshot] signal_table``), under a write load; restart.

The snapshot must resume after the last chunk it committed (the checkpoint's ``incremental`` object: never from
the table's start), the sink's uncommitted tail is cut back, and the sink replayed (reads as upserts, then the
changes in order) equals each table's SELECT, with no key read twice. MINIMAL row metadata.
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_snapshot_incremental import make_signal_table, overrides, signal
from tests.support.daemon import DaemonProcess, read_changes, read_checkpoint
from tests.support.snapshots import WriteLoad, check_against_server, finish, make_tables, stop_when

pytestmark = pytest.mark.server


def _into_big(cp):
    """``ready`` for :func:`stop_when`: the incremental state once a few chunks of big are committed."""
    state = (cp or {}).get("incremental") or {}
    return state if state.get("rows", 0) >= 100 and state["tables"][0][1] == "big" else None


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
            at = stop_when(d, checkpoint, _into_big, "incremental snapshot progress")
        finally:
            if d.running:
                d.kill()
        logs.append(d.stderr)
        after_kill = read_checkpoint(checkpoint)["incremental"]
        assert after_kill["tables"][0][1] == "big" and after_kill["rows"] >= at["rows"], after_kill
        d = DaemonProcess(settings)
        line = finish(d, server, checkpoint, load, r"incremental snapshot: resuming ", r"incremental snapshot: done",
                      streaming=False)
        assert f"{db}.big after key [" in line, line
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
