"""The rows of a text-protocol result set (the answer to a ``COM_QUERY``) as PostgreSQL COPY text: bytes in, bytes
out.

:func:`rows` writes the whole rows of a buffer of row packets (as :func:`binlogd.protocol.textrows.scan` finds
them) in COPY's text format (a tab between fields, a newline after each row, ``\\N`` for NULL, backslash, tab,
newline and CR escaped), each value as :func:`binlogd.library.pgtypes.pg_text` gives it for its column, by
the column's :data:`kind <RAW>` (:func:`binlogd.library.pgtypes.copy_kind`). A value it does not write the way
``pg_text`` would (text that is not well-formed UTF-8, or holds NUL) makes it return None: the caller then
takes the rows the slower way, which names the value. ``binlogd.library._textcopy`` does the same in C (byte for
byte); it is used unless ``BINLOGD_PURE_PYTHON`` is set (:mod:`binlogd.protocol.speedups`).
"""

from __future__ import annotations

from binlogd.protocol import speedups
from binlogd.protocol.textrows import fields, payload, row_at

#: Value kinds: how a column's raw text becomes COPY text.
RAW = 0     #: as it is (numbers, TIME for an interval: no byte COPY escapes)
TEXT = 1    #: UTF-8 text, escaped; None for the rows when it is not well-formed or holds NUL
DATE = 2    #: DATE or DATETIME: ``-infinity`` for a zero date, else as it is
UTC = 3     #: TIMESTAMP (read in UTC): as DATE, with ``+00`` after it
BYTEA = 4   #: the bytes as bytea's hex text (``\\x`` and two hex digits a byte; its backslash escaped)

_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}


def zero_date(v: bytes) -> bool:
    """Whether ``v`` (a DATE, DATETIME or TIMESTAMP's text) has a zero year, month or day."""
    return len(v) >= 10 and (v[0:4] == b"0000" or v[5:7] == b"00" or v[8:10] == b"00")


def rows(buf, start: int, end: int, kinds: bytes) -> bytes | None:
    """The rows of ``buf[start:end]`` (whole row packets, one value per byte of ``kinds``) as COPY text, or None
    when a TEXT value is not well-formed UTF-8 or holds NUL.

    Raises:
        ValueError: a row is not whole, or its values are not one per kind (malformed).
    """
    if not (0 <= start <= end <= len(buf)):
        raise ValueError("rows: start and end are outside the buffer")
    if any(k > BYTEA for k in kinds):
        raise ValueError("rows: a kind out of range")
    out = []
    pos = start
    while pos < end:
        whole = row_at(buf, pos, end)
        if whole is None:
            raise ValueError(f"malformed text-protocol row at offset {pos}: the row is not whole")
        values = fields(payload(buf, pos, whole[0]), len(kinds))
        line = []
        for kind, v in zip(kinds, values):
            if v is None:
                line.append(b"\\N")
            elif kind == TEXT:
                try:
                    text = v.decode("utf-8")
                except UnicodeDecodeError:
                    return None
                if "\x00" in text:
                    return None
                line.append(text.translate(_ESCAPES).encode())
            elif kind == BYTEA:
                line.append(b"\\\\x" + v.hex().encode())
            elif kind in (DATE, UTC) and zero_date(v):
                line.append(b"-infinity")
            else:
                line.append(v + b"+00" if kind == UTC else v)
        out.append(b"\t".join(line) + b"\n")
        pos = whole[0]
    return b"".join(out)


#: The C twin of :func:`rows`, or None (not built, or ``BINLOGD_PURE_PYTHON`` set).
C = None
if speedups.ENABLED:
    try:
        from binlogd.library import _textcopy as C  # noqa: N812
    except ImportError:
        C = None

py_rows = rows
if C is not None:
    rows = C.rows  # noqa: F811
