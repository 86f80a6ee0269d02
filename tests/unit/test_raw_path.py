"""The raw (archive) path's shortcuts: stream positions from the header, rows decoded lazily, metrics
flushed on collection and counted per run. Each must give what the full path gives (skimming: test_skim.py)."""

from __future__ import annotations

import struct
import threading
import zlib

import pytest

from daemon.metrics import Metrics
from daemon.service import _stream_pos
from protocol import events as E
from protocol.constants import EventType as ET
from protocol.decoder import Decoder
from protocol.errors import ChecksumError, EventDecodeError, ProtocolError


def event(type_code: int, body: bytes, pos: int = 1000, crc: bool = True) -> bytes:
    length = 19 + len(body) + (4 if crc else 0)
    raw = struct.pack("<IBIIIH", 1_700_000_000, type_code, 1, length, pos + length, 0) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def errors_of(fn):
    try:
        return fn()
    except (ChecksumError, EventDecodeError, ProtocolError) as exc:
        return type(exc), str(exc), exc.args


def test_stream_pos_matches_header():
    dec = Decoder(checksum_alg=1)
    raw = event(ET.XID, struct.pack("<Q", 9), pos=4321)
    assert _stream_pos(raw, dec) == 4321
    artificial = struct.pack("<IBIIIH", 0, ET.ROTATE, 1, 40, 0, 0x20) + b"\x00" * 21
    assert _stream_pos(artificial, dec) == 0
    for bad in (raw[:12], struct.pack("<IBIIIH", 0, ET.XID, 1, 5, 0, 0)):
        with pytest.raises(ProtocolError):
            _stream_pos(bad, dec)


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
    from protocol.reader import iter_events
    from tests.conformance.manifest import data, entries_or_empty

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
