"""Decoder.decode's frame check in C (``_skim.frame``) against the Python one (``Decoder._frame``).

Every event of every corpus file, and mutations of real events (a flipped byte anywhere in the header or
the CRC, a wrong length field, a truncated event, another type code, an FDE with the IN_USE flag), must
give the same event, or the same error (type, message, offset, type code), whichever path checks it.
``iter_events``' inline event_bounds must split and fail as event_bounds does.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from binlogd.protocol import decoder as D
from binlogd.protocol import events as E
from binlogd.protocol.constants import LOG_EVENT_BINLOG_IN_USE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.reader import event_bounds, iter_events
from tests.support import manifest as M

pytestmark = pytest.mark.skipif(D._frame_c is None, reason="protocol._skim is not built (or BINLOGD_PURE_PYTHON)")

ENTRIES = M.entries_or_empty()
# A CRC32 file and a checksum NONE file, both past their FDE after event 0, with rows events.
CRC_FILE = "canal/tsdb/mysql-bin.000002"
NO_CRC_FILE = "rust_mysql_common/ver_trunk_row_v2.001"


class Counting:
    """``_skim.frame``, counting the events it framed (so a test sees the C path was taken)."""

    def __init__(self):
        self.taken = 0

    def __call__(self, view, crc_len, crc32):
        out = D._frame_c(view, crc_len, crc32)
        self.taken += out is not None
        return out


def pair(**kwargs) -> tuple[D.Decoder, D.Decoder]:
    """(a decoder checking frames in C where it may, one checking them in Python only)."""
    fast, slow = D.Decoder(**kwargs), D.Decoder(**kwargs)
    fast._frame_c, slow._frame_c = Counting(), None
    return fast, slow


def outcome(decoder: D.Decoder, data, pos: int) -> tuple:
    """What decoding ``data`` gives: ("event", type, header, event, rows or their error) or
    ("error", type, message, offset, type code)."""
    try:
        event = decoder.decode(data, pos)
    except BinlogError as exc:
        return "error", type(exc), str(exc), exc.offset, getattr(exc, "type_code", None)
    rows = None
    if isinstance(event, E.RowsEvent):
        try:
            rows = event.rows
        except BinlogError as exc:
            rows = type(exc), str(exc)
    return "event", type(event), event.header, event, rows


def same(fast: D.Decoder, slow: D.Decoder, data, pos: int) -> tuple:
    """Decode ``data`` on both; assert the same outcome and the same decoder state after it."""
    got, want = outcome(fast, data, pos), outcome(slow, data, pos)
    assert got == want
    assert (fast.header_len, fast.checksum_alg, fast.encrypted_at) == \
        (slow.header_len, slow.checksum_alg, slow.encrypted_at)
    return want


def events_of(data: bytes, header_len: int = 19) -> list[tuple[int, bytes]]:
    """(offset, bytes) of each whole event from offset 4, by length fields only (the walk stops at the first
    length that is too short or runs past the end)."""
    out, pos = [], 4
    while True:
        try:
            length = event_bounds(data, pos, header_len)
        except BinlogError:
            length = None
        if length is None:
            return out
        out.append((pos, data[pos:pos + length]))
        pos += length


# =========================================================================== the corpus


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
@pytest.mark.parametrize("path", M.ids(ENTRIES))
def test_corpus_events_same_both_paths(corpus, path, verify):
    """Every event of every corpus file (negative ones too): the same event or error on both paths."""
    data = M.data(path)
    fast, slow = pair(verify_checksums=verify)
    view, pos, n = memoryview(data), 4, 0
    while pos < len(view):
        try:
            length = event_bounds(view, pos, slow.header_len)
        except BinlogError:
            break
        if length is None:
            break
        same(fast, slow, view[pos:pos + length], pos)
        pos, n = pos + length, n + 1
    entry = M.entry(path)
    if not entry.negative and entry.checksum in ("CRC32", "NONE") and n > 3:
        assert fast._frame_c.taken >= n // 2, "the C path framed too few events"


# =========================================================================== mutations


def crc_ok(event: bytes) -> bytes:
    """``event`` with its last 4 bytes the CRC32 of the rest."""
    return event[:-4] + struct.pack("<I", zlib.crc32(event[:-4]))


def replay(path: str, upto: int, data, verify: bool = True, crc: bool = False) -> tuple:
    """Decode events 0..upto-1 of ``path`` on a fresh pair, then ``data`` (``crc``: with its CRC32 made right)
    at event ``upto``'s offset; returns the outcome."""
    events = events_of(M.data(path))
    fast, slow = pair(verify_checksums=verify)
    for pos, event in events[:upto]:
        same(fast, slow, event, pos)
    data = crc_ok(bytes(data)) if crc else data
    return same(fast, slow, data, events[upto][0])


def mutants(event: bytes) -> list[tuple[str, bytes]]:
    """Named mutations of one event."""
    out = []
    for i in [*range(19), len(event) - 4, len(event) - 1]:
        for bit in (0x01, 0x80):
            flipped = bytearray(event)
            flipped[i] ^= bit
            out.append((f"byte {i} ^ {bit:#x}", bytes(flipped)))
    length = len(event)
    for wrong in (0, 1, 18, 19, 20, 22, 23, length - 1, length + 1, 1 << 31):
        out.append((f"length field {wrong}", event[:9] + struct.pack("<I", wrong) + event[13:]))
    for cut in (0, 1, 18, 19, 22, 23, length - 4, length - 1):
        out.append((f"cut to {cut}", event[:cut]))
        out.append((f"cut to {cut}, length field too", event[:9] + struct.pack("<I", cut) + event[13:cut]))
    for tc in (0, 1, 2, 4, 15, 16, 19, 30, 31, 35, 40, 160, 162, 164, 255):
        out.append((f"type {tc}", event[:4] + bytes([tc]) + event[5:]))
    out.append(("artificial", event[:17] + struct.pack("<H", 0x20) + event[19:]))
    return out


@pytest.mark.parametrize("crc", [False, True], ids=["as-mutated", "crc-fixed"])
@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
@pytest.mark.parametrize("path", [CRC_FILE, NO_CRC_FILE])
def test_mutated_events_same_both_paths(corpus, path, verify, crc):
    """Each mutation of a few events of a CRC32 file and of a checksum NONE file (``crc``: with the CRC32 made
    right again, so that the mutation reaches the checks after it): the same outcome on both paths."""
    events = events_of(M.data(path))
    for i in sorted({1, 2, len(events) // 2, len(events) - 2, len(events) - 1}):
        for name, data in mutants(events[i][1]):
            try:
                replay(path, i, data, verify, crc and path == CRC_FILE and len(data) >= 4)
            except AssertionError as exc:
                raise AssertionError(f"{path}, event {i}, {name}") from exc


def test_crc_mismatch_and_short_events(corpus):
    """The errors the C path must leave to Python come out of both paths the same, and the C path frames
    every event of the CRC32 file but its FDE."""
    events = events_of(M.data(CRC_FILE))
    pos, event = events[-3]
    assert replay(CRC_FILE, len(events) - 3, event)[0] == "event"
    bad = event[:-1] + bytes([event[-1] ^ 0xFF])
    kind, cls, message, offset, _ = replay(CRC_FILE, len(events) - 3, bad)
    assert (kind, cls.__name__, offset) == ("error", "ChecksumError", pos) and "CRC32 mismatch" in message
    short = event[:4] + event[4:5] + event[5:9] + struct.pack("<I", 21) + event[13:21]
    kind, cls, message, _, _ = replay(CRC_FILE, len(events) - 3, short)
    assert (kind, cls.__name__) == ("error", "ProtocolError") and "too short for its checksum" in message
    fast, slow = pair()
    for p, e in events:
        same(fast, slow, e, p)
    assert fast._frame_c.taken == len(events) - 1  # all but the FDE


@pytest.mark.parametrize("in_use_crc", [False, True], ids=["crc-without-flag", "crc-with-flag"])
def test_fde_in_use_flag(corpus, in_use_crc):
    """An FDE with LOG_EVENT_BINLOG_IN_USE_F (checksummed with the flag clear by the server): the same FDE, or
    the same CRC error, on both paths, and the events after it the same."""
    events = events_of(M.data(CRC_FILE))
    pos, fde = events[0]
    assert fde[4] == ET.FORMAT_DESCRIPTION
    flagged = bytearray(fde)
    flagged[17] |= LOG_EVENT_BINLOG_IN_USE_F
    if in_use_crc:
        flagged = bytearray(crc_ok(bytes(flagged)))
    fast, slow = pair()
    first = same(fast, slow, bytes(flagged), pos)
    assert first[0] == ("error" if in_use_crc else "event")
    for p, e in events[1:]:
        same(fast, slow, e, p)


def test_view_kinds(corpus):
    """bytes, memoryview, a memoryview slice and a non-byte memoryview: the same outcome on both paths."""
    events = events_of(M.data(CRC_FILE))
    pos, event = events[-3]
    whole = memoryview(b"xx" + event + b"yy")
    for data in (event, bytearray(event), memoryview(event), whole[2:-2], memoryview(event).cast("B"),
                 memoryview(event[:len(event) // 4 * 4]).cast("I"), memoryview(event)[::-1]):
        fast, slow = pair()
        for p, e in events[:-3]:
            same(fast, slow, e, p)
        try:
            want = outcome(slow, data, pos)
        except Exception as exc:  # a view the Python path cannot read: the fast path must fail the same way
            with pytest.raises(type(exc)):
                outcome(fast, data, pos)
            continue
        assert outcome(fast, data, pos) == want


def v1_v3_file(version: int) -> bytes:
    """A binlog v1 (13-byte headers) or v3 file: START_V3, two QUERY events, STOP."""
    def event(type_code: int, body: bytes, pos: int) -> bytes:
        if version == 1:
            return struct.pack("<IBII", 1000, type_code, 7, 13 + len(body)) + body
        return struct.pack("<IBIIIH", 1000, type_code, 7, 19 + len(body), pos + 19 + len(body), 0) + body

    data = bytearray(b"\xfebin")
    data += event(ET.START_V3, struct.pack("<H", version) + b"4.0.30-log".ljust(50, b"\0") + struct.pack("<I", 9), 4)
    for i in range(2):
        data += event(ET.QUERY, struct.pack("<IIBH", 5, 0, 2, 0) + b"db\0INSERT INTO t VALUES (%d)" % i, len(data))
    data += event(ET.STOP, b"", len(data))
    return bytes(data)


def encrypted_file() -> bytes:
    """The CRC32 file with a START_ENCRYPTION after its FDE: every event after it is refused."""
    events = events_of(M.data(CRC_FILE))
    body = bytes([1]) + struct.pack("<I", 2) + bytes(12)
    start = struct.pack("<IBIIIH", 1000, ET.START_ENCRYPTION, 1, 19 + 17 + 4, 0, 0) + body + bytes(4)
    return b"\xfebin" + events[0][1] + crc_ok(start) + b"".join(e for _, e in events[1:])


@pytest.mark.parametrize("make, header_len, decoded", [(lambda: v1_v3_file(1), 13, 4), (lambda: v1_v3_file(3), 19, 4),
                                                      (encrypted_file, 19, 2)], ids=["v1", "v3", "encrypted"])
def test_other_formats_and_encryption(corpus, make, header_len, decoded):
    """A v1 file (13-byte headers), a v3 file, and events after START_ENCRYPTION: the same on both paths."""
    fast, slow = pair()
    kinds = [same(fast, slow, event, pos)[0] for pos, event in events_of(make(), header_len)]
    assert kinds == ["event"] * decoded + ["error"] * (len(kinds) - decoded)


# =========================================================================== iter_events' inline event_bounds


def old_iter_events(data: bytes):
    """iter_events as it was: event_bounds for every event."""
    from binlogd.protocol.errors import TruncatedError
    from binlogd.protocol.reader import _declared, check_magic

    view, decoder, pos = memoryview(data), D.Decoder(), 4
    check_magic(view)
    while pos < len(view):
        length = event_bounds(view, pos, decoder.header_len)
        if length is None:
            raise TruncatedError(f"binlog ends inside an event ({len(view) - pos} of {_declared(view, pos, decoder)} "
                                 "bytes present)", pos)
        yield decoder.decode(view[pos:pos + length], pos)
        pos += length


def walk(iterate, data: bytes) -> tuple[list, tuple | None]:
    """([(pos, type code) of each event ``iterate(data)`` yields], (error type, message) or None)."""
    out = []
    try:
        for event in iterate(data):
            out.append((event.header.pos, event.header.type_code))
    except BinlogError as exc:
        return out, (type(exc), str(exc), exc.offset)
    return out, None


@pytest.mark.parametrize("path", [CRC_FILE, NO_CRC_FILE, "canal/mysql-bin.000002", "v1"])
def test_iter_events_truncated_and_bad_lengths(corpus, path):
    """Every cut of the file's last events, and a length field set too short or too long: the same events and
    error as the event_bounds walk."""
    data = v1_v3_file(1) if path == "v1" else M.data(path)
    for cut in [data, *(data[:pos + i] for pos, e in events_of(data, 13)[-3:] for i in (*range(40), len(e) - 1))]:
        assert walk(iter_events, cut) == walk(old_iter_events, cut), len(cut)
    for pos, event in events_of(data, 13)[-3:]:
        for wrong in (0, 12, 13, 18, 19, len(event) + 1, 1 << 30):
            mutated = data[:pos + 9] + struct.pack("<I", wrong) + data[pos + 13:]
            assert walk(iter_events, mutated) == walk(old_iter_events, mutated), wrong
