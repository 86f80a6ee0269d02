"""The rows of a text-protocol result set (the answer to a ``COM_QUERY``) as JSON: bytes in, bytes out.

:func:`lines` writes the whole rows of a buffer of row packets (as :func:`binlogd.protocol.textrows.scan` finds
them) as JSON, each value in the form a :class:`Plan` gives its column's :data:`kind <RAW>`.
``binlogd.library._textjson`` does the same in C (byte for byte, its strings by the JSON string writer it
shares with ``_jsonrows``, ``library/_jsonstr.h``); it is used unless ``BINLOGD_PURE_PYTHON`` is set
(:mod:`binlogd.protocol.speedups`).
"""

from __future__ import annotations

from base64 import b64encode
from typing import Callable, NamedTuple

from binlogd.protocol import speedups
from binlogd.protocol.textrows import payload, row_at, value

#: Value kinds of a plan: how a column's raw text becomes JSON.
RAW = 0      #: copied as it is (integers: their text is JSON)
QUOTED = 1   #: in double quotes, unescaped (DECIMAL, temporal types: digits and punctuation)
TEXT = 2     #: a JSON string of the UTF-8 text, as ``dumps(v.decode("utf-8", "replace"))``
BASE64 = 3   #: a JSON string of the bytes in base64 (with padding)
BIT = 4      #: the unsigned big-endian number of the bytes
DOUBLE = 5   #: ``dumps(float(v))``
CALL = 6     #: what the column's function returns for the raw bytes


class Plan(NamedTuple):
    """How :func:`lines` writes a row.

    Fields:
        kinds: one byte per column, its kind (:data:`RAW` ... :data:`CALL`).
        names: each column's ``"name":`` as JSON bytes.
        calls: per column a function ``bytes -> bytes`` (JSON): the converter of a :data:`CALL` column, and
            the one used for a :data:`BIT` value over 8 bytes and a :data:`DOUBLE` text ``float`` takes but
            C's strtod does not; None for the other kinds.
        dumps: the JSON encoder of a ``str`` or ``float`` (orjson.dumps).
    """

    kinds: bytes
    names: tuple
    calls: tuple
    dumps: Callable


def lines(buf, start: int, end: int, plan: Plan, head: bytes, mid: bytes | None, tail: bytes, first: int,
          into: bytearray | None = None, again: bytes | None = None) -> bytes | int:
    """The rows of ``buf[start:end]`` (whole row packets, as :func:`binlogd.protocol.textrows.scan` walks them)
    as JSON: per row ``head``, the object ``{"name": value, ...}``, then (unless ``mid`` is None) ``mid`` and the
    row's number (``first``, ``first + 1``, ...), with ``again`` (bytes, only with ``mid``) that number a second
    time after ``again``, then ``tail``. With ``into``, written at the start of that bytearray (which grows when
    too short and never shrinks, so that its memory serves again) and their length returned.

    Raises:
        ValueError: a row is not whole, or its values do not fit ``plan`` (malformed).
        BufferError: ``into`` is too short and a view of it keeps it from growing.
        whatever a converter of ``plan.calls`` raises.
    """
    if not (0 <= start <= end <= len(buf)):
        raise ValueError("lines: start and end are outside the buffer")
    if again is not None and mid is None:
        raise TypeError("lines: mid must be bytes or None, again bytes (with mid) or None")
    out = []
    pos, number = start, first
    while pos < end:
        whole = row_at(buf, pos, end)
        if whole is None:
            raise ValueError(f"malformed text-protocol row at offset {pos}: the row is not whole")
        nxt = whole[0]
        out.append(head)
        out.append(row(plan, payload(buf, pos, nxt), pos))
        if mid is not None:
            out.append(mid + str(number).encode())
            if again is not None:
                out.append(again + str(number).encode())
        out.append(tail)
        number += 1
        pos = nxt
    data = b"".join(out)
    if into is None:
        return data
    if not isinstance(into, bytearray):
        raise TypeError("lines: into must be a bytearray or None")
    into[:min(len(data), len(into))] = data
    return len(data)


def row(plan: Plan, p: bytes, at: int) -> bytes:
    """One row payload ``p`` as its JSON object.

    Raises:
        ValueError: its values do not fit ``plan`` (the message names ``at``, where the row starts).
        TypeError: a converter returned other than bytes.
    """
    parts, i, dumps = [], 0, plan.dumps
    for kind, name, call in zip(plan.kinds, plan.names, plan.calls):
        v, i = value(p, i, at)
        if v is None:
            text = b"null"
        elif kind == RAW:
            text = v
        elif kind == QUOTED:
            text = b'"' + v + b'"'
        elif kind == TEXT:
            text = dumps(v.decode("utf-8", "replace"))
        elif kind == BASE64:
            text = b'"' + b64encode(v) + b'"'
        elif kind == BIT:
            text = str(int.from_bytes(v, "big")).encode() if len(v) <= 8 else call(v)
        elif kind == DOUBLE:
            text = dumps(float(v))
        else:
            text = call(v)
        if not isinstance(text, bytes):
            raise TypeError(f"a value converter returned {type(text).__name__}, not bytes")
        parts.append(name + text)
    if i != len(p):
        raise ValueError(f"malformed text-protocol row at offset {at}: more values than columns")
    return b"{" + b",".join(parts) + b"}"


def powers_of_ten() -> bytes:
    """10^e for -342 <= e <= 308, each as its 128-bit mantissa rounded down (top bit set), 16 bytes: the high
    then the low 64 bits, little-endian (the table of ``_textjson.load_powers``)."""
    out = []
    for e in range(-342, 309):
        if e >= 0:
            v = 10 ** e
            bits = v.bit_length()
            m = v >> (bits - 128) if bits > 128 else v << (128 - bits)
        else:
            d = 10 ** -e
            m = (1 << (127 + d.bit_length())) // d
        out.append((m >> 64).to_bytes(8, "little") + (m & (1 << 64) - 1).to_bytes(8, "little"))
    return b"".join(out)


#: The C twin of :func:`lines`, or None (not built, or ``BINLOGD_PURE_PYTHON`` set).
C = None
if speedups.ENABLED:
    try:
        from binlogd.library import _textjson as C  # noqa: N812
    except ImportError:
        C = None

py_lines = lines
if C is not None:
    C.load_powers(powers_of_ten())
    lines = C.lines  # noqa: F811
