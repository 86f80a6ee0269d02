"""The position tracker across failed sessions: the committed position never moves backwards.

A model primary holds a few binlog files of transactions (MySQL GTIDs or MariaDB GTIDs in two domains).
A run is a series of sessions: each starts a :class:`PositionTracker` at the last durable position and
gets the stream a real primary sends for it: by file/pos (an artificial ROTATE to that position, the
FORMAT_DESCRIPTION re-sent, then the events from there), or by GTID (an artificial ROTATE to the start
of a file at or before the first missing transaction, then every event from there except the
transactions the GTID set already holds). A session fails after any number of events; a commit (the
durable position taken from ``committed``) may follow any event outside a transaction, as the daemon's
idle commit does. The model knows every boundary of the whole history and the GTIDs before it, so:

- ``committed`` is always a real boundary, with exactly the GTIDs of the transactions before it;
- it is never behind the durable position the session started from (file number, then offset);
- the last session, which does not fail, ends at the end of the last file with every GTID.

Issue 19: after a failed session, a GTID resume's artificial ``ROTATE <file>:4`` was committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol import events as E
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.gtid import MariadbGtid, MariadbGtidList, MysqlGtidSet
from binlogd.protocol.position import Position, PositionTracker
from binlogd.protocol.rows import STMT_END_F

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TS = 1700000000


@dataclass(frozen=True)
class Placed:
    """One event of the model's history: its file, start and end offsets, and the GTID of its transaction."""

    event: E.Event
    file: str
    start: int
    end: int
    gtid: str | None   # the transaction it belongs to (None between transactions)


def _header(tc: int, start: int, size: int, *, server_id: int = 1, flags: int = 0) -> E.EventHeader:
    return E.EventHeader(TS, tc, server_id, size, start + size, flags, start)


def _transaction(flavor: str, n: int, ddl: bool, start: int) -> tuple[str, list[E.Event]]:
    """The ``n``-th transaction (1-based) from ``start``: its GTID text and events (40 bytes each)."""
    out: list[E.Event] = []

    def h(tc: int, **kw) -> E.EventHeader:
        return _header(tc, start + 40 * len(out), 40, **kw)

    if flavor == "mysql":
        gtid = f"{UUID}:{n}"
        out.append(E.GtidEvent(h(ET.GTID), UUID, n, None, False))
        if not ddl:
            out.append(E.QueryEvent(h(ET.QUERY), 1, 0, 0, "db", "BEGIN", {}))
    else:
        domain = n % 2
        gtid = f"{domain}-1-{n}"
        out.append(E.MariadbGtidEvent(h(ET.MARIADB_GTID), domain, n, 1 if ddl else 8))
    if ddl:
        out.append(E.QueryEvent(h(ET.QUERY), 1, 0, 0, "db", f"CREATE TABLE t{n} (a INT)", {}))
    else:
        out.append(E.TableMapEvent(h(ET.TABLE_MAP), 70, 1, "db", "t", ()))
        out.append(E.RowsEvent(h(ET.WRITE_ROWS), "insert", 70, STMT_END_F, "db", "t", ("id",), lambda: [{"id": n}]))
        out.append(E.XidEvent(h(ET.XID), n))
    return gtid, out


def history(flavor: str, files: list[list[bool]]) -> list[list[Placed]]:
    """The model's files (``files``: per file, per transaction, whether it is a DDL), as placed events."""
    out, n = [], 0
    for index, txs in enumerate(files):
        name = f"b.{index + 1:06d}"
        placed: list[Placed] = []

        def put(event: E.Event, gtid: str | None = None, name=name, placed=placed) -> None:
            placed.append(Placed(event, name, event.header.pos, event.header.next_position, gtid))

        put(E.FormatDescriptionEvent(_header(ET.FORMAT_DESCRIPTION, 4, 120), 4, "8.0.36", 0, 19, b"", 1))
        if flavor == "mysql":
            put(E.PreviousGtidsEvent(_header(ET.PREVIOUS_GTIDS, 124, 40), f"{UUID}:1-{n}" if n else ""))
        else:
            put(E.MariadbGtidListEvent(_header(ET.MARIADB_GTID_LIST, 124, 40), (), 0))
        pos = 164
        for ddl in txs:
            n += 1
            gtid, events = _transaction(flavor, n, ddl, pos)
            for ev in events:
                put(ev, gtid)
            pos = events[-1].header.next_position
        if index + 1 < len(files):
            put(E.RotateEvent(_header(ET.ROTATE, pos, 40), 4, f"b.{index + 2:06d}"))
        out.append(placed)
    return out


def _gtids_text(flavor: str, gtids: list[str]) -> str:
    """The set (MySQL) or list (MariaDB: the last GTID of each domain) of ``gtids`` (GTID or set texts)."""
    if flavor == "mysql":
        return str(MysqlGtidSet.parse(",".join(gtids)))
    out = MariadbGtidList()
    for text in gtids:
        for one in text.split(","):
            out.advance(MariadbGtid.parse(one))
    return str(out)


def boundaries(flavor: str, files: list[list[Placed]]) -> dict[tuple[str, int], str]:
    """Every position a resume may start at -> the GTID text of the transactions before it."""
    out, done = {}, []
    for placed in files:
        out[(placed[0].file, 4)] = _gtids_text(flavor, done)
        for i, p in enumerate(placed):
            last_of_group = p.gtid is None or i + 1 == len(placed) or placed[i + 1].gtid != p.gtid
            if p.gtid is not None and last_of_group:
                done.append(p.gtid)
            if last_of_group and p.event.header.type_code != ET.ROTATE:
                out[(p.file, p.end)] = _gtids_text(flavor, done)
    return out


def _has(flavor: str, have: str, gtid: str) -> bool:
    if not have:
        return False
    if flavor == "mysql":
        return int(gtid.rsplit(":", 1)[1]) in {n for _, _, ivs in MysqlGtidSet.parse(have).items()
                                                for a, b in ivs for n in range(a, b)}
    domain, _, seq = gtid.split("-")
    mine = MariadbGtidList.parse(have).get(int(domain))
    return mine is not None and mine.seq_no >= int(seq)


def _artificial_rotate(file: str, pos: int) -> E.RotateEvent:
    return E.RotateEvent(E.EventHeader(0, ET.ROTATE, 1, 44, 0, LOG_EVENT_ARTIFICIAL_F, 0), pos, file)


def serve(flavor: str, files: list[list[Placed]], durable: Position, by_gtid: bool, earlier: int) -> list[E.Event]:
    """What a primary sends for a dump from ``durable`` (``earlier``: how many files before the first one with
    a missing transaction a GTID dump starts at, as MySQL may)."""
    if not by_gtid:
        index = next(i for i, placed in enumerate(files) if placed[0].file == durable.file)
        out: list[E.Event] = [_artificial_rotate(durable.file, durable.pos)]
        if durable.pos > 4:  # the FORMAT_DESCRIPTION re-sent with logged position 0
            out.append(E.FormatDescriptionEvent(E.EventHeader(TS, ET.FORMAT_DESCRIPTION, 1, 120, 0, 0, 0), 4,
                                                "8.0.36", 0, 19, b"", 1))
        out += [p.event for p in files[index] if p.start >= durable.pos]
        return out + [p.event for placed in files[index + 1:] for p in placed]
    have = durable.gtid_set if flavor == "mysql" else durable.gtid_list
    first = next((i for i, placed in enumerate(files)
                  if any(p.gtid and not _has(flavor, have, p.gtid) for p in placed)), len(files) - 1)
    index = max(0, first - earlier)
    out = [_artificial_rotate(files[index][0].file, 4)]
    for placed in files[index:]:
        out += [p.event for p in placed if p.gtid is None or not _has(flavor, have, p.gtid)]
    return out


def _key(file: str, pos: int) -> tuple[int, int]:
    return (int(file.rsplit(".", 1)[1]) if file else -1, pos)


def _check(flavor: str, table: dict, committed: Position, durable: Position) -> None:
    where = (committed.file, committed.pos)
    assert where in table, f"committed {where} is not a transaction boundary"
    text = committed.gtid_set if flavor == "mysql" else committed.gtid_list
    assert _gtids_text(flavor, [text] if text else []) == table[where], \
        f"committed {where} carries {text!r}, the transactions before it are {table[where]!r}"
    assert _key(*where) >= _key(durable.file, durable.pos), \
        f"committed {where} is behind the durable {durable.file}:{durable.pos}"


sessions = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2), st.lists(st.booleans(), max_size=60)),
                    max_size=6)


@settings(max_examples=400, deadline=None)
@given(flavor=st.sampled_from(["mysql", "mariadb"]), by_gtid=st.booleans(),
       shape=st.lists(st.lists(st.booleans(), max_size=4), min_size=1, max_size=3), runs=sessions,
       last_commits=st.lists(st.booleans(), max_size=60))
def test_committed_never_moves_backwards_across_failed_sessions(flavor, by_gtid, shape, runs, last_commits):
    files = history(flavor, shape)
    table = boundaries(flavor, files)
    durable = Position(files[0][0].file, 4)
    for fail_after, earlier, commits in [*runs, (None, 0, last_commits)]:
        tracker = PositionTracker(durable)
        stream = serve(flavor, files, durable, by_gtid, earlier)
        for i, event in enumerate(stream[:fail_after]):
            tracker.observe(event)
            _check(flavor, table, tracker.committed, durable)
            if i < len(commits) and commits[i] and not tracker.in_transaction:
                assert _key(tracker.committed.file, tracker.committed.pos) >= _key(durable.file, durable.pos)
                durable = tracker.committed
    end = files[-1][-1]
    assert (tracker.committed.file, tracker.committed.pos) == (end.file, end.end)
    _check(flavor, table, tracker.committed, durable)


def test_gtid_resume_rotate_to_the_file_start_keeps_the_committed_position():
    """The case of issue 19: the session after a failure resumes by GTID; the primary's artificial ROTATE
    names the file at offset 4, then re-sends its header events. None of it is committed."""
    files = history("mariadb", [[False, True, False]])
    durable = Position("b.000001", files[0][-1].end, gtid_list="0-1-2,1-1-3")
    tracker = PositionTracker(durable)
    for event in serve("mariadb", files, durable, True, 0):
        tracker.observe(event)
        assert tracker.committed == durable
    assert (tracker.file, tracker.pos) == ("b.000001", 164)


def test_gtid_resume_from_an_older_file_commits_only_past_the_durable_position():
    files = history("mysql", [[False, False], [True], [False]])
    durable = Position("b.000002", files[1][-2].end, gtid_set=f"{UUID}:1-3")
    tracker = PositionTracker(durable)
    stream = serve("mysql", files, durable, True, 1)
    assert stream[0].next_file == "b.000002" and isinstance(stream[0], E.RotateEvent)
    moved = []
    for event in stream:
        if tracker.observe(event) or tracker.committed != durable:
            moved.append(tracker.committed)
    assert moved[0] == Position("b.000003", 4, f"{UUID}:1-3"), moved
    assert tracker.committed == Position("b.000003", files[2][-1].end, f"{UUID}:1-4")
