"""Typed binlog events: one frozen, slotted dataclass per event type.

Every event has ``header`` (:class:`EventHeader`); the other fields are the
event's own. Row events decode their rows lazily on first access of ``rows``.

The classes are frozen, slotted dataclasses (``dataclasses.fields``, ``asdict`` and ``replace`` work on
them) made by :func:`protocol.records.record`: a class's ``__init__`` is compiled when its first instance
is made (most classes of a run never have one) and ``__repr__``, ``__eq__`` and ``__hash__`` are shared.
"""

from __future__ import annotations

from .constants import LOG_EVENT_ARTIFICIAL_F, EventType, event_name
from .primitives import text
from .records import field, record

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


_FORMAT_DESCRIPTION = int(EventType.FORMAT_DESCRIPTION)


@record(slots=True)
class EventHeader:
    """The common event header.

    Fields:
        timestamp: unix seconds the statement started (0 for artificial events).
        type_code: event type code (see :class:`protocol.constants.EventType`).
        server_id: server that wrote the event.
        event_length: total length of the event, header and checksum included.
        next_position: the log position after this event (0 in v1 headers and
            for artificial or in-payload events).
        flags: LOG_EVENT_*_F flags.
        pos: where the event starts in its file or stream (not part of the wire
            header; filled in by the reader).
    """

    timestamp: int
    type_code: int
    server_id: int
    event_length: int
    next_position: int
    flags: int
    pos: int = 0

    @property
    def type_name(self) -> str:
        """The event's name without ``_EVENT``, as ``binlogd dump --json`` prints it."""
        return event_name(self.type_code)

    @property
    def artificial(self) -> bool:
        """True for an event a primary sends that is not at this place in its binlog file: the ROTATE
        a dump starts with and MariaDB's GTID list at a GTID connect (LOG_EVENT_ARTIFICIAL_F, or a
        timestamp of 0 from older servers), and the FORMAT_DESCRIPTION re-sent when a dump starts
        inside a file (logged position 0). Such an event names the file or the format, and is never
        archived, committed or counted for lag. Heartbeats are apart: :data:`constants.HEARTBEATS`."""
        return bool(self.flags & LOG_EVENT_ARTIFICIAL_F) or self.timestamp == 0 \
            or (self.type_code == _FORMAT_DESCRIPTION and self.next_position == 0)


@record(slots=True)
class Event:
    """Base of every event. Subclasses add their own fields."""

    header: EventHeader


@record(slots=True)
class UnknownEvent(Event):
    """An event whose type code the decoder does not know; ``body`` is its raw payload."""

    body: bytes


@record(slots=True)
class FormatDescriptionEvent(Event):
    """FORMAT_DESCRIPTION (v4) or START_EVENT_V3: the format of every later event.

    Fields:
        binlog_version: 1, 3 or 4.
        server_version: e.g. ``"8.0.32"`` or ``"10.11.6-MariaDB-log"``.
        create_timestamp: when the file was created (0 after the first file).
        header_length: 13 or 19.
        post_header_lengths: per event type (index = type code - 1).
        checksum_alg: 0 (none), 1 (CRC32) or None when the server predates checksums.
    """

    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int | None


@record(slots=True)
class QueryEvent(Event):
    """QUERY (and MariaDB QUERY_COMPRESSED, EXECUTE_LOAD_QUERY).

    Fields:
        thread_id, exec_time, error_code: from the post-header.
        schema: the default database.
        query: the statement text.
        status: decoded status variables by name (``flags2``, ``sql_mode``,
            ``charset``, ``time_zone``, ``updated_db_names``, ``xid``, …).
    """

    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: dict[str, Any]


@record(slots=True)
class ExecuteLoadQueryEvent(QueryEvent):
    """EXECUTE_LOAD_QUERY: a LOAD DATA statement whose file came in earlier blocks."""

    file_id: int
    start_pos: int
    end_pos: int
    dup_handling: int


@record(slots=True)
class RotateEvent(Event):
    """ROTATE: the next binlog file and the position to continue at."""

    position: int
    next_file: str


@record(slots=True)
class StopEvent(Event):
    """STOP: the server stopped and closed this file."""


@record(slots=True)
class XidEvent(Event):
    """XID: commit of a transactional (InnoDB) transaction."""

    xid: int


@record(slots=True)
class IntvarEvent(Event):
    """INTVAR: LAST_INSERT_ID (kind 1) or INSERT_ID (kind 2) for the next statement."""

    kind: int
    value: int


@record(slots=True)
class RandEvent(Event):
    """RAND: the two seeds of RAND() for the next statement."""

    seed1: int
    seed2: int


@record(slots=True)
class UserVarEvent(Event):
    """USER_VAR: a user variable the next statement uses; ``value`` None means NULL."""

    name: str
    value: Any
    value_type: int | None
    charset: int | None
    is_unsigned: bool


@record(slots=True)
class IncidentEvent(Event):
    """INCIDENT: something happened on the primary that replicas cannot replay."""

    incident: int
    message: str


@record(slots=True)
class HeartbeatEvent(Event):
    """HEARTBEAT / HEARTBEAT_V2: the primary is alive; ``position`` is 64-bit in v2."""

    log_file: str
    position: int


@record(slots=True)
class GtidEvent(Event):
    """MySQL GTID, ANONYMOUS_GTID or GTID_TAGGED: starts a transaction.

    Fields:
        sid: server UUID (all zeros for anonymous), gno: sequence number,
        tag: GTID tag or None, commit_flag: statement committed in one event,
        last_committed / sequence_number: logical clock (None on 5.6),
        immediate_commit_ts / original_commit_ts: microseconds (None before 8.0),
        transaction_length: bytes of the transaction (None before 8.0.2).
    """

    sid: str
    gno: int
    tag: str | None
    commit_flag: bool
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_ts: int | None = None
    original_commit_ts: int | None = None
    transaction_length: int | None = None

    @property
    def gtid(self) -> str | None:
        """``uuid:[tag:]gno``, or None for an anonymous transaction."""
        if self.header.type_code == EventType.ANONYMOUS_GTID:
            return None
        return f"{self.sid}:{self.tag}:{self.gno}" if self.tag else f"{self.sid}:{self.gno}"


@record(slots=True)
class PreviousGtidsEvent(Event):
    """PREVIOUS_GTIDS: the GTID set of every earlier file (``gtid_set`` in MySQL text form)."""

    gtid_set: str


@record(slots=True)
class RowsQueryEvent(Event):
    """ROWS_QUERY (MySQL) or ANNOTATE_ROWS (MariaDB): the statement behind the next rows.

    Fields:
        statement: the statement's bytes as logged (a view of the event's bytes, as a rows event holds
            its images; bytes once pickled).
        query: (a property) their text, UTF-8 with bad bytes backslash-escaped, decoded on first read:
            a consumer that never reads it (the JSON-lines sink, ``binlogd sql``'s comment lines, from
            the bytes) costs no copy and no decode. It stands as the event's field in ``repr``, ``==``,
            ``hash`` and the JSON of ``binlogd dump --json`` (:func:`library.serialize.event_to_dict`).
    """

    statement: bytes | memoryview = field(repr=False, compare=False)
    _text: list = field(default_factory=list, repr=False, compare=False)
    _as_fields = ("query",)

    @property
    def query(self) -> str:
        cache = self._text
        if not cache:
            cache.append(text(self.statement))
        return cache[0]


@record(slots=True)
class TransactionContextEvent(Event):
    """TRANSACTION_CONTEXT (group replication certification info)."""

    server_uuid: str
    thread_id: int
    gtid_specified: bool
    body: bytes


@record(slots=True)
class ViewChangeEvent(Event):
    """VIEW_CHANGE (group replication membership change)."""

    view_id: str
    seq_number: int
    body: bytes


@record(slots=True)
class XaPrepareEvent(Event):
    """XA_PREPARE: ``XA PREPARE`` (or one-phase ``XA COMMIT``) of an XA transaction."""

    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


@record(slots=True)
class TransactionPayloadEvent(Event):
    """TRANSACTION_PAYLOAD: a whole (compressed) transaction.

    Fields:
        compression: 0 = zstd, 255 = none.
        payload_size / uncompressed_size: byte counts.
        events: the inner events, decoded, in order.
        offsets: where each inner event starts in the uncompressed payload (a change's identity names it).
    """

    compression: int
    payload_size: int
    uncompressed_size: int
    events: tuple[Event, ...]
    offsets: tuple[int, ...] = ()


@record(slots=True)
class LoadBlockEvent(Event):
    """BEGIN_LOAD_QUERY, APPEND_BLOCK, CREATE_FILE: a block of a LOAD DATA file."""

    file_id: int
    data: bytes


@record(slots=True)
class LoadFileEvent(Event):
    """EXEC_LOAD, DELETE_FILE: run or drop the LOAD DATA file ``file_id``."""

    file_id: int


@record(slots=True)
class LegacyLoadEvent(Event):
    """LOAD / NEW_LOAD (pre-5.0 LOAD DATA INFILE) and CREATE_FILE's statement part."""

    thread_id: int
    exec_time: int
    skip_lines: int
    schema: str
    table: str
    file_name: str
    fields: tuple[str, ...]
    file_id: int | None = None
    data: bytes | None = None  # CREATE_FILE: the first block of the file


@record(slots=True)
class IgnorableEvent(Event):
    """IGNORABLE_EVENT (28). (Unknown types flagged LOG_EVENT_IGNORABLE_F stay UnknownEvent;
    consumers check the flag.)"""

    body: bytes


@record(slots=True)
class MariadbGtidEvent(Event):
    """MariaDB GTID: starts an event group; ``standalone`` means no BEGIN/COMMIT (DDL).

    Fields:
        domain_id, seq_no (server id is ``header.server_id``), flags,
        commit_id: group commit id or None, xid: XA id bytes or None.
    """

    domain_id: int
    seq_no: int
    flags: int
    commit_id: int | None = None
    xa_xid: bytes | None = None

    @property
    def gtid(self) -> str:
        """``domain-server-seq``."""
        return f"{self.domain_id}-{self.header.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        """True when the group is a single statement (DDL), committed by itself."""
        return bool(self.flags & 1)


@record(slots=True)
class MariadbGtidListEvent(Event):
    """MariaDB GTID_LIST: the last GTID of each domain before this file."""

    gtids: tuple[str, ...]
    flags: int


@record(slots=True)
class BinlogCheckpointEvent(Event):
    """MariaDB BINLOG_CHECKPOINT: the oldest file crash recovery still needs."""

    checkpoint_file: str


@record(slots=True)
class StartEncryptionEvent(Event):
    """MariaDB START_ENCRYPTION: every later event in the file is encrypted."""

    scheme: int
    key_version: int
    nonce: bytes


@record(slots=True)
class UndecodedRowsEvent(Event):
    """A rows event from a decoder built with ``rows=False``: its header and ``flags`` only.

    Such a decoder also passes TABLE_MAP, ANNOTATE_ROWS and ROWS_QUERY as a bare :class:`Event`
    (their length and checksum are checked all the same).
    """

    flags: int


@record(slots=True)
class TableMapEvent(Event):
    """TABLE_MAP: the table the next row events change, with its column types.

    Fields:
        table_id, flags, schema, table,
        columns: one :class:`protocol.tablemap.Column` per column, with whatever
            the optional metadata (or a schema source) told about it.
    """

    table_id: int
    flags: int
    schema: str
    table: str
    columns: tuple  # tuple[protocol.tablemap.Column, ...]


@record(slots=True)
class RowsEvent(Event):
    """WRITE/UPDATE/DELETE/PARTIAL_UPDATE rows (v0, v1, v2, MariaDB compressed).

    Fields:
        kind: "insert", "update" or "delete".
        table_id, flags, schema, table.
        columns: the column names in table order (``@1``… where unknown).
        rows: for insert/delete a list of ``{column: value}``; for update a list of
            ``(before, after)`` pairs. Only the columns present in the image appear; a PARTIAL_UPDATE_ROWS after
            image holds a partially updated JSON column as its diffs, a :class:`protocol.jsonb.JsonDiffs`.
            Decoded on first access; raises EventDecodeError on malformed rows.
        images: the event's row images: called, it decodes them (what ``rows`` holds); its ``data`` is their
            bytes, which the C writers read directly.
    """

    kind: str
    table_id: int
    flags: int
    schema: str
    table: str
    columns: tuple[str, ...]
    images: Callable[[], list] = field(repr=False, compare=False)
    _cache: list = field(default_factory=list, repr=False, compare=False)

    @property
    def rows(self) -> list:
        cache = self._cache
        if not cache:
            cache.append(self.images())
        return cache[0]


