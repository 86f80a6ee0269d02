"""A text-protocol result set (the answer to a ``COM_QUERY``), parsed: sans-I/O, bytes in, offsets and values out.

The result set is packets (a 3-byte little-endian length, a sequence byte, the payload): the column count, one
column definition per column, EOF, then one packet per row holding one length-encoded string per column (0xFB
for NULL; a payload of 0xFFFFFF bytes or more goes on in the next packets), and EOF (or ERR). :func:`header`
walks the packets before the rows, :func:`scan` finds the whole rows in a buffer as it fills, :func:`fields`
gives a row's values. ``binlogd.protocol._textrows`` scans in C (the same results); it is used unless
``BINLOGD_PURE_PYTHON`` is set (:mod:`binlogd.protocol.speedups`). Writing the rows as JSON is
:mod:`binlogd.library.textjson`'s.
"""

from __future__ import annotations

from . import speedups


def header(buf, end: int) -> tuple[int, int] | bytes | None:
    """The result set's packets before its rows in ``buf[:end]`` (bytes-like: packets with their headers, from
    the first): the column count, the column definitions and the EOF after them.

    Returns:
        (start, columns): where the rows start and the column count; the payload of an ERR packet (bytes) met
        there instead; None when those packets are not whole in ``buf[:end]`` yet.
    """
    pos, columns, skip = 0, -1, 0
    while columns < 0 or skip:
        got = packet_at(buf, pos, end)
        if got is None:
            return None
        pos, payload = got
        first = payload[0] if payload else 0
        if first == 0xFF:
            return payload
        if columns < 0:
            columns = first if first < 251 else payload[1] | payload[2] << 8   # 252: a 2-byte count
            skip = columns + 1
        else:
            skip -= 1
    return pos, columns


def packet_at(buf, pos: int, end: int) -> tuple[int, bytes] | None:
    """(where it ends, its payload) of the packet at ``buf[pos]``, None when it is not whole before ``end``."""
    if end - pos < 4:
        return None
    n = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    if end - pos - 4 < n:
        return None
    return pos + 4 + n, bytes(buf[pos + 4:pos + 4 + n])


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
        whole = row_at(buf, pos, end)
        if whole is None:
            return pos, rows, last, 0
        nxt, size = whole
        first = buf[pos + 4] if size else 0
        if first == 0xFF:
            return pos, rows, last, 2
        if first == 0xFE and size < 9:
            return pos, rows, last, 1
        last, rows, pos = pos, rows + 1, nxt


def row_at(buf, pos: int, end: int) -> tuple[int, int] | None:
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
        v, i = value(p, i, 0)
        out.append(v)
    if i != len(p):
        raise ValueError("malformed text-protocol row at offset 0: more values than columns")
    return out


def value(p: bytes, i: int, at: int) -> tuple[bytes | None, int]:
    """The length-encoded value at ``p[i]`` (None for NULL) and the index after it.

    Raises:
        ValueError: there is none, or it runs past ``p`` (the message names ``at``, where the row starts).
    """
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


#: The C twin of :func:`scan`, or None (not built, or ``BINLOGD_PURE_PYTHON`` set).
C = None
if speedups.ENABLED:
    try:
        from . import _textrows as C  # noqa: N812
    except ImportError:
        C = None

py_scan = scan
if C is not None:
    scan = C.scan  # noqa: F811
