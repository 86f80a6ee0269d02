"""The mirror's table definitions: from a TABLE_MAP, and the SQL a MySQL DDL change becomes in PostgreSQL.

The mirror keeps each mirrored table's MySQL definition (a :class:`TableDef`) in PostgreSQL, committed with the
rows; a DDL change record (:mod:`library.schema.changes`) is applied to it by :class:`library.schema.catalog.
Catalog`, and :func:`alter_plan` says how PostgreSQL follows: statements in place (ADD COLUMN last, DROP, RENAME,
a type change in place) or a rebuild (a column placed FIRST/AFTER, a primary-key change), where PostgreSQL cannot
reorder columns.
"""

from __future__ import annotations

import re

from binlogd.library.pgtypes import pg_text, pg_type, quote_ident
from binlogd.library.schema.model import ColumnDef, TableDef, charset_name
from binlogd.protocol.charsets import charset_for_collation
from binlogd.protocol.constants import ColumnType as T

_TM_TYPES = {T.TINY: "tinyint", T.SHORT: "smallint", T.INT24: "mediumint", T.LONG: "int", T.LONGLONG: "bigint",
             T.FLOAT: "float", T.DOUBLE: "double", T.DATE: "date", T.NEWDATE: "date", T.TIME: "time",
             T.TIME2: "time", T.DATETIME: "datetime", T.DATETIME2: "datetime", T.TIMESTAMP: "timestamp",
             T.TIMESTAMP2: "timestamp", T.YEAR: "year", T.JSON: "json", T.GEOMETRY: "geometry",
             T.VECTOR: "vector", T.ENUM: "enum", T.SET: "set", T.BIT: "bit"}
_BLOBS = {T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB}


class DdlError(Exception):
    """A DDL change the mirror cannot apply (the message says why)."""


def tablemap_def(schema: str, table: str, columns) -> TableDef | None:
    """A definition from a TABLE_MAP's columns (:class:`protocol.tablemap.Column`), None when a column is unnamed.
    Its primary key is what the TABLE_MAP's metadata says (none with MINIMAL metadata)."""
    out = []
    for c in columns:
        if c.name is None:
            return None
        cs = charset_name(charset_for_collation(c.collation)) if c.collation is not None else None
        if c.collation == 63:
            cs = "binary"
        kind = _TM_TYPES.get(c.type)
        length = precision = scale = None
        if c.type in (T.NEWDECIMAL, T.DECIMAL):
            kind, (precision, scale) = "decimal", c.meta
        elif c.type in (T.TIME2, T.DATETIME2, T.TIMESTAMP2):
            precision = c.meta
        elif c.type == T.BIT:
            bits, nbytes = c.meta
            length = nbytes * 8 + bits
        elif c.type in _BLOBS:
            kind = "blob" if cs == "binary" else "text"
        elif c.type in (T.VARCHAR, T.VAR_STRING, T.STRING):
            kind = "varbinary" if cs == "binary" else "varchar"
        if kind is None:
            kind = f"type code {c.type}"
        values = c.enum_values if c.type == T.ENUM else c.set_values if c.type == T.SET else None
        out.append(ColumnDef(c.name, kind, length, precision, scale, bool(c.unsigned), c.nullable, cs, values,
                             c.vector_dimensions))
    return TableDef(schema, table, tuple(out), tuple(c.name for c in columns if c.primary_key))


def pg_columns(table: TableDef) -> list[tuple[str, str]]:
    """(column name, PostgreSQL type) of each column, in order. Raises: DdlError (an unmappable type)."""
    try:
        return [(c.name, pg_type(c)) for c in table.columns]
    except ValueError as exc:
        raise DdlError(f"{table.schema}.{table.table}: {exc}") from None


def create_sql(qualified: str, table: TableDef) -> str:
    """CREATE TABLE for ``table`` under the quoted name ``qualified``."""
    cols = [f"{quote_ident(n)} {t}{'' if c.nullable else ' NOT NULL'}"
            for (n, t), c in zip(pg_columns(table), table.columns)]
    if table.primary_key:
        cols.append(f"PRIMARY KEY ({', '.join(quote_ident(k) for k in table.primary_key)})")
    return f"CREATE TABLE {qualified} ({', '.join(cols)})"


def same_shape(a: TableDef, b: TableDef, keys: bool = True) -> bool:
    """Whether the two definitions make the same PostgreSQL table (names and types; the key's columns with
    ``keys``: a TABLE_MAP names them, not their order)."""
    if pg_columns(a) != pg_columns(b):
        return False
    return not keys or set(a.primary_key) == set(b.primary_key)


_DEFAULT = re.compile(r"""\bDEFAULT\s+('(?:[^'\\]|''|\\.)*'|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|NULL\b|TRUE\b|FALSE\b)""",
                      re.I | re.S)
_ESCAPE = re.compile(r"''|\\(.)", re.S)


def added_default(statement: str, col: ColumnDef):
    """The value (README's JSON form) an added column gets in existing rows: its DEFAULT literal in the
    statement, else NULL, or for a NOT NULL column MySQL's implicit default.

    Raises:
        DdlError: a DEFAULT that is not a plain literal (an expression the mirror cannot evaluate).
    """
    name = re.escape(col.name.replace("`", "``"))
    m = re.search(rf"(?:`{name}`|\b{name}\b)\s+[^,]*?(?:\bDEFAULT\b[^,]*)?(?=,|$)", statement, re.I | re.S)
    clause = m.group(0) if m else ""
    if re.search(r"\bDEFAULT\b", clause, re.I):
        d = _DEFAULT.search(clause)
        if d is None:
            raise DdlError(f"the DEFAULT of added column {col.name!r} is not a plain literal")
        raw = d.group(1)
        if raw.upper() == "NULL":
            return None
        if raw.upper() in ("TRUE", "FALSE"):
            return int(raw.upper() == "TRUE")
        if raw.startswith("'"):
            raw = _ESCAPE.sub(lambda x: "'" if x.group(0) == "''" else _unescape(x.group(1)), raw[1:-1])
            return [v for v in raw.split(",") if v] if col.type == "set" else raw
        return int(raw) if re.fullmatch(r"-?\d+", raw) else raw
    if col.nullable:
        return None
    return implicit_default(col)


def _unescape(ch: str) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "0": "\x00", "Z": "\x1a"}.get(ch, ch)


def implicit_default(col: ColumnDef):
    """MySQL's implicit default of a NOT NULL column without DEFAULT (the JSON form)."""
    t = col.type
    if t in ("date",):
        return "0000-00-00"
    if t in ("datetime", "timestamp"):
        return "0000-00-00 00:00:00"
    if t == "time":
        return "00:00:00"
    if t == "enum":
        return (col.values or ("",))[0]
    if t == "set":
        return []
    if t == "json":
        return None
    if t == "vector":
        return None
    if pg_type(col) in ("text", "bytea"):
        return ""
    return 0


def literal(col: ColumnDef, value) -> str:
    """``value`` as a typed SQL literal of ``col``'s PostgreSQL type."""
    text = pg_text(col, value)
    if text is None:
        return "NULL"
    return "'" + text.replace("'", "''") + "'::" + pg_type(col)


__all__ = ["DdlError", "added_default", "create_sql", "implicit_default", "literal", "pg_columns", "same_shape",
           "tablemap_def"]
