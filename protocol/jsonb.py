"""MySQL's binary JSON format (the JSON column type) and partial-update diffs.

Layout (sql-common/json_binary.cc in mysql-server), all integers little-endian::

    doc       ::= type:u8 value
    object    ::= count size key-entry* value-entry* key* value*      (type 0x00 small, 0x01 large)
    array     ::= count size value-entry* value*                      (type 0x02 small, 0x03 large)
    key-entry ::= key-offset key-length:u16
    value-entry ::= type:u8 (offset | inlined value)
    string    ::= varlen utf8-bytes                                   (type 0x0c)
    opaque    ::= field-type:u8 varlen bytes                          (type 0x0f)

``count``, ``size`` and offsets are u16 in the small format and u32 in the large
one; offsets count from the first byte after the container's type byte.
Literals (null/true/false), int16 and uint16 are always stored inside the value
entry; int32 and uint32 only in the large format. ``varlen`` is 1-5 bytes of 7
bits each, low bits first, the high bit meaning "more follows".

Opaque values are rendered as MySQL renders them in JSON text: NEWDECIMAL as
:class:`decimal.Decimal`, DATE as ``"YYYY-MM-DD"``, DATETIME/TIMESTAMP as
``"YYYY-MM-DD HH:MM:SS.ffffff"``, TIME as ``"[-]HH:MM:SS.ffffff"`` and anything else
as ``"base64:typeNN:<base64 of the bytes>"``.

Partial JSON (PARTIAL_UPDATE_ROWS_EVENT after-images, ``Json_diff_vector::read_binary``
in sql/json_diff.cc): the row image holds the column like a full JSON value, a
4-byte little-endian length followed by that many bytes; those bytes are a
sequence of diffs, each ``operation:u8 path-length:lenenc path value-length:lenenc
value`` where the value part is absent for REMOVE. :func:`decode_json_diff` takes
the bytes *after* the 4-byte length, just as :func:`decode_json` does, and returns a
:class:`JsonDiffs`: a type of its own, so that a diff is never taken for a document
(a JSON column may hold a list that looks like diffs).
"""

from __future__ import annotations

import base64
import struct
from decimal import Decimal

from .errors import EventDecodeError
from .records import record
from .values import decimal_size, decimal_text

__all__ = [
    "MAX_DEPTH",
    "JsonDiff",
    "JsonDiffs",
    "decode_json",
    "decode_json_diff",
]

#: Deepest container nesting accepted (MySQL's JSON_DOCUMENT_MAX_DEPTH).
MAX_DEPTH = 100

# Value type codes.
_SMALL_OBJECT = 0x00
_LARGE_OBJECT = 0x01
_SMALL_ARRAY = 0x02
_LARGE_ARRAY = 0x03
_LITERAL = 0x04
_INT16 = 0x05
_UINT16 = 0x06
_INT32 = 0x07
_UINT32 = 0x08
_INT64 = 0x09
_UINT64 = 0x0A
_DOUBLE = 0x0B
_STRING = 0x0C
_OPAQUE = 0x0F

# MySQL field types that opaque values carry and that MySQL renders specially.
_FT_TIMESTAMP = 7
_FT_DATE = 10
_FT_TIME = 11
_FT_DATETIME = 12
_FT_NEWDECIMAL = 246

_LITERALS = {0x00: None, 0x01: True, 0x02: False}

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_U24 = struct.Struct("<HB")
_SMALL_HEADER = struct.Struct("<HH")
_LARGE_HEADER = struct.Struct("<II")
_SMALL_KEY_ENTRY = struct.Struct("<HH")
_LARGE_KEY_ENTRY = struct.Struct("<IH")

# Fixed-size scalars: type -> (struct, size).
_FIXED = {
    _INT16: struct.Struct("<h"),
    _UINT16: struct.Struct("<H"),
    _INT32: struct.Struct("<i"),
    _UINT32: struct.Struct("<I"),
    _INT64: _I64,
    _UINT64: _U64,
    _DOUBLE: struct.Struct("<d"),
}

_OPS = ("REPLACE", "INSERT", "REMOVE")
_REMOVE = 2


@record(slots=True)
class JsonDiff:
    """One logical change to a JSON document, from a PARTIAL_UPDATE_ROWS event.

    Fields:
        op: ``"REPLACE"``, ``"INSERT"`` or ``"REMOVE"``.
        path: the MySQL JSON path the change applies to, e.g. ``"$.a[2]"``.
        value: the new value as :func:`decode_json` returns it; None for REMOVE
            (and for a JSON null, which REPLACE/INSERT may carry).
    """

    op: str
    path: str
    value: object | None


class JsonDiffs(tuple):
    """The diffs of one partially updated JSON column (a tuple of :class:`JsonDiff`, in the order the
    server applies them to the column's value before the update), as an update's after image holds
    them in place of the document. Empty: the server logged the column as changed by no diff.
    Serialisers write it apart from the row image (``json_diffs``); orjson refuses it as a value.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JsonDiffs({list(self)!r})"


def _err(message: str) -> EventDecodeError:
    return EventDecodeError(f"binary JSON: {message}")


class _Decoder:
    """One document's decoding state.

    ``budget`` bounds the total work: in a well-formed document every node and
    every string byte occupies distinct input bytes, so decoding never needs to
    produce more than ``len(buf)`` of them. Offsets that alias one subtree from
    many places (exponential blow-up) exhaust the budget and raise.
    """

    __slots__ = ("buf", "budget")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.budget = len(buf) + 1

    def charge(self, amount: int) -> None:
        self.budget -= amount
        if self.budget < 0:
            raise _err("document references more data than it holds (aliased offsets)")

    def value(self, vtype: int, pos: int, end: int, depth: int) -> object:
        """Decode the value of type ``vtype`` stored at ``buf[pos:end]``."""
        self.charge(1)
        if vtype <= _LARGE_ARRAY:
            return self.container(vtype, pos, end, depth + 1)
        if vtype == _LITERAL:
            if pos >= end:
                raise _err("truncated literal")
            literal = self.buf[pos]
            if literal not in _LITERALS:
                raise _err(f"bad literal 0x{literal:02x}")
            return _LITERALS[literal]
        fixed = _FIXED.get(vtype)
        if fixed is not None:
            if pos + fixed.size > end:
                raise _err(f"truncated scalar of type 0x{vtype:02x}")
            return fixed.unpack_from(self.buf, pos)[0]
        if vtype == _STRING:
            length, pos = _varlen(self.buf, pos, end)
            if pos + length > end:
                raise _err("string runs past the end of its container")
            self.charge(length)
            return _utf8(self.buf[pos : pos + length], "string")
        if vtype == _OPAQUE:
            if pos >= end:
                raise _err("truncated opaque value")
            field_type = self.buf[pos]
            length, pos = _varlen(self.buf, pos + 1, end)
            if pos + length > end:
                raise _err("opaque value runs past the end of its container")
            self.charge(length)
            return _opaque(field_type, self.buf[pos : pos + length])
        raise _err(f"unknown value type 0x{vtype:02x}")

    def container(self, vtype: int, pos: int, end: int, depth: int) -> object:
        """Decode an object or array whose header starts at ``buf[pos]``."""
        if depth > MAX_DEPTH:
            raise _err(f"nesting deeper than {MAX_DEPTH}")
        buf = self.buf
        large = vtype & 1
        is_object = vtype <= _LARGE_OBJECT
        if large:
            header, key_entry, word = _LARGE_HEADER, _LARGE_KEY_ENTRY, 4
        else:
            header, key_entry, word = _SMALL_HEADER, _SMALL_KEY_ENTRY, 2
        if pos + header.size > end:
            raise _err("truncated container header")
        count, size = header.unpack_from(buf, pos)
        if size > end - pos:
            raise _err(f"container size {size} exceeds the {end - pos} bytes available")
        value_entry_size = 1 + word
        entries = pos + header.size
        values_at = entries + (count * key_entry.size if is_object else 0)
        if values_at + count * value_entry_size > pos + size:
            raise _err(f"{count} elements do not fit in a container of {size} bytes")
        cend = pos + size
        self.charge(count)

        keys: list[str] = []
        if is_object:
            for i in range(count):
                key_offset, key_length = key_entry.unpack_from(buf, entries + i * key_entry.size)
                start = pos + key_offset
                if key_offset > size or start + key_length > cend:
                    raise _err("object key outside its container")
                self.charge(key_length)
                keys.append(_utf8(buf[start : start + key_length], "object key"))

        values: list[object] = []
        unpack_offset = (_U32 if large else _U16).unpack_from
        for i in range(count):
            entry = values_at + i * value_entry_size
            etype = buf[entry]
            if etype in (_LITERAL, _INT16, _UINT16) or (large and etype in (_INT32, _UINT32)):
                values.append(self.value(etype, entry + 1, entry + value_entry_size, depth))
                continue
            offset = unpack_offset(buf, entry + 1)[0]
            if offset >= size:
                raise _err(f"value offset {offset} outside a container of {size} bytes")
            values.append(self.value(etype, pos + offset, cend, depth))

        if is_object:
            return dict(zip(keys, values))
        return values


def _varlen(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a 1-5 byte variable-length integer; returns (value, position after it)."""
    value = 0
    for i in range(5):
        if pos + i >= end:
            raise _err("truncated variable-length integer")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                raise _err("variable-length integer exceeds 32 bits")
            return value, pos + i + 1
    raise _err("variable-length integer longer than 5 bytes")


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _err(f"{what} is not valid UTF-8: {exc.reason}") from None


def _opaque(field_type: int, data: bytes) -> object:
    """Render an opaque value the way MySQL prints it in JSON text."""
    if field_type == _FT_NEWDECIMAL:
        if len(data) < 2:
            raise _err("truncated opaque DECIMAL")
        precision, scale = data[0], data[1]
        if not 0 < precision <= 65 or decimal_size(precision, scale) != len(data) - 2:
            raise _err(f"opaque DECIMAL({precision},{scale}) has {len(data) - 2} bytes")
        return Decimal(decimal_text(data, 2, precision, scale))
    if field_type in (_FT_DATE, _FT_TIME, _FT_DATETIME, _FT_TIMESTAMP):
        if len(data) != 8:
            raise _err(f"opaque temporal value of {len(data)} bytes, expected 8")
        packed = _I64.unpack_from(data)[0]
        if field_type == _FT_TIME:
            return _time_from_packed(packed)
        return _datetime_from_packed(packed, date_only=field_type == _FT_DATE)
    return f"base64:type{field_type}:{base64.b64encode(data).decode('ascii')}"


def _time_from_packed(packed: int) -> str:
    """TIME_from_longlong_time_packed, printed with 6 fraction digits."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    frac = packed & 0xFFFFFF
    hms = packed >> 24
    hour = (hms >> 12) % (1 << 10)
    minute = (hms >> 6) % (1 << 6)
    second = hms % (1 << 6)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{frac:06d}"


def _datetime_from_packed(packed: int, date_only: bool) -> str:
    """TIME_from_longlong_datetime_packed, printed as MySQL's JSON text does."""
    packed = abs(packed)
    frac = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    hms = ymdhms % (1 << 17)
    ym = ymd >> 5
    day = ymd % (1 << 5)
    year, month = divmod(ym, 13)
    if date_only:
        return f"{year:04d}-{month:02d}-{day:02d}"
    hour = hms >> 12
    minute = (hms >> 6) % (1 << 6)
    second = hms % (1 << 6)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{frac:06d}"


def decode_json(data: bytes | bytearray | memoryview) -> object:
    """Decode one binary JSON document.

    Args:
        data: the column's bytes after its length prefix. Empty means JSON null
            (MySQL writes that for NULL stored into a NOT NULL JSON column).

    Returns:
        dict / list / str / int / float / bool / None / Decimal, as described in
        the module docstring. Bytes after the top-level value are ignored, as
        MySQL ignores them.

    Raises:
        EventDecodeError: truncated or malformed data, an offset outside its
            container, nesting deeper than :data:`MAX_DEPTH`, invalid UTF-8.
    """
    buf = bytes(data)
    if not buf:
        return None
    return _Decoder(buf).value(buf[0], 1, len(buf), 0)


def _lenenc(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """MySQL net_field_length: returns (value, position after it)."""
    if pos >= end:
        raise _err("truncated length in JSON diff")
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    if first == 251:
        raise _err("NULL length in JSON diff")
    if first == 252:
        if pos + 3 > end:
            raise _err("truncated length in JSON diff")
        return _U16.unpack_from(buf, pos + 1)[0], pos + 3
    if first == 253:
        if pos + 4 > end:
            raise _err("truncated length in JSON diff")
        low, high = _U24.unpack_from(buf, pos + 1)
        return low | high << 16, pos + 4
    if pos + 9 > end:
        raise _err("truncated length in JSON diff")
    return _U64.unpack_from(buf, pos + 1)[0], pos + 9


def decode_json_diff(data: bytes | bytearray | memoryview) -> JsonDiffs:
    """Decode the diffs of one partially updated JSON column.

    Args:
        data: the column's bytes after its 4-byte length prefix (see the module
            docstring for the framing). Empty means no diffs.

    Returns:
        The diffs in the order the server applies them.

    Raises:
        EventDecodeError: unknown operation, truncated path or value, invalid
            UTF-8 path, or a value :func:`decode_json` rejects.
    """
    buf = bytes(data)
    end = len(buf)
    pos = 0
    diffs: list[JsonDiff] = []
    while pos < end:
        op = buf[pos]
        if op >= len(_OPS):
            raise _err(f"unknown JSON diff operation {op}")
        path_length, pos = _lenenc(buf, pos + 1, end)
        if path_length > end - pos:
            raise _err("JSON diff path runs past the end of the column")
        path = _utf8(buf[pos : pos + path_length], "JSON diff path")
        pos += path_length
        value = None
        if op != _REMOVE:
            value_length, pos = _lenenc(buf, pos, end)
            if value_length > end - pos:
                raise _err("JSON diff value runs past the end of the column")
            value = decode_json(buf[pos : pos + value_length])
            pos += value_length
        diffs.append(JsonDiff(_OPS[op], path, value))
    return JsonDiffs(diffs)


# --- DECIMAL binary format (NEWDECIMAL columns and opaque JSON decimals) ----------
