"""Column facts from information_schema, for primaries that log no TABLE_MAP metadata.

The cache is filled on a connection of its own, when a table is first seen,
and emptied by any DDL statement in the stream. The decoder only ever looks
up the cache (no SQL inside decoding); the daemon's consumer awaits
:meth:`SchemaCache.fetch` for a missing table and decodes the TABLE_MAP again,
while the reader task keeps receiving events behind it.
"""

from __future__ import annotations

import re

from binlogd.protocol.tablemap import TableSchema

_DDL = re.compile(r"^(?:\s|/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)*(ALTER|CREATE|DROP|RENAME|TRUNCATE)\b",
                  re.IGNORECASE | re.DOTALL)
_VALUES = re.compile(r"'((?:[^']|'')*)'")
_DIMENSIONS = re.compile(r"\((\d+)\)")


def is_ddl(statement: str) -> bool:
    """True for statements that may change a table's columns."""
    return bool(_DDL.match(statement))


def _value_names(column_type: str) -> tuple[str, ...]:
    return tuple(v.replace("''", "'") for v in _VALUES.findall(column_type))


class SchemaCache:
    """``(schema, table) → TableSchema`` with lazy fetching.

    Args:
        connect: an async callable returning a fresh aiomysql connection.
    Fields:
        misses: tables the decoder asked for that are not cached yet.
        fetches: how many information_schema lookups ran.
    """

    def __init__(self, connect):
        self._connect = connect
        self._conn = None
        self._tables: dict[tuple[str, str], TableSchema | None] = {}
        self.misses: set[tuple[str, str]] = set()
        self.fetches = 0

    def lookup(self, schema: str, table: str) -> TableSchema | None:
        """The decoder's schema source: cached facts, or None (and remember the miss)."""
        key = (schema, table)
        if key in self._tables:
            return self._tables[key]
        self.misses.add(key)
        return None

    def invalidate(self) -> None:
        """Forget everything (after DDL)."""
        self._tables.clear()

    async def fetch(self, schema: str, table: str) -> TableSchema | None:
        """Read one table's columns; None if it no longer exists."""
        import pymysql

        self.misses.discard((schema, table))
        self.fetches += 1
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = await self._connect()
                async with self._conn.cursor() as cur:
                    await cur.execute(
                        "SELECT c.COLUMN_NAME, c.COLUMN_TYPE, c.DATA_TYPE, co.ID FROM information_schema.COLUMNS c "
                        "LEFT JOIN information_schema.COLLATIONS co ON co.COLLATION_NAME = c.COLLATION_NAME "
                        "WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION",
                        (schema, table))
                    rows = await cur.fetchall()
                break
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError):
                self._conn = None
                if attempt == 2:
                    raise
        result = None
        if rows:
            kinds = [str(r[2]).lower() for r in rows]
            dims = tuple(int(_DIMENSIONS.search(str(r[1]))[1]) if k == "vector" else None for r, k in zip(rows, kinds))
            result = TableSchema(
                names=tuple(r[0] for r in rows),
                unsigned=tuple("unsigned" in str(r[1]).lower() for r in rows),
                collations=tuple(int(r[3]) if r[3] is not None else None for r in rows),
                enum_values=tuple(_value_names(str(r[1])) if k == "enum" else None for r, k in zip(rows, kinds)),
                set_values=tuple(_value_names(str(r[1])) if k == "set" else None for r, k in zip(rows, kinds)),
                vector_dimensions=dims if any(dims) else None,
            )
        self._tables[(schema, table)] = result
        return result

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
