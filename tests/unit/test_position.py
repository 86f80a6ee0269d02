"""Tests for protocol.position: PositionTracker moves ``committed`` only at transaction boundaries.

The real corpus is checked against an independent segmentation computed here from the events
themselves (:func:`segment`): a transaction starts at a GTID / ANONYMOUS_GTID / MariaDB GTID, at a
``BEGIN``, or (servers without GTIDs, statements logged without ``BEGIN``) at the first event of a
statement (its INTVAR / RAND / USER_VAR / LOAD blocks / TABLE_MAP); it ends at XID, XA_PREPARE, a
``COMMIT`` or ``ROLLBACK`` (not ``ROLLBACK TO <savepoint>``), a statement outside ``BEGIN`` (DDL, a
non-transactional statement) or, outside ``BEGIN``, a rows event carrying STMT_END_F.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from binlogd.protocol import events as E
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.gtid import Gtid, MariadbGtid, MariadbGtidList, MysqlGtidSet
from binlogd.protocol.position import Position, PositionTracker
from binlogd.protocol.reader import iter_events
from binlogd.protocol.rows import ROWS_TYPES

# --------------------------------------------------------------------------- corpus files

ANONYMOUS_GTID_FILES = [
    "canal/tsdb/mysql-bin.000002",
    "canal/tsdb/mysql-bin.000003",
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32",
    "mysql-binlog-connector-java/mysql-bin.checksum-none",
    "rust_mysql_common/slave-relay-bin.000001",  # a relay log whose offsets still chain
    "rust_mysql_common/master-bin.000001",  # no transaction at all
    "rust_mysql_common/bug27213339-bin.000001",
    "rust_mysql_common/binlog_transaction_with_anonymous_GTID.000001",
    "rust_mysql_common/rpl_cross_version_default_utf8mb4_collation.000001",
    "rust_mysql_common/json.binlog.000001",
    "rust_mysql_common/json-opaque.binlog",
    "rust_mysql_common/vector.binlog",
    "rust_mysql_common/minimal_row_metadata.000001",
    "rust_mysql_common/time_issue.000001",
]
GTID_FILES = [
    "mysql-binlog-connector-rust/mysql-bin.000080",
    "rust-mysql-binlog/bin-log.000001",
    "rust_mysql_common/binlog-invisible-columns.000001",
    "rust_mysql_common/binlog_56_gtid_reserved_word.000001",
    "rust_mysql_common/binlog_transaction_with_GTID.000001",
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",  # MySQL 9.6 tagged GTID
    "rust_mysql_common/mysql-enum-string-set.000001",
    "rust_mysql_common/mysql_type_bit.000001",
    "rust_mysql_common/rpl_atomic_ddl_rollback_full.000001",
    "rust_mysql_common/rpl_atomic_ddl_rollback_table.000001",
    "rust_mysql_common/rpl_atomic_ddl_rollback_view.000001",
]
PAYLOAD_FILES = [  # MySQL 8 TRANSACTION_PAYLOAD
    "mysql-binlog-connector-java/mysql-bin.compressed",
    "mysql-binlog-connector-rust/mysql-bin.000057",
    "rust_mysql_common/transaction_compression.000001",
]
MARIADB_FILES = ["rust_mysql_common/mariadb-bin.000001"]
STATEMENT_FILES = [  # 5.0 / 5.1 / 5.5 / 5.6 without GTIDs: BEGIN ... COMMIT / XID, DDL by itself
    "canal/mysql-bin.000001",
    "canal/mysql-bin.000002",
    "mysql-binlog-connector-java/mysql-bin.sakila",
    "rust_mysql_common/binlog_transaction.000001",
    "rust_mysql_common/bug11747887-bin.000003",
    "rust_mysql_common/bug16266.000001",
    "rust_mysql_common/bug32407.001",
    "rust_mysql_common/bug40482-bin.000001",
    "rust_mysql_common/write-full-row.binlog",
    "rust_mysql_common/write-partial-row.binlog",
    "rust_mysql_common/update-full-row.binlog",
    "rust_mysql_common/update-partial-row.binlog",
    "rust_mysql_common/ver_trunk_row_v2.001",
    "rust_mysql_common/ver_5_1_23.001",
    "rust_mysql_common/ver_5_1-wl2325_r.001",
    "ybinlogp/mysql-bin.default-path",
    "ybinlogp/mysql-bin.delayed-event",
]
# Relay logs: their next_position values are the primary's, not offsets in the file, so only
# the transaction count is checked on them.
RELAY_FILES = [
    "rust_mysql_common/binlog_savepoint.000001",  # BEGIN … SAVEPOINT … ROLLBACK TO … XID
    "rust_mysql_common/bug33029-slave-relay-bin.000001",
    "rust_mysql_common/rpl_unfiltered_hidden_gcol.000001",
    "rust_mysql_common/ver_5_1-wl2325_s.001",
]
FILE_FILES = ANONYMOUS_GTID_FILES + GTID_FILES + PAYLOAD_FILES + MARIADB_FILES + STATEMENT_FILES
ALL_FILES = FILE_FILES + RELAY_FILES

GTID_TYPES = {ET.GTID, ET.GTID_TAGGED, ET.ANONYMOUS_GTID, ET.MARIADB_GTID}
STATEMENT_CONTEXT = {ET.INTVAR, ET.RAND, ET.USER_VAR, ET.BEGIN_LOAD_QUERY, ET.APPEND_BLOCK, ET.CREATE_FILE,
                     ET.TABLE_MAP, ET.ROWS_QUERY, ET.ANNOTATE_ROWS}
QUERY_TYPES = {ET.QUERY, ET.QUERY_COMPRESSED, ET.EXECUTE_LOAD_QUERY}
STMT_END_F = 1


def load(corpus: Path, name: str) -> tuple[bytes, list[E.Event]]:
    path = corpus / name
    assert path.is_file(), f"corpus file {name} missing"
    data = path.read_bytes()
    return data, list(iter_events(data))


def file_name(name: str) -> str:
    return Path(name).name


# --------------------------------------------------------------------------- the independent oracle


def _first_words(query: str) -> list[str]:
    return re.sub(r"/\*.*?\*/", " ", query, flags=re.S).strip().upper().split()


@dataclass
class Segmentation:
    ends: int = 0                     # transactions ended
    xids: int = 0
    commits: int = 0                  # COMMIT / ROLLBACK / XA COMMIT / XA ROLLBACK queries
    standalone: int = 0               # statements logged outside BEGIN (DDL, non-transactional)
    boundaries: set[int] = field(default_factory=set)   # offsets where no transaction is open
    starts: dict[int, int] = field(default_factory=dict)  # event offset → offset of its transaction's start
    gtids: list[str] = field(default_factory=list)
    ended_by: set[int] = field(default_factory=set)  # offsets of the events that ended a transaction
    end_pos: int = 0


def segment(events: list[E.Event]) -> Segmentation:
    seg = Segmentation()
    state = {"open": False, "block": False}

    def close() -> None:
        seg.ends += 1
        state["open"] = state["block"] = False

    def one(ev: E.Event) -> None:
        tc = ev.header.type_code
        if tc in GTID_TYPES:
            state["open"] = True
            state["block"] = tc == ET.MARIADB_GTID and not ev.standalone
            if tc != ET.ANONYMOUS_GTID:
                seg.gtids.append(ev.gtid)
        elif tc in (ET.XID, ET.XA_PREPARE):
            seg.xids += tc == ET.XID
            close()
        elif tc in QUERY_TYPES:
            words = _first_words(ev.query) or [""]
            head = " ".join(words[:2])
            if words[0] == "BEGIN" or head == "XA START":
                state["open"] = state["block"] = True
            elif head == "XA END":
                pass
            elif words[0] == "COMMIT" or (words[0] == "ROLLBACK" and words[1:2] != ["TO"]) \
                    or head in ("XA COMMIT", "XA ROLLBACK"):
                seg.commits += 1
                close()
            elif not state["block"]:
                seg.standalone += 1
                close()
        elif tc in ROWS_TYPES:
            state["open"] = True
            if not state["block"] and ev.flags & STMT_END_F:
                seg.standalone += 1
                close()
        elif tc in STATEMENT_CONTEXT:
            state["open"] = True

    start = None
    for ev in events:
        pos = ev.header.pos
        if not state["open"]:
            seg.boundaries.add(pos)
            start = pos
        seg.starts[pos] = start
        ends = seg.ends
        if ev.header.type_code == ET.TRANSACTION_PAYLOAD:
            for inner in ev.events:
                one(inner)
        else:
            one(ev)
        if seg.ends > ends:
            seg.ended_by.add(pos)
    seg.end_pos = events[-1].header.next_position
    if not state["open"]:
        seg.boundaries.add(seg.end_pos)
    return seg


def feed(events, start: Position) -> tuple[PositionTracker, list[Position], int]:
    tracker = PositionTracker(start)
    seen, ends = [], 0
    for ev in events:
        ends += tracker.observe(ev)
        seen.append(tracker.committed)
    return tracker, seen, ends


def walk(events):
    for ev in events:
        if ev.header.type_code == ET.TRANSACTION_PAYLOAD:
            yield from ev.events
        else:
            yield ev


# --------------------------------------------------------------------------- corpus: counts


@pytest.mark.parametrize("name", ALL_FILES)
def test_ended_transactions_match_xids_commits_and_standalone_statements(corpus, name):
    _, events = load(corpus, name)
    seg = segment(events)
    assert seg.ends == seg.xids + seg.commits + seg.standalone
    assert seg.ends > 0 or name.endswith(("bug40482-bin.000001", "master-bin.000001"))
    tracker, _, ends = feed(events, Position(file_name(name), 4))
    assert ends == seg.ends, (f"tracker ended {ends} transactions; the file has {seg.xids} XIDs, "
                              f"{seg.commits} COMMIT/ROLLBACK and {seg.standalone} standalone statements")
    assert not tracker.in_transaction


def test_savepoint_rollback_does_not_end_the_transaction(corpus):
    """binlog_savepoint: BEGIN, INSERT, SAVEPOINT, INSERT, INSERT, ROLLBACK TO, INSERT, INSERT, XID."""
    _, events = load(corpus, "rust_mysql_common/binlog_savepoint.000001")
    tracker = PositionTracker(Position("master-bin.000003", 4))
    ended_at = [ev.header.type_name for ev in events if tracker.observe(ev)]
    assert ended_at == ["XID"]


# --------------------------------------------------------------------------- corpus: committed positions


@pytest.mark.parametrize("name", FILE_FILES)
def test_committed_pos_is_always_a_transaction_boundary(corpus, name):
    _, events = load(corpus, name)
    for ev in events:  # precondition: a real binlog file, offsets chain
        assert ev.header.pos + ev.header.event_length == ev.header.next_position
    seg = segment(events)
    fname = file_name(name)
    _, seen, _ = feed(events, Position(fname, 4))
    by_end = {ev.header.next_position: ev for ev in events}
    for ev, committed in zip(events, seen):
        if committed.file != fname:  # only after the file's own closing ROTATE
            assert ev.header.type_code == ET.ROTATE and ev is events[-1]
            assert (committed.file, committed.pos) == (ev.next_file, ev.position)
            continue
        before = by_end.get(committed.pos)
        # Never right after a TABLE_MAP, nor after a rows event, unless that rows event ended a
        # statement logged without BEGIN (STMT_END_F, MySQL 5.1 non-transactional tables).
        assert before is None or before.header.type_code != ET.TABLE_MAP and (
            before.header.type_code not in ROWS_TYPES or before.header.pos in seg.ended_by), (
            f"after {ev.header.type_name} at {ev.header.pos}: committed {committed.pos} follows "
            f"{before.header.type_name} at {before.header.pos}: a resume there loses rows")
        assert committed.pos in seg.boundaries, (
            f"after {ev.header.type_name} at {ev.header.pos}: committed {committed.pos} is inside a transaction")
        assert committed.pos <= ev.header.next_position


@pytest.mark.parametrize("name", ANONYMOUS_GTID_FILES + GTID_FILES + PAYLOAD_FILES + MARIADB_FILES)
def test_committed_pos_at_each_commit_is_a_gtid_event_or_the_end(corpus, name):
    """With GTIDs every transaction starts at its GTID event: that is where committed must point."""
    _, events = load(corpus, name)
    starts = {ev.header.pos: ev for ev in events}
    fname = file_name(name)
    tracker = PositionTracker(Position(fname, 4))
    checked = 0
    for ev in events:
        if not tracker.observe(ev):
            continue
        committed = tracker.committed
        assert committed.file == fname
        assert committed.pos == ev.header.next_position
        nxt = starts.get(committed.pos)
        if nxt is None:
            assert committed.pos == events[-1].header.next_position
        else:
            assert nxt.header.type_code in GTID_TYPES | {ET.STOP, ET.ROTATE}, (
                f"transaction ending at {ev.header.pos} committed {committed.pos}: start of {nxt.header.type_name}")
        checked += 1
    assert checked > 0 or name.endswith("master-bin.000001")


def test_file_that_ends_inside_a_transaction_commits_up_to_its_gtid_event(corpus):
    """aurora-padding ends with ANONYMOUS_GTID, a padding event and BEGIN: the transaction is cut."""
    data, events = load(corpus, "mysql-binlog-connector-java/mysql-bin.aurora-padding")
    assert [ev.header.type_code for ev in events[-3:]] == [ET.ANONYMOUS_GTID, 100, ET.QUERY]
    tracker, seen, ends = feed(events, Position("mysql-bin.aurora-padding", 4))
    assert ends == 0
    assert tracker.in_transaction
    assert tracker.committed == Position("mysql-bin.aurora-padding", events[-3].header.pos)
    assert tracker.pos == len(data)
    assert [p.pos for p in seen] == [185, 216, 216, 216, 216]


@pytest.mark.parametrize("name", FILE_FILES)
def test_committed_reaches_the_end_of_the_file(corpus, name):
    data, events = load(corpus, name)
    last = events[-1]
    tracker, _, _ = feed(events, Position(file_name(name), 4))
    if last.header.type_code == ET.ROTATE:
        assert (tracker.committed.file, tracker.committed.pos) == (last.next_file, last.position)
    else:
        assert (tracker.committed.file, tracker.committed.pos) == (file_name(name), len(data))
    assert (tracker.file, tracker.pos) == (tracker.committed.file, tracker.committed.pos)


# --------------------------------------------------------------------------- corpus: GTIDs


@pytest.mark.parametrize("name", GTID_FILES + ["mysql-binlog-connector-rust/mysql-bin.000057"])
def test_gtid_set_after_the_file_is_the_files_gtids(corpus, name):
    _, events = load(corpus, name)
    expected = MysqlGtidSet()
    for ev in events:
        if ev.header.type_code in (ET.GTID, ET.GTID_TAGGED):
            expected.add(Gtid.parse(ev.gtid))
    assert expected
    tracker, _, _ = feed(events, Position(file_name(name), 4))
    assert MysqlGtidSet.parse(tracker.committed.gtid_set) == expected
    assert tracker.gtid_set == expected
    assert tracker.committed.gtid_list == ""


def test_tagged_gtid_is_kept_with_its_tag(corpus):
    _, events = load(corpus, "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    tracker, _, _ = feed(events, Position("binlog.000004", 4))
    assert tracker.committed.gtid_set == "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"


@pytest.mark.parametrize("name", ANONYMOUS_GTID_FILES + STATEMENT_FILES)
def test_anonymous_and_gtid_less_files_leave_the_gtid_set_empty(corpus, name):
    _, events = load(corpus, name)
    tracker, seen, _ = feed(events, Position(file_name(name), 4))
    assert all(p.gtid_set == "" and p.gtid_list == "" for p in seen)


def test_gtid_set_grows_one_transaction_at_a_time(corpus):
    _, events = load(corpus, "mysql-binlog-connector-rust/mysql-bin.000080")
    tracker = PositionTracker(Position("mysql-bin.000080", 4))
    done = MysqlGtidSet()
    pending = None
    for ev in events:
        if ev.header.type_code == ET.GTID:
            pending = Gtid.parse(ev.gtid)
        ended = tracker.observe(ev)
        if ended:
            done.add(pending)
        assert MysqlGtidSet.parse(tracker.committed.gtid_set) == done
        assert (pending in MysqlGtidSet.parse(tracker.committed.gtid_set)) == (ended or pending in done)


def test_mariadb_file_gtid_list(corpus):
    _, events = load(corpus, "rust_mysql_common/mariadb-bin.000001")
    tracker = PositionTracker(Position("mariadb-bin.000001", 4))
    lists = []
    for ev in events:
        if tracker.observe(ev):
            lists.append(tracker.committed.gtid_list)
    assert lists == ["0-1-1", "0-1-2"]
    assert tracker.committed == Position("mariadb-bin.000001", 1074, "", "0-1-2")


# --------------------------------------------------------------------------- corpus: a cut transaction


def _cut_cases(corpus, names, types):
    for name in names:
        _, events = load(corpus, name)
        for i, ev in enumerate(events):
            if ev.header.type_code in types:
                yield name, events, i


NO_TABLE_MAP = {
    "rust_mysql_common/binlog_56_gtid_reserved_word.000001", "rust_mysql_common/binlog_transaction_with_GTID.000001",
    "rust_mysql_common/rpl_atomic_ddl_rollback_full.000001", "rust_mysql_common/rpl_atomic_ddl_rollback_table.000001",
    "rust_mysql_common/rpl_atomic_ddl_rollback_view.000001", "rust_mysql_common/bug27213339-bin.000001",
    "rust_mysql_common/binlog_transaction_with_anonymous_GTID.000001", "rust_mysql_common/slave-relay-bin.000001",
    "rust_mysql_common/master-bin.000001", "rust_mysql_common/rpl_cross_version_default_utf8mb4_collation.000001",
}
CUT_FILES = [n for n in GTID_FILES + ANONYMOUS_GTID_FILES + MARIADB_FILES if n not in NO_TABLE_MAP] + [
    "rust_mysql_common/ver_trunk_row_v2.001", "canal/mysql-bin.000001", "rust_mysql_common/bug32407.001",
    "rust_mysql_common/write-full-row.binlog", "mysql-binlog-connector-java/mysql-bin.sakila"]


@pytest.mark.parametrize("name", CUT_FILES)
def test_cut_after_table_map_or_rows_keeps_the_previous_boundary(corpus, name):
    """Stopping the feed right after any TABLE_MAP or rows event (the state the tracker has then)."""
    _, events = load(corpus, name)
    seg = segment(events)
    fname = file_name(name)
    tracker = PositionTracker(Position(fname, 4))
    done: list[str] = []       # GTIDs of transactions that ended before
    current = None             # the GTID event of the transaction in progress
    cuts = 0
    for ev in events:
        ended = tracker.observe(ev)
        if ev.header.type_code in GTID_TYPES:
            current = ev
        if ended:
            if current is not None and current.header.type_code != ET.ANONYMOUS_GTID:
                done.append(current.gtid)
            current = None
        if ev.header.type_code not in {ET.TABLE_MAP} | ROWS_TYPES or ended:
            continue
        cuts += 1
        where = f"cut after {ev.header.type_name} at {ev.header.pos}"
        start = seg.starts[ev.header.pos]
        assert tracker.in_transaction, where
        assert (tracker.committed.file, tracker.committed.pos) == (fname, start), where
        assert tracker.pos == ev.header.next_position  # the live position did move
        if current is not None and current.header.type_code != ET.ANONYMOUS_GTID:
            assert current.header.pos == start
            assert tracker.gtid == current.gtid
            if current.header.type_code == ET.MARIADB_GTID:
                assert MariadbGtid.parse(current.gtid) not in MariadbGtidList.parse(tracker.committed.gtid_list)
                assert MariadbGtidList.parse(tracker.committed.gtid_list) == \
                    MariadbGtidList(MariadbGtid.parse(g) for g in done)
            else:
                assert Gtid.parse(current.gtid) not in MysqlGtidSet.parse(tracker.committed.gtid_set)
                assert MysqlGtidSet.parse(tracker.committed.gtid_set) == MysqlGtidSet(Gtid.parse(g) for g in done)
    assert cuts > 0


@pytest.mark.parametrize("name", PAYLOAD_FILES)
def test_cut_before_a_payload_keeps_the_gtid_uncommitted(corpus, name):
    _, events = load(corpus, name)
    for i, ev in enumerate(events):
        if ev.header.type_code != ET.TRANSACTION_PAYLOAD:
            continue
        gtid_ev = events[i - 1]
        assert gtid_ev.header.type_code in (ET.GTID, ET.ANONYMOUS_GTID)
        tracker, _, _ = feed(events[:i], Position(file_name(name), 4))
        assert tracker.in_transaction and tracker.committed.pos == gtid_ev.header.pos
        if gtid_ev.gtid:
            assert Gtid.parse(gtid_ev.gtid) not in MysqlGtidSet.parse(tracker.committed.gtid_set)
        assert tracker.observe(ev) is True
        assert not tracker.in_transaction and tracker.committed.pos == ev.header.next_position
        if gtid_ev.gtid:
            assert Gtid.parse(gtid_ev.gtid) in MysqlGtidSet.parse(tracker.committed.gtid_set)


# --------------------------------------------------------------------------- synthetic streams

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Stream:
    """Builds events with consecutive offsets (each ``size`` bytes long)."""

    def __init__(self, pos: int = 4, size: int = 40):
        self.pos, self.size = pos, size

    def header(self, tc: int, *, server_id: int = 1, flags: int = 0, size: int | None = None,
               next_position: int | None = None, timestamp: int = 1700000000) -> E.EventHeader:
        size = size or self.size
        nxt = self.pos + size if next_position is None else next_position
        h = E.EventHeader(timestamp, tc, server_id, size, nxt, flags, self.pos)
        if next_position is None:
            self.pos += size
        return h

    def gtid(self, gno: int, sid: str = UUID, tag: str | None = None) -> E.GtidEvent:
        return E.GtidEvent(self.header(ET.GTID_TAGGED if tag else ET.GTID), sid, gno, tag, False)

    def anonymous(self) -> E.GtidEvent:
        return E.GtidEvent(self.header(ET.ANONYMOUS_GTID), "00000000-0000-0000-0000-000000000000", 0, None, False)

    def mariadb_gtid(self, domain: int, server: int, seq: int, standalone: bool = False) -> E.MariadbGtidEvent:
        return E.MariadbGtidEvent(self.header(ET.MARIADB_GTID, server_id=server), domain, seq,
                                  1 if standalone else 8)

    def query(self, text: str, tc: int = ET.QUERY) -> E.QueryEvent:
        return E.QueryEvent(self.header(tc), 1, 0, 0, "db", text, {})

    def table_map(self) -> E.TableMapEvent:
        return E.TableMapEvent(self.header(ET.TABLE_MAP), 70, 1, "db", "t", ())

    def rows(self, kind: str = "insert") -> E.RowsEvent:
        tc = {"insert": ET.WRITE_ROWS, "update": ET.UPDATE_ROWS, "delete": ET.DELETE_ROWS}[kind]
        return E.RowsEvent(self.header(tc), kind, 70, STMT_END_F, "db", "t", ("id",), lambda: [{"id": 1}])

    def xid(self) -> E.XidEvent:
        return E.XidEvent(self.header(ET.XID), 77)

    def xa_prepare(self) -> E.XaPrepareEvent:
        return E.XaPrepareEvent(self.header(ET.XA_PREPARE), False, 1, b"g1", b"")

    def rotate(self, name: str, position: int = 4, artificial: bool = False) -> E.RotateEvent:
        if artificial:
            h = E.EventHeader(0, ET.ROTATE, 1, 44, 0, LOG_EVENT_ARTIFICIAL_F, 0)
        else:
            h = self.header(ET.ROTATE)
        return E.RotateEvent(h, position, name)

    def heartbeat(self, log_file: str, position: int, tc: int = ET.HEARTBEAT) -> E.HeartbeatEvent:
        return E.HeartbeatEvent(E.EventHeader(0, tc, 1, 39, position, 0, 0), log_file, position)

    def fde(self, resent: bool = False) -> E.FormatDescriptionEvent:
        h = (E.EventHeader(1700000000, ET.FORMAT_DESCRIPTION, 1, 120, 0, 0, 0) if resent
             else self.header(ET.FORMAT_DESCRIPTION, size=120))
        return E.FormatDescriptionEvent(h, 4, "8.0.36", 0, 19, b"", 1)


def run(tracker: PositionTracker, events) -> list[bool]:
    return [tracker.observe(ev) for ev in events]


def test_row_transaction_commits_only_at_xid():
    s = Stream(pos=200)
    tracker = PositionTracker(Position("binlog.000001", 200))
    events = [s.gtid(5), s.query("BEGIN"), s.table_map(), s.rows(), s.table_map(), s.rows("update"), s.xid()]
    results = []
    for ev in events:
        results.append(tracker.observe(ev))
        if ev is not events[-1]:
            assert tracker.committed == Position("binlog.000001", 200)
            assert tracker.in_transaction
            assert tracker.gtid == f"{UUID}:5"
    assert results == [False] * 6 + [True]
    assert tracker.committed == Position("binlog.000001", s.pos, f"{UUID}:5")
    assert tracker.gtid is None and not tracker.in_transaction


def test_start_gtid_set_is_extended():
    s = Stream(pos=1000)
    tracker = PositionTracker(Position("binlog.000009", 1000, f"{UUID}:1-10"))
    run(tracker, [s.gtid(11), s.query("BEGIN"), s.table_map(), s.rows(), s.xid()])
    assert tracker.committed.gtid_set == f"{UUID}:1-11"
    run(tracker, [s.gtid(12), s.query("CREATE TABLE t2 (a int)")])
    assert tracker.committed.gtid_set == f"{UUID}:1-12"
    assert tracker.committed.pos == s.pos


def test_rollback_to_savepoint_inside_a_row_transaction_is_not_a_boundary():
    s = Stream(pos=4)
    tracker = PositionTracker(Position("binlog.000001", 4))
    events = [s.gtid(1), s.query("BEGIN"), s.table_map(), s.rows(), s.query("SAVEPOINT `sp1`"),
              s.table_map(), s.rows(), s.query("ROLLBACK TO `sp1`"), s.table_map(), s.rows(), s.xid()]
    assert run(tracker, events) == [False] * 10 + [True]
    assert tracker.committed == Position("binlog.000001", s.pos, f"{UUID}:1")


def test_full_rollback_ends_the_transaction():
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    assert run(tracker, [s.query("BEGIN"), s.query("INSERT INTO m VALUES (1)"), s.query("ROLLBACK")]) == \
        [False, False, True]
    assert tracker.committed.pos == s.pos


def test_mysql_ddl_after_gtid_is_a_transaction_by_itself():
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    assert run(tracker, [s.gtid(1), s.query("ALTER TABLE t ADD c INT"), s.gtid(2),
                         s.query("/* app */ DROP TABLE t")]) == [False, True, False, True]
    assert tracker.committed.gtid_set == f"{UUID}:1-2"


def test_statements_without_gtid_or_begin_commit_each():
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    assert run(tracker, [s.query("CREATE TABLE t (a INT)"), s.query("INSERT INTO myisam VALUES (1)")]) == \
        [True, True]
    assert tracker.committed.pos == s.pos


def test_transaction_payload_is_one_transaction():
    s = Stream(pos=157)
    inner = Stream(pos=0)
    inner_events = (inner.query("BEGIN"), inner.table_map(), inner.rows(), inner.xid())
    tracker = PositionTracker(Position("binlog.000002", 157))
    gtid = s.gtid(3)
    payload = E.TransactionPayloadEvent(s.header(ET.TRANSACTION_PAYLOAD, size=300), 0, 200, 300, inner_events)
    assert run(tracker, [gtid]) == [False]
    assert tracker.observe(payload) is True
    assert tracker.committed == Position("binlog.000002", 157 + 40 + 300, f"{UUID}:3")


def test_statement_context_event_belongs_to_the_statement_after_it():
    """INTVAR / USER_VAR / RAND before a statement logged without BEGIN: resuming between them loses the value."""
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    intvar = E.IntvarEvent(s.header(ET.INTVAR), 2, 17)
    assert tracker.observe(intvar) is False
    assert tracker.committed.pos == intvar.header.pos
    assert tracker.observe(s.query("INSERT INTO myisam VALUES (NULL)")) is True
    assert tracker.committed.pos == s.pos


def test_rows_logged_without_begin_end_at_stmt_end_not_after_the_table_map():
    """MySQL 5.1.23-rc logged non-transactional row changes with no BEGIN/COMMIT (ver_5_1_23.001)."""
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    table_map = s.table_map()
    assert tracker.observe(table_map) is False
    assert tracker.committed.pos == table_map.header.pos
    assert tracker.observe(s.rows()) is True
    assert tracker.committed.pos == s.pos


def test_load_data_logged_without_begin_is_one_transaction():
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    blocks = [E.LoadBlockEvent(s.header(ET.BEGIN_LOAD_QUERY), 1, b"1\n2\n"),
              E.LoadBlockEvent(s.header(ET.APPEND_BLOCK), 1, b"3\n")]
    assert run(tracker, blocks) == [False, False]
    assert tracker.committed.pos == blocks[0].header.pos
    load_query = E.ExecuteLoadQueryEvent(s.header(ET.EXECUTE_LOAD_QUERY), 1, 0, 0, "db",
                                         "LOAD DATA INFILE 'f' INTO TABLE t3", {}, 1, 0, 10, 0)
    assert tracker.observe(load_query) is True
    assert tracker.committed.pos == s.pos


# --------------------------------------------------------------------------- XA


def test_xa_transaction_ends_at_xa_prepare_and_xa_commit_is_its_own_transaction():
    s = Stream(pos=500)
    tracker = PositionTracker(Position("binlog.000003", 500))
    events = [s.gtid(7), s.query("XA START X'6731',X'',1"), s.table_map(), s.rows(),
              s.query("XA END X'6731',X'',1")]
    assert run(tracker, events) == [False] * 5
    assert tracker.in_transaction and tracker.committed.pos == 500
    prepare = s.xa_prepare()
    assert tracker.observe(prepare) is True
    assert tracker.committed == Position("binlog.000003", prepare.header.next_position, f"{UUID}:7")
    assert run(tracker, [s.gtid(8), s.query("XA COMMIT X'6731',X'',1")]) == [False, True]
    assert tracker.committed == Position("binlog.000003", s.pos, f"{UUID}:7-8")


def test_xa_without_gtids():
    s = Stream()
    tracker = PositionTracker(Position("b.1", 4))
    assert run(tracker, [s.anonymous(), s.query("XA START 'x'"), s.table_map(), s.rows(),
                         s.query("XA END 'x'"), s.xa_prepare(), s.anonymous(),
                         s.query("XA ROLLBACK 'x'")]) == [False] * 5 + [True, False, True]
    assert tracker.committed == Position("b.1", s.pos)


# --------------------------------------------------------------------------- MariaDB


def test_mariadb_gtid_list_advances_per_domain():
    s = Stream()
    tracker = PositionTracker(Position("mariadb-bin.000002", 4, gtid_list="0-1-10,1-1-3"))
    assert run(tracker, [s.mariadb_gtid(0, 1, 11), s.table_map(), s.rows(), s.xid()]) == [False] * 3 + [True]
    assert tracker.committed.gtid_list == "0-1-11,1-1-3"
    assert run(tracker, [s.mariadb_gtid(1, 2, 4, standalone=True), s.query("ALTER TABLE t ADD x INT")]) == \
        [False, True]
    assert tracker.committed.gtid_list == "0-1-11,1-2-4"
    assert run(tracker, [s.mariadb_gtid(5, 3, 1), s.query("INSERT INTO m VALUES (1)"), s.query("COMMIT")]) == \
        [False, False, True]
    assert tracker.committed.gtid_list == "0-1-11,1-2-4,5-3-1"
    assert tracker.committed.gtid_set == ""
    # A cut transaction of domain 0 does not move domain 0.
    mark = s.pos
    run(tracker, [s.mariadb_gtid(0, 1, 12), s.table_map(), s.rows()])
    assert tracker.committed == Position("mariadb-bin.000002", mark, "", "0-1-11,1-2-4,5-3-1")
    assert tracker.gtid == "0-1-12"


def test_mariadb_standalone_compressed_ddl():
    s = Stream()
    tracker = PositionTracker(Position("m.1", 4))
    assert run(tracker, [s.mariadb_gtid(0, 1, 1, standalone=True),
                         s.query("CREATE TABLE t (a INT)", tc=ET.QUERY_COMPRESSED)]) == [False, True]
    assert tracker.committed.gtid_list == "0-1-1"


def test_mariadb_transaction_with_statements_ends_at_commit_not_at_its_first_statement():
    s = Stream()
    tracker = PositionTracker(Position("m.1", 4))
    assert run(tracker, [s.mariadb_gtid(0, 1, 1), s.query("INSERT INTO a VALUES (1)"),
                         s.query("UPDATE b SET x = 1"), s.query("COMMIT")]) == [False, False, False, True]


# --------------------------------------------------------------------------- ROTATE, heartbeat, FDE


def test_artificial_rotate_at_stream_start_sets_the_file():
    s = Stream()
    tracker = PositionTracker(Position("", 4))
    assert tracker.observe(s.rotate("binlog.000007", 4, artificial=True)) is False
    assert (tracker.file, tracker.pos) == ("binlog.000007", 4)
    assert tracker.committed == Position("binlog.000007", 4)


def test_artificial_rotate_on_resume_keeps_the_gtid_set():
    s = Stream(pos=900)
    tracker = PositionTracker(Position("binlog.000007", 900, f"{UUID}:1-3"))
    tracker.observe(s.rotate("binlog.000007", 900, artificial=True))
    assert tracker.committed == Position("binlog.000007", 900, f"{UUID}:1-3")


def test_rotate_at_the_end_of_a_file_moves_file_and_pos():
    s = Stream(pos=300)
    tracker = PositionTracker(Position("binlog.000007", 300))
    run(tracker, [s.gtid(1), s.query("BEGIN"), s.table_map(), s.rows(), s.xid()])
    assert tracker.observe(s.rotate("binlog.000008", 4)) is False
    assert (tracker.file, tracker.pos) == ("binlog.000008", 4)
    assert tracker.committed == Position("binlog.000008", 4, f"{UUID}:1")
    fde = Stream(pos=4).fde()
    tracker.observe(fde)
    assert tracker.committed == Position("binlog.000008", 124, f"{UUID}:1")


def test_rotate_inside_a_transaction_does_not_move_committed():
    s = Stream(pos=300)
    tracker = PositionTracker(Position("binlog.000007", 300))
    run(tracker, [s.gtid(1), s.query("BEGIN"), s.table_map()])
    tracker.observe(s.rotate("binlog.000008", 4, artificial=True))
    assert tracker.file == "binlog.000008"
    assert tracker.committed == Position("binlog.000007", 300)


@pytest.mark.parametrize("tc", [ET.HEARTBEAT, ET.HEARTBEAT_V2])
def test_heartbeats_move_nothing(tc):
    s = Stream(pos=400)
    tracker = PositionTracker(Position("binlog.000002", 400))
    assert tracker.observe(s.heartbeat("binlog.000002", 99999, tc)) is False
    assert (tracker.file, tracker.pos, tracker.committed) == ("binlog.000002", 400, Position("binlog.000002", 400))
    run(tracker, [s.gtid(1), s.query("BEGIN"), s.table_map()])
    live = (tracker.file, tracker.pos, tracker.committed, tracker.gtid)
    assert tracker.observe(s.heartbeat("binlog.000003", 77777, tc)) is False
    assert (tracker.file, tracker.pos, tracker.committed, tracker.gtid) == live
    assert tracker.in_transaction


def test_resent_fde_with_position_zero_does_not_move_the_position():
    s = Stream(pos=5000)
    tracker = PositionTracker(Position("binlog.000002", 5000, f"{UUID}:1-4"))
    run(tracker, [s.rotate("binlog.000002", 5000, artificial=True), s.fde(resent=True)])
    assert (tracker.file, tracker.pos) == ("binlog.000002", 5000)
    assert tracker.committed == Position("binlog.000002", 5000, f"{UUID}:1-4")


def test_position_dict_round_trip():
    p = Position("binlog.000002", 1234, f"{UUID}:1-4", "0-1-7")
    assert p.to_dict() == {"file": "binlog.000002", "pos": 1234, "gtid_set": f"{UUID}:1-4", "gtid_list": "0-1-7"}
    assert Position.from_dict(p.to_dict()) == p
    assert Position.from_dict({"file": "b.1", "pos": "4"}) == Position("b.1", 4)
