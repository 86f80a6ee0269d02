"""The raw (archive) path's shortcuts: rows decoded lazily, metrics
flushed on collection and counted per run. Each must give what the full path gives (skimming: test_skim.py)."""

from __future__ import annotations

import os
import struct
import threading
import zlib

import pytest

from binlogd.daemon.operations.metrics import Metrics
from binlogd.protocol import events as E
from binlogd.protocol.errors import ChecksumError, EventDecodeError, ProtocolError
from tests.support.sinks import commit_sink


def event(type_code: int, body: bytes, pos: int = 1000, crc: bool = True) -> bytes:
    length = 19 + len(body) + (4 if crc else 0)
    raw = struct.pack("<IBIIIH", 1_700_000_000, type_code, 1, length, pos + length, 0) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def errors_of(fn):
    try:
        return fn()
    except (ChecksumError, EventDecodeError, ProtocolError) as exc:
        return type(exc), str(exc), exc.args


def test_metrics_for_a_run_equal_metrics_per_event():
    one, run = Metrics(clock=lambda: 5.0), Metrics(clock=lambda: 5.0)
    for name, ts in (("WRITE_ROWS_EVENT", 10), ("TABLE_MAP_EVENT", 11), ("WRITE_ROWS_EVENT", 12)):
        one.event(name, ts, 100, False)
    run.events({"WRITE_ROWS_EVENT": 2, "TABLE_MAP_EVENT": 1}, 12, 300)

    def samples(m):  # without the *_created timestamps
        return [line for line in m.exposition().decode().splitlines() if "_created" not in line]

    assert samples(one) == samples(run)
    assert run.registry.get_sample_value("binlogd_events_total", {"type": "WRITE_ROWS_EVENT"}) == 2


def test_metrics_flush_on_every_collection_and_from_threads():
    m = Metrics()
    m.event("XID_EVENT", 1, 31, False)
    m.position("bin.000007", 99)
    assert m.registry.get_sample_value("binlogd_events_total", {"type": "XID_EVENT"}) == 1
    assert m.registry.get_sample_value("binlogd_position", {"file": "bin.000007"}) == 99
    assert b"binlogd_bytes_received_total 31.0" in m.exposition()

    def scrape():
        for _ in range(200):
            m.exposition()

    threads = [threading.Thread(target=scrape) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(20_000):
        m.event("WRITE_ROWS_EVENT", 1, 2, False)
    for t in threads:
        t.join()
    assert m.registry.get_sample_value("binlogd_events_total", {"type": "WRITE_ROWS_EVENT"}) == 20_000
    assert m.registry.get_sample_value("binlogd_bytes_received_total") == 31 + 40_000


def test_rows_read_after_the_whole_file_equal_rows_read_at_once():
    """Rows events keep a view of their images and copy it when ``rows`` is first read: reading
    them after every later event was decoded gives what reading each one at once gives."""
    from binlogd.protocol.reader import iter_events
    from tests.support.manifest import data, entries_or_empty

    paths = [e.path for e in entries_or_empty() if e.path.endswith(tuple("0123456789"))][:40]
    if not paths:
        pytest.skip("no corpus")
    checked = 0
    for path in paths:
        raw = data(path)
        try:
            at_once = [ev.rows for ev in iter_events(raw) if isinstance(ev, E.RowsEvent)]
            later = [ev for ev in iter_events(memoryview(raw)) if isinstance(ev, E.RowsEvent)]
        except (EventDecodeError, ProtocolError, ChecksumError):
            continue  # the corpus's deliberately broken files
        assert [ev.rows for ev in later] == at_once
        checked += len(at_once)
    assert checked


# ----------------------------------------------------------------- the archive's flush, sync and runs


def test_archive_flush_writes_and_sync_fsyncs_even_a_file_closed_by_a_rotate(corpus, tmp_path, monkeypatch):
    from binlogd.daemon.sinks.archive import ArchiveSink
    from tests.support.sinks import _fsync_recorder, artificial_rotate, feed_archive, stream

    first = (corpus / "canal/mysql-bin.000001").read_bytes()
    second = (corpus / "canal/mysql-bin.000002").read_bytes()
    calls = _fsync_recorder(monkeypatch)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, False)] + stream(first) + stream(second))
    files = [tmp_path / "mysql-bin.000001", tmp_path / "mysql-bin.000002"]
    synced = lambda: {(st.st_dev, st.st_ino) for st in map(os.stat, files)} & {c[:2] for c in calls if not c[2]}
    assert synced() == set()  # the rotate closed the first file without fsyncing it on the consumer
    assert sink.flush() == {"file": "mysql-bin.000002", "size": len(second)}
    assert [p.read_bytes() for p in files] == [first, second] and synced() == set()  # readable, not durable
    sink.begin_sync()
    sink.sync()
    assert synced() == {(st.st_dev, st.st_ino) for st in map(os.stat, files)}
    sink.close()


def test_archive_event_run_writes_what_events_write(corpus, tmp_path):
    from binlogd.daemon.sinks.archive import ArchiveSink
    from binlogd.daemon.sinks.base import SinkError
    from tests.support.sinks import artificial_rotate, stream

    data = (corpus / "canal/mysql-bin.000001").read_bytes()
    items = stream(data)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    sink.event(*artificial_rotate("mysql-bin.000001", 4, False))
    for raw, event in items[:3]:
        sink.event(raw, event)
    middle = items[3:-1]
    start = middle[0][1].header.pos
    with pytest.raises(SinkError, match="out of step") as err:
        sink.event_run([raw for raw, _ in middle], start + 1, middle[-1][1].header.next_position)
    assert err.value.fatal
    sink.event_run([raw for raw, _ in middle], start, middle[-1][1].header.next_position)
    sink.event(*items[-1])
    commit_sink(sink)
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data


def test_session_receive_buffers_are_larger_only_without_rows():
    """The archive's consumer keeps up with the socket: its connection reads into 4 MiB buffers
    (a quarter of the reads and hand-offs); a consumer decoding rows keeps 1 MiB ones (its memory)."""
    from binlogd.daemon.config import load_config
    from binlogd.daemon.replication.connection import RAW_RECEIVE_BUFFER, RECEIVE_BUFFER
    from binlogd.daemon.replication.session import Session

    config = load_config(None, env={})
    assert (RECEIVE_BUFFER, RAW_RECEIVE_BUFFER) == (1 << 20, 4 << 20)
    assert Session(config, Metrics()).conn.receive_buffer == RECEIVE_BUFFER
    assert Session(config, Metrics(), rows=False).conn.receive_buffer == RAW_RECEIVE_BUFFER


@pytest.mark.parametrize("kind, rows", [("archive", False), ("jsonl", True)])
def test_daemon_session_follows_the_sink(tmp_path, monkeypatch, kind, rows):
    import asyncio

    from binlogd.daemon import service
    from binlogd.daemon.config import load_config

    seen = []

    class Stop(Exception):
        pass

    class Recorder:
        def __init__(self, config, metrics, rows=True):
            seen.append(rows)

        async def __aenter__(self):
            raise Stop

        async def __aexit__(self, *exc):
            return False

    monkeypatch.setattr(service, "Session", Recorder)
    config = load_config(None, env={}, overrides={
        "sink.kind": kind, "sink.path": str(tmp_path / "out"), "checkpoint.path": str(tmp_path / "cp.json"),
        "metrics.listen": ""})
    daemon = service.Daemon(config)
    daemon.sink.open(None)
    try:
        with pytest.raises(Stop):
            asyncio.run(daemon._session())
    finally:
        daemon.sink.close()
    assert seen == [rows]
