"""The incremental snapshot's pure parts: the checkpoint's ``incremental`` object, signal rows, key matching.

The chunks, watermarks and restarts are tested on real servers (tests/integration/test_snapshot_incremental.py,
tests/faults/test_faults_snapshot_incremental.py).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from binlogd.daemon.config import load_config
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.snapshot.context import SnapshotContext
from binlogd.daemon.snapshot.incremental import Incremental, parse_collection
from binlogd.daemon.snapshot.tables import TableInfo
from binlogd.daemon.state import ResumeState
from binlogd.library.checkpointfile import Checkpoint
from binlogd.protocol.position import Position

STATE = {"tables": [["s", "t1"], ["s", "t2"]], "last": [5, "aB"], "rows": 10, "chunks": 2, "started": 1.5}


def test_checkpoint_keeps_the_incremental_state_apart_from_the_initial_snapshot():
    resume = ResumeState(Position("bin.000002", 400), incremental=STATE)
    raw = resume.checkpoint().to_bytes()
    back = ResumeState.from_checkpoint(Checkpoint.parse(raw))
    assert back.incremental == STATE and back.snapshot is None
    assert b'"incremental"' in raw and b'"snapshot"' not in raw
    assert Checkpoint.parse(ResumeState(Position("b.1", 4)).checkpoint().to_bytes()).incremental is None


def test_parse_collection():
    assert parse_collection("db.t") == ("db", "t")
    assert parse_collection("catalog.db.t") == ("db", "t")
    assert parse_collection("t") is None and parse_collection("db.") is None and parse_collection(5) is None


def _incremental(state=None, selected="s"):
    cfg = load_config(None, env={}, overrides={"snapshot.signal_table": "s.signals", "filters.include_schemas": selected})

    async def no_connection():
        raise AssertionError("the signals are read without a connection")

    ctx = SnapshotContext(connect=no_connection, sink=None, committer=None, metrics=Metrics(),
                          log=logging.getLogger("test.incremental"), schema=None,
                          config=cfg.snapshot, selected=cfg.filters.table_selected, sink_kind="jsonl",
                          binlogd_format=True, start_kind="current", checkpointed=lambda: None)
    return Incremental(ctx, SimpleNamespace(server_id=1), state)


def _rows(schema, table, kind, rows):
    return SimpleNamespace(schema=schema, table=table, kind=kind, rows=rows, columns=tuple(rows[0]) if rows else ())


def test_signals_queue_and_stop(caplog):
    inc = _incremental()
    caplog.set_level(logging.INFO, "test.incremental")
    # columns not named (the signal table is not selected): (id, type, data) by position
    inc.observe(_rows("s", "signals", "insert", [{"@1": "1", "@2": b"execute-snapshot",
                                                   "@3": b'{"data-collections": ["s.t1", "s.t2", "x.t3"]}'}]))
    assert inc.state["tables"] == [["s", "t1"], ["s", "t2"]]
    assert "x.t3 is not selected by [filters]: refused" in caplog.text
    inc.observe(_rows("s", "signals", "insert", [{"id": "2", "type": "execute-snapshot",
                                                  "data": '{"data-collections": ["s.t1", "s.t4"]}'}]))
    assert inc.state["tables"] == [["s", "t1"], ["s", "t2"], ["s", "t4"]]
    inc.observe(_rows("s", "signals", "insert", [{"id": "3", "type": "stop-snapshot",
                                                  "data": '{"data-collections": ["s.t2"]}'}]))
    assert inc.state["tables"] == [["s", "t1"], ["s", "t4"]]
    inc.observe(_rows("s", "signals", "insert", [{"id": "4", "type": "execute-snapshot", "data": "{oops"}]))
    assert "signal 4 (execute-snapshot): data is not JSON" in caplog.text
    inc.observe(_rows("s", "signals", "update", [({"id": "5"}, {"id": "5", "type": "stop-snapshot"})]))
    assert inc.state is not None  # only INSERTs are signals
    inc.observe(_rows("s", "signals", "insert", [{"id": "6", "type": "stop-snapshot", "data": None}]))
    assert inc.state is None and inc.saved() is None


def test_streamed_changes_drop_their_keys_from_the_buffered_chunk():
    inc = _incremental(dict(STATE))
    saved = inc.saved()
    inc.table = TableInfo("s", "t1", ("a", "b", "v"), ("int", "varchar", "int"), ("a", "b"))
    inc.buffer = {(1, "x"): {}, (2, "y"): {}, (3, "z"): {}, (4, "w"): {}}
    inc.watched = {inc.signal, ("s", "t1")}
    inc.observe(_rows("s", "t1", "update", [({"a": 1, "b": "x", "v": 0}, {"a": 1, "b": "x", "v": 1})]))
    inc.observe(_rows("s", "t1", "delete", [{"a": 2, "b": "y", "v": 0}]))
    inc.observe(_rows("s", "t1", "update", [({"a": 9, "b": "q", "v": 0}, {"a": 4, "b": "w", "v": 1})]))
    inc.observe(_rows("s", "t2", "delete", [{"a": 3, "b": "z", "v": 0}]))  # another table
    assert list(inc.buffer) == [(3, "z")]
    inc.observe(_rows("s", "t1", "insert", [{"@1": 3, "@2": "z"}]))  # key columns not named: read it again
    assert inc.buffer is None
    assert inc.saved() == saved  # the state moves only when a chunk is written
