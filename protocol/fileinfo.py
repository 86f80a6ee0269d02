"""What ``binlogd info`` reports about a binlog file, found by seeking rather than scanning.

:func:`describe` reads the FORMAT_DESCRIPTION and the first events, then finds the
last event from the end: a binlog that a ROTATE or STOP closes ends with an
event whose ``next_position`` equals the file size (modulo 2**32: the header
field is 32 bits and a file may pass 4 GiB) and whose length reaches back to its
own start, which (with its CRC32 when the file has one) pins it down without
reading what lies between. The last GTID is the highest GTID event header from
which the events' lengths lead to that closing event (walked forwards: MariaDB
11.4+ logs next_position 0 inside transactions, so they cannot be stepped back
one by one). Files without such an ending (still being written, truncated, relay
logs, v1/v3) fall back to a header walk, reported as ``method: "scan"``.

Sans-I/O like the rest of the package: the caller opens the file and passes the
file object in (the CLI and the Spark source both do). A file object rather than
bytes, because the seek reads a few KiB at each end of a file that may hold many GiB.
"""

from __future__ import annotations

import io

from .constants import CHECKSUM_CRC32, LOG_EVENT_BINLOG_IN_USE_F
from .constants import EventType as ET
from .decoder import HEADER_V4, Decoder
from .errors import ProtocolError, TruncatedError
from .events import Event, FormatDescriptionEvent, GtidEvent, MariadbGtidEvent, RotateEvent
from .primitives import crc32
from .reader import ONLY_MAGIC, check_magic
from .records import record

TYPE_CHECKING = False  # typing itself is not imported at run time (start-up: `binlogd info`)
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["BinlogInfo", "describe"]

_GTID_TYPES = {ET.GTID, ET.GTID_TAGGED, ET.MARIADB_GTID}
_GTID_CODES = [bytes([tc]) for tc in _GTID_TYPES]
_CLOSING_TYPES = {ET.ROTATE, ET.STOP}
_PREAMBLE_TYPES = {ET.PREVIOUS_GTIDS, ET.MARIADB_GTID_LIST, ET.BINLOG_CHECKPOINT, ET.IGNORABLE}
_FORWARD_EVENTS = 64          # preamble events read from the start looking for the first GTID
_BACKWARD_EVENTS = 4096       # events of the last transaction walked from its GTID to the end
_BACKWARD_BYTES = 64 << 20    # bytes read back from the end looking for the last GTID
_MERGE = 64 << 10             # _File merges adjacent segments up to this size


@record(frozen=False)
class BinlogInfo:
    """What ``binlogd info`` reports for one file (keys of ``--json``)."""

    file: str
    size: int
    binlog_version: int | None = None
    server_version: str | None = None
    checksum: str | None = None
    begin_time: int | None = None
    end_time: int | None = None
    next_file: str | None = None
    first_gtid: str | None = None
    last_gtid: str | None = None
    closed_cleanly: bool = False
    method: str = "seek"
    truncated_at: int | None = None


def _gtid_text(event: Event) -> str | None:
    if isinstance(event, (GtidEvent, MariadbGtidEvent)):
        return event.gtid
    return None


class _File:
    """Reads at an offset of a seekable binary file object, each byte of it at most once: what was read is
    kept (``segments``), and a read asks the file only for the bytes it has not given yet, so what a caller
    counts underneath (``bytes_read``) never exceeds the size.

    Fields: size, its length when wrapped; readahead, the least a read asks the file for (0: what is needed;
    the scan sets more); segments, sorted disjoint ``[start, bytes]`` of what was read and is kept.
    """

    def __init__(self, f: BinaryIO):
        self.f = f
        f.seek(0, io.SEEK_END)
        self.size = f.tell()
        self.readahead = 0
        self.segments: list[list] = []
        self._hit = (0, b"")  # the segment the last read was served from (the scan reads on in it)

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (fewer at the end of the file)."""
        end = min(offset + n, self.size)
        start, data = self._hit
        if start <= offset and end <= start + len(data):
            return data[offset - start:end - start]
        parts, pos = [], offset
        for segment in list(self.segments):  # a copy: _fetch inserts and merges segments meanwhile
            start, data = segment
            if start <= offset and end <= start + len(data):
                self._hit = (start, data)
                return data[offset - start:end - start]
            if pos >= end or start >= end:
                break
            stop = start + len(data)
            if stop <= pos:
                continue
            if start > pos:
                parts.append(self._fetch(pos, start))
                pos = start
            parts.append(data[pos - start:min(stop, end) - start])
            pos = min(stop, end)
        if pos < end:
            limit = next((start for start, _ in self.segments if start > pos), self.size)
            parts.append(self._fetch(pos, min(limit, max(end, pos + self.readahead)))[:end - pos])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _fetch(self, lo: int, hi: int) -> bytes:
        """The file's bytes ``[lo, hi)`` (none of them read before), kept as a segment."""
        self.f.seek(lo)
        data = self.f.read(hi - lo)
        if data:
            segs = self.segments
            i = next((k for k, (start, _) in enumerate(segs) if start > lo), len(segs))
            # Small neighbours are merged (fewer segments to look through); large ones are not copied again.
            if i and segs[i - 1][0] + len(segs[i - 1][1]) == lo and len(segs[i - 1][1]) + len(data) <= _MERGE:
                segs[i - 1][1] += data
                i -= 1
            else:
                segs.insert(i, [lo, data])
            if (i + 1 < len(segs) and segs[i][0] + len(segs[i][1]) == segs[i + 1][0]
                    and len(segs[i][1]) + len(segs[i + 1][1]) <= _MERGE):
                segs[i][1] += segs.pop(i + 1)[1]
        return data

    def forget_before(self, pos: int) -> None:
        """Drop the kept bytes before ``pos`` (the scan never goes back)."""
        segs = self.segments
        while segs and segs[0][0] + len(segs[0][1]) <= pos:
            segs.pop(0)


def describe(f: BinaryIO, name: str) -> BinlogInfo:
    """Describe the binlog in ``f``, seeking rather than scanning where the file allows.

    Args:
        f: the whole binlog, magic included, as a seekable binary file object opened by the caller
            (an open file, ``io.BytesIO``, an mmap); only ``seek``, ``tell`` and ``read`` are used,
            and the size is taken once, at the start.
        name: the result's ``file``.
    Returns:
        The :class:`BinlogInfo`; ``method`` says whether the end was found by seeking or by a scan.
    Raises:
        BinlogError: not a binlog, or no complete FORMAT_DESCRIPTION at its start.
        OSError: from ``f``.
    """
    return _info(_File(f), name)


def _info(f: _File, name: str) -> BinlogInfo:
    result = BinlogInfo(file=name, size=f.size)
    check_magic(f.read(0, 4))
    decoder = Decoder()
    if f.size == 4:
        raise TruncatedError(ONLY_MAGIC, 4)
    first = _read_event(f, 4, decoder)
    if first is None:
        raise TruncatedError("file ends inside its first event (no complete FORMAT_DESCRIPTION)", 4)
    if not isinstance(first, FormatDescriptionEvent):
        raise ProtocolError(f"first event is {first.header.type_name}, not FORMAT_DESCRIPTION", 4)
    result.binlog_version, result.server_version = first.binlog_version, first.server_version
    result.checksum = {0: "NONE", 1: "CRC32"}.get(first.checksum_alg) if first.checksum_alg is not None else None
    result.begin_time = first.header.timestamp
    # v4: the server clears LOG_EVENT_BINLOG_IN_USE_F when it closes the file. v1/v3 (3.23, 4.0) have no such
    # flag: there the file was closed cleanly only when it ends with its ROTATE or STOP (set by _scan).
    result.closed_cleanly = not first.header.flags & LOG_EVENT_BINLOG_IN_USE_F
    pos = first.header.next_position or 4 + first.header.event_length
    # First GTID: it comes right after the FDE and the previous-GTIDs/GTID-list events;
    # any other event first means the file's transactions carry no GTIDs.
    for _ in range(_FORWARD_EVENTS):
        head = f.read(pos, 19)
        if len(head) < 19 or head[4] not in _PREAMBLE_TYPES | _GTID_TYPES:
            break
        if head[4] in _GTID_TYPES:
            event = _read_event(f, pos, decoder)
            result.first_gtid = _gtid_text(event) if event is not None else None
            break
        pos += HEADER_V4.unpack_from(head, 0)[3]
    last = _closing_event(f, decoder) if first.binlog_version == 4 else None
    if last is None:
        return _scan(f, result)
    result.end_time = last.header.timestamp
    if isinstance(last, RotateEvent):
        result.next_file = last.next_file
    if result.first_gtid is not None:  # a file has GTIDs from its start, or none at all
        result.last_gtid = _last_gtid_backward(f, decoder, last.header.pos)
        if result.last_gtid is None:
            return _scan(f, result)
    return result


def _logged(pos: int) -> int:
    """``pos`` as a header's 32-bit next_position logs it (modulo 2**32: files may pass 4 GiB)."""
    return pos & 0xFFFFFFFF


def _read_event(f: _File, pos: int, decoder: Decoder) -> Event | None:
    """Decode the event at ``pos``, or None if the file ends inside it."""
    head = f.read(pos, 19)
    if len(head) < 19:
        return None
    length = HEADER_V4.unpack_from(head, 0)[3]
    if length < 19 or pos + length > f.size:
        return None
    return decoder.decode(f.read(pos, length), pos)


class _Tail:
    """The bytes ``[lo, end)`` of a file, read once and extended backwards as needed."""

    def __init__(self, f: _File, end: int):
        self.f, self.lo, self.end, self.buf = f, end, end, b""

    def extend(self, n: int) -> bool:
        """Read up to ``n`` more bytes before ``lo``; False at the start of the events (offset 4)."""
        new_lo = max(4, self.lo - n)
        if new_lo == self.lo:
            return False
        self.buf = self.f.read(new_lo, self.lo - new_lo) + self.buf
        self.lo = new_lo
        return True

    def event_ending_at(self, end: int, crc: bool, types=None, limit: int = 1 << 30) -> int | None:
        """Start of the event whose bytes end exactly at ``end``, found by looking back.

        A candidate start q must have length == end - q and next_position == end
        (and a type in ``types`` when given); with CRC32 its checksum must verify too.
        Reads further back (the buffer doubles) until found, ``limit`` bytes were searched, or offset 4.
        """
        needle = _logged(end).to_bytes(4, "little")  # an event ending at ``end`` logs it as next_position
        next_q = end - 19  # the highest start not yet tried
        while True:
            rel_end = end - self.lo
            hi = min(len(self.buf), next_q - self.lo + 17)
            while (idx := self.buf.rfind(needle, 0, hi)) >= 0:
                q, hi = idx - 13, idx + 3
                if q < 0:
                    continue
                _, tc, _, length, _, _ = HEADER_V4.unpack_from(self.buf, q)
                if length != rel_end - q or (types and tc not in types):
                    continue
                if crc and crc32(memoryview(self.buf)[q:rel_end - 4]) != int.from_bytes(
                        self.buf[rel_end - 4:rel_end], "little"):
                    continue
                return self.lo + q
            next_q = min(next_q, self.lo - 1)
            if end - self.lo >= limit or not self.extend(max(4096, self.end - self.lo)):  # geometric growth
                return None


def _closing_event(f: _File, decoder: Decoder) -> Event | None:
    """The ROTATE or STOP that ends the file, or None when it does not end with one (looks at 4 KiB)."""
    tail = _Tail(f, f.size)
    start = tail.event_ending_at(f.size, decoder.checksum_alg == CHECKSUM_CRC32, _CLOSING_TYPES, 4096)
    return None if start is None else decoder.decode(f.read(start, f.size - start), start)


def _last_gtid_backward(f: _File, decoder: Decoder, end: int) -> str | None:
    """The GTID of the last transaction before ``end`` (the closing event's start), found from the end.

    The last GTID event is the highest offset holding a GTID event header (a GTID type, a length that
    fits, a logged next_position equal to its end, its CRC32 when the file has them) from which the
    events' lengths lead exactly to ``end``. The events in between are walked forwards: MariaDB 11.4+
    logs next_position 0 inside transactions, so they cannot be found backwards one by one. Reads back
    at most _BACKWARD_BYTES; None when no GTID is found there (the caller then scans).
    """
    crc = decoder.checksum_alg == CHECKSUM_CRC32
    tail = _Tail(f, end)
    hi = end - 19  # the highest start not yet tried
    while True:
        lo = tail.lo
        q = lo + max(tail.buf.rfind(code, 4, hi - lo + 5) for code in _GTID_CODES) - 4  # type byte at q + 4
        if q < lo:
            hi = min(hi, lo - 1)
            if end - lo >= _BACKWARD_BYTES or not tail.extend(max(4096, end - lo)):
                return None
            continue
        hi = q - 1
        view = memoryview(tail.buf)[q - lo:end - lo]
        length, logged = HEADER_V4.unpack_from(view, 0)[3:5]
        if 19 <= length <= len(view) and logged == _logged(q + length) and _leads_to_end(view, length) and not (
                crc and crc32(view[:length - 4]) != int.from_bytes(view[length - 4:length], "little")):
            return _gtid_text(decoder.decode(view[:length], q))


def _leads_to_end(view: memoryview, p: int) -> bool:
    """True when the event lengths from ``view[p:]`` on lead exactly to the end of ``view``."""
    for _ in range(_BACKWARD_EVENTS):
        if p == len(view):
            return True
        if p + 19 > len(view):
            return False
        length = int.from_bytes(view[p + 9:p + 13], "little")
        if length < 19:
            return False
        p += length
    return False


def _scan(f: _File, result: BinlogInfo) -> BinlogInfo:
    """Header walk of the whole file: for files that do not end with ROTATE or STOP, and v1/v3 files."""
    result.method = "scan"
    decoder = Decoder()
    result.next_file = result.last_gtid = None
    pos, header_len, tc = 4, 19, None
    f.readahead = 1 << 20  # the headers one after the other: read in large blocks, each byte once
    while pos < f.size:
        f.forget_before(pos)
        head = f.read(pos, 19)
        if len(head) < header_len:
            result.truncated_at = pos
            break
        length = int.from_bytes(head[9:13], "little")
        if length < header_len or pos + length > f.size:
            result.truncated_at = pos
            break
        tc = head[4]
        if pos == 4 or tc in _GTID_TYPES or tc in _CLOSING_TYPES or tc == ET.FORMAT_DESCRIPTION:
            event = decoder.decode(f.read(pos, length), pos)
            header_len = decoder.header_len
            if tc in _GTID_TYPES:
                result.last_gtid = _gtid_text(event)
                result.first_gtid = result.first_gtid or result.last_gtid
            if isinstance(event, RotateEvent) and pos + length == f.size:
                result.next_file = event.next_file
        result.end_time = int.from_bytes(head[0:4], "little")
        pos += length
    if result.binlog_version != 4:
        result.closed_cleanly = result.truncated_at is None and tc in _CLOSING_TYPES
    return result
