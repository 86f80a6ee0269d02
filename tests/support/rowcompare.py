"""Comparing the two row image decoders (the C extension and the generated Python): whole binlogs' rows in
the current mode, compared exactly (types, key order, floats bit for bit)."""

from __future__ import annotations

import struct

from binlogd.protocol import events as E
from binlogd.protocol.errors import BinlogError, EventDecodeError
from binlogd.protocol.reader import iter_events


def same(a, b) -> bool:
    """Equal and of the same types all the way down; floats compared bit for bit (NaN, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def outcome(fn):
    """('ok', value) or ('error', exception type): the comparable result of decoding."""
    try:
        return "ok", fn()
    except EventDecodeError:
        return "error", EventDecodeError


def file_rows(data: bytes) -> list:
    """Every rows event's rows (or its error) of a binlog, payload events included, in the current mode:
    ``(end position, outcome)`` each, and ``("stopped", error name)`` last where reading the file stopped."""
    out = []

    def collect(event):
        if isinstance(event, E.RowsEvent):
            out.append((event.header.next_position, outcome(lambda: event.rows)))
        elif isinstance(event, E.TransactionPayloadEvent):
            for inner in event.events:
                collect(inner)

    try:
        for event in iter_events(data):
            collect(event)
    except BinlogError as exc:
        out.append(("stopped", type(exc).__name__))
    return out
