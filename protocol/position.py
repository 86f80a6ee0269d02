"""Where the stream is, and where it may be resumed: transaction boundaries only.

:class:`PositionTracker` watches every decoded event. It follows the live
position (file and next offset) and the transaction in progress, and moves
:attr:`PositionTracker.committed` only when a transaction ends: after XID,
after a COMMIT / ROLLBACK / XA PREPARE, after a DDL statement (an implicit
commit) or any statement logged without BEGIN, after a rows event that ends a
statement logged without BEGIN (5.1 non-transactional tables), after a whole
TRANSACTION_PAYLOAD. The context events before a statement (INTVAR, RAND,
USER_VAR, TABLE_MAP, LOAD DATA blocks) open its group. A GTID is added to the GTID set
(MySQL) or list (MariaDB) only then. Resuming from ``committed`` therefore
always starts at a transaction's first event, whose TABLE_MAPs come with it.

Positions come from the stream itself: an event starts where the last one
ended, unless it logs where it ends (its header's next_position), which
re-anchors the count (ROTATE, FDE, GTID, commits: every event on servers
before MariaDB 11.4, which log end_log_pos 0 for the events inside a
transaction). :meth:`PositionTracker.start_of` gives an event's start before
it is decoded, so nothing above the decoder reads header bytes.

Pure: the daemon, the file tools and Spark share it.
"""

from __future__ import annotations

import struct

from . import events as E
from .constants import HEARTBEATS
from .constants import EventType as ET
from .gtid import Gtid, MariadbGtid, MariadbGtidList, MysqlGtidSet
from .records import record, replace
from .rows import ROWS_TYPES, STMT_END_F

_GROUP_OPENERS = frozenset({ET.INTVAR, ET.RAND, ET.USER_VAR, ET.TABLE_MAP, ET.BEGIN_LOAD_QUERY, ET.APPEND_BLOCK,
                            ET.CREATE_FILE, ET.ROWS_QUERY, ET.ANNOTATE_ROWS})
_ENDING_STATEMENTS = ("COMMIT", "ROLLBACK", "XA PREPARE", "XA COMMIT", "XA ROLLBACK")
# observe() runs for every event: plain ints and sets, as an IntEnum member lookup costs ~0.2 µs on 3.11.
_ROTATE, _TRANSACTION_PAYLOAD, _ANONYMOUS_GTID, _MARIADB_GTID = (
    int(ET.ROTATE), int(ET.TRANSACTION_PAYLOAD), int(ET.ANONYMOUS_GTID), int(ET.MARIADB_GTID))
_GTIDS = frozenset({ET.GTID, ET.GTID_TAGGED})
_ENDS = frozenset({ET.XID, ET.XA_PREPARE})
_QUERIES = frozenset({ET.QUERY, ET.QUERY_COMPRESSED, ET.EXECUTE_LOAD_QUERY})
_LENGTH_NEXT = struct.Struct("<II")  # event_length and next_position, at offset 9 of a v4 header


@record
class Position:
    """A resumable point in the primary's binlog.

    Fields:
        file, pos: the binlog file and the offset of the next event to read.
        gtid_set: MySQL executed GTID set text ("" when unknown or unused).
        gtid_list: MariaDB GTID list text, one GTID per domain ("" when unused).
    """

    file: str
    pos: int
    gtid_set: str = ""
    gtid_list: str = ""

    def to_dict(self) -> dict:
        """The checkpoint file's form: ``{"file", "pos", "gtid_set", "gtid_list"}``."""
        return {"file": self.file, "pos": self.pos, "gtid_set": self.gtid_set, "gtid_list": self.gtid_list}

    @classmethod
    def from_dict(cls, data: dict) -> Position:
        """The inverse of :meth:`to_dict` (GTID keys optional).

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not a position.
        """
        return cls(str(data["file"]), int(data["pos"]), str(data.get("gtid_set", "")),
                   str(data.get("gtid_list", "")))


def is_before(file: str, pos: int, than_file: str, than_pos: int) -> bool:
    """True when ``file:pos`` is before ``than_file:than_pos``: in the same file, or in an older one of the same
    base name (binlog numbers compared). Names that cannot be compared ("" before the first ROTATE,
    another base name) are not before."""
    if file == than_file:
        return pos < than_pos
    stem, _, number = file.rpartition(".")
    than_stem, _, than_number = than_file.rpartition(".")
    return stem == than_stem and number.isdigit() and than_number.isdigit() and int(number) < int(than_number)


def _statement(query: str) -> str:
    return query.lstrip(" \t\r\n(/*").upper()


class PositionTracker:
    """Follows the stream event by event and knows the last committed boundary.

    Fields:
        file, pos: the live position: where the next event starts (after the last event seen).
        committed: the Position after the last complete transaction.
        in_transaction: True between a transaction's first and last event.
        gtid: the GTID of the transaction in progress (text) or None.
    """

    def __init__(self, start: Position):
        self.file, self.pos = start.file, start.pos
        self.gtid_set = MysqlGtidSet.parse(start.gtid_set) if start.gtid_set else MysqlGtidSet()
        self.gtid_list = MariadbGtidList.parse(start.gtid_list) if start.gtid_list else MariadbGtidList()
        self._committed: Position | None = start  # None: build it from the sets when asked
        self._committed_at = (start.file, start.pos)
        self.in_transaction = False
        self.gtid: str | None = None
        self._pending: Gtid | MariadbGtid | None = None
        self._began = False        # saw BEGIN in the current group
        self._standalone = False   # MariaDB group with no COMMIT: ends after its one statement

    @property
    def committed(self) -> Position:
        """The Position after the last complete transaction. Its GTID texts are made when it is asked
        for (at commits, not per transaction): the sets change only when a transaction ends, which
        also moves this position, so the current sets are always the committed ones."""
        if self._committed is None:
            file, pos = self._committed_at
            self._committed = Position(file, pos, str(self.gtid_set), str(self.gtid_list))
        return self._committed

    def _commit_at(self, ended: bool) -> None:
        """Move ``committed`` to the live position (with new GTID sets if a transaction ``ended``).

        Without a transaction ending, never backwards: a resume by GTID starts at a file's beginning (the
        primary's ROTATE names ``<file>:4``, or an older file's) and re-reads header events that lie
        before the position it resumed from."""
        if not ended and is_before(self.file, self.pos, *self._committed_at):
            return
        self._committed_at = (self.file, self.pos)
        if ended or self._committed is None:
            self._committed = None
        else:
            self._committed = replace(self._committed, file=self.file, pos=self.pos)

    @property
    def inside(self) -> bool:
        """In a transaction that only its own end (XID, COMMIT…) closes: the rows events and their
        context (TABLE_MAP, ANNOTATE_ROWS) move nothing here but the position (:meth:`skip`)."""
        return self.in_transaction and self._began

    def start_of(self, raw: bytes | memoryview) -> int:
        """Where the complete v4 event ``raw``, the next in the stream, starts in the primary's file.

        Its logged end minus its length when it logs an end (next_position); else, when it logs 0
        (MariaDB 11.4+ inside a transaction, artificial events), where the last event ended; past 4 GiB
        of file, where the logged u32 end wrapped, the offset it stands for near the running one. For a
        heartbeat or an artificial event, which is not in the file, that is only where the stream
        stands. A header too short to read gives :attr:`pos` (the decoder then rejects it).
        """
        if len(raw) >= 19:
            length, next_position = _LENGTH_NEXT.unpack_from(raw, 9)
            if next_position >= length > 0:
                start = next_position - length
                if self.pos - start > 1 << 31:  # the logged end is a u32: past 4 GiB of file it wrapped
                    start += (self.pos - start + (1 << 31)) >> 32 << 32
                return start
        return self.pos

    def skip(self, next_position: int) -> None:
        """Account for events that :meth:`observe` would only move the position for (see :attr:`inside`)."""
        self.pos = next_position

    def observe(self, event: E.Event) -> bool:
        """Account for one event (in stream order). Returns True when it ended a transaction."""
        h = event.header
        tc = h.type_code
        if tc == _ROTATE:
            self.file, self.pos = event.next_file, event.position
            if not self.in_transaction:
                self._commit_at(False)
            return False
        if tc in HEARTBEATS:
            return False  # a heartbeat says where the primary is, not where we are
        if tc == _TRANSACTION_PAYLOAD:
            ended = False
            for inner in event.events:
                ended = self._observe_group(inner) or ended
            return self._advance(h, ended)
        return self._advance(h, self._observe_group(event))

    def _advance(self, h: E.EventHeader, ended: bool) -> bool:
        if h.next_position > h.pos:
            self.pos = h.next_position
        elif not h.artificial:
            self.pos = h.pos + h.event_length  # logged 0 (MariaDB 11.4+ inside a transaction) or wrapped: count on
        if ended:
            self._commit_at(True)
            self.gtid = None
        elif not self.in_transaction and h.next_position:
            # Events between transactions (FDE, PREVIOUS_GTIDS, GTID_LIST, STOP…) can be skipped on resume.
            self._commit_at(False)
        return ended

    def _start(self, gtid: Gtid | MariadbGtid | None, text: str | None) -> None:
        self.in_transaction, self._began, self._standalone = True, False, False
        self._pending, self.gtid = gtid, text

    def _end(self) -> bool:
        if isinstance(self._pending, Gtid):
            self.gtid_set.add(self._pending)
        elif isinstance(self._pending, MariadbGtid):
            self.gtid_list.advance(self._pending)
        self.in_transaction, self._pending = False, None
        return True

    def _observe_group(self, event: E.Event) -> bool:
        tc = event.header.type_code
        if tc in _GTIDS:
            self._start(Gtid(event.sid, event.gno, event.tag), event.gtid)
        elif tc == _ANONYMOUS_GTID:
            self._start(None, None)
        elif tc == _MARIADB_GTID:
            self._start(MariadbGtid(event.domain_id, event.header.server_id, event.seq_no), event.gtid)
            # MariaDB's GTID replaces BEGIN; a standalone group (DDL) has no COMMIT at all.
            self._standalone = event.standalone
            self._began = not event.standalone
        elif tc in _ENDS:
            return self._end()
        elif tc in _GROUP_OPENERS:
            # Context events (INSERT_ID, RAND seeds, user variables, LOAD DATA blocks, TABLE_MAP)
            # belong to the statement after them: a resume must not start between them.
            if not self.in_transaction:
                self._start(None, None)
        elif tc in ROWS_TYPES:
            if not self.in_transaction:
                self._start(None, None)
            if event.flags & STMT_END_F and not self._began:
                return self._end()  # a non-transactional statement logged without BEGIN (5.1)
        elif tc in _QUERIES:
            statement = _statement(event.query)
            if statement.startswith("BEGIN") or statement.startswith("XA START"):
                if not self.in_transaction:
                    self._start(None, None)
                self._began = True
                return False
            if statement.startswith(("XA END", "ROLLBACK TO", "SAVEPOINT", "RELEASE SAVEPOINT")):
                return False  # inside the transaction
            if statement.startswith(_ENDING_STATEMENTS):
                return self._end()
            if not self.in_transaction or not self._began or self._standalone:
                # DDL (or a statement logged without BEGIN): a transaction by itself.
                if not self.in_transaction:
                    self._start(None, None)
                return self._end()
        return False
