"""Binlog files as transactions: the unit ``binlogd sql`` selects, replays and inverts.

A :class:`Group` is one transaction, or one statement the server logged by itself (DDL, a statement
on a non-transactional table). Where one starts and ends is the daemon's rule, applied by the same
code (:class:`binlogd.protocol.position.PositionTracker`): from a GTID, a BEGIN, or the first context
event of a statement, to XID, COMMIT, ROLLBACK, XA PREPARE, a DDL, the statement of a group without
BEGIN, or a rows event ending a statement logged without BEGIN. The events inside a
TRANSACTION_PAYLOAD are taken as if they stood in the file.

:func:`select` applies the range options to the groups of a sequence of files: a range that starts
inside a transaction takes the whole transaction, one that stops inside a transaction leaves it out,
and both corrections are reported through ``notice``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator

from binlogd.cli import filetools
from binlogd.library.schema.history import SchemaTracker
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol import events as E
from binlogd.protocol.bodies import mariadb_uncompress
from binlogd.protocol.constants import LOG_EVENT_IGNORABLE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.gtid import Gtid, MariadbGtid, MysqlGtidSet
from binlogd.protocol.position import Position, PositionTracker
from binlogd.protocol.reader import iter_events
from binlogd.protocol.records import field, record
from binlogd.protocol.rows import STMT_END_F, RowImages

_RAW_QUERIES = frozenset({ET.QUERY, ET.QUERY_COMPRESSED, ET.EXECUTE_LOAD_QUERY})
_SKIPPED = (E.FormatDescriptionEvent, E.RotateEvent, E.StopEvent, E.PreviousGtidsEvent, E.MariadbGtidListEvent,
            E.BinlogCheckpointEvent, E.HeartbeatEvent, E.IgnorableEvent, E.TransactionContextEvent,
            E.ViewChangeEvent)
_LEGACY_LOAD = (E.LoadFileEvent, E.LegacyLoadEvent)
_RUN_BYTES = 1 << 20


def statement_kind(text: str) -> str:
    """The first words of a statement, upper-cased, comments and parentheses stripped (``"BEGIN"``…)."""
    return text.lstrip(" \t\r\n(/*").upper()


@record(slots=True)
class Statement:
    """A QUERY event with its statement text exactly as logged (raw bytes as surrogate-escaped str)."""

    event: E.QueryEvent
    text: str


_CONTEXT = (E.IntvarEvent, E.RandEvent, E.UserVarEvent, E.TableMapEvent, E.RowsQueryEvent, E.LoadBlockEvent)


@record(frozen=False)
class Group:
    """One transaction, or one statement logged by itself.

    Fields:
        file: the binlog file (as given). start: offset of its first event; end: offset after its last.
        events: its events in order (QUERY events as :class:`Statement`, runs of like rows events as
        :class:`RowsRun` when asked for; BEGIN and the end are not kept).
        gtid: the GTID (``Gtid`` or ``MariadbGtid``) or None. began: logged with BEGIN (or as a
        MariaDB transaction): replayed inside BEGIN…COMMIT. closer: "COMMIT", "ROLLBACK" or the
        XA statement that ended it; None for a statement by itself.
        first_ts, last_ts: the first event's timestamp and the latest one.
        flavor: "mariadb" or "mysql", from the file's FORMAT_DESCRIPTION.
    """

    file: str
    start: int
    flavor: str
    end: int = 0
    events: list = field(default_factory=list)
    gtid: Gtid | MariadbGtid | None = None
    began: bool = False
    closer: str | None = None
    first_ts: int = 0
    last_ts: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.start}"


class RowsRun:
    """A rows event and the events after it in its file that are just like it but for their rows
    (:meth:`Decoder.rows_like`): what :mod:`.native` writes in one C call, without an object per event.

    Fields:
        first: the first event, decoded. view: the file. start, stop: the events' offsets (start is first's).
        count: how many. ends: the last one ends its statement (STMT_END_F). head: where each one's row images
        start in it; crc: the checksum bytes at its end.
    """

    __slots__ = ("first", "view", "start", "stop", "count", "ends", "head", "crc")

    def __init__(self, first: E.RowsEvent, view: memoryview, stop: int, count: int, ends: bool, crc: int):
        self.first, self.view, self.start, self.stop = first, view, first.header.pos, stop
        self.count, self.ends, self.crc = count, ends, crc
        self.head = first.header.event_length - crc - len(first.images.data)

    def events(self) -> list[E.RowsEvent]:
        """The events one by one, as the decoder gives them (for the reference path)."""
        first, images, view, out, pos = self.first, self.first.images, self.view, [], self.start
        fh = first.header
        while pos < self.stop:
            length = int.from_bytes(view[pos + 9:pos + 13], "little")
            h = E.EventHeader(fh.timestamp, fh.type_code, fh.server_id, length,
                              int.from_bytes(view[pos + 13:pos + 17], "little"), fh.flags, pos)
            data = view[pos + self.head:pos + length - self.crc]
            source = RowImages(images.codec, images.kind, data, images.present_before, images.present_after,
                               images.partial, h, images.null_offset)
            flags = first.flags | STMT_END_F if self.ends and pos + length == self.stop else first.flags
            out.append(E.RowsEvent(h, first.kind, first.table_id, flags, first.schema, first.table, first.columns,
                                   source))
            pos += length
        return out


def _raw_statement(view: memoryview, event: E.QueryEvent, decoder: Decoder) -> str:
    """The statement bytes of a QUERY (or QUERY_COMPRESSED) event in the file, as surrogate-escaped str:
    the decoder's text has escaped the bytes its character set does not decode."""
    h = event.header
    body = h.pos + decoder.header_len
    post = decoder.post_header_len(h.type_code)
    status_len = int.from_bytes(view[body + 11:body + 13], "little") if post >= 13 else 0
    start = body + post + status_len + view[body + 8] + 1
    end = h.pos + h.event_length - decoder.crc_len
    raw = bytes(view[start:end])
    if h.type_code == ET.QUERY_COMPRESSED:
        raw = mariadb_uncompress(memoryview(raw))
    return raw.decode("utf-8", "surrogateescape")


def file_groups(path: str, notice: Callable[[str], None], tracker: SchemaTracker | None = None,
                runs: bool = False, skip_before: int = 0) -> Iterator[Group]:
    """The groups of one binlog file, in order; a group the file ends inside is reported and left out.

    ``tracker`` (a schema history) names the columns of TABLE_MAPs that carry no names, and follows
    the DDL of the file. With ``runs``, the rows events after one that are just like it but for their
    rows are kept as one :class:`RowsRun` (up to about 1 MiB of them each). A group that ends at or
    before ``skip_before`` comes without the rows events, TABLE_MAPs and logged statements of its BEGIN
    transaction, which are passed over unread (only their headers: they move nothing but the position);
    a group that reaches past it is read again whole.

    Raises:
        SqlOutError: the file is not a binlog, is truncated or corrupt; an INCIDENT, LOAD DATA, or an
            event type nobody may skip (each naming the file and offset).
        OSError: the file cannot be read.
    """
    try:
        yield from _file_groups(path, notice, tracker, runs, skip_before)
    except SqlOutError:
        raise
    except BinlogError as exc:
        raise SqlOutError(f"{path}: {exc}") from exc


def _file_groups(path: str, notice: Callable[[str], None], tracker: SchemaTracker | None,
                 runs: bool, skip_before: int) -> Iterator[Group]:
    view = filetools.mapped(path)
    decoder = Decoder(schema_source=tracker.lookup if tracker is not None else None)
    name = os.path.basename(path)
    bounds = PositionTracker(Position(name, 4))  # the one rule for where transactions start and end
    flavor = "mysql"
    cur: Group | None = None
    skipped = False  # events of cur were passed over unread
    walk = iter_events(view, decoder)
    for event in walk:
        h = event.header
        end = h.pos + h.event_length
        if tracker is not None:
            tracker.observe(event, name, end)
        if isinstance(event, E.FormatDescriptionEvent):
            flavor = "mariadb" if "mariadb" in event.server_version.lower() else "mysql"
        _check(event, path)
        if isinstance(event, (E.GtidEvent, E.MariadbGtidEvent)) and cur is not None:
            notice(f"{path}:{h.pos}: a GTID before the transaction at {cur.start} ended: that one is left out")
            cur, skipped = None, False
        ended = bounds.observe(event)
        if not ended and not bounds.in_transaction:
            continue  # between transactions: FORMAT_DESCRIPTION, ROTATE, GTID lists, checkpoints…
        if cur is None:
            cur = Group(path, h.pos, flavor, first_ts=h.timestamp)
        cur.began |= bounds.inside
        cur.last_ts = max(cur.last_ts, h.timestamp)
        for e in event.events if isinstance(event, E.TransactionPayloadEvent) else (event,):
            if isinstance(e, E.QueryEvent):
                e = Statement(e, _raw_statement(view, e, decoder) if e is event and h.type_code in _RAW_QUERIES
                              else e.query)
            _add(cur, e)
        if end < skip_before and bounds.inside and not ended:
            stop, cut = decoder.past_row_context(view, end, skip_before)
        else:
            stop, cut = end, end > skip_before
        if cut and (skipped or stop > end):  # cur reaches into the range, and some of it is passed over: read it whole
            walk.send(cur.start)
            bounds, cur, skipped, skip_before = PositionTracker(Position(name, cur.start)), None, False, 0
            continue
        if stop > end:
            skipped = True
            bounds.skip(stop)
            walk.send(stop)
        elif runs and type(event) is E.RowsEvent and not event.flags & STMT_END_F:
            # The events after it that only move the position (in a BEGIN transaction, the last may end the
            # statement): past them at once, and the event with them.
            stop, count, ends = decoder.rows_like(view, end, event, _RUN_BYTES, statement_end=cur.began)
            if count:
                cur.events[-1] = RowsRun(event, view, stop, count + 1, ends, decoder.crc_len)
                bounds.skip(stop)
                walk.send(stop)
        if ended:
            cur.end = end
            yield cur
            cur, skipped = None, False
    if cur is not None:
        notice(f"{path}: the file ends inside the transaction at {cur.start}: it is left out")


def _check(event: E.Event, path: str) -> None:
    """Events no SQL can stand for.

    Raises:
        SqlOutError: an INCIDENT, a pre-5.0 LOAD DATA, or an unknown event not marked ignorable.
    """
    h = event.header
    if isinstance(event, E.IncidentEvent):
        raise SqlOutError(f"{path}:{h.pos}: INCIDENT ({event.message or event.incident}): the primary lost changes "
                          "here, so no replay past it can be right")
    if isinstance(event, _LEGACY_LOAD):
        raise SqlOutError(f"{path}:{h.pos}: {h.type_name}: binlogd sql does not replay the LOAD DATA events "
                          "of servers before 5.0; use mysqlbinlog --local-load for this range")
    if isinstance(event, E.UnknownEvent) and not h.flags & LOG_EVENT_IGNORABLE_F:
        raise SqlOutError(f"{path}:{h.pos}: unknown event type {h.type_code} (not marked ignorable)")


def _add(g: Group, e) -> None:
    """One event of a group: kept for the SQL, or taken as its GTID or its end (BEGIN is the group's own)."""
    if isinstance(e, E.RowsEvent):  # the most of them first
        g.events.append(e)
        if e.flags & STMT_END_F and not g.began:
            g.closer = "COMMIT"  # a statement logged without BEGIN (5.1 non-transactional tables)
    elif isinstance(e, _CONTEXT):
        g.events.append(e)
    elif isinstance(e, E.GtidEvent):
        g.gtid = Gtid(e.sid, e.gno, e.tag) if e.gtid is not None else None
    elif isinstance(e, E.MariadbGtidEvent):
        g.gtid = MariadbGtid(e.domain_id, e.header.server_id, e.seq_no)
    elif isinstance(e, E.XidEvent):
        g.closer = "COMMIT"
    elif isinstance(e, E.XaPrepareEvent):
        xid = f"X'{e.gtrid.hex()}',X'{e.bqual.hex()}',{e.format_id}"
        g.closer = f"XA COMMIT {xid} ONE PHASE" if e.one_phase else f"XA PREPARE {xid}"
    elif isinstance(e, Statement):
        kind = statement_kind(e.text)
        if kind.startswith(("COMMIT", "ROLLBACK")) and not kind.startswith("ROLLBACK TO"):
            g.closer = "ROLLBACK" if kind.startswith("ROLLBACK") else "COMMIT"
        elif not kind.startswith("BEGIN"):
            g.events.append(e)
    elif not isinstance(e, _SKIPPED) and not isinstance(e, E.UnknownEvent):
        raise SqlOutError(f"{g.file}:{e.header.pos}: {e.header.type_name} events are not supported by binlogd sql")


def check_sequence(paths: list[str]) -> None:
    """Each file must follow the one before it: named by its closing ROTATE, else the next number.

    Raises:
        SqlOutError: a file is missing between two, or they are out of order.
        BinlogError, OSError: a file cannot be read as a binlog.
    """
    for prev, path in zip(paths, paths[1:]):
        try:
            nxt = filetools.info(prev).next_file
        except BinlogError as exc:
            raise SqlOutError(f"{prev}: {exc}") from exc
        name = os.path.basename(path)
        if nxt is not None and os.path.basename(nxt) != name:
            raise SqlOutError(f"{prev} rotates to {nxt}, but the next file given is {path}: "
                              f"{nxt} is missing or the files are out of order")
        if nxt is None and not _numbered_successor(os.path.basename(prev), name):
            raise SqlOutError(f"{path} does not follow {prev} ({prev} ends without a ROTATE and {name} "
                              "is not its next number): a file is missing or the files are out of order")


def _numbered_successor(prev: str, name: str) -> bool:
    a, b = re.fullmatch(r"(.*)\.(\d+)", prev), re.fullmatch(r"(.*)\.(\d+)", name)
    return bool(a and b and a.group(1) == b.group(1) and int(b.group(2)) == int(a.group(2)) + 1)


@record(frozen=False)
class Range:
    """The range options. Positions apply to the first file (start) and the last (stop); datetimes
    are unix seconds; ``gtids`` keeps only the transactions it holds (see :func:`parse_gtids`)."""

    start_position: int | None = None
    stop_position: int | None = None
    start_datetime: int | None = None
    stop_datetime: int | None = None
    gtids: Callable[[Gtid | MariadbGtid | None], bool] | None = None


def select(paths: list[str], rng: Range, notice: Callable[[str], None],
           tracker: SchemaTracker | None = None, runs: bool = False) -> Iterator[Group]:
    """The groups of ``paths`` inside ``rng``, whole transactions only (corrections go to ``notice``;
    ``tracker`` and ``runs`` as for :func:`file_groups`).

    Raises:
        SqlOutError, BinlogError, OSError: as :func:`check_sequence` and :func:`file_groups`.
    """
    check_sequence(paths)
    started = rng.start_position is None and rng.start_datetime is None
    for index, path in enumerate(paths):
        first, last = index == 0, index == len(paths) - 1
        for g in file_groups(path, notice, tracker, runs, rng.start_position or 0 if first else 0):
            if not started:
                if first and rng.start_position is not None and g.end <= rng.start_position:
                    continue
                if rng.start_datetime is not None and g.last_ts < rng.start_datetime:
                    continue
                started = True
                if (first and rng.start_position is not None and g.start < rng.start_position) or (
                        rng.start_datetime is not None and g.first_ts < rng.start_datetime):
                    notice(f"{g.where}: the range starts inside this transaction (it ends at {g.end}); "
                           f"moved to its start, {g.start}")
            if last and rng.stop_position is not None and g.end > rng.stop_position:
                if g.start < rng.stop_position:
                    notice(f"{g.where}: the range stops inside this transaction (it ends at {g.end}); "
                           "it is left out")
                return
            if rng.stop_datetime is not None and g.last_ts >= rng.stop_datetime:
                if g.first_ts < rng.stop_datetime:
                    notice(f"{g.where}: the range stops inside this transaction (it commits after the stop "
                           "time); it is left out")
                return
            if rng.gtids is None or rng.gtids(g.gtid):
                yield g


def parse_gtids(text: str) -> Callable[[Gtid | MariadbGtid | None], bool]:
    """``--include-gtids``: a MySQL GTID set (``uuid:1-5,uuid2:7``), or MariaDB GTIDs and ranges
    (``0-1-5`` one transaction, ``0-1-5-9`` sequence numbers 5 to 9 of domain 0, server 1), comma separated.

    Returns:
        A predicate on a group's GTID (None, an anonymous transaction, is never in the set).
    Raises:
        SqlOutError: text that is neither form.
    """
    if ":" in text:
        try:
            gtid_set = MysqlGtidSet.parse(text)
        except ValueError as exc:
            raise SqlOutError(f"--include-gtids: {exc}")
        return lambda gtid: isinstance(gtid, Gtid) and gtid in gtid_set
    ranges = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)-(\d+)-(\d+)(?:-(\d+))?\s*", item)
        if not m:
            raise SqlOutError(f"--include-gtids: {item.strip()!r} is neither a MySQL GTID set nor a MariaDB "
                              "domain-server-seq (or domain-server-first-last)")
        lo = int(m.group(3))
        ranges.append((int(m.group(1)), int(m.group(2)), lo, int(m.group(4) or lo)))
    return lambda gtid: isinstance(gtid, MariadbGtid) and any(
        gtid.domain_id == d and gtid.server_id == s and lo <= gtid.seq_no <= hi for d, s, lo, hi in ranges)
