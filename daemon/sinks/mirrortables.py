"""The mirror's PostgreSQL side: its tables (created, checked, changed by DDL) and row changes applied in batches.

Runs on the mirror sink's worker loop, inside the one open PostgreSQL transaction that the next mark commits.
"""

from __future__ import annotations

import re
from operator import itemgetter

from binlogd.daemon.sinks.mirrorddl import DdlError, added_default, create_sql, literal, pg_columns, same_shape
from binlogd.library import textcopy
from binlogd.library.pgtypes import converter, pg_text, pg_type, quote_ident
from binlogd.library.schema import changes as D
from binlogd.library.schema.catalog import DROPPED, Catalog
from binlogd.library.schema.model import TableDef

META = "binlogd_mirror_tables"
CHECKPOINT = "binlogd_mirror_checkpoint"
CREATE_META = (f"CREATE TABLE IF NOT EXISTS {META} (mysql_schema text, mysql_table text, definition jsonb NOT NULL, "
               "PRIMARY KEY (mysql_schema, mysql_table))",
               f"CREATE TABLE IF NOT EXISTS {CHECKPOINT} (id boolean PRIMARY KEY DEFAULT true CHECK (id), "
               "checkpoint jsonb NOT NULL)")
_TRUNCATE = re.compile(r"\s*TRUNCATE\s+(?:TABLE\s+)?((?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)"
                       r"\s*;?\s*$", re.I | re.S)
#: Types whose values COPY takes as psycopg writes them (:func:`plain`).
PLAIN = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "year", "float", "double", "enum",
                   "char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
DATES = frozenset({"date", "datetime", "timestamp"})
_COPY_KINDS = {**dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "year", "float",
                                "double", "time"), textcopy.RAW),
               **dict.fromkeys(("enum", "char", "varchar", "tinytext", "text", "mediumtext", "longtext"),
                               textcopy.TEXT),
               **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), textcopy.BYTEA),
               "date": textcopy.DATE, "datetime": textcopy.DATE, "timestamp": textcopy.UTC}
SET_ROWS = 64  # a run of at least this many updates or deletes by distinct, unchanged keys is applied set-wise
_INPLACE = (D.AddColumn, D.DropColumn, D.RenameColumn, D.ChangeColumn, D.RenameTo, D.Charset)


class ShapeError(Exception):
    """A PostgreSQL table that is not what the mirror expects (exit 6)."""


class DataError(Exception):
    """A row change the mirror cannot apply (exit 7)."""


def truncated(query: str, db: str) -> tuple[str, str] | None:
    """The table a TRUNCATE statement empties, else None."""
    m = _TRUNCATE.match(query)
    if not m:
        return None
    parts = [p.strip().strip("`").replace("``", "`") for p in re.split(r"`?\s*\.\s*`?(?=(?:[^`]*`[^`]*`)*[^`]*$)",
                                                                        m.group(1))]
    return (parts[0], parts[1]) if len(parts) == 2 else (db, parts[0])


class Tables:
    """The mirrored tables' definitions and the SQL that keeps them.

    Args:
        schema_map: MySQL schema → PostgreSQL schema (default: the same name).
    Fields:
        defs: (MySQL schema, table) → TableDef of each mirrored table, as committed with the rows.
        json_text: JSON values are their documents' text (the source is MariaDB).
    """

    def __init__(self, schema_map: dict[str, str]):
        self.schema_map = schema_map
        self.defs: dict[tuple[str, str], TableDef] = {}
        self.json_text = False
        self._cols: dict[tuple[str, str], dict] = {}
        self._conv: dict[tuple, dict] = {}
        self._sql: dict[tuple, str] = {}

    def qualified(self, name: tuple[str, str]) -> str:
        """The quoted PostgreSQL name of MySQL table ``name``."""
        return f"{quote_ident(self.schema_map.get(name[0], name[0]))}.{quote_ident(name[1])}"

    async def load(self, cur) -> None:
        """Read the mirrored tables' definitions."""
        for stmt in CREATE_META:
            await cur.execute(stmt)
        await cur.execute(f"SELECT mysql_schema, mysql_table, definition FROM {META}")
        self.defs = {(s, t): TableDef.from_json(s, t, d) for s, t, d in await cur.fetchall()}
        self._cols.clear()
        self._conv.clear()
        self._sql.clear()

    async def _save(self, cur, name, table: TableDef | None) -> None:
        import json

        self._cols.pop(name, None)
        self._conv.clear()
        self._sql.clear()
        await cur.execute(f"DELETE FROM {META} WHERE mysql_schema = %s AND mysql_table = %s", name)
        if table is None:
            self.defs.pop(name, None)
            return
        self.defs[name] = table
        await cur.execute(f"INSERT INTO {META} VALUES (%s, %s, %s::jsonb)", (*name, json.dumps(table.to_json())))

    # ------------------------------------------------------------------ tables
    async def ensure(self, cur, table: TableDef, keys_known: bool) -> None:
        """Make ``table`` (as a TABLE_MAP or the schema history describes it) mirrored: created when new, else
        checked. Raises: ShapeError, DdlError."""
        name = (table.schema, table.table)
        held = self.defs.get(name)
        if held is not None:
            if not same_shape(held, table, keys_known):
                raise ShapeError(f"{name[0]}.{name[1]}: the source's table ({_describe(table)}) is not the mirrored "
                                 f"one ({_describe(held)}); a DDL the mirror did not follow?")
            return
        pg_schema = self.schema_map.get(name[0], name[0])
        await cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(pg_schema)}")
        await cur.execute("SELECT to_regclass(%s)", (self.qualified(name),))
        if (await cur.fetchone())[0] is not None:
            await self._check_existing(cur, name, table)
        else:
            await cur.execute(create_sql(self.qualified(name), table))
        await self._save(cur, name, table)

    async def _check_existing(self, cur, name, table: TableDef) -> None:
        await cur.execute(create_sql("pg_temp.binlogd_shape", table))
        shape = ("SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute WHERE attrelid = "
                 "to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum")
        await cur.execute(shape, ("pg_temp.binlogd_shape",))
        want = await cur.fetchall()
        await cur.execute(shape, (self.qualified(name),))
        have = await cur.fetchall()
        await cur.execute("DROP TABLE pg_temp.binlogd_shape")
        if want != have:
            raise ShapeError(f"table {self.qualified(name)} exists in PostgreSQL with another shape: "
                             f"{_cols(have)}, not {_cols(want)}")

    async def truncate(self, cur, name) -> None:
        if name in self.defs:
            await cur.execute(f"TRUNCATE {self.qualified(name)}")

    async def ddl(self, cur, change, query: str) -> None:
        """Apply one DDL change record (:mod:`library.schema.changes`) to the mirrored tables it names.
        Raises: DdlError (nothing of it is committed: the transaction fails with it)."""
        if isinstance(change, D.Unparsed):
            hit = [n for n in change.names if n in self.defs] if change.names else list(self.defs)
            if hit:
                raise DdlError(f"cannot parse it ({change.reason})")
            return
        if isinstance(change, D.DropTables):
            for name in change.names:
                if name in self.defs:
                    await cur.execute(f"DROP TABLE {self.qualified(name)}")
                    await self._save(cur, name, None)
        elif isinstance(change, D.DropDatabase):
            for name in [n for n in self.defs if n[0] == change.name]:
                await cur.execute(f"DROP TABLE {self.qualified(name)}")
                await self._save(cur, name, None)
        elif isinstance(change, D.RenameTables):
            for old, new in change.pairs:
                if old in self.defs:
                    await self._rename(cur, old, new, self.defs[old])
        elif isinstance(change, D.AlterTable) and change.name in self.defs:
            await self._alter(cur, change, query)

    async def _rename(self, cur, old, new, table: TableDef) -> None:
        if new in self.defs:
            raise DdlError(f"{new[0]}.{new[1]} is mirrored already")
        src_schema, dst_schema = (self.schema_map.get(n[0], n[0]) for n in (old, new))
        q = self.qualified(old)
        if src_schema != dst_schema:
            await cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(dst_schema)}")
            await cur.execute(f"ALTER TABLE {q} SET SCHEMA {quote_ident(dst_schema)}")
            q = f"{quote_ident(dst_schema)}.{quote_ident(old[1])}"
        if old[1] != new[1]:
            await cur.execute(f"ALTER TABLE {q} RENAME TO {quote_ident(new[1])}")
        await self._save(cur, old, None)
        await self._save(cur, new, TableDef(new[0], new[1], table.columns, table.primary_key, table.charset))

    async def _alter(self, cur, change: D.AlterTable, query: str) -> None:
        name, old = change.name, self.defs[change.name]
        catalog = Catalog()
        catalog.set(name, old)
        out = catalog.apply(change)
        target = next((n for n, s in out.items() if s != DROPPED), name)
        new = out.get(target)
        if not isinstance(new, TableDef):
            raise DdlError("the table's new definition cannot be followed")
        pg_columns(new)  # every new type has a mapping (DdlError otherwise)
        inplace = all(isinstance(a, _INPLACE) and getattr(a, "position", None) is None for a in change.actions)
        q = self.qualified(name)
        if inplace:
            await self._inplace(cur, q, change.actions, new, query)
        else:
            await self._rebuild(cur, q, name, old, new, change.actions, query)
        if target != name:
            await self._rename(cur, name, target, new)
        else:
            await self._save(cur, name, new)

    async def _inplace(self, cur, q: str, actions, new: TableDef, query: str) -> None:
        final = {c.name.lower(): c for c in new.columns}
        for a in actions:
            if isinstance(a, D.AddColumn):
                col = final.get(a.column.name.lower(), a.column)
                lit = literal(col, _default(query, col))
                await cur.execute(f"ALTER TABLE {q} ADD COLUMN {quote_ident(col.name)} {pg_type(col)} DEFAULT {lit}"
                                  f"{'' if col.nullable else ' NOT NULL'}")
                await cur.execute(f"ALTER TABLE {q} ALTER COLUMN {quote_ident(col.name)} DROP DEFAULT")
            elif isinstance(a, D.DropColumn):
                await cur.execute(f"ALTER TABLE {q} DROP COLUMN {quote_ident(a.name)}")
            elif isinstance(a, D.RenameColumn):
                await cur.execute(f"ALTER TABLE {q} RENAME COLUMN {quote_ident(a.old)} TO {quote_ident(a.new)}")
            elif isinstance(a, D.ChangeColumn):
                await self._change_column(cur, q, a, final.get(a.column.name.lower(), a.column))

    async def _change_column(self, cur, q: str, a: D.ChangeColumn, col) -> None:
        await cur.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                          "AND attname = %s AND NOT attisdropped", (q, a.old))
        row = await cur.fetchone()
        if row is None:
            raise DdlError(f"column {a.old!r} is not in the mirrored table")
        c = quote_ident(a.old)
        await cur.execute(f"ALTER TABLE {q} ALTER COLUMN {c} TYPE {pg_type(col)} USING {c}::text::{pg_type(col)}")
        await cur.execute(f"ALTER TABLE {q} ALTER COLUMN {c} {'DROP' if col.nullable else 'SET'} NOT NULL")
        if a.old != col.name:
            await cur.execute(f"ALTER TABLE {q} RENAME COLUMN {c} TO {quote_ident(col.name)}")

    async def _rebuild(self, cur, q: str, name, old: TableDef, new: TableDef, actions, query: str) -> None:
        """A new table in the new column order, filled from the old one, under the old name."""
        origin = {c.name.lower(): quote_ident(c.name) for c in old.columns}
        final = {c.name.lower(): c for c in new.columns}
        for a in actions:
            if isinstance(a, D.AddColumn):
                col = final.get(a.column.name.lower(), a.column)
                origin[col.name.lower()] = literal(col, _default(query, col))
            elif isinstance(a, D.DropColumn):
                origin.pop(a.name.lower(), None)
            elif isinstance(a, D.RenameColumn):
                origin[a.new.lower()] = origin.pop(a.old.lower())
            elif isinstance(a, D.ChangeColumn):
                col = final.get(a.column.name.lower(), a.column)
                expr = origin.pop(a.old.lower())
                before = next((c for c in old.columns if quote_ident(c.name) == expr), None)
                same = before is not None and pg_type(before) == pg_type(col)
                origin[col.name.lower()] = expr if same else f"{expr}::text::{pg_type(col)}"
        pg_schema = quote_ident(self.schema_map.get(name[0], name[0]))
        tmp = f"{pg_schema}.{quote_ident('binlogd_rebuild')}"
        await cur.execute(f"DROP TABLE IF EXISTS {tmp}")
        await cur.execute(create_sql(tmp, new))
        cols = ", ".join(quote_ident(c.name) for c in new.columns)
        exprs = ", ".join(origin[c.name.lower()] for c in new.columns)
        await cur.execute(f"INSERT INTO {tmp} ({cols}) SELECT {exprs} FROM {q}")
        await cur.execute(f"DROP TABLE {q}")
        await cur.execute(f"ALTER TABLE {tmp} RENAME TO {quote_ident(name[1])}")

    # ------------------------------------------------------------------ rows
    def columns(self, name) -> dict:
        """Column name → ColumnDef of a mirrored table."""
        cols = self._cols.get(name)
        if cols is None:
            cols = self._cols[name] = {c.name: c for c in self.defs[name].columns}
        return cols

    async def apply(self, conn, name, op: str, rows: list) -> None:
        """Apply consecutive row changes of one table and kind (``rows``: (before, after, id) with the same
        columns). Raises: DataError (a value PostgreSQL cannot hold, or a row the mirror lacks)."""
        if name not in self.defs:
            raise DataError(f"{name[0]}.{name[1]} is not mirrored (no TABLE_MAP before its rows)")
        if op in ("insert", "read"):
            await self._insert(conn, name, rows)
            return
        q = self.qualified(name)
        table = self.defs[name]
        before0 = rows[0][0]
        keys = [k for k in table.primary_key if k in before0] if table.primary_key else []
        if table.primary_key and len(keys) != len(table.primary_key):
            raise DataError(f"{name[0]}.{name[1]}: the before image lacks primary-key columns")
        if not keys:
            await self._each_apply(conn, name, q, op, keys, rows)
            return
        start = 0
        while start < len(rows):
            stop = _set_run(rows, start, keys, op)
            if stop - start >= SET_ROWS:
                await self._set_apply(conn, name, q, op, keys, rows[start:stop])
            else:  # a short run, or the row that ended one (a repeated or changed key): row by row
                stop = max(stop, start + 1)
                await self._each_apply(conn, name, q, op, keys, rows[start:stop])
            start = stop

    async def copy_lines(self, conn, name, data: bytes, prefix: str, first: int) -> None:
        """Insert the rows of ``data``, change-event JSON lines of table ``name`` (a snapshot chunk, ids
        ``<prefix>:<first + i>``), by one COPY. Only each line's ``after`` object is parsed: it starts at the
        same place in every line (the envelope's keys before it are the same) and ends before the line's last
        ``,"ts":`` (``source`` has no ``ts``; a string's quotes are escaped). Dates go as they are when no
        value in the chunk can be a zero date. Raises: as :meth:`apply`."""
        import orjson

        lines, loads = data.splitlines(), orjson.loads
        start = lines[0].index(b'"after":') + 8
        afters = loads(b"[" + b",".join([line[start:line.rindex(b',"ts":')] for line in lines]) + b"]")
        if afters[0] != loads(lines[0])["after"]:  # another layout: every line parsed whole
            afters = [loads(line)["after"] for line in lines]
        if name not in self.defs:
            raise DataError(f"{name[0]}.{name[1]} is not mirrored (no table definition before its rows)")
        rows = [(None, a, f"{prefix}:{i}") for i, a in enumerate(afters, first)]
        await self._insert(conn, name, rows, b"-00" not in data and b'"0000-' not in data)

    async def copy_text(self, conn, name, columns: tuple, data: bytes) -> None:
        """Insert ``data``, rows of table ``name`` in COPY's text format with the values of ``columns``, by one
        COPY. Raises: DataError (the table is not mirrored), psycopg.DataError (PostgreSQL refused a value)."""
        if name not in self.defs:
            raise DataError(f"{name[0]}.{name[1]} is not mirrored (no table definition before its rows)")
        async with conn.cursor() as cur:
            async with cur.copy(f"COPY {self.qualified(name)} ({', '.join(quote_ident(c) for c in columns)}) "
                                "FROM STDIN") as copy:
                await copy.write(data)

    async def _insert(self, conn, name, rows: list, dates: bool = False) -> None:
        """COPY ``rows`` (inserts) into table ``name``; ``dates``: their dates need no conversion (no zero
        dates; a TIMESTAMP's text is UTC, the session's time zone)."""
        names = list(rows[0][1])
        sql = f"COPY {self.qualified(name)} ({', '.join(quote_ident(k) for k in names)}) FROM STDIN"
        await self._copy(conn, sql, name, rows, [(1, k) for k in names], dates)

    async def _each_apply(self, conn, name, q: str, op: str, keys: list, rows: list) -> None:
        """One statement per row (pipelined): by key, or for a keyless table the ctid of one equal row."""
        before0, after0 = rows[0][0], rows[0][1] or {}
        where_cols = keys or list(before0)
        sql = self._row_sql(name, q, op, tuple(after0), tuple(where_cols), bool(keys))
        spec = ([(1, k) for k in after0] if op == "update" else []) + [(0, k) for k in where_cols]
        params = self._values(name, rows, spec)
        async with conn.cursor() as cur:
            await cur.executemany(sql, params)
            _check_count(name, op, rows, cur.rowcount)

    async def _set_apply(self, conn, name, q: str, op: str, keys: list, rows: list) -> None:
        """Rows with distinct keys, none changed: COPY into a temporary table, then one UPDATE ... FROM or
        DELETE ... USING joined on the key."""
        sets = _changed(rows, [k for k in rows[0][1] if k not in keys]) if op == "update" else []
        names = keys + sets
        listed = ", ".join(quote_ident(k) for k in names)
        async with conn.cursor() as cur:
            await cur.execute(f"CREATE TEMP TABLE binlogd_batch ON COMMIT DROP AS SELECT {listed} FROM {q} "
                              "WITH NO DATA")
            spec = [(0, k) for k in keys] + [(1, k) for k in sets]
            await self._copy(conn, f"COPY binlogd_batch ({listed}) FROM STDIN", name, rows, spec)
            on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in keys)
            if op == "update":
                assign = ", ".join(f"{quote_ident(k)} = s.{quote_ident(k)}" for k in sets)
                await cur.execute(f"UPDATE {q} AS t SET {assign} FROM binlogd_batch s WHERE {on}")
            else:
                await cur.execute(f"DELETE FROM {q} AS t USING binlogd_batch s WHERE {on}")
            _check_count(name, op, rows, cur.rowcount)
            await cur.execute("DROP TABLE binlogd_batch")

    def _row_sql(self, name, q: str, op: str, sets: tuple, where: tuple, keyed: bool) -> str:
        key = (name, op, sets, where, keyed)
        sql = self._sql.get(key)
        if sql is None:
            cols = self.columns(name)
            cond = " AND ".join(f"{quote_ident(k)} {'=' if keyed else 'IS NOT DISTINCT FROM'} %s::{pg_type(cols[k])}"
                                for k in where)
            if not keyed:
                cond = f"ctid = (SELECT ctid FROM {q} WHERE {cond} LIMIT 1)"
            if op == "update":
                assign = ", ".join(f"{quote_ident(k)} = %s::{pg_type(cols[k])}" for k in sets)
                sql = f"UPDATE {q} SET {assign} WHERE {cond}"
            else:
                sql = f"DELETE FROM {q} WHERE {cond}"
            self._sql[key] = sql
        return sql

    async def _copy(self, conn, sql: str, name, rows: list, spec: list, dates: bool = False) -> None:
        """COPY the values ``spec`` names of ``rows`` (:meth:`_tuples`, ``dates`` as there). Raises: DataError (a
        value PostgreSQL cannot hold, named with its column and change), psycopg.DataError (one it refused)."""
        import psycopg

        values = self._tuples(name, rows, spec, dates)
        try:
            async with conn.cursor() as cur:
                async with cur.copy(sql) as copy:
                    for v in values:
                        await copy.write_row(v)
        except psycopg.DataError:
            self._check(name, rows, spec)
            raise

    def _converters(self, name) -> dict:
        key = (name, self.json_text)
        conv = self._conv.get(key)
        if conv is None:
            conv = self._conv[key] = {c.name: converter(c, self.json_text) for c in self.defs[name].columns}
        return conv

    def _tuples(self, name, rows: list, spec: list, dates: bool = False) -> list:
        """The values ``spec`` names ((0 before / 1 after, column) pairs, the before ones first) of each row, as
        psycopg's COPY takes them: a value of a :data:`PLAIN` type as it is (its Python text is PostgreSQL's),
        the others as PostgreSQL text; ``dates``: a DATE, DATETIME or TIMESTAMP too (no zero dates among them).
        Raises: DataError naming the column and change."""
        cols, conv = self.columns(name), self._converters(name)
        try:
            special = [(i, conv[k]) for i, (_side, k) in enumerate(spec)
                       if not (plain(cols[k]) or dates and cols[k].type in DATES)]
            after = _getter([k for side, k in spec if side == 1])
            if all(side == 1 for side, _k in spec):
                values = [after(r[1]) for r in rows]
            else:
                before = _getter([k for side, k in spec if side == 0])
                values = [before(r[0]) + after(r[1]) for r in rows]
            if special:
                values = [_convert(v, special) for v in values]
            return values
        except (KeyError, ValueError, TypeError, AttributeError):
            self._check(name, rows, spec)
            raise

    def _values(self, name, rows: list, spec: list) -> list[list]:
        """The PostgreSQL text of each row's values that ``spec`` names: (0 before / 1 after, column) pairs.
        Raises: DataError naming the column and change."""
        conv = self._converters(name)
        try:
            fs = [(side, k, conv[k]) for side, k in spec]
            return [[f(r[side][k]) for side, k, f in fs] for r in rows]
        except (KeyError, ValueError, TypeError, AttributeError):
            self._check(name, rows, spec)
            raise

    def _check(self, name, rows: list, spec: list) -> None:
        """Raises: DataError for the first value of ``rows`` that PostgreSQL's text of it cannot be made of."""
        for r in rows:
            for side, k in spec:
                self._text(self.columns(name), name, k, (r[side] or {}).get(k), r[2], self.json_text)

    @staticmethod
    def _text(cols: dict, name, column: str, value, cid: str, json_text: bool) -> str | None:
        col = cols.get(column)
        if col is None:
            raise DataError(f"{name[0]}.{name[1]}: column {column!r} of change {cid} is not in the mirrored table")
        try:
            return pg_text(col, value, json_text)
        except (ValueError, TypeError) as exc:
            raise DataError(f"{name[0]}.{name[1]} column {column!r}, change {cid}: {exc}") from None


def copy_kinds(table: TableDef, columns) -> bytes | None:
    """The :mod:`library.textcopy` kind of each of ``columns`` (names of ``table``'s columns, as a snapshot reads
    them: FLOAT as a DOUBLE, YEAR as a number, TIMESTAMP in UTC), whose COPY text is then what :func:`pg_text`
    makes of their values; None when a column is not in ``table`` or of a type left to ``pg_text`` (BIT, SET,
    JSON, VECTOR, GEOMETRY, INET, UUID)."""
    cols = {c.name: c for c in table.columns}
    out = []
    for name in columns:
        col = cols.get(name)
        kind = None if col is None else _COPY_KINDS.get(col.type)
        if kind == textcopy.TEXT and col.charset == "binary":
            kind = textcopy.BYTEA
        if kind is None:
            return None
        out.append(kind)
    return bytes(out)


def _set_run(rows: list, start: int, keys: list, op: str) -> int:
    """The end of the run of ``rows`` (all with the same columns) from ``start`` whose keys are distinct and
    unchanged (and, for an update, that set at least one column besides the key)."""
    before_key, seen, n = _getter(keys), set(), len(rows)
    after = rows[start][1]
    if op == "update" and len(after) <= len(keys):
        return start
    moved = [k for k in keys if k in after] if op == "update" else []
    moved_key = _getter(moved)
    for i in range(start, n):
        before, after, _cid = rows[i]
        key = before_key(before)
        if key in seen or moved and moved_key(after) != moved_key(before):
            return i
        seen.add(key)
    return n


def _changed(rows: list, columns: list) -> list:
    """Those of ``columns`` that some row's update changes (a column its before image lacks counts as changed),
    else all of them."""
    changed = [k for k in columns if any(r[0].get(k, r) != r[1][k] for r in rows)]
    return changed or columns


def plain(col) -> bool:
    """Whether psycopg's text of ``col``'s values (README's JSON forms) is what PostgreSQL takes for its type:
    integers, DECIMAL and YEAR, FLOAT and DOUBLE, ENUM, and text in a character set."""
    return col.type in PLAIN and col.charset != "binary"


def _getter(keys: list):
    """A function of a dict giving the tuple of its values at ``keys``."""
    if len(keys) == 1:
        key = keys[0]
        return lambda d: (d[key],)
    return itemgetter(*keys) if keys else lambda d: ()


def _convert(values: tuple, special: list) -> list:
    out = list(values)
    for i, f in special:
        out[i] = f(out[i])
    return out


def _check_count(name, op: str, rows: list, count: int) -> None:
    if count != len(rows):
        raise DataError(f"{name[0]}.{name[1]}: {op} of {len(rows)} rows found {count} in the mirror (from change "
                        f"{rows[0][2]}): the mirror and the source differ")


def _default(query: str, col):
    return added_default(query, col)


def _describe(table: TableDef) -> str:
    cols = ", ".join(f"{n} {t}" for n, t in pg_columns(table))
    return cols + (f"; key {', '.join(table.primary_key)}" if table.primary_key else "; no key")


def _cols(rows) -> str:
    return ", ".join(f"{n} {t}{' not null' if nn else ''}" for n, t, nn in rows) or "no columns"


__all__ = ["CHECKPOINT", "META", "DataError", "ShapeError", "Tables", "truncated"]
