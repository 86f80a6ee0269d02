"""TABLE_MAP bodies: column types, their metadata, and the optional metadata.

The optional metadata (``binlog_row_metadata=FULL`` on MySQL 8 / MariaDB 10.5+)
gives names, signedness, charsets, ENUM/SET strings, primary key, geometry
types, visibility and VECTOR dimensions. Where it is missing, a schema source
may supply a :class:`TableSchema` instead.
"""

from __future__ import annotations

from .constants import ColumnType as T
from .errors import EventDecodeError
from .primitives import need, packed_bytes, packed_len, take, text
from .records import record, replace

MAX_COLUMNS = 4096  # MySQL's limit on columns per table
BINARY_COLLATION = 63
NUMERIC_TYPES = frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG, T.FLOAT, T.DOUBLE, T.NEWDECIMAL, T.DECIMAL})
BLOB_TYPES = frozenset({T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB})
CHARACTER_TYPES = frozenset({T.STRING, T.VAR_STRING, T.VARCHAR}) | BLOB_TYPES
ENUM_SET_TYPES = frozenset({T.ENUM, T.SET})
# The columns the optional metadata's charset lists count: MariaDB counts GEOMETRY too (a BLOB inside), MySQL 9
# counts VECTOR too; a column left out would shift every later column's charset by one.
CHARSET_LISTED = {True: CHARACTER_TYPES | {T.GEOMETRY}, False: CHARACTER_TYPES | {T.VECTOR}}

# How many metadata bytes each column type has in TABLE_MAP.
_META_SIZE = {
    T.FLOAT: 1, T.DOUBLE: 1, T.BLOB: 1, T.TINY_BLOB: 1, T.MEDIUM_BLOB: 1, T.LONG_BLOB: 1,
    T.GEOMETRY: 1, T.JSON: 1, T.VECTOR: 1, T.TIME2: 1, T.DATETIME2: 1, T.TIMESTAMP2: 1,
    T.VARCHAR: 2, T.VAR_STRING: 2, T.BIT: 2, T.NEWDECIMAL: 2, T.STRING: 2, T.ENUM: 2, T.SET: 2,
    T.DECIMAL: 2,
}


@record(slots=True)
class Column:
    """One column as a TABLE_MAP (plus optional metadata or schema source) describes it.

    Fields:
        index: 0-based position in the table.
        type: the real column type (STRING's ENUM/SET resolved to ENUM/SET).
        meta: type metadata: max length, pack length, (precision, scale), (bits, bytes) or fsp.
        nullable: from the null-bits.
        name: column name, or None when unknown.
        unsigned: signedness of numeric columns, None when unknown.
        collation: collation id of character and ENUM/SET columns, None when unknown.
        enum_values / set_values: the value names of ENUM / SET columns, when known.
        geometry_type, vector_dimensions: from the optional metadata.
        primary_key: column is (part of) the primary key.
        visible: False for invisible columns (MySQL 8.0.23+).
    """

    index: int
    type: int
    meta: int | tuple[int, int]
    nullable: bool = True
    name: str | None = None
    unsigned: bool | None = None
    collation: int | None = None
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    vector_dimensions: int | None = None
    primary_key: bool = False
    visible: bool = True

    @property
    def label(self) -> str:
        """The key the column's values are stored under: its name, else ``@N`` (1-based)."""
        return self.name if self.name is not None else f"@{self.index + 1}"


@record(slots=True)
class TableSchema:
    """Column facts a schema source (information_schema) knows; each list is per column.

    Fields:
        names, unsigned, collations, enum_values, set_values: as the Column fields of the same names.
        vector_dimensions: n for a VECTOR(n) column, else None. MariaDB 11.7+ logs a VECTOR as a
            binary VARCHAR of 4n bytes with nothing in the TABLE_MAP that marks it: only this tells.
    """

    names: tuple[str, ...]
    unsigned: tuple[bool, ...] | None = None
    collations: tuple[int | None, ...] | None = None
    enum_values: tuple[tuple[str, ...] | None, ...] | None = None
    set_values: tuple[tuple[str, ...] | None, ...] | None = None
    vector_dimensions: tuple[int | None, ...] | None = None

    def agrees(self, columns) -> bool:
        """True when this schema may name a TABLE_MAP's ``columns``. Names alone say only how many columns
        there are; sources that know types (the schema history) check each column's type and metadata too."""
        return len(self.names) == len(columns)


def _column_meta(ctype: int, raw: memoryview) -> tuple[int, int | tuple[int, int]]:
    """Resolve (real type, metadata) from a column's type code and metadata bytes."""
    if not len(raw):
        return ctype, (0, 0) if ctype in (T.NEWDECIMAL, T.DECIMAL, T.BIT) else 0
    if ctype in (T.STRING, T.ENUM, T.SET):
        byte0, byte1 = raw[0], raw[1]
        if ctype == T.STRING and byte0 and (byte0 & 0x30) != 0x30:
            # CHAR longer than 255 bytes: two high bits of the length live in byte0.
            return T.STRING, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
        real = byte0 if byte0 in (T.ENUM, T.SET, T.STRING) else ctype
        return real, byte1
    if ctype in (T.VARCHAR, T.VAR_STRING):
        return ctype, raw[0] | raw[1] << 8
    if ctype in (T.NEWDECIMAL, T.DECIMAL):
        return ctype, (raw[0], raw[1])
    if ctype == T.BIT:
        return ctype, (raw[0], raw[1])  # (bits beyond whole bytes, whole bytes)
    return ctype, raw[0] if len(raw) else 0


def decode_table_map(body: memoryview, table_id_size: int,
                     mariadb: bool = False) -> tuple[int, int, str, str, list[Column]]:
    """Decode a TABLE_MAP body (post-header included); ``mariadb``: a MariaDB server logged it.

    Returns:
        (table_id, flags, schema, table, columns).
    Raises:
        EventDecodeError: on any inconsistency or truncation.
    """
    need(body, 0, table_id_size + 2, "TABLE_MAP post-header")
    table_id = int.from_bytes(body[:table_id_size], "little")
    flags = body[table_id_size] | body[table_id_size + 1] << 8
    pos = table_id_size + 2
    schema_raw, pos = _counted_cstring(body, pos)
    table_raw, pos = _counted_cstring(body, pos)
    ncols, pos = packed_len(body, pos)
    if ncols > MAX_COLUMNS:
        raise EventDecodeError(f"TABLE_MAP declares {ncols} columns; MySQL allows at most {MAX_COLUMNS}")
    types, pos = take(body, pos, ncols, "column types")
    if pos < len(body):
        meta_block, pos = packed_bytes(body, pos)
        nulls, pos = take(body, pos, (ncols + 7) // 8, "null bitmap")
        null_bits = int.from_bytes(nulls, "little")
    else:  # 5.1 pre-GA servers wrote neither metadata nor null bits
        meta_block, null_bits = memoryview(b""), (1 << ncols) - 1
    columns = []
    mpos = 0
    for i, ctype in enumerate(types):
        size = _META_SIZE.get(ctype, 0) if len(meta_block) else 0
        raw, mpos = take(meta_block, mpos, size, f"metadata of column {i + 1}")
        real, meta = _column_meta(ctype, raw)
        columns.append(Column(i, real, meta, bool(null_bits >> i & 1)))
    if pos < len(body):
        columns = _apply_optional_metadata(columns, body[pos:], mariadb)
    return table_id, flags, text(schema_raw), text(table_raw), columns


def _counted_cstring(view: memoryview, pos: int) -> tuple[memoryview, int]:
    """A 1-byte length, that many bytes, then a NUL."""
    need(view, pos, 1, "name length")
    raw, pos = take(view, pos + 1, view[pos], "name")
    need(view, pos, 1, "name terminator")
    return raw, pos + 1


def _bits_msb(raw: memoryview, count: int) -> list[bool]:
    """The first ``count`` bits of a bitmap stored most significant bit first."""
    return [bool(raw[i >> 3] & (0x80 >> (i & 7))) for i in range(min(count, len(raw) * 8))]


def _packed_list(view: memoryview) -> list[int]:
    out, pos = [], 0
    while pos < len(view):
        value, pos = packed_len(view, pos)
        out.append(value)
    return out


def _str_value_lists(view: memoryview) -> list[tuple[str, ...]]:
    out, pos = [], 0
    while pos < len(view):
        count, pos = packed_len(view, pos)
        values = []
        for _ in range(count):
            raw, pos = packed_bytes(view, pos)
            values.append(text(raw))
        out.append(tuple(values))
    return out


def _charset_map(view: memoryview, selected: list[int]) -> dict[int, int]:
    """DEFAULT_CHARSET form: a default collation then (index, collation) exceptions."""
    values = _packed_list(view)
    if not values:
        return {}
    result = dict.fromkeys(selected, values[0])
    pairs = values[1:]
    for k in range(0, len(pairs) - 1, 2):
        if pairs[k] < len(selected):
            result[selected[pairs[k]]] = pairs[k + 1]
    return result


def _apply_optional_metadata(columns: list[Column], view: memoryview, mariadb: bool = False) -> list[Column]:
    """Fold the TLV optional metadata into the columns."""
    numeric = [c.index for c in columns if c.type in NUMERIC_TYPES]
    character = [c.index for c in columns if c.type in CHARSET_LISTED[mariadb]]
    enum_set = [c.index for c in columns if c.type in ENUM_SET_TYPES]
    enums = [c.index for c in columns if c.type == T.ENUM]
    sets = [c.index for c in columns if c.type == T.SET]
    geoms = [c.index for c in columns if c.type == T.GEOMETRY]
    vectors = [c.index for c in columns if c.type == T.VECTOR]
    updates: dict[int, dict] = {c.index: {} for c in columns}

    def assign(indexes: list[int], key: str, values) -> None:
        for idx, value in zip(indexes, values):
            updates[idx][key] = value

    pos = 0
    while pos < len(view):
        kind = view[pos]
        value, pos = packed_bytes(view, pos + 1)
        if kind == 1:  # SIGNEDNESS
            assign(numeric, "unsigned", _bits_msb(value, len(numeric)))
        elif kind == 2:  # DEFAULT_CHARSET
            for idx, coll in _charset_map(value, character).items():
                updates[idx]["collation"] = coll
        elif kind == 3:  # COLUMN_CHARSET
            assign(character, "collation", _packed_list(value))
        elif kind == 4:  # COLUMN_NAME
            names, npos = [], 0
            while npos < len(value):
                raw, npos = packed_bytes(value, npos)
                names.append(text(raw))
            assign([c.index for c in columns], "name", names)
        elif kind == 5:  # SET_STR_VALUE
            assign(sets, "set_values", _str_value_lists(value))
        elif kind == 6:  # ENUM_STR_VALUE
            assign(enums, "enum_values", _str_value_lists(value))
        elif kind == 7:  # GEOMETRY_TYPE
            assign(geoms, "geometry_type", _packed_list(value))
        elif kind == 8:  # SIMPLE_PRIMARY_KEY
            for idx in _packed_list(value):
                if idx in updates:
                    updates[idx]["primary_key"] = True
        elif kind == 9:  # PRIMARY_KEY_WITH_PREFIX
            for idx in _packed_list(value)[::2]:
                if idx in updates:
                    updates[idx]["primary_key"] = True
        elif kind == 10:  # ENUM_AND_SET_DEFAULT_CHARSET
            for idx, coll in _charset_map(value, enum_set).items():
                updates[idx]["collation"] = coll
        elif kind == 11:  # ENUM_AND_SET_COLUMN_CHARSET
            assign(enum_set, "collation", _packed_list(value))
        elif kind == 12:  # COLUMN_VISIBILITY
            assign([c.index for c in columns], "visible", _bits_msb(value, len(columns)))
        elif kind == 13:  # VECTOR_DIMENSIONALITY
            assign(vectors, "vector_dimensions", _packed_list(value))
        # Unknown kinds are skipped: their length is known, later servers may add more.
    return [replace(c, **updates[c.index]) if updates[c.index] else c for c in columns]


def may_hide_vectors(columns) -> bool:
    """True when a MariaDB 11.7+ TABLE_MAP may hold VECTOR columns: binary VARCHARs of 4n bytes."""
    return any(c.type == T.VARCHAR and c.collation in (BINARY_COLLATION, None) and c.meta and not c.meta % 4
               for c in columns)


def _as_vector(column: Column, dimensions: int | None) -> Column:
    """``column`` as the VECTOR(dimensions) a schema says it is, when the TABLE_MAP logged it as MariaDB
    does (a binary VARCHAR of 4 * dimensions bytes; meta becomes the length prefix's size); else unchanged."""
    if not dimensions or column.type != T.VARCHAR or column.meta != 4 * dimensions \
            or column.collation not in (BINARY_COLLATION, None):
        return column
    return replace(column, type=T.VECTOR, meta=1 if column.meta < 256 else 2, vector_dimensions=dimensions)


def apply_schema(columns: tuple[Column, ...], schema: TableSchema) -> tuple[Column, ...]:
    """Fill what the TABLE_MAP did not carry from a schema source; metadata wins, but a binary VARCHAR
    the schema calls VECTOR(n) becomes a VECTOR (MariaDB logs nothing else that would say so).

    Raises:
        EventDecodeError: when the schema does not agree with the TABLE_MAP (:meth:`TableSchema.agrees`:
            it describes another version of the table; the caller must refresh it).
    """
    if not schema.agrees(columns):
        raise EventDecodeError(f"schema source's {len(schema.names)} columns do not fit the binlog's TABLE_MAP "
                               f"({len(columns)} columns)")
    out = []
    for c in columns:
        i = c.index
        out.append(replace(
            c,
            name=c.name if c.name is not None else schema.names[i],
            unsigned=c.unsigned if c.unsigned is not None else (schema.unsigned[i] if schema.unsigned else None),
            collation=c.collation if c.collation is not None else (schema.collations[i] if schema.collations else None),
            enum_values=c.enum_values or (schema.enum_values[i] if schema.enum_values else None),
            set_values=c.set_values or (schema.set_values[i] if schema.set_values else None),
        ))
        if schema.vector_dimensions:
            out[-1] = _as_vector(out[-1], schema.vector_dimensions[i])
    return tuple(out)
