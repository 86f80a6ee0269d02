"""The rows of a text-protocol result set (the answer to a ``COM_QUERY``) as JSON: sans-I/O, bytes in, bytes out.

A text-protocol row is one packet (a 3-byte little-endian length, a sequence byte, the payload; a payload of
0xFFFFFF bytes or more goes on in the next packets) holding one length-encoded string per column, 0xFB for
NULL. :func:`scan` finds the whole rows in a buffer of packets as it fills; :func:`lines` writes them as JSON,
each value in the form a :data:`plan <Plan>` gives its column. ``binlogd.protocol._textrows`` does the same in
C (byte for byte); it is used unless ``BINLOGD_PURE_PYTHON`` is set (:mod:`binlogd.protocol.speedups`).
"""

from __future__ import annotations

from base64 import b64encode
from typing import Callable, NamedTuple

from . import speedups

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


def scan(buf, pos: int) -> tuple[int, int, int, int]:
    """Walk the whole rows of ``buf`` (bytes-like: packets with their headers) from ``pos``.

    Returns:
        (pos, rows, last, done): where it stopped, the rows walked, the offset of the last one (-1: none), and
        why it stopped: 0 the next row is not whole in ``buf`` yet, 1 an EOF packet starts at ``pos`` (a
        payload of fewer than 9 bytes starting 0xFE), 2 an ERR packet (starting 0xFF).
    Raises:
        ValueError: ``pos`` is outside ``buf``.
    """
    end = len(buf)
    if not 0 <= pos <= end:
        raise ValueError("scan: pos is outside the buffer")
    rows, last = 0, -1
    while True:
        whole = _row_at(buf, pos, end)
        if whole is None:
            return pos, rows, last, 0
        nxt, size = whole
        first = buf[pos + 4] if size else 0
        if first == 0xFF:
            return pos, rows, last, 2
        if first == 0xFE and size < 9:
            return pos, rows, last, 1
        last, rows, pos = pos, rows + 1, nxt


def lines(buf, start: int, end: int, plan: Plan, head: bytes, mid: bytes | None, tail: bytes, first: int,
          into: bytearray | None = None, again: bytes | None = None) -> bytes | int:
    """The rows of ``buf[start:end]`` (whole row packets, as :func:`scan` walks them) as JSON: per row
    ``head``, the object ``{"name": value, ...}``, then (unless ``mid`` is None) ``mid`` and the row's number
    (``first``, ``first + 1``, ...), with ``again`` (bytes, only with ``mid``) that number a second time after
    ``again``, then ``tail``. With ``into``, written at the start of that bytearray
    (which grows when too short and never shrinks, so that its memory serves again) and their length returned.

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
    pos, row = start, first
    while pos < end:
        whole = _row_at(buf, pos, end)
        if whole is None:
            raise ValueError(f"malformed text-protocol row at offset {pos}: the row is not whole")
        nxt, size = whole
        out.append(head)
        out.append(_row(plan, payload(buf, pos, nxt), pos))
        if mid is not None:
            out.append(mid + str(row).encode())
            if again is not None:
                out.append(again + str(row).encode())
        out.append(tail)
        row += 1
        pos = nxt
    data = b"".join(out)
    if into is None:
        return data
    if not isinstance(into, bytearray):
        raise TypeError("lines: into must be a bytearray or None")
    into[:min(len(data), len(into))] = data
    return len(data)


def payload(buf, pos: int, end: int) -> bytes:
    """The payload of the row whose packets are ``buf[pos:end]`` (several packets' payloads joined)."""
    parts = []
    while pos < end:
        n = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
        parts.append(bytes(buf[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return b"".join(parts)


def fields(p: bytes, n: int) -> list:
    """The ``n`` length-encoded values of a row payload ``p`` (bytes; None for NULL).

    Raises:
        ValueError: ``p`` holds fewer or more values, or one runs past its end.
    """
    out, i = [], 0
    for _ in range(n):
        v, i = _value(p, i, 0)
        out.append(v)
    if i != len(p):
        raise ValueError("malformed text-protocol row at offset 0: more values than columns")
    return out


def _row_at(buf, pos: int, end: int) -> tuple[int, int] | None:
    """(end, payload size) of the whole row starting at ``pos``, None when it is not whole before ``end``."""
    total = 0
    while True:
        if end - pos < 4:
            return None
        n = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
        if end - pos - 4 < n:
            return None
        pos += 4 + n
        total += n
        if n != 0xFFFFFF:
            return pos, total


def _value(p: bytes, i: int, at: int) -> tuple[bytes | None, int]:
    """The length-encoded value at ``p[i]`` (None for NULL) and the index after it."""
    n = len(p)
    if i >= n:
        raise ValueError(f"malformed text-protocol row at offset {at}: fewer values than columns")
    c = p[i]
    if c < 251:
        size, i = c, i + 1
    elif c == 251:
        return None, i + 1
    elif c == 255:
        raise ValueError(f"malformed text-protocol row at offset {at}: 0xff is no value's length")
    else:
        width = 2 if c == 252 else 3 if c == 253 else 8
        if n - i < 1 + width:
            raise ValueError(f"malformed text-protocol row at offset {at}: a value's length is cut short")
        size, i = int.from_bytes(p[i + 1:i + 1 + width], "little"), i + 1 + width
    if n - i < size:
        raise ValueError(f"malformed text-protocol row at offset {at}: a value runs past the row")
    return p[i:i + size], i + size


def _row(plan: Plan, p: bytes, at: int) -> bytes:
    """One row payload as its JSON object."""
    parts, i, dumps = [], 0, plan.dumps
    for kind, name, call in zip(plan.kinds, plan.names, plan.calls):
        v, i = _value(p, i, at)
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


#: The C twins of :func:`scan` and :func:`lines`, or None (not built, or ``BINLOGD_PURE_PYTHON`` set).
C = None
if speedups.ENABLED:
    try:
        from . import _textrows as C  # noqa: N812
    except ImportError:
        C = None



def powers_of_ten() -> bytes:
    """10^e for -342 <= e <= 308, each as its 128-bit mantissa rounded down (top bit set), 16 bytes: the high
    then the low 64 bits, little-endian (the table of ``_textrows.load_powers``)."""
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


py_scan, py_lines = scan, lines
if C is not None:
    C.load_powers(powers_of_ten())
    scan, lines = C.scan, C.lines  # noqa: F811
