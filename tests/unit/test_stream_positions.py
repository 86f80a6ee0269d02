"""Stream positions when events log end_log_pos 0 (MariaDB 11.4+ inside a transaction).

The streams are real corpus files rewritten the way MariaDB 11.4+ writes them: every event strictly
inside a transaction logs next_position 0 (CRC32 recomputed). Every position computed from such a
stream must equal the event's offset in the file, found by an independent header walk (:func:`walk`):
the tracker's (:meth:`PositionTracker.start_of`, ``committed``), the consumer's change events
(``source.pos``) and the raw archive's bytes. Real 11.8 servers: tests/integration/test_daemon_positions.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import zlib
from pathlib import Path

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.delivery.committer import Committer
from binlogd.daemon.delivery.consumer import Consumer
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.sinks import make_sink
from binlogd.daemon.state import ResumeState
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.position import Position, PositionTracker
from binlogd.protocol.reader import iter_events
from binlogd.protocol.rows import ROWS_TYPES
from tests.support.sinks import artificial_rotate, checksummed, resent_fde

FILES = [
    "rust_mysql_common/mariadb-bin.000001",                 # MariaDB GTID, ANNOTATE_ROWS
    "mysql-binlog-connector-rust/mysql-bin.000080",         # MySQL GTIDs, BEGIN ... XID
    "canal/tsdb/mysql-bin.000002",                           # anonymous GTIDs
    "mysql-binlog-connector-java/mysql-bin.checksum-none",  # no CRC32
]


def walk(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, length, type code) of every event, chained by the length field alone."""
    out, pos = [], 4
    while pos + 19 <= len(data):
        type_code, length = data[pos + 4], struct.unpack_from("<I", data, pos + 9)[0]
        out.append((pos, length, type_code))
        pos += length
    assert pos == len(data)
    return out


def zeroed(data: bytes) -> tuple[bytes, int]:
    """``data`` as MariaDB 11.4+ logs it: next_position 0 for every event after a transaction's first
    and before its last; returns the bytes and how many events were changed."""
    crc = checksummed(data)
    out, changed = bytearray(data), 0
    tracker = PositionTracker(Position("f", 4))
    for event in iter_events(data):
        inside = tracker.in_transaction
        ended = tracker.observe(event)
        if inside and not ended:
            h = event.header
            struct.pack_into("<I", out, h.pos + 13, 0)
            if crc:
                end = h.pos + h.event_length
                struct.pack_into("<I", out, end - 4, zlib.crc32(bytes(out[h.pos:end - 4])))
            changed += 1
    return bytes(out), changed


def raws(data: bytes) -> list[bytes]:
    return [data[pos:pos + length] for pos, length, _ in walk(data)]


def follow(items: list[bytes], start: Position, crc: bool) -> tuple[list[int], list[Position], PositionTracker]:
    """Feed a dump's events to a tracker as the daemon does; (each event's start, committed after each)."""
    tracker, decoder = PositionTracker(start), Decoder(checksum_alg=1 if crc else 0)
    starts, committed = [], []
    for raw in items:
        pos = tracker.start_of(raw)
        tracker.observe(decoder.decode(raw, pos))
        starts.append(pos)
        committed.append(tracker.committed)
    return starts, committed, tracker


@pytest.mark.parametrize("name", FILES)
def test_every_start_is_the_file_offset_through_logged_zeros(corpus, name):
    data = (corpus / name).read_bytes()
    logged_zero, changed = zeroed(data)
    assert changed > 0 and [e[:2] for e in walk(logged_zero)] == [e[:2] for e in walk(data)]
    crc, fname = checksummed(data), Path(name).name
    rotate = artificial_rotate(fname, 4, crc)[0]
    starts, committed, tracker = follow([rotate] + raws(logged_zero), Position("", 4), crc)
    assert starts[1:] == [pos for pos, _, _ in walk(data)]
    assert (tracker.file, tracker.pos) == (fname, len(data))
    assert committed == follow([rotate] + raws(data), Position("", 4), crc)[1], \
        "the committed boundaries must not depend on what the headers log"


@pytest.mark.parametrize("name", FILES)
def test_a_dump_from_a_boundary_inside_the_file(corpus, name):
    """ROTATE(file, P), the FDE re-sent with position 0, then the file from P."""
    data = (corpus / name).read_bytes()
    logged_zero, _ = zeroed(data)
    crc, fname = checksummed(data), Path(name).name
    events = walk(data)
    _, committed, _ = follow([artificial_rotate(fname, 4, crc)[0]] + raws(logged_zero), Position("", 4), crc)
    boundaries = sorted({c.pos for c in committed if 4 < c.pos < len(data)})
    middle = boundaries[len(boundaries) // 2]
    fde = raws(logged_zero)[0]
    head = [artificial_rotate(fname, middle, crc)[0], resent_fde(data, fde)[0]]
    tail = [raw for (pos, _, _), raw in zip(events, raws(logged_zero)) if pos >= middle]
    starts, _, tracker = follow(head + tail, Position(fname, middle), crc)
    assert starts[2:] == [pos for pos, _, _ in events if pos >= middle]
    assert tracker.pos == len(data)


def test_a_gap_is_reanchored_by_the_next_event_that_logs_its_position(corpus):
    """A GTID resume skips the transactions the replica has: the first event after the gap (a GTID)
    logs where it ends, and counting goes on from there."""
    name = "rust_mysql_common/mariadb-bin.000001"
    data = (corpus / name).read_bytes()
    logged_zero, _ = zeroed(data)
    events = walk(data)
    gtids = [i for i, (_, _, tc) in enumerate(events) if tc == ET.MARIADB_GTID]
    kept = list(range(gtids[0])) + list(range(gtids[1], len(events)))  # the first transaction skipped
    items = raws(logged_zero)
    starts, _, _ = follow([artificial_rotate("mariadb-bin.000001", 4, True)[0]] + [items[i] for i in kept],
                          Position("", 4), True)
    assert starts[1:] == [events[i][0] for i in kept]


def test_start_of_past_4_gib_and_for_a_short_header():
    tracker = PositionTracker(Position("b.000001", (1 << 32) + 1000))
    header = struct.pack("<IBIIIH", 1, ET.XID, 1, 50, 1050, 0)  # logged end: (2**32 + 1050) mod 2**32
    assert tracker.start_of(header + b"\0" * 31) == (1 << 32) + 1000
    zero = struct.pack("<IBIIIH", 1, ET.WRITE_ROWS, 1, 50, 0, 0)
    assert tracker.start_of(zero + b"\0" * 31) == (1 << 32) + 1000
    assert PositionTracker(Position("b.000001", 77)).start_of(b"\0" * 12) == 77


# --------------------------------------------------------------------------- the consumer, end to end


class _Batches:
    """The part of a Session the consumer uses: the events in one batch, then the daemon stops."""

    def __init__(self, items: list[bytes], stopping: asyncio.Event):
        self._items, self._stopping = items, stopping

    async def get(self, timeout: float) -> list | None:
        items, self._items = self._items, None
        if items is None:
            self._stopping.set()
        return items

    @property
    def idle(self) -> bool:
        return self._items is None


async def consume(tmp_path: Path, kind: str, items: list[bytes], crc: bool) -> tuple[Path, ResumeState]:
    """Run a Consumer with a ``kind`` sink over ``items`` (a dump from offset 4); returns the sink's
    directory and the durable state it reached."""
    out = tmp_path / kind
    config = load_config(None, env={}, overrides={"sink.kind": kind, "sink.path": str(out),
                                                  "checkpoint.path": str(tmp_path / f"{kind}.json")})

    async def main():
        sink = make_sink(config.sink)
        sink.open(None)
        store = CheckpointStore(config.checkpoint.path, lock=False)
        committer, stopping = Committer(sink, store, Metrics(), None), asyncio.Event()
        resume = ResumeState(Position("", 4), False, None, {})
        decoder = Decoder(checksum_alg=1 if crc else 0, rows=sink.wants_rows)
        consumer = Consumer(config, resume, decoder, sink, committer, Metrics(), logging.getLogger("test"), None,
                            stopping)
        await consumer.run(_Batches(items, stopping))
        sink.close()
        return committer.durable

    return out, await main()


@pytest.mark.parametrize("name", FILES)
async def test_archive_of_a_stream_with_logged_zeros_is_byte_exact(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    logged_zero, _ = zeroed(data)
    crc, fname = checksummed(data), Path(name).name
    out, durable = await consume(tmp_path, "archive", [artificial_rotate(fname, 4, crc)[0]] + raws(logged_zero), crc)
    assert (out / fname).read_bytes() == logged_zero
    assert (durable.position.file, durable.position.pos) == (fname, len(data))
    assert durable.sink == {"file": fname, "size": len(data)}


@pytest.mark.parametrize("name", FILES)
async def test_change_events_carry_the_rows_events_file_offsets(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    logged_zero, _ = zeroed(data)
    crc, fname = checksummed(data), Path(name).name
    rotate = artificial_rotate(fname, 4, crc)[0]
    changes = {}
    for label, stream in (("logged", data), ("zeroed", logged_zero)):
        out, durable = await consume(tmp_path / label, "jsonl", [rotate] + raws(stream), crc)
        assert (durable.position.file, durable.position.pos) == (fname, len(data))
        changes[label] = [json.loads(line) for p in sorted(out.glob("*.jsonl")) for line in p.read_text().splitlines()]
    rows_at = {pos for pos, _, tc in walk(data) if tc in ROWS_TYPES}
    assert changes["zeroed"] and changes["zeroed"] == changes["logged"]
    assert {c["source"]["pos"] for c in changes["zeroed"]} <= rows_at
