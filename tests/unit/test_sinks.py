"""Tests for daemon.sinks (JSON lines, raw archive, stdout) and daemon.schema (is_ddl, SchemaCache)."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import struct
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import pymysql
import pytest
from binlogd.daemon.schema import SchemaCache, is_ddl
from binlogd.daemon.sinks import SinkError, make_sink
from binlogd.daemon.sinks import jsonl as jsonl_mod
from binlogd.daemon.sinks.archive import ArchiveSink
from binlogd.daemon.sinks.jsonl import JsonLinesSink
from binlogd.daemon.sinks.stdout import StdoutSink
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_BINLOG_IN_USE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.reader import iter_events
from binlogd.protocol.tablemap import TableSchema


def change(i: int, table: str = "t") -> dict:
    return {"op": "insert", "source": {"file": "binlog.000001", "pos": 100 + i, "row": i},
            "schema": "db", "table": table, "after": {"id": i, "name": f"row-{i}", "note": "x" * 20}}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# =========================================================================== JSON lines


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "changes"


def open_sink(directory: Path, state=None, **kw) -> JsonLinesSink:
    kw.setdefault("max_file_seconds", 0)
    sink = JsonLinesSink(directory, **kw)
    sink.open(state)
    return sink


def test_changes_then_commit_returns_file_and_offset(out):
    sink = open_sink(out)
    for i in range(3):
        sink.change(change(i))
    state = sink.commit()
    path = out / "changes-000001.jsonl"
    assert state == {"file": "changes-000001.jsonl", "offset": path.stat().st_size}
    assert lines(path) == [change(i) for i in range(3)]
    sink.change(change(3))
    state2 = sink.commit()
    assert state2["file"] == "changes-000001.jsonl" and state2["offset"] == path.stat().st_size > state["offset"]
    sink.close()
    assert lines(path) == [change(i) for i in range(4)]


def test_empty_commit_keeps_the_offset(out):
    sink = open_sink(out)
    assert sink.commit() == {"file": "changes-000001.jsonl", "offset": 0}
    sink.change(change(1))
    first = sink.commit()
    assert sink.commit() == first
    sink.close()


def test_uncommitted_tail_is_truncated_on_reopen(out):
    """Exactly once after a crash: what was written after the checkpointed state disappears."""
    sink = open_sink(out)
    for i in range(2):
        sink.change(change(i))
    state = sink.commit()
    for i in range(2, 5):  # a transaction in progress when the daemon dies
        sink.change(change(i))
    sink.close()  # its bytes did reach the file
    path = out / state["file"]
    assert path.stat().st_size > state["offset"]

    again = open_sink(out, state)
    assert path.stat().st_size == state["offset"]
    for i in range(2, 5):  # the transaction is read again and written again
        again.change(change(i))
    again.commit()
    again.close()
    assert lines(path) == [change(i) for i in range(5)]


def test_sink_ahead_of_checkpoint_after_rotation_is_rolled_back(out):
    """Crash between sink commit (which rotated) and checkpoint save: reopen at the older state."""
    sink = open_sink(out, max_file_bytes=200)
    sink.change(change(0))
    saved = sink.commit()  # this one reached the checkpoint
    assert saved["file"] == "changes-000001.jsonl"
    for i in range(1, 4):
        sink.change(change(i))
    ahead = sink.commit()  # durable in the sink, but the checkpoint save never happened
    assert ahead == {"file": "changes-000002.jsonl", "offset": 0}
    sink.close()
    assert files(out) == ["changes-000001.jsonl", "changes-000002.jsonl"]

    again = open_sink(out, saved, max_file_bytes=200)
    assert files(out) == ["changes-000001.jsonl"]
    for i in range(1, 4):
        again.change(change(i))
    again.commit()
    again.close()
    assert lines(out / "changes-000001.jsonl") == [change(i) for i in range(4)]


def test_rotation_by_size_happens_only_at_commit(out):
    sink = open_sink(out, max_file_bytes=300)
    for i in range(10):  # far more than 300 bytes, in one transaction
        sink.change(change(i))
        assert files(out) == ["changes-000001.jsonl"]
    state = sink.commit()
    assert state == {"file": "changes-000002.jsonl", "offset": 0}
    assert files(out) == ["changes-000001.jsonl", "changes-000002.jsonl"]
    assert lines(out / "changes-000001.jsonl") == [change(i) for i in range(10)]  # the transaction is whole
    assert (out / "changes-000002.jsonl").stat().st_size == 0
    sink.change(change(10))
    state = sink.commit()
    assert state["file"] == "changes-000002.jsonl" and 0 < state["offset"] < 300
    sink.close()
    assert lines(out / "changes-000002.jsonl") == [change(10)]


def test_no_rotation_below_the_limit_or_with_zero_limit(out):
    sink = open_sink(out, max_file_bytes=0)
    for i in range(50):
        sink.change(change(i))
        assert sink.commit()["file"] == "changes-000001.jsonl"
    sink.close()
    assert files(out) == ["changes-000001.jsonl"]


def test_rotation_by_age_happens_at_commit(out, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(jsonl_mod.time, "monotonic", lambda: clock[0])
    sink = open_sink(out, max_file_bytes=0, max_file_seconds=60)
    sink.change(change(0))
    assert sink.commit()["file"] == "changes-000001.jsonl"
    clock[0] += 61
    sink.change(change(1))
    assert files(out) == ["changes-000001.jsonl"]
    assert sink.commit() == {"file": "changes-000002.jsonl", "offset": 0}
    sink.close()
    assert lines(out / "changes-000001.jsonl") == [change(0), change(1)]


def test_later_files_beyond_the_checkpoint_are_deleted_on_open(out):
    out.mkdir()
    for i, text in ((1, b'{"a":1}\n{"a":2}\n'), (2, b'{"a":3}\n'), (3, b'{"a":4}\n'), (12, b"")):
        (out / f"changes-{i:06d}.jsonl").write_bytes(text)
    (out / "notes.txt").write_text("keep me")
    (out / "changes-1.jsonl").write_text("not ours")
    sink = open_sink(out, {"file": "changes-000001.jsonl", "offset": 8})
    sink.close()
    assert files(out) == ["changes-000001.jsonl", "changes-1.jsonl", "notes.txt"]
    assert (out / "changes-000001.jsonl").read_bytes() == b'{"a":1}\n'


def test_earlier_files_are_kept_on_open(out):
    out.mkdir()
    (out / "changes-000001.jsonl").write_bytes(b'{"a":1}\n')
    (out / "changes-000002.jsonl").write_bytes(b'{"a":2}\n{"a":3}\n')
    sink = open_sink(out, {"file": "changes-000002.jsonl", "offset": 8})
    sink.change({"a": 4})
    assert sink.commit() == {"file": "changes-000002.jsonl", "offset": 16}
    sink.close()
    assert (out / "changes-000001.jsonl").read_bytes() == b'{"a":1}\n'
    assert (out / "changes-000002.jsonl").read_bytes() == b'{"a":2}\n{"a":4}\n'


@pytest.mark.parametrize("content", [b"", b'{"a":1}\n'])
def test_state_beyond_the_file_size_is_an_error(out, content):
    out.mkdir()
    (out / "changes-000003.jsonl").write_bytes(content)
    sink = JsonLinesSink(out)
    with pytest.raises(SinkError, match="changes-000003.jsonl"):
        sink.open({"file": "changes-000003.jsonl", "offset": 100})
    assert (out / "changes-000003.jsonl").read_bytes() == content  # nothing touched


def test_state_naming_a_missing_file_with_data_is_an_error(out):
    out.mkdir()
    with pytest.raises(SinkError):
        JsonLinesSink(out).open({"file": "changes-000005.jsonl", "offset": 10})


def test_state_with_a_foreign_file_name_is_a_sink_error(out):
    with pytest.raises(SinkError):
        JsonLinesSink(out).open({"file": "mysql-bin.000001", "offset": 0})


def test_no_state_with_existing_files_starts_after_the_highest(out):
    out.mkdir()
    for i in (1, 2, 7):
        (out / f"changes-{i:06d}.jsonl").write_bytes(b'{"old":%d}\n' % i)
    sink = open_sink(out)
    sink.change(change(0))
    assert sink.commit()["file"] == "changes-000008.jsonl"
    sink.close()
    for i in (1, 2, 7):  # nothing old is lost
        assert (out / f"changes-{i:06d}.jsonl").read_bytes() == b'{"old":%d}\n' % i


def _fsync_recorder(monkeypatch):
    calls: list[tuple[int, int, bool]] = []
    real = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        calls.append((st.st_dev, st.st_ino, os.path.stat.S_ISDIR(st.st_mode)))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_commit_fsyncs_the_file(out, monkeypatch):
    sink = open_sink(out)
    calls = _fsync_recorder(monkeypatch)
    sink.change(change(0))
    assert calls == []  # writing is not committing
    sink.commit()
    st = (out / "changes-000001.jsonl").stat()
    assert (st.st_dev, st.st_ino, False) in calls
    sink.close()


def test_new_file_fsyncs_the_directory(out, monkeypatch):
    out.mkdir()
    calls = _fsync_recorder(monkeypatch)
    sink = open_sink(out, max_file_bytes=10)
    st = out.stat()
    assert (st.st_dev, st.st_ino, True) in calls
    calls.clear()
    sink.change(change(0))
    sink.commit()  # rotates: a new file, so the directory again
    assert (st.st_dev, st.st_ino, True) in calls
    sink.close()


def test_fsync_false_never_fsyncs(out, monkeypatch):
    calls = _fsync_recorder(monkeypatch)
    sink = open_sink(out, fsync=False, max_file_bytes=10)
    sink.change(change(0))
    sink.commit()
    sink.close()
    assert calls == []


class _DiskFull:
    """Wraps a file object; its write (or flush) fails with ENOSPC once ``full`` is set."""

    full = {"write": False, "flush": False}

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        if self.full["write"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._fh.write(data)

    def flush(self):
        if self.full["flush"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._fh.flush()

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()
        return False


@pytest.fixture
def disk(monkeypatch):
    full = {"write": False, "flush": False}
    monkeypatch.setattr(_DiskFull, "full", full)
    monkeypatch.setattr(jsonl_mod, "open", lambda *a, **kw: _DiskFull(open(*a, **kw)), raising=False)
    return full


def test_disk_full_on_write_is_a_sink_error(out, disk):
    sink = open_sink(out)
    sink.change(change(0))
    state = sink.commit()
    disk["write"] = True
    with pytest.raises(SinkError, match="No space left on device") as info:
        sink.change(change(1))
    assert "changes-000001.jsonl" in str(info.value)
    sink.close()
    disk["write"] = False
    again = open_sink(out, state)  # what the daemon does after a SinkError
    again.close()
    assert lines(out / "changes-000001.jsonl") == [change(0)]


def test_disk_full_on_commit_is_a_sink_error(out, disk):
    sink = open_sink(out)
    sink.change(change(0))
    state = sink.commit()
    sink.change(change(1))
    disk["flush"] = True
    with pytest.raises(SinkError, match="No space left on device"):
        sink.commit()
    disk["flush"] = False
    sink.close()
    again = open_sink(out, state)
    again.close()
    assert lines(out / "changes-000001.jsonl") == [change(0)]


def test_failing_fsync_is_a_sink_error(out, monkeypatch):
    sink = open_sink(out)
    sink.change(change(0))

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(SinkError, match="Input/output error"):
        sink.commit()
    monkeypatch.undo()
    sink.close()


def test_unusable_directory_is_a_sink_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SinkError):
        JsonLinesSink(blocker / "changes").open(None)


# =========================================================================== archive

ARCHIVE_FILES = [
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32",  # CRC32, ends with ROTATE
    "mysql-binlog-connector-java/mysql-bin.checksum-none",   # checksums off, ends with STOP
    "rust_mysql_common/mariadb-bin.000001",                  # MariaDB, FDE flagged in use
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",
    "mysql-binlog-connector-rust/mysql-bin.000057",           # TRANSACTION_PAYLOAD
    "rust_mysql_common/binlog_transaction.000001",            # 5.0, no checksums
    "canal/mysql-bin.000001",                                 # 5.1
    "mysql-binlog-connector-java/mysql-bin.sakila",           # 1.4 MB
]


def checksummed(data: bytes) -> bool:
    return next(iter_events(data)).checksum_alg == 1


def crc_footer(raw: bytes, crc: bool) -> bytes:
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def artificial_rotate(name: str, pos: int, crc: bool) -> tuple[bytes, object]:
    """The ROTATE a primary sends first: timestamp 0, type 4, flags ARTIFICIAL, log_pos 0."""
    body = struct.pack("<Q", pos) + name.encode()
    length = 19 + len(body) + (4 if crc else 0)
    raw = crc_footer(struct.pack("<IBIIIH", 0, ET.ROTATE, 1, length, 0, LOG_EVENT_ARTIFICIAL_F) + body, crc)
    event = Decoder(checksum_alg=1 if crc else 0).decode(raw)
    assert event.header.type_code == ET.ROTATE and (event.next_file, event.position) == (name, pos)
    return raw, event


def heartbeat(name: str, pos: int, crc: bool, tc: int = ET.HEARTBEAT) -> tuple[bytes, object]:
    """A heartbeat as the primary sends it: its log_pos is where the primary is (non-zero)."""
    body = name.encode() if tc == ET.HEARTBEAT else b""
    length = 19 + len(body) + (4 if crc else 0)
    raw = crc_footer(struct.pack("<IBIIIH", 0, tc, 1, length, pos, 0) + body, crc)
    if tc == ET.HEARTBEAT:
        event = Decoder(checksum_alg=1 if crc else 0).decode(raw)
    else:
        from binlogd.protocol.events import EventHeader, HeartbeatEvent
        event = HeartbeatEvent(EventHeader(0, tc, 1, length, pos, 0, 0), name, pos)
    assert event.header.type_code == tc and event.header.next_position == pos
    return raw, event


def resent_fde(data: bytes, fde_raw: bytes) -> tuple[bytes, object]:
    """The FDE a primary sends when a dump starts past offset 4: log_pos 0, in-use flag clear, CRC redone."""
    crc = checksummed(data)
    raw = bytearray(fde_raw[:-4] if crc else fde_raw)
    raw[13:17] = b"\0\0\0\0"
    raw[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    raw = crc_footer(bytes(raw), crc)
    return raw, Decoder().decode(raw)


def stream(data: bytes) -> list[tuple[bytes, object]]:
    """(raw bytes, decoded event) of every event of a binlog file, as a dump would deliver them."""
    return [(data[ev.header.pos:ev.header.pos + ev.header.event_length], ev) for ev in iter_events(data)]


def feed_archive(sink: ArchiveSink, items) -> None:
    for raw, event in items:
        sink.event(raw, event)


@pytest.mark.parametrize("name", ARCHIVE_FILES)
def test_archive_is_byte_identical_to_the_source(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    sink = ArchiveSink(tmp_path / "archive")
    sink.open(None)
    feed_archive(sink, [artificial_rotate(fname, 4, crc)] + stream(data))
    state = sink.commit()
    sink.close()
    assert state == {"file": fname, "size": len(data)}
    archived = (tmp_path / "archive" / fname).read_bytes()
    assert len(archived) == len(data)
    assert archived == data
    # A ROTATE at the end names the next file, which is only created when its first event arrives.
    assert files(tmp_path / "archive") == [fname]


@pytest.mark.parametrize("name", ARCHIVE_FILES)
def test_archive_resumes_mid_file_from_a_committed_state(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    items = stream(data)
    k = len(items) // 2
    target = tmp_path / "archive"

    sink = ArchiveSink(target)
    sink.open(None)
    feed_archive(sink, [artificial_rotate(fname, 4, crc)] + items[:k])
    state = sink.commit()
    assert state == {"file": fname, "size": items[k][1].header.pos}
    feed_archive(sink, items[k:k + 3])  # written, never committed: the daemon dies here
    sink.close()
    assert (target / fname).stat().st_size > state["size"] or k + 3 > len(items)

    again = ArchiveSink(target)
    again.open(state)
    assert (target / fname).stat().st_size == state["size"]
    resume = [artificial_rotate(fname, state["size"], crc), resent_fde(data, items[0][0])]
    feed_archive(again, resume + items[k:])
    assert again.commit() == {"file": fname, "size": len(data)}
    again.close()
    assert (target / fname).read_bytes() == data


def test_archive_reconnect_to_an_earlier_position_rewrites_from_there(corpus, tmp_path):
    """A reconnect from the last committed boundary, without reopening: the tail after it is replaced."""
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    k = 40
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, True)] + items[:k + 5])
    pos = items[k][1].header.pos
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", pos, True), resent_fde(data, items[0][0])]
                 + items[k:k + 2])
    state = sink.commit()
    assert state == {"file": "mysql-bin.000001", "size": items[k + 2][1].header.pos}
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data[:state["size"]]  # no stale tail
    feed_archive(sink, items[k + 2:])
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data


def test_archive_follows_a_rotate_into_the_next_file(corpus, tmp_path):
    first = (corpus / "canal/mysql-bin.000001").read_bytes()
    second = (corpus / "canal/mysql-bin.000002").read_bytes()
    items = stream(first)
    assert items[-1][1].next_file == "mysql-bin.000002"
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, False)] + items + stream(second))
    assert sink.commit() == {"file": "mysql-bin.000002", "size": len(second)}
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == first
    assert (tmp_path / "mysql-bin.000002").read_bytes() == second


def test_archive_next_file_announced_again_by_an_artificial_rotate(corpus, tmp_path):
    first = (corpus / "canal/mysql-bin.000001").read_bytes()
    second = (corpus / "canal/mysql-bin.000002").read_bytes()
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, False)] + stream(first)
                 + [artificial_rotate("mysql-bin.000002", 4, False)] + stream(second))
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == first
    assert (tmp_path / "mysql-bin.000002").read_bytes() == second


@pytest.mark.parametrize("name", ["mysql-binlog-connector-java/mysql-bin.checksum-crc32",
                                  "rust_mysql_common/binlog_transaction.000001"])
def test_archive_skips_heartbeats_and_artificial_events(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    items = stream(data)
    mixed = [artificial_rotate(fname, 4, crc)]
    for raw, ev in items:
        mixed.append((raw, ev))
        end = ev.header.next_position
        mixed.append(heartbeat(fname, end, crc))
        mixed.append(heartbeat(fname, end, crc, ET.HEARTBEAT_V2))
        if ev.header.type_code != ET.ROTATE:
            mixed.append(artificial_rotate(fname, end, crc))  # a reconnect announcing the same place
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, mixed)
    sink.close()
    assert (tmp_path / fname).read_bytes() == data


def test_archive_skips_an_event_flagged_artificial(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    raw, ev = items[3]
    flagged = bytearray(raw)
    flagged[17] |= LOG_EVENT_ARTIFICIAL_F
    from dataclasses import replace
    fake = replace(ev, header=replace(ev.header, flags=ev.header.flags | LOG_EVENT_ARTIFICIAL_F))
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("x.000001", 4, True)] + items[:3] + [(bytes(flagged), fake)])
    assert sink.commit() == {"file": "x.000001", "size": items[3][1].header.pos}


def test_archive_event_out_of_step_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, True)] + items[:5])
    with pytest.raises(SinkError, match="mysql-bin.000001"):
        sink.event(*items[6])  # items[5] was lost
    sink.close()


def test_archive_event_before_any_rotate_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    with pytest.raises(SinkError):
        sink.event(*stream(data)[0])


def test_archive_resume_past_the_end_of_the_file_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    (tmp_path / "mysql-bin.000001").write_bytes(data[:1000])
    sink = ArchiveSink(tmp_path)
    with pytest.raises(SinkError):
        sink.open({"file": "mysql-bin.000001", "size": 2000})
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    with pytest.raises(SinkError):  # the stream says it continues at 2000, the archive has 1000 bytes
        sink.event(*artificial_rotate("mysql-bin.000001", 2000, True))


def test_archive_of_the_fde_as_sent_differs_only_in_the_in_use_flag(corpus, tmp_path):
    """What a primary sends has the in-use flag clear; the active file on disk has it set (offset 21)."""
    data = (corpus / "rust_mysql_common/mariadb-bin.000001").read_bytes()
    items = stream(data)
    assert items[0][1].header.flags & LOG_EVENT_BINLOG_IN_USE_F
    sent = bytearray(items[0][0])
    sent[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    fde = Decoder().decode(bytes(sent))  # the CRC still holds: it was computed with the flag clear
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mariadb-bin.000001", 4, True), (bytes(sent), fde)] + items[1:])
    sink.close()
    archived = (tmp_path / "mariadb-bin.000001").read_bytes()
    assert len(archived) == len(data)
    assert [i for i in range(len(data)) if archived[i] != data[i]] == [21]


def test_archive_commit_fsyncs(corpus, tmp_path, monkeypatch):
    data = (corpus / "rust_mysql_common/binlog_transaction.000001").read_bytes()
    calls = _fsync_recorder(monkeypatch)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("master-bin.000001", 4, False)] + stream(data)[:4])
    calls.clear()
    sink.commit()
    st = (tmp_path / "master-bin.000001").stat()
    assert (st.st_dev, st.st_ino, False) in calls
    sink.close()


# =========================================================================== stdout


def test_stdout_writes_json_lines_and_flushes_on_commit():
    raw = io.BytesIO()
    buffered = io.BufferedWriter(raw, buffer_size=1 << 16)
    sink = StdoutSink(buffered)
    sink.open(None)
    sink.change(change(0))
    sink.change(change(1))
    assert raw.getvalue() == b""  # not flushed before the commit
    assert sink.commit() == {}
    assert [json.loads(line) for line in raw.getvalue().splitlines()] == [change(0), change(1)]
    assert raw.getvalue().endswith(b"\n") and raw.getvalue().count(b"\n") == 2


def test_stdout_commit_calls_flush():
    class Counting(io.BytesIO):
        flushes = 0

        def flush(self):
            self.flushes += 1
            super().flush()

    out = Counting()
    sink = StdoutSink(out)
    sink.change({"a": 1})
    assert out.flushes == 0
    sink.commit()
    assert out.flushes == 1
    assert out.getvalue() == b'{"a":1}\n'


def test_stdout_broken_pipe_is_a_sink_error():
    class Broken(io.BytesIO):
        def flush(self):
            raise OSError(errno.EPIPE, "Broken pipe")

    sink = StdoutSink(Broken())
    sink.change({"a": 1})
    with pytest.raises(SinkError, match="Broken pipe"):
        sink.commit()


def test_stdout_defaults_to_the_process_stdout(monkeypatch):
    buf = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", SimpleNamespace(buffer=buf))
    sink = StdoutSink()
    sink.change({"a": 1})
    sink.commit()
    assert buf.getvalue() == b'{"a":1}\n'


def test_make_sink_kinds(tmp_path):
    cfg = SimpleNamespace(kind="jsonl", path=str(tmp_path), max_file_bytes=5, max_file_seconds=0, fsync=False)
    sink = make_sink(cfg)
    assert isinstance(sink, JsonLinesSink) and sink.max_file_bytes == 5 and sink.fsync is False
    assert isinstance(make_sink(SimpleNamespace(kind="archive", path=str(tmp_path), fsync=True)), ArchiveSink)
    assert make_sink(SimpleNamespace(kind="archive", path=str(tmp_path), fsync=True)).wants_rows is False
    assert isinstance(make_sink(SimpleNamespace(kind="stdout")), StdoutSink)
    with pytest.raises(SinkError, match="kafka"):
        make_sink(SimpleNamespace(kind="kafka"))


# =========================================================================== schema


@pytest.mark.parametrize("statement", [
    "ALTER TABLE t ADD COLUMN c INT",
    "alter table t drop column c",
    "  CREATE TABLE t (a INT)",
    "\n\tCREATE TABLE IF NOT EXISTS t (a INT)",
    "CREATE OR REPLACE TABLE t (a INT)",
    "create temporary table tmp (a int)",
    "DROP TABLE `t` /* generated by server */",
    "drop table if exists a, b",
    "RENAME TABLE a TO b",
    "TRUNCATE TABLE t",
    "truncate t",
    "ALTER ONLINE TABLE t ADD c INT",
    "DROP DATABASE d",
    "Create\tTable t (a int)",
])
def test_is_ddl_true(statement):
    assert is_ddl(statement) is True


@pytest.mark.parametrize("statement", [
    "/* migration 42 */ ALTER TABLE t ADD COLUMN c INT",
    "/*app=web,route=/admin*/ DROP TABLE t",
])
def test_is_ddl_with_a_leading_comment(statement):
    """Statements reach the binlog as the client sent them, leading comments included (sqlcommenter…)."""
    assert is_ddl(statement) is True


@pytest.mark.parametrize("statement", [
    "INSERT INTO t VALUES (1)",
    "insert into alter_log values ('ALTER TABLE t')",
    "UPDATE t SET created = 1",
    "DELETE FROM drop_queue",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT s1",
    "XA START 'x'",
    "SELECT 1",
    "CREATED_AT",
    "DROPPED",
    "ALTERATIONS",
    "REPLACE INTO t VALUES (1)",
    "",
    "   ",
])
def test_is_ddl_false(statement):
    assert is_ddl(statement) is False


class FakeCursor:
    def __init__(self, conn):
        self.conn = conn
        self._rows = ()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    async def execute(self, sql, args):
        self.conn.queries.append((sql, args))
        if self.conn.failures:
            raise self.conn.failures.pop(0)
        self._rows = self.conn.tables.get(args, ())

    async def fetchall(self):
        return self._rows


class FakeConnection:
    def __init__(self, tables, failures=()):
        self.tables, self.failures = tables, list(failures)
        self.queries: list = []
        self.closed = False

    def cursor(self):
        return FakeCursor(self)

    def close(self):
        self.closed = True


CANNED = {
    ("shop", "orders"): (
        ("id", "int(10) unsigned", "int", None),
        ("name", "varchar(64)", "varchar", 45),
        ("size", "enum('small','medium','it''s','a,b','')", "enum", 33),
        ("flags", "set('read','write','x''y','''q''')", "set", 8),
        ("amount", "decimal(10,2) unsigned zerofill", "decimal", None),
        ("big", "bigint(20)", "bigint", None),
        ("note", "text", "text", 255),
    ),
    ("shop", "cased"): (
        ("id", "int(11)", "int", None),
        ("size", "enum('Small','MEDIUM','x-Large')", "enum", 45),
        ("tags", "set('Red','GREEN')", "set", 45),
    ),
}


def make_cache(tables=CANNED, failures=()):
    connections = []

    async def connect():
        conn = FakeConnection(tables, failures if not connections else ())
        connections.append(conn)
        return conn

    return SchemaCache(connect), connections


def test_schema_fetch_parses_columns():
    cache, conns = make_cache()
    schema = asyncio.run(cache.fetch("shop", "orders"))
    assert schema == TableSchema(
        names=("id", "name", "size", "flags", "amount", "big", "note"),
        unsigned=(True, False, False, False, True, False, False),
        collations=(None, 45, 33, 8, None, None, 255),
        enum_values=(None, None, ("small", "medium", "it's", "a,b", ""), None, None, None, None),
        set_values=(None, None, None, ("read", "write", "x'y", "'q'"), None, None, None),
    )
    assert len(conns) == 1
    sql, args = conns[0].queries[0]
    assert args == ("shop", "orders")
    assert "information_schema.COLUMNS" in sql and "ORDINAL_POSITION" in sql


def test_schema_enum_and_set_values_keep_their_case():
    """ENUM/SET values are case-sensitive text: the decoder must print 'Small', not 'small'."""
    cache, _ = make_cache()
    schema = asyncio.run(cache.fetch("shop", "cased"))
    assert schema.enum_values[1] == ("Small", "MEDIUM", "x-Large")
    assert schema.set_values[2] == ("Red", "GREEN")


def test_schema_lookup_misses_fetch_and_invalidate():
    cache, conns = make_cache()
    assert cache.lookup("shop", "orders") is None
    assert cache.misses == {("shop", "orders")}
    assert cache.fetches == 0
    fetched = asyncio.run(cache.fetch("shop", "orders"))
    assert cache.misses == set() and cache.fetches == 1
    assert cache.lookup("shop", "orders") is fetched
    assert cache.misses == set()
    cache.invalidate()
    assert cache.lookup("shop", "orders") is None
    assert cache.misses == {("shop", "orders")}


def test_schema_missing_table_is_cached_as_none():
    cache, _ = make_cache()
    assert asyncio.run(cache.fetch("shop", "gone")) is None
    assert cache.lookup("shop", "gone") is None
    assert cache.misses == set()  # known to be absent, not a miss
    assert cache.fetches == 1


def test_schema_reuses_its_connection_and_closes_it():
    cache, conns = make_cache()

    async def two():
        await cache.fetch("shop", "orders")
        await cache.fetch("shop", "cased")
        await cache.close()

    asyncio.run(two())
    assert len(conns) == 1 and len(conns[0].queries) == 2
    assert conns[0].closed


def test_schema_reconnects_once_after_a_lost_connection():
    cache, conns = make_cache(failures=[pymysql.err.OperationalError(2013, "Lost connection")])
    schema = asyncio.run(cache.fetch("shop", "orders"))
    assert len(conns) == 2
    assert schema.names[0] == "id"
    assert cache.fetches == 1


def test_schema_gives_up_after_the_second_failure():
    async def connect():
        return FakeConnection(CANNED, [pymysql.err.OperationalError(2013, "Lost connection")])

    cache = SchemaCache(connect)
    with pytest.raises(pymysql.err.OperationalError):
        asyncio.run(cache.fetch("shop", "orders"))
    assert cache.lookup("shop", "orders") is None
