"""Table definitions as the schema history keeps them, and the check against a TABLE_MAP.

A :class:`TableDef` is what a DDL statement, ``SHOW CREATE TABLE`` or information_schema says a
table looks like; :func:`agrees` tells whether it describes the table a TABLE_MAP event was
logged for (column count, each column's type code and metadata), and :func:`compile_schema`
turns it into the :class:`binlogd.protocol.tablemap.TableSchema` the decoder applies.
"""

from __future__ import annotations

from binlogd.protocol.charsets import COLLATIONS, charset_for_collation
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.records import asdict, record, replace
from binlogd.protocol.tablemap import Column, TableSchema

# Bytes per character of each character set (the server's mbmaxlen); 1 when not listed.
_MBMAXLEN = {"utf8mb3": 3, "utf8mb4": 4, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2, "sjis": 2,
             "cp932": 2, "gbk": 2, "gb2312": 2, "euckr": 2, "ujis": 3, "eucjpms": 3, "gb18030": 4}
_CHARSET_ALIASES = {"utf8": "utf8mb3"}
# One collation id per character set (the lowest), enough to pick the codec that decodes its text.
_COLLATION_OF = {}
for _cid, _cs in sorted(COLLATIONS.items(), reverse=True):
    _COLLATION_OF[_cs] = _cid

INTEGER_TYPES = {"tinyint": T.TINY, "smallint": T.SHORT, "mediumint": T.INT24, "int": T.LONG, "bigint": T.LONGLONG}
BLOB_PACK = {"tinytext": 1, "text": 2, "mediumtext": 3, "longtext": 4,
             "tinyblob": 1, "blob": 2, "mediumblob": 3, "longblob": 4}
FIXED_BINARY = {"inet6": 16, "uuid": 16, "inet4": 4}  # MariaDB's types stored as BINARY(n)
CHAR_TYPES = frozenset({"char", "varchar", "binary", "varbinary", "enum", "set"} | set(BLOB_PACK))
_TEXT_BY_SIZE = ((255, "tiny"), (65535, ""), (16777215, "medium"), (1 << 32, "long"))
_TEMPORAL = {"time": (T.TIME2, T.TIME), "datetime": (T.DATETIME2, T.DATETIME), "timestamp": (T.TIMESTAMP2, T.TIMESTAMP)}


def mbmaxlen(charset: str) -> int:
    """Bytes per character of a character set (the server's mbmaxlen)."""
    return _MBMAXLEN.get(charset, 1)


def charset_name(name: str | None) -> str | None:
    """A character set's canonical name (``utf8`` is ``utf8mb3``), or the charset a collation name belongs to."""
    if not name:
        return None
    name = name.lower()
    if name in _COLLATION_OF or name in _CHARSET_ALIASES:
        return _CHARSET_ALIASES.get(name, name)
    prefix = name.split("_", 1)[0]
    if prefix in _COLLATION_OF or prefix in _CHARSET_ALIASES:
        return _CHARSET_ALIASES.get(prefix, prefix)
    return None


@record(slots=True)
class ColumnDef:
    """One column of a table definition.

    Fields:
        name: the column name as declared.
        type: canonical lower-case SQL type (``int``, ``varchar``, ``decimal``, ``enum``, ``inet6`` ...).
        length: characters of CHAR/VARCHAR/TEXT(n), bytes of BINARY/VARBINARY, bits of BIT.
        precision, scale: DECIMAL's; ``precision`` is the fractional-seconds digits of TIME/DATETIME/TIMESTAMP.
        unsigned: numeric signedness.
        nullable: NULL allowed.
        charset: character set of a text column (``binary`` for byte strings), None when unknown.
        values: ENUM/SET value names.
        dimensions: VECTOR dimensions.
    """

    name: str
    type: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    unsigned: bool = False
    nullable: bool = True
    charset: str | None = None
    values: tuple[str, ...] | None = None
    dimensions: int | None = None

    def to_json(self) -> dict:
        """The column as a JSON object (None fields left out)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if v is not None and (k, v) not in (("unsigned", False), ("nullable", True))}

    @classmethod
    def from_json(cls, obj: dict) -> ColumnDef:
        """Raises: KeyError, TypeError on a malformed object."""
        values = obj.get("values")
        return cls(**{**obj, "values": tuple(values) if values is not None else None})


@record(slots=True)
class TableDef:
    """A table's definition: ordered columns, primary key, default character set.

    Fields:
        schema, table: its database and name.
        columns: the columns in table order.
        primary_key: names of the primary key's columns, in key order.
        charset: the table's default character set (for columns added later), None when unknown.
    """

    schema: str
    table: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...] = ()
    charset: str | None = None

    def column_index(self, name: str) -> int | None:
        """Position of a column (names compare case-insensitively, as the server's do), or None."""
        low = name.lower()
        for i, c in enumerate(self.columns):
            if c.name.lower() == low:
                return i
        return None

    def to_json(self) -> dict:
        """The definition's JSON fields (without schema/table, which the history entry holds)."""
        out = {"columns": [c.to_json() for c in self.columns], "primary_key": list(self.primary_key)}
        if self.charset:
            out["charset"] = self.charset
        return out

    @classmethod
    def from_json(cls, schema: str, table: str, obj: dict) -> TableDef:
        """Raises: KeyError, TypeError on a malformed object."""
        return cls(schema, table, tuple(ColumnDef.from_json(c) for c in obj["columns"]),
                   tuple(obj.get("primary_key") or ()), obj.get("charset"))


def _char_bytes(col: ColumnDef, tm: Column) -> set[int]:
    """The byte lengths a CHAR/VARCHAR of ``col.length`` characters may have in the TABLE_MAP."""
    n = col.length or 0
    charset = col.charset or charset_for_collation(tm.collation)
    if col.type in ("binary", "varbinary") or charset == "binary":
        return {n}
    if charset is None:
        return {n * k for k in (1, 2, 3, 4)}
    return {n * mbmaxlen(charset)}


def column_agrees(col: ColumnDef, tm: Column) -> bool:
    """True when the TABLE_MAP column ``tm`` (type code and metadata) can be ``col``."""
    kind, code, meta = col.type, tm.type, tm.meta
    if kind in INTEGER_TYPES:
        return code == INTEGER_TYPES[kind]
    if kind == "decimal":
        return code == T.DECIMAL or (code == T.NEWDECIMAL and meta == (col.precision, col.scale))
    if kind in ("float", "double"):
        return code == (T.FLOAT if kind == "float" else T.DOUBLE)
    if kind == "bit":
        return code == T.BIT and meta == ((col.length or 1) % 8, (col.length or 1) // 8)
    if kind == "year":
        return code == T.YEAR
    if kind == "date":
        return code in (T.DATE, T.NEWDATE)
    if kind in _TEMPORAL:
        new, old = _TEMPORAL[kind]
        return (code == new and meta == (col.precision or 0)) or (code == old and not col.precision)
    if kind in ("char", "binary"):
        return code == T.STRING and meta in _char_bytes(col, tm) and _same_charset(col, tm)
    if kind in ("varchar", "varbinary"):
        return code in (T.VARCHAR, T.VAR_STRING) and meta in _char_bytes(col, tm) and _same_charset(col, tm)
    if kind in FIXED_BINARY:
        return code == T.STRING and meta == FIXED_BINARY[kind]
    if kind in BLOB_PACK:
        return code == T.BLOB and meta == BLOB_PACK[kind] and _same_charset(col, tm)
    if kind == "enum":
        return code == T.ENUM and meta == (1 if len(col.values or ()) < 256 else 2)
    if kind == "set":
        size = (len(col.values or ()) + 7) // 8
        return code == T.SET and meta == (8 if size > 4 else size)
    if kind == "json":
        return code == T.JSON or (code == T.BLOB and meta == 4)
    if kind == "geometry":
        return code == T.GEOMETRY
    if kind == "vector":
        return code == T.VECTOR or (code in (T.VARCHAR, T.VAR_STRING) and meta == 4 * (col.dimensions or 0))
    return False


def _same_charset(col: ColumnDef, tm: Column) -> bool:
    """False only when both sides know the character set and they differ."""
    logged = charset_for_collation(tm.collation)
    return col.charset is None or logged is None or charset_name(logged) == col.charset


def sized_text(col: ColumnDef, charset: str | None) -> ColumnDef:
    """TEXT(n)/BLOB(n): the smallest TEXT/BLOB type that holds n characters (bytes) of ``charset``."""
    if col.type not in ("text", "blob") or col.length is None:
        return col
    size = col.length * (1 if col.type == "blob" else mbmaxlen(charset) if charset else 4)
    prefix = next(p for limit, p in _TEXT_BY_SIZE if size <= limit)
    return replace(col, type=prefix + col.type, length=None)


def agrees(table: TableDef, columns: tuple[Column, ...] | list[Column]) -> bool:
    """True when ``table`` describes the table a TABLE_MAP with ``columns`` was logged for:
    the same column count, and each column's type code and metadata fit its definition."""
    return len(table.columns) == len(columns) and all(map(column_agrees, table.columns, columns))


@record(slots=True)
class CheckedSchema(TableSchema):
    """A :class:`TableSchema` built from a :class:`TableDef`; it names a TABLE_MAP's columns only when the
    definition agrees with it (:meth:`agrees`), so a stale definition gives positional names, never wrong ones.

    Fields:
        definition: the TableDef it was built from.
    """

    definition: TableDef | None = None

    def agrees(self, columns) -> bool:
        """True when the definition fits the TABLE_MAP's columns (see :func:`agrees`)."""
        return self.definition is not None and agrees(self.definition, columns)


def compile_schema(table: TableDef) -> CheckedSchema:
    """The decoder's view of a definition: names, signedness, charsets, ENUM/SET strings, vector dimensions."""
    cols = table.columns
    return CheckedSchema(
        names=tuple(c.name for c in cols),
        unsigned=tuple(c.unsigned for c in cols),
        collations=tuple(_COLLATION_OF.get(c.charset) if c.type in CHAR_TYPES or c.type == "json" else None
                         for c in cols),
        enum_values=tuple(c.values if c.type == "enum" else None for c in cols),
        set_values=tuple(c.values if c.type == "set" else None for c in cols),
        vector_dimensions=tuple(c.dimensions if c.type == "vector" else None for c in cols)
        if any(c.type == "vector" for c in cols) else None,
        definition=table,
    )
