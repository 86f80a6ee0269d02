"""SQL literals for decoded row values, one renderer per column.

The decoder gives every value in its JSON form (README.md "Values"); a renderer turns that form back
into a literal the server stores as the same value. Each renderer takes the value (None for NULL) and
returns SQL text:

- integers, DECIMAL and YEAR as written; DOUBLE as its shortest round-trip repr; FLOAT as the exact
  double of its float32 (so that ``=`` and ``<=>`` find the stored value);
- DATE, DATETIME(n), TIME(n) and TIMESTAMP(n) quoted (TIMESTAMPs are UTC: the replay session runs
  under ``time_zone='+00:00'``); BIT as ``b'…'``; ENUM/SET by value (by index/bitmask when the
  binlog did not name the values);
- text quoted and escaped, in UTF-8 (the session's character set), which the server converts to the
  column's; text of a character set Python cannot decode, binary strings and GEOMETRY as hex
  (``X'…'``, with the character set's introducer for text); text of an unknown character set as the
  hex of its bytes;
- MySQL JSON as ``CAST('…' AS JSON)``; VECTOR with the server's constructor (MySQL
  ``STRING_TO_VECTOR``, MariaDB ``VEC_FromText``).
"""

from __future__ import annotations

import binascii
import re
import struct
from base64 import b64decode
from collections.abc import Callable

from binlogd.library.lazyjson import orjson
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol.charsets import charset_for_collation, codec_for_collation
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.jsonb import JsonDiff, JsonDiffs
from binlogd.protocol.tablemap import BLOB_TYPES, Column

Render = Callable[[object], str]

BINARY_COLLATION = 63
_F32 = struct.Struct("<f")
_SPECIAL = re.compile("[\\\\'\0\n\r\x1a]")
_INTEGERS = frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG})
_QUOTED = frozenset({T.DATE, T.NEWDATE, T.TIME, T.TIME2, T.DATETIME, T.DATETIME2, T.TIMESTAMP, T.TIMESTAMP2})
_CHARACTER = frozenset({T.STRING, T.VAR_STRING, T.VARCHAR}) | BLOB_TYPES
# Character sets whose text the decoder hands over decoded; the server converts UTF-8 literals to them.
_TEXT_CHARSETS = frozenset({"utf8mb3", "utf8mb4", "utf8", "ascii", "latin1"})


def ident(name: str) -> str:
    """A backquoted identifier (backquotes inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def quote(text: str) -> str:
    """A single-quoted string literal, escaped as mysql_real_escape_string does."""
    if _SPECIAL.search(text) is None:  # most text: one scan in C, no copy
        return "'" + text + "'"
    return "'" + (text.replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0").replace("\n", "\\n")
                  .replace("\r", "\\r").replace("\x1a", "\\Z")) + "'"


def _nullable(render: Render) -> Render:
    def value(v):
        return "NULL" if v is None else render(v)
    return value


def _str(v) -> str:
    return "NULL" if v is None else str(v)


def _repr(v) -> str:
    return "NULL" if v is None else repr(v)


def _text(v) -> str:
    return "NULL" if v is None else quote(v)


def _signed_unknown(where: str) -> Render:
    def value(v):
        if v < 0:
            raise SqlOutError(f"{where}: a negative value ({v}) in a column whose signedness the binlog does not "
                              "record: it may be an UNSIGNED value stored as signed, so no literal is sure")
        return str(v)
    return value


def _temporal(v) -> str:
    return "NULL" if v is None else "'" + v + "'"  # digits, '-', ':', '.' and ' ' only


def _float32(v) -> str:
    return repr(_F32.unpack(_F32.pack(v))[0])


def _bit(v) -> str:
    return f"b'{v:b}'"


def _enum_set(v) -> str:
    if isinstance(v, int):
        return str(v)  # the binlog did not name the values: the index / bitmask, which the server accepts
    return quote(",".join(v) if isinstance(v, list) else v)


def _hex(v) -> str:
    return "X'" + b64decode(v).hex() + "'"


def _json(v) -> str:
    orjson()  # not imported at sql's start (library.lazyjson): serialize needs it
    from binlogd.library.serialize import dumps

    return "CAST(" + quote(dumps(v).decode()) + " AS JSON)"


def json_diff_sql(column_sql: str, diffs: list[JsonDiff]) -> str:
    """A PARTIAL_UPDATE_ROWS column: its JSON diffs applied in order to the column's current value, as the
    server applies them (and as mysqlbinlog writes them): REPLACE as JSON_REPLACE, REMOVE as JSON_REMOVE,
    INSERT of an array element (a path ending in ``]``: placed at that index, the later ones shifted, or
    appended past the end) as JSON_ARRAY_INSERT, INSERT of an object member as JSON_INSERT."""
    expr = column_sql
    for d in diffs:
        if d.op == "REMOVE":
            expr = f"JSON_REMOVE({expr}, {quote(d.path)})"
        else:
            fn = "JSON_ARRAY_INSERT" if d.op == "INSERT" and d.path.endswith("]") else f"JSON_{d.op}"
            expr = f"{fn}({expr}, {quote(d.path)}, {_json(d.value)})"
    return expr


def is_json_diff(value) -> bool:
    """True when a JSON column's value in an update's after image is its diffs (:class:`JsonDiffs`), not a
    document (a document may be a list that looks like diffs; an empty JsonDiffs changes nothing)."""
    return type(value) is JsonDiffs


def _vector(constructor: str) -> Render:
    def value(v):
        return f"{constructor}('[" + ",".join(repr(x) for x in v) + "]')"
    return value


def _unknown_charset(where: str) -> Render:
    """A column whose character set neither the binlog nor a schema history names: the decoder gives its
    value as text when the bytes are valid UTF-8, else as their base64. A value that cannot be such base64
    is text: its UTF-8 bytes, as a hex literal, which the server stores (and matches) byte for byte under
    any character set. A value that reads as the base64 of bytes that are not UTF-8 may be either, and is
    an error."""
    def value(v):
        try:
            raw = b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            return "X'" + v.encode("utf-8").hex() + "'"
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SqlOutError(f"{where}: the binlog does not name the column's character set, and {v!r} may be "
                              "text or the base64 of other bytes; a schema history with the column's character "
                              "set (binlogd schema build --seed) settles it")
        return "X'" + v.encode("utf-8").hex() + "'"  # base64 of UTF-8 would have come as text: it is text
    return value


def literal_kind(col: Column) -> str:
    """What a column's literals are made from (each kind has its renderer in :func:`renderer`):

    "number" (integers, DECIMAL, YEAR), "signed?" (an integer of unknown signedness), "double",
    "float", "temporal", "bit", "enum_set", "json", "vector", "hex" (binary strings and GEOMETRY),
    "text" (UTF-8 quoted), "charset" (text of another character set, as its bytes), "unknown_charset",
    "null"; "" for a type that cannot appear in a row.
    """
    t = col.type
    if t in _INTEGERS:
        return "signed?" if col.unsigned is None else "number"
    if t in _SIMPLE_KINDS:
        return _SIMPLE_KINDS[t]
    if t in _CHARACTER:
        if col.collation is None:
            return "unknown_charset"
        if col.collation == BINARY_COLLATION:
            return "hex"
        if codec_for_collation(col.collation) is None or charset_for_collation(col.collation) not in _TEXT_CHARSETS:
            return "charset"  # utf16/ucs2/sjis/…: Python's mapping may differ from the server's
        return "text"
    return ""


_SIMPLE_KINDS = {T.NEWDECIMAL: "number", T.DECIMAL: "number", T.YEAR: "number", T.DOUBLE: "double",
                 T.FLOAT: "float", T.BIT: "bit", T.ENUM: "enum_set", T.SET: "enum_set", T.JSON: "json",
                 T.VECTOR: "vector", T.GEOMETRY: "hex", T.NULL: "null", **{t: "temporal" for t in _QUOTED}}


def _charset_render(col: Column) -> Render:
    """Text of a character set Python may map otherwise than the server: the bytes under an introducer."""
    codec = codec_for_collation(col.collation)
    intro = "_" + charset_for_collation(col.collation) + " "
    if codec is None:
        return lambda v: intro + _hex(v)
    return lambda v: intro + "X'" + v.encode(codec, "backslashreplace").hex() + "'"


def renderer(col: Column, flavor: str, where: str, match: bool = False) -> Render:
    """The literal renderer of one column (NULL included).

    Args:
        col: the column as the TABLE_MAP (and its optional metadata) describes it.
        flavor: "mariadb" or "mysql": the server that wrote the binlog (VECTOR's constructor).
        where: ``db.table.column at FILE:POS``, for errors.
        match: the literal is compared (``<=>``) rather than stored: text compares byte-exact.
    Raises:
        SqlOutError: a column whose values cannot be rendered exactly (charset or signedness unknown,
            a type that cannot appear in a row).
    """
    kind = literal_kind(col)
    if kind == "signed?":
        return _nullable(_signed_unknown(where))
    if kind == "number":
        return _str if col.nullable else str
    if kind == "double":
        return _repr if col.nullable else repr
    if kind == "temporal":
        return _temporal
    if kind == "text":
        # <=> on a case-insensitive or accent-insensitive collation would match other rows too.
        return (lambda v: "NULL" if v is None else quote(v) + " COLLATE utf8mb4_bin") if match else _text
    if kind == "null":
        return lambda v: "NULL"
    if kind == "vector":
        return _nullable(_vector("VEC_FromText" if flavor == "mariadb" else "STRING_TO_VECTOR"))
    if kind == "unknown_charset":
        return _nullable(_unknown_charset(where))
    if kind == "charset":
        return _nullable(_charset_render(col))
    if kind:
        return _nullable({"float": _float32, "bit": _bit, "enum_set": _enum_set, "json": _json, "hex": _hex}[kind])
    raise SqlOutError(f"{where}: column type {int(col.type)} cannot appear in a row image")
