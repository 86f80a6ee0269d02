"""SIGKILL the daemon twice during an initial snapshot, then SIGTERM it, under a write load; restart until it streams.

The snapshot must resume at its first unfinished chunk (never from the start: the tables' first reads are not
written again), the sink's half-written chunk is cut back and rewritten once, and the sink replayed (reads as
upserts, then the changes in order) equals each table's SELECT, with no key read twice. MINIMAL row metadata.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    read_changes,
    read_checkpoint,
)
from tests.support.snapshots import WriteLoad, check_against_server, finish, make_tables, stop_when

pytestmark = pytest.mark.server


def _progress(cp: dict | None) -> tuple[int, int] | None:
    """(tables done, rows of the current table) of a checkpoint's unfinished snapshot, or None."""
    snap = (cp or {}).get("snapshot")
    return None if snap is None else (snap["done"], snap["rows"])


def _beyond(at: tuple[int, int] | None):
    """``ready`` for :func:`stop_when`: the snapshot's progress once it passed ``at`` (a table done, rows read)."""
    def ready(cp):
        p = _progress(cp)
        return p if p is not None and p[0] >= 1 and p[1] > 0 and (at is None or p > at) else None
    return ready


def test_sigkill_twice_during_initial_snapshot(mariadb_minimal, tmp_path):
    server, db = mariadb_minimal, f"snapk_{uuid.uuid4().hex[:10]}"
    rows = 12000
    make_tables(server, db, rows)
    checkpoint = tmp_path / "checkpoint.json"
    overrides = base_overrides(server, tmp_path, snapshot__mode="initial", snapshot__chunk_rows=7,
                               filters__include_schemas=db)
    load = WriteLoad(server, db, rows).start()
    logs = []
    try:
        at = None
        for _ in range(2):
            d = DaemonProcess(overrides)
            at = stop_when(d, checkpoint, _beyond(at), f"snapshot progress beyond {at}")
            logs.append(d.stderr)
            assert _progress(read_checkpoint(checkpoint)) >= at
            at = _progress(read_checkpoint(checkpoint))  # the dying daemon may have saved one more chunk
        d = DaemonProcess(overrides)   # then a SIGTERM in the middle: exit 0 at once, the checkpoint kept
        stop_when(d, checkpoint, _beyond(at), f"snapshot progress beyond {at}", stop=lambda d: d.proc.terminate())
        assert d.wait(20) == 0, d.stderr
        logs.append(d.stderr)
        assert _progress(read_checkpoint(checkpoint)) is not None, "a stop ended the snapshot's progress"
        d = DaemonProcess(overrides)
        finish(d, server, checkpoint, load, r"snapshot: resuming at table", r"snapshot: done")
        logs.append(d.stderr)
        assert sum(log.count("snapshot: resuming at table") for log in logs) == 3, "\n---\n".join(logs)
        assert sum(log.count("snapshot: read view at") for log in logs) >= 3
        changes = read_changes(tmp_path / "sink")
        reads = check_against_server(server, db, changes)
        assert sum(1 for k in reads if k[0] == "big") >= rows * 0.8
        views = {c["source"]["pos"] for c in changes if c["op"] == "read"}
        assert len(views) >= 2, "every chunk was read in one view: the restarts did not resume"
    finally:
        load.done.set()
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
