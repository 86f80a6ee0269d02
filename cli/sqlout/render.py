"""Groups as SQL text: the replay of a transaction, or its inverse (``--flashback``).

Statements (QUERY events) are replayed with the session context the server logged for them, as
mysqlbinlog does: default database, ``SET TIMESTAMP``, pseudo thread id, the flags2 switches, sql_mode,
auto-increment settings, character sets and collations, time_zone, lc_time_names, and the INTVAR,
RAND and USER_VAR events before them. Row changes run in a session of our own: UTF-8
(``SET NAMES utf8mb4``), ``time_zone='+00:00'`` (row images hold TIMESTAMPs in UTC), and an sql_mode
that stores every value a row image can hold (zero dates, 0 in an AUTO_INCREMENT column). A SET is
written only when it changes what the session was last told.

Every statement ends with ``;`` on its line; a logged statement holding ``;``, ``--`` or ``#`` is written
between ``DELIMITER /*!*/;`` and ``DELIMITER ;`` (stored programs, trailing comments).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from binlogd.cli.sqlout.groups import Group, RowsRun, Statement, statement_kind
from binlogd.library.sqlwriter import native
from binlogd.library.sqlwriter.literals import ident, quote
from binlogd.library.sqlwriter.rowsql import TablePlan
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol import events as E
from binlogd.protocol.charsets import charset_for_collation, codec_for_collation
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.gtid import Gtid, MariadbGtid
from binlogd.protocol.records import field, record
from binlogd.protocol.rows import RowImages

ROW_SESSION = (("charset", "SET NAMES utf8mb4"), ("time_zone", "SET @@session.time_zone='+00:00'"),
               ("sql_mode", "SET @@session.sql_mode='NO_AUTO_VALUE_ON_ZERO'"))
_NO_FOREIGN_KEY_CHECKS_F, _RELAXED_UNIQUE_CHECKS_F = 0x0002, 0x0004
_AUTO_IS_NULL, _NOT_AUTOCOMMIT, _NO_FOREIGN_KEYS, _RELAXED_UNIQUE = 1 << 14, 1 << 19, 1 << 26, 1 << 27
_BATCH_LINES = 256  # lines of a group made before they are written
_HARMLESS = ("SAVEPOINT", "RELEASE SAVEPOINT")  # statements a flashback may step over
_DATABASE_DDL = ("CREATE DATABASE", "CREATE SCHEMA", "DROP DATABASE", "DROP SCHEMA")


@record(frozen=False)
class Filters:
    """``--database`` and ``--table``: row changes of a listed database or table, statements whose
    default database is listed; no filter keeps everything (``--table`` alone keeps no statement)."""

    databases: frozenset = frozenset()
    tables: frozenset = frozenset()  # (db, table) pairs

    def rows(self, schema: str, table: str) -> bool:
        if not self.databases and not self.tables:
            return True
        return schema in self.databases or (schema, table) in self.tables

    def statement(self, schema: str) -> bool:
        if not self.databases and not self.tables:
            return True
        return schema in self.databases


@record(frozen=False)
class Renderer:
    """Turns groups into SQL, keeping the session state the output has set so far.

    Fields:
        filters: which changes to keep. keep_gtids: write the group's GTID as session variables.
        skip_unsafe: flashback steps over what it cannot invert (each reported through ``notice``).
        primary_key: ``(schema, table, column names) -> key column names`` from a schema history, for
            TABLE_MAPs that mark no primary key (() when unknown).
        load_dir: where LOAD DATA files are written for the client to read (None: LOAD DATA is an error).
    """

    filters: Filters = field(default_factory=Filters)
    keep_gtids: bool = False
    skip_unsafe: bool = False
    notice: Callable[[str], None] = print
    primary_key: Callable[[str, str, tuple], tuple] = lambda schema, table, names: ()
    load_dir: str | None = None
    state: dict = field(default_factory=dict)
    _plans: dict = field(default_factory=dict)
    _tables: dict = field(default_factory=dict)  # table id → the last TABLE_MAP for it
    _loads: dict = field(default_factory=dict)  # LOAD DATA file id → its blocks so far
    partial: bool = False  # a group's head is written and its end is not
    _last_plan: tuple = (None, None, None)  # the TABLE_MAP, group and plan of the last _plan
    _sets: int = 0  # SETs written so far
    _row_mark: tuple = ()  # (timestamp, check flags, _sets) after the last row session was written

    # ------------------------------------------------------------------ shared
    def _set(self, out: list, key: str, statement: str) -> None:
        if self.state.get(key) != statement:
            self.state[key] = statement
            self._sets += 1
            out.append(statement + ";")

    def _plan(self, tmap: E.TableMapEvent, g: Group, ev: E.Event) -> TablePlan:
        """The table's plan, made again when its TABLE_MAP, the file's server or its history's key change
        (none of which can change for the rows events of one TABLE_MAP in one group)."""
        last = self._last_plan
        if last[0] is tmap and last[1] is g:
            return last[2]
        key = (tmap.schema, tmap.table)
        pk = self.primary_key(tmap.schema, tmap.table, tuple(c.name for c in tmap.columns))
        cached = self._plans.get(key)
        if cached is None or (cached[0] is not tmap.columns and cached[0] != tmap.columns) or \
                cached[1:3] != (g.flavor, pk):
            cached = self._plans[key] = (tmap.columns, g.flavor, pk,
                                         TablePlan(tmap, g.flavor, f"{g.file}:{ev.header.pos}", pk))
        self._last_plan = (tmap, g, cached[3])
        return cached[3]

    def _row_lines(self, g: Group, ev: E.RowsEvent, invert: bool) -> list | None:
        """The statement lines of a rows event (str, or bytes from the C writer: :mod:`.native`); [] when
        it holds no rows; with ``invert`` the lines that undo it, None when its images cannot.

        Raises:
            SqlOutError, EventDecodeError: the event's rows cannot be decoded or written exactly.
        """
        images = ev.images
        if native.speedups_enabled() and type(images) is RowImages:
            if not len(images.data):
                return []
            try:
                lines = native.row_lines(self._plan(self._tables[ev.table_id], g, ev), ev, invert)
            except Exception:  # noqa: BLE001 - the reference path below raises the canonical error
                lines = None
            if lines is not None:
                return lines
        if not ev.rows:
            return []
        plan = self._plan(self._tables[ev.table_id], g, ev)
        statements = plan.invert(ev.kind, ev.rows) if invert else plan.replay(ev.kind, ev.rows)
        return None if statements is None else [s + ";" for s in statements]

    def _rows(self, g: Group, ev: E.RowsEvent | RowsRun, invert: bool) -> list[tuple]:
        """``(rows event, its lines as _row_lines gives them)`` for a rows event or for every event of a run
        the filters keep (a run written in one C call is one pair, under its first event, whose header and
        flags its events share).

        Raises:
            as :meth:`_row_lines`.
        """
        if type(ev) is not RowsRun:
            return [(ev, self._row_lines(g, ev, invert))] if self.filters.rows(ev.schema, ev.table) else []
        first = ev.first
        if not self.filters.rows(first.schema, first.table):
            return []
        try:
            lines = native.run_lines(self._plan(self._tables[first.table_id], g, first), ev, invert)
        except Exception:  # noqa: BLE001 - the events one by one raise the canonical error
            lines = None
        if lines is not None:
            return [(first, lines)]
        return [(e, self._row_lines(g, e, invert)) for e in ev.events()]

    def _row_session(self, out: list, ev: E.RowsEvent) -> None:
        mark = (ev.header.timestamp, ev.flags & (_NO_FOREIGN_KEY_CHECKS_F | _RELAXED_UNIQUE_CHECKS_F), self._sets)
        if mark == self._row_mark:
            return  # the session is as the last rows event left it, and is right for this one
        for key, statement in ROW_SESSION:
            self._set(out, key, statement)
        self._set(out, "timestamp", f"SET TIMESTAMP={ev.header.timestamp}")
        self._set(out, "checks", "SET @@session.foreign_key_checks=%d, @@session.unique_checks=%d" % (
            not ev.flags & _NO_FOREIGN_KEY_CHECKS_F, not ev.flags & _RELAXED_UNIQUE_CHECKS_F))
        self._row_mark = mark[:2] + (self._sets,)

    # ------------------------------------------------------------------ replay
    def replay(self, g: Group, write: Callable[[list[str]], None]) -> None:
        """Write the SQL lines that replay one group (nothing when the filters leave nothing of it).

        Lines go to ``write`` in batches as they are made, and each event is let go once written (its
        decoded rows with it), so a transaction of any size takes little memory. While a group is
        being written :attr:`partial` is True.
        """
        xa = bool(g.events) and isinstance(g.events[0], Statement) and \
            statement_kind(g.events[0].text).startswith("XA START")
        wrap = not xa and (g.began or any(isinstance(ev, E.RowsEvent) for ev in g.events))
        body: list[str] = []
        pending: list[str] = []  # INTVAR/RAND/USER_VAR and ANNOTATE_ROWS: for the statement after them
        tables = self._tables
        for i, ev in enumerate(g.events):
            g.events[i] = None
            if isinstance(ev, E.TableMapEvent):
                tables[ev.table_id] = ev
            elif isinstance(ev, (E.RowsEvent, RowsRun)):
                for rows, lines in self._rows(g, ev, invert=False):
                    if lines:
                        self._row_session(body, rows)
                        body += pending
                        body += lines
                        pending = []
                pending = []
            elif isinstance(ev, Statement):
                text = self._load_data(g, ev) if isinstance(ev.event, E.ExecuteLoadQueryEvent) else ev.text
                if self.filters.statement(ev.event.schema):
                    self._statement_context(body, ev)
                    body += pending
                    body.append(_terminated(text))
                pending = []
            elif isinstance(ev, E.LoadBlockEvent):
                blocks = self._loads.setdefault(ev.file_id, [])
                if ev.header.type_code == ET.BEGIN_LOAD_QUERY:
                    blocks.clear()
                blocks.append(ev.data)
            elif isinstance(ev, E.RowsQueryEvent):
                pending.append(native.comment(None, ev.statement))
            else:
                pending.append(_context_event(ev, g))
            if len(body) >= _BATCH_LINES:
                self._write_body(g, wrap, body, write)
        if body:
            self._write_body(g, wrap, body, write)
        if self.partial:
            closer = [(g.closer or "COMMIT") + ";"] if g.closer is not None or wrap else []
            if self.keep_gtids and isinstance(g.gtid, Gtid):
                closer.append("SET @@SESSION.GTID_NEXT='AUTOMATIC';")
            write(closer)
            self.partial = False

    def _write_body(self, g: Group, wrap: bool, body: list[str], write: Callable[[list[str]], None]) -> None:
        """Write the lines made so far, after the group's head (its position, GTID and BEGIN) the first time."""
        if not self.partial:
            head = [f"-- {g.where}" + (f" GTID {g.gtid}" if g.gtid is not None else "")] + self._gtid_lines(g)
            write(head + ["BEGIN;"] if wrap else head)
            self.partial = True
        write(body[:])
        body.clear()

    def _load_data(self, g: Group, st: Statement) -> str:
        """LOAD DATA: its file (the blocks before it) written to ``load_dir``, read back by the client
        (``LOCAL INFILE``), as mysqlbinlog --local-load does."""
        ev = st.event
        if self.load_dir is None:
            raise SqlOutError(f"{g.file}:{ev.header.pos}: LOAD DATA: its file is in the binlog; give --load-dir DIR "
                              "to have it written there (the client then needs --local-infile=1)")
        path = os.path.join(self.load_dir, f"binlogd-load-{os.path.basename(g.file)}-{ev.header.pos}.dat")
        with open(path, "wb") as fh:
            fh.write(b"".join(self._loads.pop(ev.file_id, ())))
        raw = st.text.encode("utf-8", "surrogateescape")
        dup = {1: " IGNORE", 2: " REPLACE"}.get(ev.dup_handling, "")
        head, tail = raw[:ev.start_pos].decode("utf-8", "surrogateescape"), raw[ev.end_pos:]
        return f"{head} LOCAL INFILE {quote(path)}{dup} INTO" + tail.decode("utf-8", "surrogateescape")

    def _gtid_lines(self, g: Group) -> list[str]:
        if not self.keep_gtids or g.gtid is None:
            return []
        if isinstance(g.gtid, MariadbGtid):
            return [f"SET @@session.gtid_domain_id={g.gtid.domain_id}, @@session.server_id={g.gtid.server_id}, "
                    f"@@session.gtid_seq_no={g.gtid.seq_no};"]
        return [f"SET @@SESSION.GTID_NEXT='{g.gtid}';"]

    def _statement_context(self, out: list, statement: Statement) -> None:
        """The SETs that give the session what the server logged with this statement."""
        ev = statement.event
        st = ev.status
        usec = st.get("microseconds")
        self._set(out, "timestamp", f"SET TIMESTAMP={ev.header.timestamp}" + ("" if usec is None else f".{usec:06d}"))
        self._set(out, "thread", f"SET @@session.pseudo_thread_id={ev.thread_id}")
        if "flags2" in st:
            f = st["flags2"]
            self._set(out, "checks", "SET @@session.foreign_key_checks=%d, @@session.sql_auto_is_null=%d, "
                      "@@session.unique_checks=%d, @@session.autocommit=%d" % (
                          not f & _NO_FOREIGN_KEYS, bool(f & _AUTO_IS_NULL), not f & _RELAXED_UNIQUE,
                          not f & _NOT_AUTOCOMMIT))
        if "sql_mode" in st:
            self._set(out, "sql_mode", f"SET @@session.sql_mode={st['sql_mode']}")
        if "auto_increment" in st:
            inc, off = st["auto_increment"]
            self._set(out, "auto_increment",
                      f"SET @@session.auto_increment_increment={inc}, @@session.auto_increment_offset={off}")
        cs = st.get("charset")
        if cs is not None:
            client = charset_for_collation(cs["client"]) or cs["client"]  # a name: newer ids are no charset's
            client = "utf8" if client == "utf8mb3" else client  # the name every version knows
            self._set(out, "charset", f"SET @@session.character_set_client={client}, "
                      f"@@session.collation_connection={cs['connection']}, @@session.collation_server={cs['server']}")
        else:  # before 5.0 no charset was logged: latin1, the default then, passes every byte unchanged
            self._set(out, "charset", "SET NAMES latin1")
        if "time_zone" in st:
            self._set(out, "time_zone", f"SET @@session.time_zone={quote(st['time_zone'])}")
        if "lc_time_names" in st:
            self._set(out, "lc_time_names", f"SET @@session.lc_time_names={st['lc_time_names']}")
        self._set(out, "collation_database",
                  f"SET @@session.collation_database={st.get('charset_database', 'DEFAULT')}")
        kind = statement_kind(statement.text)
        if kind.startswith(_DATABASE_DDL):
            # The server logs these with the database they create or drop as the default one, which
            # need not exist; USE it would fail. A dropped default database leaves the session without one.
            if kind.startswith("DROP"):
                self.state.pop("use", None)
        elif ev.schema:
            self._set(out, "use", f"USE {ident(ev.schema)}")

    # ------------------------------------------------------------------ flashback
    def flashback(self, g: Group) -> list[str]:
        """The SQL lines that undo one group's row changes, newest first ([] when nothing to undo).

        Raises:
            SqlOutError: a statement (DDL or statement-based DML) or an image that cannot be inverted,
                naming the event and its position (unless ``skip_unsafe``: then reported and skipped).
        """
        undo: list[list[str]] = []
        tables = self._tables
        for ev in g.events:
            if isinstance(ev, E.TableMapEvent):
                tables[ev.table_id] = ev
            elif isinstance(ev, (E.RowsEvent, RowsRun)):
                for rows, inverse in self._rows(g, ev, invert=True):
                    if inverse is None:
                        self._unsafe(g, rows, f"`{rows.schema}`.`{rows.table}`: partial row images "
                                     "(binlog_row_image MINIMAL or NOBLOB) do not say what to restore")
                    elif inverse:
                        undo.append(inverse)
            elif isinstance(ev, Statement):
                kind = statement_kind(ev.text)
                if self.filters.statement(ev.event.schema) and not kind.startswith(_HARMLESS):
                    self._unsafe(g, ev.event, f"the statement {ev.text[:80]!r} cannot be inverted (DDL or "
                                 "statement-based change)")
        if not undo:
            return []
        out = [f"-- flashback of {g.where}" + (f" GTID {g.gtid}" if g.gtid is not None else ""), "BEGIN;"]
        for statements in reversed(undo):
            out += statements
        out.append("COMMIT;")
        return out

    def _unsafe(self, g: Group, ev: E.Event, why: str) -> None:
        message = f"{g.file}:{ev.header.pos}: {ev.header.type_name}: {why}"
        if not self.skip_unsafe:
            raise SqlOutError(message + "; nothing was written (--skip-unsafe leaves such events out)")
        self.notice(message + "; skipped (--skip-unsafe)")

    def flashback_preamble(self) -> list[str]:
        """The session every flashback runs in (the row session)."""
        return [statement + ";" for _, statement in ROW_SESSION]


def _terminated(text: str) -> str:
    if ";" in text or "--" in text or "#" in text:
        return f"DELIMITER /*!*/;\n{text}\n/*!*/;\nDELIMITER ;"
    return text + ";"


def _context_event(ev: E.Event, g: Group) -> str:
    """INTVAR, RAND or USER_VAR as the SET that gives the next statement the same value."""
    if isinstance(ev, E.IntvarEvent):
        return f"SET {'LAST_INSERT_ID' if ev.kind == 1 else 'INSERT_ID'}={ev.value};"
    if isinstance(ev, E.RandEvent):
        return f"SET @@RAND_SEED1={ev.seed1}, @@RAND_SEED2={ev.seed2};"
    if isinstance(ev, E.UserVarEvent):
        return f"SET @{ident(ev.name)}:={_user_var_value(ev, g)};"
    raise SqlOutError(f"{g.file}:{ev.header.pos}: {ev.header.type_name} is not expected inside a transaction")


def _user_var_value(ev: E.UserVarEvent, g: Group) -> str:
    if ev.value is None:
        return "NULL"
    if ev.value_type == 0:  # a string: its bytes under its character set's introducer
        charset = charset_for_collation(ev.charset) or "binary"
        raw = ev.value.encode(codec_for_collation(ev.charset) or "utf-8", "backslashreplace")
        return f"_{charset} X'{raw.hex()}'"
    if ev.value_type == 1:  # REAL: a double literal keeps the variable a double
        text = repr(ev.value)
        return text if "e" in text or "n" in text else text + "e0"
    if ev.value_type in (2, 4):  # INT, DECIMAL
        return str(ev.value)
    raise SqlOutError(f"{g.file}:{ev.header.pos}: USER_VAR @{ev.name} has value type {ev.value_type}, which "
                      "binlogd sql cannot write")
