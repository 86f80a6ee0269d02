"""A table's rows as snapshot change events: its description, keyset chunks, and values in README's JSON forms.

The pieces the initial snapshot (:mod:`binlogd.daemon.snapshot.initial`) uses, and the incremental one can:

- :func:`describe`: a table's columns (information_schema.COLUMNS, invisible ones too), its primary key
  (information_schema.STATISTICS) and row estimate (information_schema.TABLES);
- :func:`read_chunk`: one chunk, on a given connection, in key order after a given key:
  ``WHERE k1 >= v1 AND (k1 > v1 OR (k1 = v1 AND k2 > v2)) ORDER BY k1, k2 LIMIT n`` (the row comparison
  ``(k1, k2) > (v1, v2)`` spelled so that every server ranges over the key). The server compares the keys,
  in each column's collation; Python never orders them;
- :meth:`TableInfo.changes`: the rows as ``op: "read"`` change events, values converted from the text
  protocol to the forms the stream gives the same row (README "Values").

The connection must return raw text values: :func:`raw_connection` sets that up (no PyMySQL converters,
``time_zone = '+00:00'`` so TIMESTAMPs read in UTC, utf8mb4).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import orjson

from binlogd.protocol.decoder import version_tuple
from binlogd.protocol.values import float32

INT_TYPES = frozenset(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"))
BYTE_TYPES = frozenset(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                    "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                    "geometrycollection"))
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _bit(value: bytes) -> int:
    return int.from_bytes(value, "big")


def _set(value: str) -> list:
    return value.split(",") if value else []


def _text(value):
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def vector_values(value: bytes) -> list:
    return [float32(x) for x in struct.unpack(f"<{len(value) // 4}f", value)]


def _converter(data_type: str):
    """The conversion of a text-protocol value (str, or bytes for binary columns) of ``data_type``; None: as is."""
    if data_type in INT_TYPES:
        return int
    if data_type == "double":
        return float
    if data_type == "float":
        return lambda v: float32(float(v))
    if data_type == "bit":
        return _bit
    if data_type == "set":
        return _set
    if data_type == "json":  # MySQL's JSON (MariaDB's is LONGTEXT: a string, as the stream gives it)
        return orjson.loads
    if data_type == "vector":
        return vector_values
    if data_type in BYTE_TYPES:
        return None   # bytes: serialised as base64
    return _text      # DECIMAL (exact text with its scale), temporal (UTC for TIMESTAMP), ENUM, text


@dataclass
class TableInfo:
    """One table as the snapshot reads it.

    Fields:
        schema, table: its name.
        columns: column names in table order (invisible columns too).
        types: information_schema DATA_TYPE of each column (lower case).
        key: the primary key's column names in key order; () without one.
        rows_estimate: information_schema.TABLES.TABLE_ROWS (an estimate for InnoDB), 0 when unknown.
    """

    schema: str
    table: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    key: tuple[str, ...] = ()
    rows_estimate: int = 0
    _convert: list = field(default_factory=list, repr=False)
    _key_at: tuple[int, ...] = field(default=(), repr=False)

    def __post_init__(self):
        self._convert = [_converter(t) for t in self.types]
        self._key_at = tuple(self.columns.index(k) for k in self.key)

    @property
    def name(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"

    @property
    def integer_key(self) -> bool:
        """Whether the primary key is one integer column (what key ranges split)."""
        return len(self.key) == 1 and self.types[self._key_at[0]] in INT_TYPES

    def row(self, raw: tuple) -> dict:
        """One text-protocol row as ``{column: value}`` in README's JSON forms (bytes stay bytes: base64 later)."""
        return {name: (value if conv is None or value is None else conv(value))
                for name, conv, value in zip(self.columns, self._convert, raw)}

    def last_key(self, raw: tuple) -> list:
        """The primary key of a raw row, JSON-safe for the checkpoint (bytes as ``{"hex": …}``)."""
        return [{"hex": v.hex()} if isinstance(v, bytes) else v for v in (raw[i] for i in self._key_at)]

    def changes(self, rows: list, source: dict, ts: int, first: int, prefix: str):
        """The rows as change events ``{"op": "read", "schema", "table", "before": None, "after", "ts",
        "source": {**source, "row", "id"}}``; ``row`` counts from ``first``, ``id`` is ``<prefix>:<row>``."""
        schema, table = self.schema, self.table
        for index, raw in enumerate(rows, first):
            yield {"op": "read", "schema": schema, "table": table, "before": None, "after": self.row(raw),
                   "ts": ts, "source": {**source, "row": index, "id": f"{prefix}:{index}"}}

    def chunk_sql(self, after: list | None, limit: int | None, escape, select: str | None = None,
                  upto: list | None = None) -> str:
        """The SELECT of the chunk after key ``after`` (None: from the first key) of at most ``limit`` rows
        (None: every row, unordered for a table without a key), up to key ``upto`` (None: to the last; one-column
        keys only). ``escape(str) -> str`` quotes a string literal; ``select``: the select list (default: every
        column).

        Raises:
            ValueError: ``after`` or ``upto`` does not fit the key (a checkpoint from another table definition).
        """
        select = select or self.select_list()
        sql = f"SELECT {select} FROM {quote_name(self.schema)}.{quote_name(self.table)}"
        if self.key:
            cols, where = [quote_name(k) for k in self.key], []
            if after is not None:
                if len(after) != len(self.key):
                    raise ValueError(f"key {after!r} does not fit {self.name}'s primary key {self.key}")
                lits = [self._literal(i, v, escape) for i, v in zip(self._key_at, after)]
                terms = [" AND ".join([*(f"{c} = {v}" for c, v in zip(cols[:n], lits[:n])), f"{cols[n]} > {lits[n]}"])
                         for n in range(len(cols))]
                where.append(f"{cols[0]} >= {lits[0]} AND ({' OR '.join(f'({t})' for t in terms)})")
            if upto is not None:
                if len(upto) != 1 or len(self.key) != 1:
                    raise ValueError(f"key range end {upto!r} does not fit {self.name}'s primary key {self.key}")
                where.append(f"{cols[0]} <= {self._literal(self._key_at[0], upto[0], escape)}")
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += f" ORDER BY {', '.join(cols)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return sql

    def select_list(self) -> str:
        """Every column, FLOAT as DOUBLE (the text protocol shows a FLOAT with 6 digits only; as a DOUBLE it is
        exact, and :func:`float32` gives the shortest text of it, as the stream does) and YEAR as a number (its
        text of 0 is ``0000``, which is no JSON number)."""
        cast = {"float": " + 0e0", "year": " + 0"}
        return ", ".join(f"({quote_name(c)}{cast[t]})" if t in cast else quote_name(c)
                         for c, t in zip(self.columns, self.types))

    def _literal(self, column: int, value, escape) -> str:
        """A checkpointed key value as an SQL literal of its column."""
        if isinstance(value, dict):
            return "X'" + bytes.fromhex(value["hex"]).hex() + "'"
        if isinstance(value, bytes):
            return "X'" + value.hex() + "'"
        text = str(value)
        if self.types[column] in INT_TYPES or self.types[column] in ("decimal", "double", "float"):
            if not _NUMBER.fullmatch(text):
                raise ValueError(f"key value {text!r} of {self.name} is not a number")
            return text
        return escape(text)


async def describe(conn, schema: str, table: str) -> TableInfo | None:
    """The table's :class:`TableInfo`, or None when it does not exist (any more) as a base table.

    Raises:
        pymysql.err.Error, OSError: a query failed.
    """
    async with conn.cursor() as cur:
        await cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                          "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
        columns = [(_text(n), _text(t).lower()) for n, t in await cur.fetchall()]
        await cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND "
                          "TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", (schema, table))
        key = tuple(_text(r[0]) for r in await cur.fetchall())
        await cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                          "TABLE_NAME = %s AND TABLE_TYPE = 'BASE TABLE'", (schema, table))
        found = await cur.fetchall()
    if not columns or not found:
        return None
    types = dict(columns)
    if any(types.get(k) in ("enum", "set") for k in key):
        key = ()   # the server orders an ENUM by its index but compares it with text: read in one pass
    estimate = found[0][0]
    return TableInfo(schema, table, tuple(n for n, _ in columns), tuple(t for _, t in columns), key,
                     int(estimate) if estimate is not None else 0)


async def raw_connection(conn) -> None:
    """Make an aiomysql connection return text-protocol values as they come (str; bytes for binary columns),
    TIMESTAMPs in UTC, and on MySQL information_schema's row estimates fresh.

    Raises:
        pymysql.err.Error, OSError: a query failed.
    """
    conn.decoders = {}
    server = conn.get_server_info()
    async with conn.cursor() as cur:
        await cur.execute("SET NAMES utf8mb4")
        await cur.execute("SET SESSION time_zone = '+00:00'")
        if "mariadb" not in server.lower() and version_tuple(server) >= (8, 0, 3):
            # row estimates as they are now, not as cached up to a day ago (a new table: 0 rows)
            await cur.execute("SET SESSION information_schema_stats_expiry = 0")
        # backslash escapes in literals (PyMySQL's escaping) and CHAR values without their pad spaces
        await cur.execute("SET SESSION sql_mode = REPLACE(REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', ''), "
                          "'PAD_CHAR_TO_FULL_LENGTH', '')")


async def read_chunk(conn, info: TableInfo, after: list | None, limit: int | None,
                     upto: list | None = None) -> list[tuple]:
    """One chunk of ``info``'s rows after key ``after`` (up to key ``upto``), in key order (see
    :meth:`TableInfo.chunk_sql`), as raw text-protocol tuples; on a connection prepared by :func:`raw_connection`.

    Raises:
        pymysql.err.Error, OSError: the query failed.
    """
    async with conn.cursor() as cur:
        await cur.execute(info.chunk_sql(after, limit, conn.escape, upto=upto))
        return list(await cur.fetchall())

