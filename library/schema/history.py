"""The schema history file and the tracker that follows a binlog stream's DDL.

The history is a JSON-lines file, appended to and never rewritten. Each line is one
:class:`Entry`: a table's state (its definition, ``unknown`` or ``dropped``) or a database's
default character set, valid from a binlog position (file, pos) onwards, with the GTID of the
transaction that made it and its source (``ddl``, ``seed``, ``information_schema``, ``tablemap``).
A DDL's entries sit at the position just after the DDL's QUERY event, where a checkpoint taken
after it would point.

``source`` lines (:class:`~.identity.Source`) say whose positions the entries use: the first one names
the server, each later one (a failover's re-anchor) starts an *epoch* whose entries use the new
server's positions. Entries sort by (epoch, position): positions of two servers are never compared.
A re-anchor's own entries (source ``reanchor``) sit at the epoch's start (file "", pos 0).

:class:`SchemaTracker` holds the tables' state at the current stream position. Its
:meth:`~SchemaTracker.lookup` is the decoder's ``schema_source`` (a dict lookup); the caller hands
every event to :meth:`~SchemaTracker.observe`, which parses DDL and returns the new entries.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable

from binlogd.library.lazyjson import orjson
from binlogd.protocol.charsets import charset_for_collation
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.records import record, replace

from .catalog import DROPPED, UNKNOWN, Catalog
from .identity import FileIdentity, Source, fde_identity
from .model import CheckedSchema, TableDef, charset_name, compile_schema
from .readddl import read_ddl

Name = tuple[str, str]
_SUFFIX = re.compile(r"^(.*?)(\d+)$")
_GTIDS = frozenset(int(t) for t in (ET.GTID, ET.ANONYMOUS_GTID, ET.GTID_TAGGED, ET.MARIADB_GTID))
_QUERIES = frozenset({int(ET.QUERY), int(ET.QUERY_COMPRESSED)})
_FDE = int(ET.FORMAT_DESCRIPTION)
_WATCHED = _GTIDS | _QUERIES | {_FDE}


class SchemaHistoryError(BinlogError):
    """A schema history file that cannot be read (names the file and line)."""


def position_key(file: str, pos: int) -> tuple:
    """Sort key of a binlog position: file names compare by their numeric suffix, then the offset."""
    m = _SUFFIX.match(file)
    return (m[1], int(m[2]), pos) if m else (file, -1, pos)


@record(slots=True)
class Entry:
    """One line of the history.

    Fields:
        file, pos: where the state starts to hold (the end of the DDL event that made it).
        gtid: the GTID of the transaction that made it, or None.
        schema: the database.
        table: the table, or None for a database entry.
        state: a TableDef, ``"unknown"``, ``"dropped"`` (tables); the default charset or None (databases).
        source: ``ddl``, ``seed``, ``information_schema``, ``tablemap`` or ``reanchor``.
        dropped: a database entry for DROP DATABASE.
        epoch: how many ``source`` lines after the first precede it (not written: its place in the file says).
    """

    file: str
    pos: int
    gtid: str | None
    schema: str
    table: str | None
    state: TableDef | str | None
    source: str = "ddl"
    dropped: bool = False
    epoch: int = 0

    @property
    def key(self) -> tuple:
        return position_key(self.file, self.pos)

    @property
    def ekey(self) -> tuple:
        """The sort key across epochs: (epoch, position)."""
        return (self.epoch, *position_key(self.file, self.pos))

    def to_json(self) -> bytes:
        """The entry as one JSON line (with its newline)."""
        obj = {"file": self.file, "pos": self.pos, "gtid": self.gtid, "schema": self.schema, "table": self.table,
               "source": self.source}
        if self.table is None:
            obj.update(kind="database_dropped" if self.dropped else "database", charset=self.state)
        elif isinstance(self.state, TableDef):
            obj.update(kind="table", **self.state.to_json())
        else:
            obj["kind"] = self.state
        return orjson().dumps(obj) + b"\n"

    @classmethod
    def from_json(cls, obj: dict, epoch: int = 0) -> Entry:
        """Raises: KeyError, TypeError, ValueError on a malformed object."""
        kind, schema, table = obj["kind"], obj["schema"], obj["table"]
        if kind in ("database", "database_dropped"):
            state = obj.get("charset")
        elif kind == "table":
            state = TableDef.from_json(schema, table, obj)
        elif kind in (UNKNOWN, DROPPED):
            state = kind
        else:
            raise ValueError(f"unknown kind {kind!r}")
        return cls(obj["file"], int(obj["pos"]), obj.get("gtid"), schema, table, state, obj.get("source", "ddl"),
                   kind == "database_dropped", epoch)


def read_history(path: str | os.PathLike) -> list[Entry]:
    """Every complete entry of a history file, in file order (a last line cut short by a crash is ignored),
    each with its epoch; ``source`` lines are left out (see :func:`load_history`).

    Raises:
        SchemaHistoryError: a complete line that is not a valid entry (naming the file and line).
        OSError: the file cannot be read.
    """
    return load_history(path)[1]


def load_history(path: str | os.PathLike) -> tuple[list[Source], list[Entry]]:
    """A history file's ``source`` lines (each with its epoch) and entries, in file order.

    Raises:
        SchemaHistoryError: a complete line that is not a valid entry (naming the file and line).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    json = orjson()
    sources: list[Source] = []
    out = []
    for number, line in enumerate(lines[:-1], 1):  # the part after the last newline is incomplete
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if obj.get("kind") == "source":
                sources.append(Source.from_obj(obj, len(sources)))
                continue
            out.append(Entry.from_json(obj, max(0, len(sources) - 1)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SchemaHistoryError(f"{path}: line {number} is not a schema history entry ({exc})")
    return sources, out


class SchemaHistoryLocked(SchemaHistoryError):
    """Another process holds the history file's lock."""


class HistoryWriter:
    """Appends entries durably: each call writes, flushes and fsyncs before returning.

    A line left incomplete by a crash is cut off when the file is opened again. With ``lock``, an exclusive
    ``flock`` on ``<path>.lock`` is held until :meth:`close` (like the checkpoint's), so two processes
    never append to one history.

    Raises (constructor):
        SchemaHistoryLocked: another process holds the lock.
        OSError: the file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike, lock: bool = False):
        self.path = os.fspath(path)
        self._lock_fd: int | None = None
        if lock:
            import fcntl

            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise SchemaHistoryLocked(f"schema history {self.path} is locked by another binlogd process "
                                          "(two daemons must not share a history: give each its own "
                                          "[schema] history_path)") from None
            self._lock_fd = fd
        try:
            self._fh = open(self.path, "ab+")
        except OSError:
            self._unlock()
            raise
        self._fh.seek(0)
        data = self._fh.read()
        if data and not data.endswith(b"\n"):
            self._fh.truncate(data.rfind(b"\n") + 1)
        self._fh.seek(0, os.SEEK_END)

    def append(self, entries: list[Entry]) -> None:
        """Write ``entries`` and make them durable."""
        if entries:
            self._fh.write(b"".join(e.to_json() for e in entries))
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def append_source(self, source: Source, entries: list[Entry] = ()) -> None:
        """Write a ``source`` line and the entries of its epoch that follow it, durably (one write)."""
        self._fh.write(orjson().dumps(source.to_obj()) + b"\n" + b"".join(e.to_json() for e in entries))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def close(self) -> None:
        self._fh.close()
        self._unlock()


class SchemaTracker:
    """The tables' definitions at the current position of one binlog stream.

    Args:
        entries: a history to start from (see :meth:`start_at`); entries after the start position are
            applied when the stream reaches them, and DDL up to its last ``ddl`` entry is not parsed again.
        warn: called with one line for each DDL statement that could not be parsed.
        sources: the history's ``source`` lines (:func:`load_history`), for :meth:`bind`.
        name: the history file's name, for messages.
    Fields:
        catalog: the current state.
        unparsed: how many DDL statements could not be parsed.
        epoch: whose positions the stream's are (default: the history's last epoch); entries of earlier
            epochs hold before any position of it, those of later ones never.
    """

    def __init__(self, entries: list[Entry] = (), warn: Callable[[str], None] | None = None,
                 sources: list[Source] = (), name: str = ""):
        self.catalog = Catalog()
        self._schemas: dict[Name, CheckedSchema] = {}
        self._pending = deque(sorted(entries, key=lambda e: e.ekey))  # stable: file order at one position
        # DDL the history already holds (its own "ddl" entries) is not parsed again; seeds and repairs
        # (read from a server at some position) leave the DDL before them to be parsed.
        self._covered = max((e.ekey for e in self._pending if e.source == "ddl"), default=None)
        self.sources, self.name = list(sources), name
        self.epoch = max([e.epoch for e in self._pending] + [s.epoch for s in self.sources], default=0)
        self._bound: FileIdentity | None = None
        self.warn = warn or (lambda message: None)
        self.server_version = ""
        self.gtid: str | None = None
        self.unparsed = 0

    # ------------------------------------------------------------ lookups

    def lookup(self, schema: str, table: str) -> CheckedSchema | None:
        """The decoder's schema source: the current definition of a table, None when unknown."""
        return self._schemas.get((schema, table))

    def definition(self, schema: str, table: str) -> TableDef | str | None:
        """A table's current state: its TableDef, ``"unknown"``, or None when never seen."""
        return self.catalog.tables.get((schema, table))

    # ------------------------------------------------------------ moving forward

    def _key(self, file: str, pos: int) -> tuple:
        return (self.epoch, *position_key(file, pos))

    def start_at(self, file: str, pos: int) -> None:
        """Apply the history's entries up to (and including) position ``file:pos`` of the current epoch."""
        self._apply_pending(self._key(file, pos))

    def start_at_epoch(self) -> None:
        """Apply the entries of the earlier epochs and the current epoch's re-anchor: the state where a
        re-anchored stream resumed (its own positions not known yet)."""
        self._apply_pending((self.epoch, *position_key("", 0)))

    def bind(self, identity: FileIdentity | None) -> None:
        """Read a binlog file with this history: its positions are those of the epoch whose source wrote it.

        Nothing happens for a history without ``source`` lines (``binlogd schema build``, or older) or an
        unknown identity (None).

        Raises:
            SchemaHistoryError: no ``source`` line of the history is the file's server (naming both).
        """
        if identity is None or not self.sources:
            return
        matching = [s for s in self.sources if identity.matches(s)]
        if not matching:
            owners = "; then ".join(dict.fromkeys(s.describe() for s in self.sources))
            raise SchemaHistoryError(f"{self.name}: this schema history belongs to {owners}, not to binlog file "
                                     f"{identity.describe()}: its positions mean nothing there")
        self.epoch = matching[-1].epoch
        self._bound = identity

    def _apply_pending(self, key: tuple) -> None:
        while self._pending and self._pending[0].ekey <= key:
            self._apply_entry(self._pending.popleft())

    def _apply_entry(self, entry: Entry) -> None:
        if entry.table is None:
            if entry.dropped:
                self.catalog.databases.pop(entry.schema, None)
            else:
                self.catalog.databases[entry.schema] = entry.state
        else:
            self._set((entry.schema, entry.table), entry.state)

    def _set(self, name: Name, state) -> None:
        self.catalog.set(name, state)
        self._compile(name, state)

    def _compile(self, name: Name, state) -> None:
        if isinstance(state, TableDef):
            self._schemas[name] = compile_schema(state)
        else:
            self._schemas.pop(name, None)

    def record(self, table: TableDef, file: str, pos: int, source: str) -> Entry:
        """Take a definition from outside the stream (a seed, information_schema) as valid from ``file:pos``."""
        self._set((table.schema, table.table), table)
        return Entry(file, pos, self.gtid, table.schema, table.table, table, source, epoch=self.epoch)

    def extend(self, entries: list[Entry], file: str, pos: int) -> None:
        """Take entries read from outside the stream (a seed) while the stream is at ``file:pos`` (they are
        of the current epoch): those at or before it hold now, the later ones once the stream reaches them."""
        entries = [e if e.epoch == self.epoch else replace(e, epoch=self.epoch) for e in entries]
        self._pending = deque(sorted([*self._pending, *entries], key=lambda e: e.ekey))
        self._apply_pending(self._key(file, pos))

    def record_database(self, schema: str, charset: str | None, file: str, pos: int, source: str) -> Entry:
        """Take a database's default character set from outside the stream."""
        self.catalog.databases[schema] = charset
        return Entry(file, pos, self.gtid, schema, None, charset, source, epoch=self.epoch)

    def observe(self, event, file: str, end: int | None = None) -> list[Entry] | tuple:
        """Follow one event of the stream (cheap for the events it ignores: call it for every event).

        Args:
            event: the decoded event (FORMAT_DESCRIPTION, GTIDs and QUERY matter; others are ignored).
            file: the binlog file it is in.
            end: the position just after it (default: ``header.pos + header.event_length``).
        Returns:
            The history entries the event made (DDL only), to be written before a checkpoint passes ``end``.
        """
        tc = event.header.type_code
        if tc not in _WATCHED:
            return ()
        if end is None:
            end = event.header.pos + event.header.event_length
        if tc == _FDE:
            self.server_version = event.server_version
            if self._bound is not None and file != self._bound.name:   # the next file of a bound reading
                epoch = self.epoch
                self.bind(fde_identity(event, file))
                self.epoch = max(epoch, self.epoch)   # never back to an epoch whose state is behind
            return ()
        key = self._key(file, end) if self._pending or self._covered is not None else None
        if self._pending:
            self._apply_pending(key)
        if tc in _GTIDS:
            self.gtid = event.gtid
        elif self._covered is None or key > self._covered:
            return self._query(event, file, end)
        return ()

    def _query(self, event, file: str, end: int) -> list[Entry]:
        changes = read_ddl(event.query, event.schema, event.status.get("sql_mode", 0), self.server_version)
        if not changes:
            return []  # BEGIN, COMMIT, DML: nothing to parse
        from .changes import Unparsed  # imported by read_ddl with the first DDL statement
        server = charset_name(charset_for_collation(event.status.get("charset", {}).get("server")))
        out = []
        for change in changes:
            if isinstance(change, Unparsed):
                self.unparsed += 1
                names = ", ".join(f"{s}.{t}" for s, t in change.names) or "every known table"
                self.warn(f"{file}:{event.header.pos}: cannot parse DDL ({change.reason}); "
                          f"positional column names for {names} until a definition that fits is found: "
                          f"{' '.join(event.query.split())[:200]}")
            dbs_before = dict(self.catalog.databases)
            for name, state in self.catalog.apply(change, server).items():
                self._compile(name, state)
                out.append(Entry(file, end, self.gtid, name[0], name[1], state, epoch=self.epoch))
            for schema in dbs_before.keys() | self.catalog.databases.keys():
                if schema not in self.catalog.databases:
                    out.append(Entry(file, end, self.gtid, schema, None, None, dropped=True, epoch=self.epoch))
                elif dbs_before.get(schema, ...) != self.catalog.databases[schema]:
                    out.append(Entry(file, end, self.gtid, schema, None, self.catalog.databases[schema],
                                     epoch=self.epoch))
        return out
