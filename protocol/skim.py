"""Skimming: runs of events that a reader taking no rows only has to check, one call per run.

A raw archive needs, for a rows event in the middle of a transaction, nothing but proof that the
event is whole (its length, its place in the stream, its CRC32) and its type for the counters. Doing
that in one call for a run of such events, instead of building an event object for each, is most
of what makes the raw path fast. :func:`skim_run` stops before the first event it does not take,
for whatever reason (another type, an artificial event, a gap in the positions, a bad checksum…):
the caller decodes that one as usual, which raises the right error if there is one. Skimming never
raises for an event's contents and never takes an event :meth:`protocol.decoder.Decoder.decode`
would reject.

The loop runs in C (:mod:`protocol._skim`) when that extension is built, else in Python; both give
the same result.
"""

from __future__ import annotations

from typing import NamedTuple

from . import speedups
from .constants import LOG_EVENT_ARTIFICIAL_F
from .primitives import HEADER_V4, U32

try:
    from . import _skim as C
except ImportError:  # not built: the Python loop below does the same
    C = None
_HEADER = 19
_USE_C = C is not None and speedups.ENABLED


class SkimRun(NamedTuple):
    """What :func:`skim_run` took.

    Fields:
        stop: the index of the first event not taken (``start`` when none was).
        next_position: where the stream continues after the last event taken (``expect`` if none),
            counted from ``expect`` through events that log next_position 0.
        last_timestamp: the last event's timestamp (0 if none).
        nbytes: the bytes taken.
        counts: type code -> events taken.
    """

    stop: int
    next_position: int
    last_timestamp: int
    nbytes: int
    counts: dict[int, int]


def skim_run(events: list, start: int, end: int, table: bytes, crc_len: int, crc32, expect: int,
             use_c: bool | None = None) -> SkimRun:
    """Take events ``events[start:end]`` in order while each one is skimmable.

    An event is taken when it has a 19-byte header, ``table[type code]`` is not 0, its length field
    equals its size, it is not artificial and has a timestamp, it starts at ``expect`` (then the next
    one must start where it ends), its body (after the header, before ``crc_len`` checksum bytes) has
    at least ``table[type code] - 1`` bytes, and, when ``crc32`` is given, its CRC32 is right.
    An event's place is ``next_position - length``, or ``expect`` when its next_position is 0: MariaDB
    11.4+ logs 0 for every event inside a transaction (``binlog_legacy_event_pos=OFF``), so a run of
    them continues at ``expect`` plus their lengths.

    Args:
        events: complete events (bytes-like), as the daemon's reader hands them over.
        table: 256 bytes, see above (:meth:`protocol.decoder.Decoder.skim_run` builds it).
        crc_len: 4 when events end with a CRC32, else 0.
        crc32: the CRC32 function to verify with, or None not to verify.
        expect: the stream position the first event must start at.
        use_c: force the C (True) or Python (False) loop; default: C when built.
    Returns:
        A :class:`SkimRun`.
    """
    if use_c if use_c is not None else _USE_C:
        return SkimRun(*C.skim_run(events, start, end, table, crc_len, crc32, expect))
    counts: dict[int, int] = {}
    nbytes = last_ts = 0
    i = max(start, 0)
    end = min(end, len(events))
    while i < end:
        raw = events[i]
        n = len(raw)
        if n < _HEADER + crc_len:
            break
        ts, type_code, _, length, next_position, flags = HEADER_V4.unpack_from(raw, 0)
        if not next_position:
            next_position = expect + length
        if not table[type_code] or length != n or flags & LOG_EVENT_ARTIFICIAL_F or not ts \
                or next_position - length != expect or n - _HEADER - crc_len < table[type_code] - 1:
            break
        if crc_len and crc32 is not None and crc32(memoryview(raw)[:-4]) != U32.unpack_from(raw, n - 4)[0]:
            break
        counts[type_code] = counts.get(type_code, 0) + 1
        nbytes += n
        last_ts, expect = ts, next_position
        i += 1
    return SkimRun(i, expect, last_ts, nbytes, counts)
