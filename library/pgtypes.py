"""MySQL/MariaDB column types as PostgreSQL types, and row values (README's JSON forms) as PostgreSQL text.

The mapping (README, "The PostgreSQL mirror"):

=====================================  ===============================  ======================================
MySQL                                  PostgreSQL                       value
=====================================  ===============================  ======================================
TINYINT, SMALLINT [UNSIGNED TINYINT]   smallint
SMALLINT UNSIGNED, MEDIUMINT, INT      integer
INT UNSIGNED, BIGINT                   bigint
BIGINT UNSIGNED                        numeric(20)
DECIMAL(p,s)                           numeric(p,s)                     exact digits
FLOAT / DOUBLE                         real / double precision          shortest text that round-trips
DATE                                   date                             a date with a zero part: -infinity
DATETIME(n)                            timestamp(n)                     zero part: -infinity
TIMESTAMP(n)                           timestamptz(n)                   UTC; the zero timestamp: -infinity
TIME(n)                                interval                         '-838:59:59' .. '838:59:59'
YEAR                                   smallint                         0 for 0000
BIT(n)                                 bit(n)
ENUM                                   text                             the value's name
SET                                    text[]                           the names, in the set's order
JSON                                   jsonb
VECTOR(n)                              real[]
CHAR, VARCHAR, TEXT (a charset)        text                             NUL (U+0000): refused, see below
BINARY, VARBINARY, BLOB, GEOMETRY,     bytea                            the stored bytes
  INET4, INET6, UUID, unknown charset
=====================================  ===============================  ======================================

PostgreSQL's text and jsonb cannot hold U+0000: such a value raises :class:`ValueError` (the mirror stops,
exit 7, naming the table, column and change), never a silent change of the data.
"""

from __future__ import annotations

import base64
import math
import re

from binlogd.library.schema.model import ColumnDef

_INT = {"tinyint": ("smallint", "smallint"), "smallint": ("smallint", "integer"),
        "mediumint": ("integer", "integer"), "int": ("integer", "bigint"), "bigint": ("bigint", "numeric(20)")}
_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "inet4",
                     "inet6", "uuid"})
_ZERO_DATE = re.compile(r"^(0000-\d\d-\d\d|\d{4}-00-\d\d|\d{4}-\d\d-00)")


def pg_type(col: ColumnDef) -> str:
    """The PostgreSQL type of a MySQL column (module docstring's table).

    Raises:
        ValueError: a type the mirror has no mapping for (named in the message).
    """
    t = col.type
    if t in _INT:
        return _INT[t][1 if col.unsigned else 0]
    if t == "decimal":
        p = col.precision or 10
        return f"numeric({p},{col.scale or 0})"
    if t in ("float", "double"):
        return "real" if t == "float" else "double precision"
    if t in ("datetime", "timestamp"):
        fsp = col.precision or 0
        return f"timestamp({fsp})" if t == "datetime" else f"timestamptz({fsp})"
    simple = {"date": "date", "time": "interval", "year": "smallint", "enum": "text", "set": "text[]",
              "json": "jsonb", "vector": "real[]"}
    if t in simple:
        return simple[t]
    if t == "bit":
        return f"bit({col.length or 1})"
    if t in _TEXT:
        return "bytea" if col.charset == "binary" else "text"
    if t in _BINARY:
        return "bytea"
    raise ValueError(f"no PostgreSQL type for MySQL type {t!r}")


def pg_text(col: ColumnDef, value, json_text: bool = False) -> str | None:
    """``value`` (README's JSON form of a value of ``col``) as PostgreSQL input text; None for NULL.
    ``json_text``: a JSON column's text is the JSON document itself (MariaDB, whose JSON is text), not a JSON
    string value.

    Raises:
        ValueError: text or JSON holding U+0000, or a value that does not fit the column's type.
    """
    if value is None:
        return None
    t = col.type
    if t in ("date", "datetime", "timestamp"):
        if _ZERO_DATE.match(value):
            return "-infinity"
        return value + "+00" if t == "timestamp" else value
    if t == "bit":
        return format(int(value), f"0{col.length or 1}b")
    if t == "set":
        names = sorted(value) if isinstance(value, (set, frozenset)) else value
        if isinstance(names, int):
            raise ValueError(f"SET value {value} has no names (the column's values are unknown)")
        return "{" + ",".join(_array_item(_no_nul(n)) for n in names) + "}"
    if t == "vector":
        return "{" + ",".join(repr(float(x)) for x in value) + "}"
    if t == "json":
        from binlogd.library.serialize import dumps

        if json_text and isinstance(value, str):
            return _no_nul(value)
        return _no_nul(dumps(value).decode())
    if t in ("float", "double"):
        return _float(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int,)):
        return str(value)
    if pg_type(col) == "bytea":
        raw = value if isinstance(value, (bytes, bytearray)) else base64.b64decode(value)
        return "\\x" + bytes(raw).hex()
    return _no_nul(str(value))


def converter(col: ColumnDef, json_text: bool = False):
    """A function of one value giving what :func:`pg_text` gives for ``col`` (quicker for the common types).

    Raises (the function): ValueError as pg_text.
    """
    t = col.type
    if t in _INT or t in ("decimal", "year"):
        return lambda v: None if v is None else str(v)
    if t in _TEXT and col.charset != "binary":
        return lambda v: None if v is None else v if "\x00" not in v else _no_nul(v)
    if t in ("date", "datetime"):
        zero = _ZERO_DATE.match
        return lambda v: None if v is None else "-infinity" if zero(v) else v
    return lambda v: pg_text(col, v, json_text)


def _float(value) -> str:
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v) if isinstance(value, float) else str(value)


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("text holds a NUL character (U+0000), which PostgreSQL text and jsonb cannot hold")
    return text


def _array_item(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def copy_field(text: str | None) -> str:
    """One field of COPY's text format (``\\N`` for NULL)."""
    if text is None:
        return "\\N"
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def quote_ident(name: str) -> str:
    """``name`` as a quoted PostgreSQL identifier (every name is quoted; ``"`` doubled).

    Raises:
        ValueError: the name is longer than PostgreSQL's 63 bytes, or holds NUL.
    """
    if "\x00" in name:
        raise ValueError(f"name {name!r} holds NUL")
    if len(name.encode()) > 63:
        raise ValueError(f"name {name!r} is {len(name.encode())} bytes, over PostgreSQL's 63")
    return '"' + name.replace('"', '""') + '"'


__all__ = ["converter", "copy_field", "pg_text", "pg_type", "quote_ident"]
