"""PostgreSQL sink: one row per change in a table, committed with the checkpoint in one transaction.

The table (``binlogd_changes`` by default) is created when missing:

    seq bigserial primary key, change jsonb, source_file text, source_pos bigint, source_row integer,
    gtid text, schema_name text, table_name text, op text, server_id bigint

and ``<table>_checkpoint`` (one row: ``id`` true, ``checkpoint`` jsonb, the checkpoint file's JSON) beside it.
Rows go in with one COPY per commit, kept open across its pieces (so a big transaction streams through and
never sits in memory); a mark ends the COPY, updates the checkpoint row and commits.

The events beyond rows (``[sink] transaction_events``...) go to a table per kind, each created when missing:

    seq bigserial primary key, event jsonb, id text, op text, source_file text, source_pos bigint, gtid text,
    schema_name text, table_name text, server_id bigint

(``id``: the event's identity, :mod:`library.identity`). They are kept in the worker until the mark, then go in
with one COPY per table before the checkpoint row, in the same transaction.
"""

from __future__ import annotations

from binlogd.daemon.sinks.base import SinkError
from binlogd.daemon.sinks.bus import (
    EXIT_AUTH,
    EXIT_CHECKPOINT,
    EXIT_DATA,
    EXIT_MISCONFIGURED,
    EXIT_UNREACHABLE,
    BusSink,
)
from binlogd.daemon.sinks.frames import copy_rows
from binlogd.daemon.sinks.lease import check_fence, fence_query, fence_session
from binlogd.library.checkpointfile import Checkpoint
from binlogd.library.metaevents import KINDS

COLUMNS = {"seq": "bigint", "change": "jsonb", "source_file": "text", "source_pos": "bigint",
           "source_row": "integer", "gtid": "text", "schema_name": "text", "table_name": "text", "op": "text",
           "server_id": "bigint"}
_CREATE = """CREATE TABLE IF NOT EXISTS {t} (seq bigserial PRIMARY KEY, change jsonb NOT NULL,
  source_file text NOT NULL, source_pos bigint NOT NULL, source_row integer NOT NULL, gtid text,
  schema_name text NOT NULL, table_name text NOT NULL, op text NOT NULL, server_id bigint)"""
META_COLUMNS = {"seq": "bigint", "event": "jsonb", "id": "text", "op": "text", "source_file": "text",
                "source_pos": "bigint", "gtid": "text", "schema_name": "text", "table_name": "text",
                "server_id": "bigint"}
_CREATE_META = """CREATE TABLE IF NOT EXISTS {t} (seq bigserial PRIMARY KEY, event jsonb NOT NULL, id text NOT NULL,
  op text NOT NULL, source_file text, source_pos bigint, gtid text, schema_name text, table_name text,
  server_id bigint)"""
_CREATE_CP = ("CREATE TABLE IF NOT EXISTS {c} (id boolean PRIMARY KEY DEFAULT true CHECK (id), "
              "checkpoint jsonb NOT NULL)")


def _text(value) -> bytes:
    """One field in COPY's text format."""
    if value is None:
        return b"\\N"
    text = str(value).encode()
    if b"\\" in text or b"\t" in text or b"\n" in text or b"\r" in text:
        text = text.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")
    return text


def copy_text(piece: list) -> bytes:
    """The COPY text-format lines of a piece's rows (:func:`.frames.copy_rows` per block).

    Args:
        piece: blocks (meta, lines, n) as :meth:`.bus.BusSink._add` makes them.
    """
    out, parts = [], {}  # (file, gtid, schema, table, op, sid) -> their fields, once per piece
    for (schema, table, file, pos, row0, gtid, op, sid, _prefix), lines, n in piece:
        key = (file, gtid, schema, table, op, sid)
        fields = parts.get(key)
        if fields is None:
            fields = parts[key] = (_text(file), b"\t".join((_text(gtid), _text(schema), _text(table), _text(op),
                                                             _text(sid))))
        out.append(copy_rows(lines, n, fields[0], pos, row0, fields[1]))
    return b"".join(out)


def meta_text(meta: tuple, lines: bytes) -> bytes:
    """The COPY text-format line of an event beyond rows (a block of one, :meth:`.bus.BusSink.meta`), for a table
    of :data:`META_COLUMNS`' shape (less seq)."""
    schema, table, file, pos, word, gtid, op, sid, prefix = meta
    fields = (f"{prefix}:{word}", op, file, pos, gtid, schema or None, table or None, sid)
    return b"\t".join((lines[:-1].replace(b"\\", b"\\\\"), *map(_text, fields))) + b"\n"


def _ident(table: str):
    """The :class:`psycopg.sql.Identifier` of ``[schema.]name``."""
    from psycopg import sql

    schema, _, name = table.rpartition(".")
    return sql.Identifier(*([schema] if schema else []), name)


class PostgresSink(BusSink):
    """PostgreSQL (``psycopg`` 3, :class:`psycopg.AsyncConnection`).

    Args:
        url: ``postgresql://user[:password]@host:port/db``.
        table: ``[schema.]name`` of the changes table.
        max_change_bytes, format, server_name, events: as :class:`~.bus.BusSink` (events: ``[schema.]name`` of
            the tables).
    """

    KIND = "postgres"

    def __init__(self, url: str, table: str = "binlogd_changes", max_change_bytes: int = 255 << 20, **kw):
        super().__init__(url, max_change_bytes, **kw)
        self.table = table
        self._conn = self._copying = self._copy_cm = self._cursor = None
        self._first = self._last = None  # (schema, table, file, pos, row) of the open COPY's first and last rows
        self._copy_sql = self._save_sql = self._fence_sql = None
        self._meta_sql: dict = {}   # table -> the COPY of events beyond rows into it
        self._meta_rows: dict = {}  # table -> the lines of the events beyond rows written since the last commit

    async def _connect(self) -> None:
        import psycopg
        from psycopg import sql

        schema, _, name = self.table.rpartition(".")
        t = sql.Identifier(*([schema] if schema else []), name)
        c = sql.Identifier(*([schema] if schema else []), f"{name}_checkpoint")
        self._copying = None
        self._conn = conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=10, autocommit=False)
        if self.epoch is not None:  # [ha]: a paused instance must not hold the lease row (FOR SHARE) for long
            await fence_session(conn)
        async with conn.cursor() as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))  # one creator at once
            await cur.execute(sql.SQL(_CREATE).format(t=t))
            await cur.execute(sql.SQL(_CREATE_CP).format(c=c))
            await self._check_shape(cur, self.table, COLUMNS)
            for table in sorted(set(self.events.values())):
                await cur.execute(sql.SQL(_CREATE_META).format(t=_ident(table)))
                await self._check_shape(cur, table, META_COLUMNS)
            await cur.execute(sql.SQL("SELECT checkpoint::text FROM {c} WHERE id").format(c=c))
            row = await cur.fetchone()
        await conn.commit()
        try:
            checkpoint = Checkpoint.parse(row[0]) if row else None
        except ValueError as exc:
            raise SinkError(f"{self.name}: {self.table}_checkpoint does not hold a binlogd checkpoint: {exc}",
                            fatal=True, exit_code=EXIT_CHECKPOINT) from None
        self._copy_sql = sql.SQL("COPY {t} (change, source_file, source_pos, source_row, gtid, schema_name, "
                                 "table_name, op, server_id) FROM STDIN").format(t=t)
        self._save_sql = sql.SQL("INSERT INTO {c} (id, checkpoint) VALUES (true, %s) "
                                 "ON CONFLICT (id) DO UPDATE SET checkpoint = excluded.checkpoint").format(c=c)
        self._fence_sql = fence_query(self.table)
        self._meta_sql = {table: sql.SQL("COPY {t} (event, id, op, source_file, source_pos, gtid, schema_name, "
                                         "table_name, server_id) FROM STDIN").format(t=_ident(table))
                          for table in set(self.events.values())}
        self._meta_rows = {}
        self._use_checkpoint(checkpoint)

    async def _check_shape(self, cur, table: str, columns: dict) -> None:
        """Raises SinkError (fatal, exit 6) when ``table`` lacks one of ``columns`` (name: type) or has it of
        another type."""
        schema, _, name = table.rpartition(".")
        await cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                          "WHERE table_schema = coalesce(nullif(%s, ''), current_schema()) AND table_name = %s",
                          (schema, name))
        have = {n: typ for n, typ in await cur.fetchall()}
        wrong = {n: have.get(n) for n, typ in columns.items() if have.get(n) != typ}
        if wrong:
            why = ", ".join(f"{n} is {typ or 'missing'} (needs {columns[n]})" for n, typ in wrong.items())
            raise SinkError(f"{self.name}: table {table} exists with another shape: {why}",
                            fatal=True, exit_code=EXIT_MISCONFIGURED)

    async def _write(self, piece: list) -> None:
        if self._meta_sql:
            piece = self._keep_meta(piece)
            if not piece:
                return
        if self._copying is None:  # one COPY per commit, open across its pieces: no round trip per piece
            self._cursor = self._conn.cursor()
            self._copy_cm = self._cursor.copy(self._copy_sql)
            self._copying = await self._copy_cm.__aenter__()
            self._first = piece[0][0]
        meta, _lines, n = piece[-1]
        self._last = (*meta[:4], meta[4] + n - 1)
        await self._checked(self._copying.write(copy_text(piece)))

    def _keep_meta(self, piece: list) -> list:
        """Keep the piece's events beyond rows (row0 a str) for the commit; returns its other blocks."""
        rows = []
        for block in piece:
            meta = block[0]
            if meta[4].__class__ is str:
                self._meta_rows.setdefault(self.events[KINDS[meta[6]]], []).append(meta_text(meta, block[1]))
            else:
                rows.append(block)
        return rows

    async def _checked(self, coro) -> None:
        """Await ``coro`` (a COPY step); PostgreSQL refusing a row: fatal SinkError naming the rows of the COPY."""
        import psycopg

        try:
            await coro
        except psycopg.errors.DataError as exc:
            (schema, table, file, pos, row), last = self._first[:5], self._last
            raise SinkError(f"{self.name}: PostgreSQL refused a change of the rows from {schema}.{table} at "
                            f"{file}:{pos} row {row} to {last[0]}.{last[1]} at {last[2]}:{last[3]} row {last[4]}: "
                            f"{str(exc).strip()}", fatal=True, exit_code=EXIT_DATA) from None

    async def _end_copy(self) -> None:
        if self._copying is not None:
            cm, cursor, self._copying = self._copy_cm, self._cursor, None
            try:
                await self._checked(cm.__aexit__(None, None, None))
            finally:
                await cursor.close()

    async def _commit(self, checkpoint: bytes | None) -> None:
        await self._end_copy()
        if self._meta_rows:
            kept, self._meta_rows = self._meta_rows, {}
            async with self._conn.cursor() as cur:
                for table, lines in kept.items():
                    async with cur.copy(self._meta_sql[table]) as copy:
                        await copy.write(b"".join(lines))
        if self.epoch is not None:  # the lease row locked until COMMIT: no takeover in between
            await check_fence(self._conn, self._fence_sql, self.epoch, self.name)
        if checkpoint is not None:
            async with self._conn.cursor() as cur:
                await cur.execute(self._save_sql, (checkpoint.decode(),))
        await self._conn.commit()

    async def _disconnect(self) -> None:
        self._copying, self._meta_rows = None, {}  # dies with the connection
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()  # an open transaction is rolled back

    def _error_of(self, exc: Exception) -> SinkError:
        import psycopg

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        state = getattr(exc, "sqlstate", None)
        if state in ("28P01", "28000") or "password authentication failed" in text \
                or "no password supplied" in text:
            return SinkError(f"{self.name}: authentication failed: {text}", fatal=True, exit_code=EXIT_AUTH)
        if isinstance(exc, psycopg.OperationalError) or isinstance(exc, OSError):
            return SinkError(f"{self.name}: unreachable: {text}", exit_code=EXIT_UNREACHABLE)
        return SinkError(f"{self.name}: {text}")
