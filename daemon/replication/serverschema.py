"""Column names for primaries that log no TABLE_MAP names: the schema history, seeded and repaired from the server.

:class:`DaemonSchema` keeps the history file (``[schema] history_path``, by default
``<checkpoint stem>.schema-history.jsonl`` beside the checkpoint) and the
:class:`binlogd.library.schema.SchemaTracker` that follows the stream's DDL. The decoder only looks
definitions up (no SQL inside decoding). The consumer hands it every event (:meth:`DaemonSchema.follow`):

- a DDL's history entries are written durably before the event is passed on, so before the
  checkpoint can move past the DDL;
- while the history holds no seed, the first TABLE_MAP of a selected table the decoder asked for and
  the history does not know seeds it from the server, valid from the start of that TABLE_MAP's
  transaction (with FULL row metadata the decoder asks for none, and the server is never asked);
- a TABLE_MAP whose columns came out positional (no definition, or one that does not agree with it)
  makes it read ``SHOW CREATE TABLE`` once; that definition is recorded when it agrees with the
  TABLE_MAP and no DDL naming the table was logged since (``SHOW BINLOG EVENTS``), else the columns
  stay positional and ``binlogd_schema_mismatch_total{schema,table}`` counts it.

Each session starts from the history file at its resume position (:meth:`DaemonSchema.attach`), so a
reconnect or a restart after SIGKILL sees the definitions as they were at the checkpoint.

The history is one source's (:mod:`binlogd.library.schema.identity`): :meth:`DaemonSchema.attach` records the
session's server in its first line, refuses (exit 8) a history of another source, and, when the session's
server is another of the same replication stream (a GTID failover), writes a re-anchor: a new ``source`` line
and the tables' definitions as the new server holds them (checked against the DDL it logged since the resume
GTID), after which entries use the new server's positions. The file is locked (``<history>.lock``) while the
daemon runs. A history that cannot be read stops the daemon with one line naming the file (exit 8). A seed's
tables that no DDL logged between its position and the server's current position names are valid from
its position; the others only from that current position (before it they are named by the stream's own
DDL, or positional), and those DDL named while the seed read the definitions not at all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from binlogd.daemon.replication.schemaqueries import ServerSchema, server_errors
from binlogd.daemon.state import CheckpointError
from binlogd.library.schema import (
    Entry,
    HistoryWriter,
    SchemaHistoryError,
    SchemaTracker,
    TableDef,
    agrees,
)
from binlogd.library.schema.catalog import DROPPED, UNKNOWN
from binlogd.library.schema.history import SchemaHistoryLocked, load_history, position_key
from binlogd.library.schema.identity import Source, basename, same_server, stream_holds
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET

#: The events :meth:`DaemonSchema.follow` needs to see (the consumer passes only these).
FOLLOWED = frozenset(int(t) for t in (ET.FORMAT_DESCRIPTION, ET.QUERY, ET.QUERY_COMPRESSED, ET.GTID,
                                      ET.ANONYMOUS_GTID, ET.GTID_TAGGED, ET.MARIADB_GTID, ET.TABLE_MAP,
                                      ET.TRANSACTION_PAYLOAD))


_TABLE_MAP, _PAYLOAD, _FDE = int(ET.TABLE_MAP), int(ET.TRANSACTION_PAYLOAD), int(ET.FORMAT_DESCRIPTION)


class SchemaHistoryUnusable(CheckpointError):
    """The schema history file cannot be read: binlogd stops (exit 8) rather than name columns wrongly."""

    fatal = True


def history_path(configured: str, checkpoint_path: str) -> Path:
    """``[schema] history_path``, or ``<checkpoint stem>.schema-history.jsonl`` beside the checkpoint when empty:
    two daemons with different checkpoints never share a history."""
    if configured:
        return Path(configured)
    checkpoint = Path(checkpoint_path)
    return checkpoint.parent / f"{checkpoint.stem}.schema-history.jsonl"


def _recorded(latest: Source, entries: list[Entry]) -> list[str]:
    """The GTIDs a history recorded in its latest epoch: its ``source`` line's and its entries'."""
    return [latest.gtid, *(e.gtid for e in entries if e.epoch == latest.epoch and e.gtid)]


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
        tracker: the current session's SchemaTracker (None before :meth:`attach`).
        source: the session's server as the history records it (None before :meth:`attach`).
        changed: the history entries the last event :meth:`follow` took made (a DDL's; else empty).
    """

    def __init__(self, path: str | os.PathLike, server: ServerSchema, selected, metrics, log):
        self.path = Path(path)
        self.source: Source | None = None
        self.server, self.selected, self.metrics, self.log = server, selected, metrics, log
        self.tracker: SchemaTracker | None = None
        self._writer: HistoryWriter | None = None
        self._tried: set[tuple[str, str]] = set()   # tables whose current state was checked with the server
        self._txn_start = ("", 0)                     # where the current transaction began
        self._seed_due = False      # the history holds no seed: one runs when a table needs it
        self._seed_wanted = False   # the decoder asked for a selected table the history does not know
        self.changed: list | tuple = ()

    def lookup(self, schema: str, table: str):
        """The decoder's schema source (see :meth:`SchemaTracker.lookup`). While a seed is due, a selected
        table it does not know asks for one, which :meth:`follow` then runs."""
        known = self.tracker.lookup(schema, table) if self.tracker is not None else None
        if known is None and self._seed_due and self.selected(schema, table):
            self._seed_wanted = True
        return known

    async def attach(self, info, resume) -> None:
        """Start a session on the server ``info`` (a ServerInfo) describes, resuming at ``resume`` (a
        ResumeState): call it at every session start, after :meth:`ServerSchema.reconnect`.

        - A history with no ``source`` line yet (new, or ``binlogd schema build``'s) records this server first.
        - The same server as the history's latest ``source`` line: the history at the resume position.
        - Another server whose GTID state holds the GTIDs the history recorded (one replication stream): a
          re-anchor (:meth:`_reanchor`); from then on entries use this server's positions.
        - Any other server: refused.

        Seeding is lazy (see :meth:`open`).

        Raises:
            SchemaHistoryUnusable: fatal (exit 8): the history belongs to another source (one line naming
                both and the file), is locked by another process, or cannot be read.
            CheckpointError: the server cannot say who it is, or the history cannot be written (retried).
        """
        position = resume.position
        gtids = (position.gtid_list if info.flavor == "mariadb" else position.gtid_set) or ""
        try:
            current_file, state = await self.server.stream_facts(info.flavor)
        except server_errors() as exc:
            raise CheckpointError(f"schema history: cannot ask the server for its binlog and GTID state "
                                  f"({exc})") from exc
        current = Source(info.flavor, int(info.server_id), info.server_uuid or "", basename(current_file), gtids,
                         position.file, int(position.pos))
        sources, entries = self._load()
        latest = sources[-1] if sources else None
        if latest is None:
            self._write_source(current, [])
            self.tracker = SchemaTracker(entries, warn=self.log.warning, sources=[current], name=str(self.path))
            self.tracker.start_at(position.file, position.pos)
        elif same_server(latest, current):
            current = latest
            self.tracker = SchemaTracker(entries, warn=self.log.warning, sources=sources, name=str(self.path))
            self._start_tracker(latest, position)
        elif stream_holds(current.flavor, _recorded(latest, entries), state):
            await self._reanchor(sources, entries, latest, current, position)
        else:
            raise SchemaHistoryUnusable(
                f"schema history {self.path} belongs to {latest.describe()}, not to this session's source "
                f"{current.describe()} (GTID state {state or 'empty'}): another source's positions would name "
                "columns wrongly; give each source its own [schema] history_path")
        self.source = current
        self._begin(entries, position.file, position.pos)

    def _start_tracker(self, latest: Source, position) -> None:
        """The tracker at the resume position; a position that is still the one a re-anchor was written at
        is the previous server's (nothing was committed on this one yet): the epoch's start."""
        if latest.epoch and (position.file, int(position.pos)) == (latest.file, latest.pos):
            self.tracker.start_at_epoch()
        else:
            self.tracker.start_at(position.file, position.pos)

    def _load(self) -> tuple[list[Source], list[Entry]]:
        """Lock and open the history, then read it: its ``source`` lines and entries.

        Raises:
            SchemaHistoryUnusable: locked, or unreadable (one line naming the file, and the line for a bad entry).
        """
        try:
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._writer = HistoryWriter(self.path, lock=True)
            return load_history(self.path)
        except SchemaHistoryLocked as exc:
            raise SchemaHistoryUnusable(str(exc)) from exc
        except (SchemaHistoryError, OSError) as exc:
            if self._writer is not None:   # fatal: the lock goes with it
                self._writer.close()
                self._writer = None
            raise SchemaHistoryUnusable(f"schema history {self.path}: {exc}") from exc

    async def _reanchor(self, sources: list[Source], entries: list[Entry], latest: Source, current: Source,
                        position) -> None:
        """Write a re-anchor: a ``source`` line for this server and, valid from its epoch's start, every table
        and database the history knows at the resume position: a selected table as this server defines it
        now when no DDL it logged since the resume GTID names it (unknown, so positional until the stream's
        DDL or a repair names it, when one does or that cannot be told), others as the history had them.

        Raises:
            CheckpointError: it cannot be written.
        """
        old = SchemaTracker(entries, sources=sources)
        old.epoch = latest.epoch
        if latest.epoch and (position.file, int(position.pos)) == (latest.file, latest.pos):
            old.start_at_epoch()
        else:
            old.start_at(position.file, position.pos)
        current.epoch = latest.epoch + 1
        try:
            start = await self.server.gtid_file(current.flavor, current.gtid)
        except server_errors() as exc:
            self.log.warning("schema history: cannot find where GTID %s starts on this server (%s)", current.gtid,
                             exc)
            start = None
        named = await self._ddl_since(start, 4) if start is not None else None
        gtid, anchors = current.gtid or None, []
        known_dbs = {e.schema for e in entries if e.table is None}
        for db in sorted(known_dbs | old.catalog.databases.keys()):
            dropped = db not in old.catalog.databases
            anchors.append(Entry("", 0, gtid, db, None, old.catalog.databases.get(db), "reanchor", dropped,
                                 current.epoch))
        fresh = unknown = 0
        for name in sorted({(e.schema, e.table) for e in entries if e.table is not None} | old.catalog.tables.keys()):
            state = old.catalog.tables.get(name, DROPPED)
            if isinstance(state, TableDef) and self.selected(*name):
                definition = None
                if not _named(named, *name):
                    try:
                        definition = await self.server.create_table(*name)
                    except server_errors() as exc:
                        self.log.warning("schema history: cannot read %s.%s from the server (%s)", *name, exc)
                if definition is None:
                    state, unknown = UNKNOWN, unknown + 1
                else:
                    if [c.name for c in definition.columns] != [c.name for c in state.columns]:
                        self.log.warning("schema history: %s.%s on %s has columns (%s), the history had (%s): "
                                         "the server's are used", *name, current.describe(),
                                         ", ".join(c.name for c in definition.columns),
                                         ", ".join(c.name for c in state.columns))
                    state, fresh = definition, fresh + 1
            anchors.append(Entry("", 0, gtid, *name, state, "reanchor", epoch=current.epoch))
        self._write_source(current, anchors)
        self.log.info("schema history: re-anchored on %s after %s at GTID %s: %d tables read from it, %d positional "
                      "until named again (DDL logged since)", current.describe(), latest.describe(),
                      current.gtid or "-", fresh, unknown)
        self.tracker = SchemaTracker([*entries, *anchors], warn=self.log.warning, sources=[*sources, current],
                                     name=str(self.path))
        self.tracker.start_at_epoch()

    def _write_source(self, source: Source, entries: list[Entry]) -> None:
        """Append a ``source`` line and its epoch's first entries. Raises: CheckpointError."""
        try:
            self._writer.append_source(source, entries)
        except OSError as exc:
            raise CheckpointError(f"schema history {self.path}: {exc.strerror or exc}") from exc

    async def open(self, file: str, pos: int, lazy: bool = False) -> None:
        """Start a session at ``file:pos`` of the history's latest source, without checking whose it is (tests;
        the daemon calls :meth:`attach`): the history as it stands on disk. When it holds no seed yet, it is
        seeded from the server now, or (``lazy``) at the first TABLE_MAP of a selected table that it cannot
        name (:meth:`follow`; with FULL row metadata and no MariaDB VECTOR look-alikes, never).

        A seed the server refuses (no SELECT grant, lost connection) is logged and left for the next session.

        Raises:
            SchemaHistoryUnusable: the history file cannot be read or is locked (fatal: exit 8).
            CheckpointError: it cannot be written (the session is retried).
        """
        sources, entries = self._load()
        self.tracker = SchemaTracker(entries, warn=self.log.warning, sources=sources, name=str(self.path))
        self.tracker.start_at(file, pos)
        self._begin(entries, file, pos)
        if self._seed_due and not lazy:
            await self._seed_at(file, pos)

    def _begin(self, entries: list[Entry], file: str, pos: int) -> None:
        """The session's state beside its tracker (a seed stays lazy: at the first TABLE_MAP that needs one)."""
        self._tried.clear()
        self._txn_start = (file, pos)
        self._seed_due, self._seed_wanted = not any(e.source == "seed" for e in entries), False

    async def _seed_at(self, file: str, pos: int) -> None:
        """Seed the history from the server, valid from ``file:pos`` (where the stream is, or a transaction
        it is in began): the entries written durably, then taken by the tracker.

        Raises:
            CheckpointError: the entries cannot be written.
        """
        self._seed_due = self._seed_wanted = False
        try:
            entries = await self._seed(file, pos)
        except server_errors() as exc:
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
        began = time.monotonic()
        now = await self.server.position()
        dbs, tables = await self.server.tables(self.selected)
        definitions = list((await self.server.definitions(tables)).items())
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
        self.log.info("schema history seeded from the server: %d tables at %s:%d%s in %.2f s", len(tables), file, pos,
                      f" ({sum(e.file == now[0] and e.pos == now[1] for e in entries)} named by later DDL: "
                      f"from {now[0]}:{now[1]})" if late else "", time.monotonic() - began)
        return entries

    async def _ddl_since(self, file: str, pos: int, until: tuple[str, int] | None = None) -> set | None:
        """:meth:`ServerSchema.ddl_tables_since`, None (every table may be named) when the server refuses it."""
        try:
            return await self.server.ddl_tables_since(file, pos, until)
        except server_errors() as exc:   # SHOW BINLOG EVENTS refused: no table is known to be untouched
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
        self.changed = ()
        if tc != _TABLE_MAP and tc != _PAYLOAD:
            if tc != _FDE:
                self._txn_start = (file, pos)  # a GTID, BEGIN or statement: a repair holds from here on
            entries = self.changed = self.tracker.observe(event, file, pos + len(raw))
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
            except server_errors() as exc:
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
