"""Column names for primaries that log no TABLE_MAP names: the schema history, seeded and repaired from the server.

:class:`DaemonSchema` keeps the history file (``[schema] history_path``, by default
``schema-history.jsonl`` beside the checkpoint) and the :class:`binlogd.library.schema.SchemaTracker` that
follows the stream's DDL. The decoder only looks definitions up (no SQL inside decoding). The
consumer hands it every event (:meth:`DaemonSchema.follow`):

- a DDL's history entries are written durably before the event is passed on, so before the
  checkpoint can move past the DDL;
- while the history holds no seed, the first TABLE_MAP of a selected table the decoder asked for and
  the history does not know seeds it from the server, valid from the start of that TABLE_MAP's
  transaction (with FULL row metadata the decoder asks for none, and the server is never asked);
- a TABLE_MAP whose columns came out positional (no definition, or one that does not agree with it)
  makes it read ``SHOW CREATE TABLE`` once; that definition is recorded when it agrees with the
  TABLE_MAP and no DDL naming the table was logged since (``SHOW BINLOG EVENTS``), else the columns
  stay positional and ``binlogd_schema_mismatch_total{schema,table}`` counts it.

Each session starts from the history file at its resume position (:meth:`DaemonSchema.open`), so a
reconnect or a restart after SIGKILL sees the definitions as they were at the checkpoint. A seed's
tables that no DDL logged between its position and the server's current position names are valid from
its position; the others only from that current position (before it they are named by the stream's own
DDL, or positional), and those DDL named while the seed read the definitions not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from binlogd.library.schema import (
    Entry,
    HistoryWriter,
    SchemaHistoryError,
    SchemaTracker,
    TableDef,
    agrees,
    read_history,
)
from binlogd.library.schema.catalog import Catalog
from binlogd.library.schema.history import position_key
from binlogd.library.schema.model import charset_name
from binlogd.library.schema.readddl import read_ddl
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET

from .checkpoint import CheckpointError

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
SCAN_LIMIT = 200_000     # binlog events SHOW BINLOG EVENTS may list to prove no DDL named a table
#: The events :meth:`DaemonSchema.follow` needs to see (the consumer passes only these).
FOLLOWED = frozenset(int(t) for t in (ET.FORMAT_DESCRIPTION, ET.QUERY, ET.QUERY_COMPRESSED, ET.GTID,
                                      ET.ANONYMOUS_GTID, ET.GTID_TAGGED, ET.MARIADB_GTID, ET.TABLE_MAP,
                                      ET.TRANSACTION_PAYLOAD))


_TABLE_MAP, _PAYLOAD, _FDE = int(ET.TABLE_MAP), int(ET.TRANSACTION_PAYLOAD), int(ET.FORMAT_DESCRIPTION)


class SchemaHistoryUnusable(CheckpointError):
    """The schema history file cannot be read: binlogd stops (exit 8) rather than name columns wrongly."""

    fatal = True


def _server_errors() -> tuple:
    import pymysql

    return pymysql.err.Error, OSError


def history_path(configured: str, checkpoint_path: str) -> Path:
    """``[schema] history_path``, or ``schema-history.jsonl`` in the checkpoint's directory when empty."""
    return Path(configured) if configured else Path(checkpoint_path).parent / "schema-history.jsonl"


def _split_use(info: str) -> tuple[str, str]:
    """SHOW BINLOG EVENTS' Info of a QUERY event, ``use `db`; statement`` → (db, statement)."""
    if info.startswith("use `"):
        end = info.find("`; ")
        if end > 0:
            return info[5:end].replace("``", "`"), info[end + 3:]
    return "", info


class ServerSchema:
    """The primary's own account of its tables, on a connection of its own (never the stream's).

    Args:
        connect: an async callable returning a fresh aiomysql connection.
    """

    def __init__(self, connect):
        self._connect = connect
        self._conn = None

    async def _query(self, sql: str, args=None) -> list[tuple]:
        """Run one query (reconnecting once after a lost connection).

        Raises:
            pymysql.err.Error, OSError: the query failed twice, or the server refused it.
        """
        import pymysql

        attempt = 1
        while True:
            try:
                if self._conn is None:
                    self._conn = await self._connect()
                async with self._conn.cursor() as cur:
                    await cur.execute(sql, args)
                    return list(await cur.fetchall())
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError):
                self._conn = None
                if attempt == 2:
                    raise
                attempt = 2

    async def create_table(self, schema: str, table: str) -> TableDef | None:
        """The table as ``SHOW CREATE TABLE`` describes it now; None when it is gone or not understood."""
        import pymysql

        try:
            rows = await self._query(f"SHOW CREATE TABLE `{schema.replace('`', '``')}`.`{table.replace('`', '``')}`")
        except pymysql.err.ProgrammingError:   # no such table (dropped since), or a view
            return None
        if not rows or len(rows[0]) < 2:
            return None
        from binlogd.library.schema.changes import CreateTable

        changes = read_ddl(rows[0][1], schema)
        if len(changes) != 1 or not isinstance(changes[0], CreateTable):
            return None
        catalog = Catalog()
        state = catalog.apply(changes[0]).get((schema, table))
        return state if isinstance(state, TableDef) else None

    async def tables(self, selected) -> tuple[dict[str, str | None], list[tuple[str, str]]]:
        """(database → default charset, [(schema, table)] of base tables) outside the system schemas,
        for which ``selected(schema, table)`` is true."""
        skip = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
        dbs = {name: charset_name(cs) for name, cs in await self._query(
            f"SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA "
            f"WHERE SCHEMA_NAME NOT IN ({skip})")}
        names = [(s, t) for s, t in await self._query(
            f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            f"AND TABLE_SCHEMA NOT IN ({skip}) ORDER BY TABLE_SCHEMA, TABLE_NAME") if selected(s, t)]
        return dbs, names

    async def position(self) -> tuple[str, int]:
        """The primary's current binlog file and position (``SHOW MASTER STATUS``, on MySQL 8.4+ ``SHOW BINARY
        LOG STATUS``)."""
        import pymysql

        try:
            rows = await self._query("SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError:
            rows = await self._query("SHOW BINARY LOG STATUS")
        return str(rows[0][0]), int(rows[0][1])

    async def ddl_tables_since(self, file: str, pos: int, until: tuple[str, int] | None = None,
                               limit: int = SCAN_LIMIT) -> set | None:
        """The tables DDL logged from ``file:pos`` to ``until`` (a (file, pos), excluded; default: the end of the
        binlog) names (``(db, "*")``: a whole database); None when that is not known (an unreadable statement,
        or more than ``limit`` events)."""
        from binlogd.library.schema.changes import tables_named

        files = [str(r[0]) for r in await self._query("SHOW BINARY LOGS")]
        end = position_key(*until) if until is not None else None
        names, seen = set(), 0
        for name in files:
            if position_key(name, 0) < position_key(file, 0):
                continue
            if end is not None and position_key(name, 0) > end:
                break
            start, skip = (pos if name == file else 4), 0
            while True:
                rows = await self._query(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT {skip}, 1000", (name,))
                for row in rows:
                    if end is not None and position_key(name, int(row[1])) >= end:
                        return names
                    if str(row[2]).startswith("Query"):
                        db, statement = _split_use(str(row[5] or ""))
                        for change in read_ddl(statement, db):
                            touched = tables_named(change)
                            if touched is None:
                                return None
                            names |= touched
                seen += len(rows)
                if seen > limit:
                    return None
                if len(rows) < 1000:
                    break
                start, skip = int(rows[-1][1]), 1
        return names

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _named(names: set | None, schema: str, table: str) -> bool:
    return names is None or (schema, table) in names or (schema, "*") in names


class DaemonSchema:
    """The daemon's schema source: the history file and its tracker, the server for seeds and repairs.

    Args:
        path: the history file.
        server: a :class:`ServerSchema`.
        selected: ``(schema, table) -> bool``, the tables the daemon delivers (others are not fetched).
        metrics, log: the daemon's.
    Fields:
        tracker: the current session's SchemaTracker (None before :meth:`open`).
    """

    def __init__(self, path: str | os.PathLike, server: ServerSchema, selected, metrics, log):
        self.path = Path(path)
        self.server, self.selected, self.metrics, self.log = server, selected, metrics, log
        self.tracker: SchemaTracker | None = None
        self._writer: HistoryWriter | None = None
        self._tried: set[tuple[str, str]] = set()   # tables whose current state was checked with the server
        self._txn_start = ("", 0)                     # where the current transaction began
        self._seed_due = False      # the history holds no seed: one runs when a table needs it
        self._seed_wanted = False   # the decoder asked for a selected table the history does not know

    def lookup(self, schema: str, table: str):
        """The decoder's schema source (see :meth:`SchemaTracker.lookup`). While a seed is due, a selected
        table it does not know asks for one, which :meth:`follow` then runs."""
        known = self.tracker.lookup(schema, table) if self.tracker is not None else None
        if known is None and self._seed_due and self.selected(schema, table):
            self._seed_wanted = True
        return known

    async def open(self, file: str, pos: int, lazy: bool = False) -> None:
        """Start a session at ``file:pos``: the history as it stands on disk. When it holds no seed yet, it is
        seeded from the server now, or (``lazy``) at the first TABLE_MAP of a selected table that it cannot
        name (:meth:`follow`; with FULL row metadata and no MariaDB VECTOR look-alikes, never).

        A seed the server refuses (no SELECT grant, lost connection) is logged and left for the next session.

        Raises:
            SchemaHistoryUnusable: the history file cannot be read (fatal: exit 8).
            CheckpointError: it cannot be written (the session is retried).
        """
        try:
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._writer = HistoryWriter(self.path)
            entries = read_history(self.path)
        except (SchemaHistoryError, OSError) as exc:
            raise SchemaHistoryUnusable(f"schema history {self.path}: {exc}") from exc
        self.tracker = SchemaTracker(entries, warn=self.log.warning)
        self.tracker.start_at(file, pos)
        self._tried.clear()
        self._txn_start = (file, pos)
        self._seed_due, self._seed_wanted = not any(e.source == "seed" for e in entries), False
        if self._seed_due and not lazy:
            await self._seed_at(file, pos)

    async def _seed_at(self, file: str, pos: int) -> None:
        """Seed the history from the server, valid from ``file:pos`` (where the stream is, or a transaction
        it is in began): the entries written durably, then taken by the tracker.

        Raises:
            CheckpointError: the entries cannot be written.
        """
        self._seed_due = self._seed_wanted = False
        try:
            entries = await self._seed(file, pos)
        except _server_errors() as exc:
            self.log.warning("schema history: cannot seed from the server (%s); columns of tables "
                             "no DDL in the stream defines stay positional", exc)
            return
        self._append(entries)
        self.tracker.extend(entries, file, pos)
        self._tried.clear()

    async def _seed(self, file: str, pos: int) -> list[Entry]:
        """The server's databases and selected tables as seed entries, in position order.

        Each holds from ``file:pos`` when no DDL logged since names it; else from the server's position before
        the definitions were read (``now``) when no DDL logged from there until they were read names it (a
        definition then may be newer than ``now``), and otherwise there is none: the stream's own DDL names it.

        Raises:
            pymysql.err.Error, OSError: the server refused a query or the connection was lost.
        """
        now = await self.server.position()
        dbs, tables = await self.server.tables(self.selected)
        definitions = [(name, await self.server.create_table(*name)) for name in tables]
        racing = set() if await self.server.position() == now else await self._ddl_since(*now)
        late = position_key(*now) > position_key(file, pos)
        named = await self._ddl_since(file, pos, now) if late else set()

        def held_from(schema: str, table: str) -> tuple[str, int] | None:
            if _named(racing, schema, table):
                return None
            return now if late and _named(named, schema, table) else (file, pos)

        entries = [Entry(*at, None, db, None, charset, "seed") for db, charset in dbs.items()
                   if (at := held_from(db, "*")) is not None]
        entries += [Entry(*at, None, *name, definition, "seed") for name, definition in definitions
                    if definition is not None and (at := held_from(*name)) is not None]
        entries.sort(key=lambda e: e.key)
        self.log.info("schema history seeded from the server: %d tables at %s:%d%s", len(tables), file, pos,
                      f" ({sum(e.file == now[0] and e.pos == now[1] for e in entries)} named by later DDL: "
                      f"from {now[0]}:{now[1]})" if late else "")
        return entries

    async def _ddl_since(self, file: str, pos: int, until: tuple[str, int] | None = None) -> set | None:
        """:meth:`ServerSchema.ddl_tables_since`, None (every table may be named) when the server refuses it."""
        try:
            return await self.server.ddl_tables_since(file, pos, until)
        except _server_errors() as exc:   # SHOW BINLOG EVENTS refused: no table is known to be untouched
            self.log.warning("schema history: cannot list the DDL since %s:%d (%s)", file, pos, exc)
            return None

    async def follow(self, event, raw, pos: int, file: str, decoder):
        """Follow one event: record its DDL durably; seed the history when a TABLE_MAP asked for it (see
        :meth:`open`); repair its TABLE_MAPs when they came out positional.

        Returns:
            The event, decoded again when a seed or a repair may have named its columns.
        Raises:
            CheckpointError: the history could not be written (the checkpoint must not move past the DDL).
        """
        tc = event.header.type_code
        if tc != _TABLE_MAP and tc != _PAYLOAD:
            if tc != _FDE:
                self._txn_start = (file, pos)  # a GTID, BEGIN or statement: a repair holds from here on
            entries = self.tracker.observe(event, file, pos + len(raw))
            if entries:
                self._append(list(entries))
                self._tried.difference_update((e.schema, e.table) for e in entries)
            return event
        if self._seed_wanted:
            await self._seed_at(*self._txn_start)
            event = decoder.decode(raw, pos)
        inner = event.events if isinstance(event, E.TransactionPayloadEvent) else (event,)
        repaired = False
        for item in inner:
            if isinstance(item, E.TableMapEvent) and item.columns and item.columns[0].name is None \
                    and self.selected(item.schema, item.table):
                repaired |= await self._repair(item)
        return decoder.decode(raw, pos) if repaired else event

    async def _repair(self, event: E.TableMapEvent) -> bool:
        """Read the table from the server once per state; record it (from the start of this TABLE_MAP's
        transaction) if it fits the TABLE_MAP and no DDL naming it was logged since. Returns whether it was."""
        name, (file, pos) = (event.schema, event.table), self._txn_start
        if name not in self._tried:
            self._tried.add(name)
            try:
                definition = await self.server.create_table(*name)
                fits = definition is not None and agrees(definition, event.columns) \
                    and not _named(await self.server.ddl_tables_since(file, pos), *name)
            except _server_errors() as exc:
                self.log.warning("schema history: cannot read %s.%s from the server (%s)", *name, exc)
                fits = False
            if fits:
                self._append([self.tracker.record(definition, file, pos, "information_schema")])
                self.log.info("schema history: %s.%s from the server at %s:%d", *name, file, pos)
                return True
        self.metrics.schema_mismatch(*name)
        return False

    def _append(self, entries: list[Entry]) -> None:
        """Write entries durably. Raises: CheckpointError (the checkpoint must not move past them)."""
        try:
            self._writer.append(entries)
        except OSError as exc:
            raise CheckpointError(f"schema history {self.path}: {exc.strerror or exc}") from exc

    async def close(self) -> None:
        await self.server.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
