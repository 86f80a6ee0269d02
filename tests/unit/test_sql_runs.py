"""Runs of rows events (``Decoder.rows_like``, ``groups.RowsRun``, ``_sqlrows.rows_events``): the events after
a rows event that are just like it but for their rows are checked and written in one C call each. A run must
change nothing a reader can see: ``binlogd sql`` gives the same exit code, output and messages as the
reference path (no C at all), on the corpus file whose statements span many rows events and on copies of it
broken or altered inside a run. Before --start-position, a transaction's rows events are passed over by their
headers (``Decoder.past_row_context``): every corpus file gives the same SQL from any start as with every event
read. The same on a real server's files, with CRC32 checksums, is in tests/integration/test_sql_runs_server.py.
"""

from __future__ import annotations

import pytest

from binlogd.cli.filetools import dump_events
from binlogd.cli.sqlout.groups import RowsRun, file_groups
from binlogd.library.sqlwriter import native
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.reader import iter_events
from binlogd.protocol.rows import STMT_END_F
from tests.support.paths import CORPUS
from tests.support.sqlout import counting_c_writer, events_between, same_sql, speedups, sql_main

SAKILA = CORPUS / "mysql-binlog-connector-java" / "mysql-bin.sakila"  # no checksums; 15 runs, 2 to 387 events
pytestmark = pytest.mark.skipif(not SAKILA.exists(), reason="corpus file missing")


@pytest.fixture
def c_rows(monkeypatch):
    return counting_c_writer(monkeypatch)


def _runs(path, runs: bool = True) -> list[RowsRun]:
    return [e for g in file_groups(str(path), print, None, runs=runs) for e in g.events if isinstance(e, RowsRun)]


def test_runs_are_the_events_the_decoder_gives() -> None:
    runs = _runs(SAKILA)
    assert len(runs) == 15 and sum(r.count for r in runs) == 1371
    decoded = {e.header.pos: e for e in dump_events(SAKILA)}
    for run in runs:
        events = run.events()
        assert len(events) == run.count == events_between(run.view, run.start, run.stop)
        assert events[0].header.pos == run.start == run.first.header.pos
        assert run.ends and events[-1].flags & STMT_END_F  # each statement's last event ends its run
        for event in events:
            want = decoded[event.header.pos]
            assert event.header == want.header and event.table_id == want.table_id and event.flags == want.flags
            assert event.rows == want.rows


def test_without_runs_every_event_is_decoded() -> None:
    assert not _runs(SAKILA, runs=False)


def test_sakila_same_sql_through_runs(capsysbinary, c_rows) -> None:
    for options in ([], ["--flashback", "--skip-unsafe"], ["--table", "sakila.payment"], ["--database", "nope"]):
        c_rows["runs"] = 0
        code, out, _ = same_sql(capsysbinary, SAKILA, *options)
        assert code == 0
        if options != ["--database", "nope"]:
            assert c_rows["runs"] > 0, options
    assert c_rows["raised"] == []


@pytest.mark.parametrize("leaves", ["None", "raises"])
def test_a_run_the_c_writer_leaves_goes_event_by_event(leaves, capsysbinary, monkeypatch) -> None:
    """A run whose shape the C writer does not take (run_lines gives None), or that it fails on, is written
    from its events one by one (RowsRun.events), as if there had been no run."""
    with speedups(True):
        expected = {options: sql_main(capsysbinary, [SAKILA, *options])
                    for options in ((), ("--flashback", "--skip-unsafe"))}

    def run_lines(plan, run, invert):
        if leaves == "raises":
            raise ValueError("not this one")
        return None

    monkeypatch.setattr(native, "run_lines", run_lines)
    with speedups(True):
        for options, want in expected.items():
            assert sql_main(capsysbinary, [SAKILA, *options]) == want, options


def _altered(tmp_path, name: str, change) -> str:
    """A copy of the corpus file with ``change(bytearray, run)`` applied (run: the rental table's long run)."""
    data = bytearray(SAKILA.read_bytes())
    run = max(_runs(SAKILA), key=lambda r: r.count)
    change(data, run)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _nth_event(data: bytearray, run: RowsRun, n: int) -> int:
    pos = run.start
    for _ in range(n):
        pos += int.from_bytes(data[pos + 9:pos + 13], "little")
    return pos


def test_a_changed_timestamp_splits_the_run(tmp_path, capsysbinary) -> None:
    def later(data, run):
        at = _nth_event(data, run, 100)
        data[at:at + 4] = (int.from_bytes(data[at:at + 4], "little") + 3600).to_bytes(4, "little")

    path = _altered(tmp_path, "later", later)
    assert len(_runs(path)) == len(_runs(SAKILA)) + 1  # the event stands alone between two runs where there was one
    code, out, _ = same_sql(capsysbinary, path)
    assert code == 0 and out.count(b"SET TIMESTAMP=") > _sql_timestamps(capsysbinary)


def _sql_timestamps(capsysbinary) -> int:
    with speedups(True):
        return sql_main(capsysbinary, [SAKILA])[1].count(b"SET TIMESTAMP=")


@pytest.mark.parametrize("damage", ["length", "type", "table_id", "truncated", "row"])
def test_damage_inside_a_run_is_reported_as_without_runs(damage, tmp_path, capsysbinary) -> None:
    def change(data, run):
        at = _nth_event(data, run, 200)
        if damage == "length":  # past the end of the file
            data[at + 9:at + 13] = (len(data)).to_bytes(4, "little")
        elif damage == "type":  # an event type nobody knows, not marked ignorable
            data[at + 4] = 0x60
        elif damage == "table_id":  # a rows event of a table no TABLE_MAP announced
            data[at + 19] ^= 0x40
        elif damage == "truncated":
            del data[at + 40:]
        else:  # the last row one byte short
            length = int.from_bytes(data[at + 9:at + 13], "little")
            data[at + 9:at + 13] = (length - 1).to_bytes(4, "little")
            del data[at + length - 1]

    code, out, err = same_sql(capsysbinary, _altered(tmp_path, damage, change))
    assert code == 1 and b"binlogd sql:" in err, err
    same_sql(capsysbinary, tmp_path / damage, "--flashback")


def test_the_walk_goes_on_where_it_is_sent() -> None:
    view = memoryview(SAKILA.read_bytes())
    run = max(_runs(SAKILA), key=lambda r: r.count)
    walk = iter_events(view, Decoder())
    seen = []
    for event in walk:
        seen.append(event.header.pos)
        if event.header.pos == run.first.header.pos:
            assert walk.send(run.stop) is None
    everything = [e.header.pos for e in dump_events(SAKILA)]
    assert seen == [p for p in everything if not run.start < p < run.stop]


def test_malloc_keeps_freed_memory_on_glibc() -> None:
    """``binlogd sql`` has malloc keep freed memory (its output blocks then reuse touched pages): glibc only."""
    import platform

    from binlogd.library import _sqlrows

    assert _sqlrows.keep_freed_memory() is (platform.libc_ver()[0] == "glibc")


def test_a_start_position_passes_over_what_comes_before(capsysbinary, monkeypatch) -> None:
    """Before --start-position, a BEGIN transaction's rows events, TABLE_MAPs and logged statements are passed
    over by their headers (Decoder.past_row_context); a transaction the start falls inside is read again
    whole. Every start gives what it gives with every event read."""
    events = [e.header.pos for e in dump_events(SAKILA)]
    starts = events[::97] + [run.start + 1 for run in _runs(SAKILA)] + [events[-1]]
    real, passed = Decoder.past_row_context, []

    def counted(self, view, pos, stop):
        out = real(self, view, pos, stop)
        passed.append(out[0] - pos)
        return out

    with speedups(True):
        monkeypatch.setattr(Decoder, "past_row_context", counted)
        fast = {start: sql_main(capsysbinary, [SAKILA, "--start-position", start]) for start in starts}
        monkeypatch.setattr(Decoder, "past_row_context", lambda self, view, pos, stop: (pos, False))
        for start in starts:
            assert sql_main(capsysbinary, [SAKILA, "--start-position", start]) == fast[start], start
    assert sum(passed) > 1_000_000  # most of the file's bytes were passed over unread
    assert any(b"moved to its start" in err for _, _, err in fast.values())


CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".txt",
                                                                                          ".json", ".py", ".result"))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_corpus_file_same_sql_from_any_start(path, capsysbinary, monkeypatch) -> None:
    """Starts at a dozen event offsets of every corpus file (every flavor, statement-based files, payloads,
    XA, files that end inside a transaction or are broken): passing over events by their headers before the
    start gives what reading every event gives, the same exit code, output and messages."""
    offsets = [4]
    try:
        for event in dump_events(path):
            offsets.append(event.header.pos)
    except Exception:  # noqa: BLE001 - a broken file: its events as far as they read
        pass
    starts = sorted(set(offsets[1::max(1, len(offsets) // 12)] + [offsets[-1] + 1]))
    with speedups(True):
        fast = {start: sql_main(capsysbinary, [path, "--start-position", start]) for start in starts}
        monkeypatch.setattr(Decoder, "past_row_context", lambda self, view, pos, stop: (pos, False))
        for start in starts:
            assert sql_main(capsysbinary, [path, "--start-position", start]) == fast[start], start
