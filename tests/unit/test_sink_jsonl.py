"""The JSON-lines sink: commits, offsets, rotation, truncation on reopen, fsync and a full disk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from binlogd.daemon.sinks import SinkError
from binlogd.daemon.sinks import jsonl as jsonl_mod
from binlogd.daemon.sinks.jsonl import JsonLinesSink
from tests.support.sinks import (
    _fsync_recorder,
    change,
    files,
    lines,
)


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "changes"


def commit(sink) -> dict:
    """Flush, hand over and sync, as the Committer does: the state once durable."""
    state = sink.flush()
    sink.begin_sync()
    sink.sync()
    return state


def _at(count: int) -> dict:
    """change_lines' keywords for ``count`` lines of table d.t (ids snapshot:0:0:0 ...)."""
    return {"count": count, "prefix": "snapshot:0:0", "first": 0, "schema": "d", "table": "t"}


def open_sink(directory: Path, state=None, **kw) -> JsonLinesSink:
    kw.setdefault("max_file_seconds", 0)
    sink = JsonLinesSink(directory, **kw)
    sink.open(state)
    return sink


def test_changes_then_commit_returns_file_and_offset(out):
    sink = open_sink(out)
    for i in range(3):
        sink.change(change(i))
    state = commit(sink)
    path = out / "changes-000001.jsonl"
    assert state == {"file": "changes-000001.jsonl", "offset": path.stat().st_size}
    assert lines(path) == [change(i) for i in range(3)]
    sink.change(change(3))
    state2 = commit(sink)
    assert state2["file"] == "changes-000001.jsonl" and state2["offset"] == path.stat().st_size > state["offset"]
    sink.close()
    assert lines(path) == [change(i) for i in range(4)]


def test_empty_commit_keeps_the_offset(out):
    sink = open_sink(out)
    assert commit(sink) == {"file": "changes-000001.jsonl", "offset": 0}
    sink.change(change(1))
    first = commit(sink)
    assert commit(sink) == first
    sink.close()


def test_uncommitted_tail_is_truncated_on_reopen(out):
    """Exactly once after a crash: what was written after the checkpointed state disappears."""
    sink = open_sink(out)
    for i in range(2):
        sink.change(change(i))
    state = commit(sink)
    for i in range(2, 5):  # a transaction in progress when the daemon dies
        sink.change(change(i))
    sink.close()  # its bytes did reach the file
    path = out / state["file"]
    assert path.stat().st_size > state["offset"]

    again = open_sink(out, state)
    assert path.stat().st_size == state["offset"]
    for i in range(2, 5):  # the transaction is read again and written again
        again.change(change(i))
    commit(again)
    again.close()
    assert lines(path) == [change(i) for i in range(5)]


def test_sink_ahead_of_checkpoint_after_rotation_is_rolled_back(out):
    """Crash between sink commit (which rotated) and checkpoint save: reopen at the older state."""
    sink = open_sink(out, max_file_bytes=200)
    sink.change(change(0))
    saved = commit(sink)  # this one reached the checkpoint
    assert saved["file"] == "changes-000001.jsonl"
    for i in range(1, 4):
        sink.change(change(i))
    ahead = commit(sink)  # durable in the sink, but the checkpoint save never happened
    assert ahead == {"file": "changes-000002.jsonl", "offset": 0}
    sink.close()
    assert files(out) == ["changes-000001.jsonl", "changes-000002.jsonl"]

    again = open_sink(out, saved, max_file_bytes=200)
    assert files(out) == ["changes-000001.jsonl"]
    for i in range(1, 4):
        again.change(change(i))
    commit(again)
    again.close()
    assert lines(out / "changes-000001.jsonl") == [change(i) for i in range(4)]


def test_rotation_by_size_happens_only_at_commit(out):
    sink = open_sink(out, max_file_bytes=300)
    for i in range(10):  # far more than 300 bytes, in one transaction
        sink.change(change(i))
        assert files(out) == ["changes-000001.jsonl"]
    state = commit(sink)
    assert state == {"file": "changes-000002.jsonl", "offset": 0}
    assert files(out) == ["changes-000001.jsonl", "changes-000002.jsonl"]
    assert lines(out / "changes-000001.jsonl") == [change(i) for i in range(10)]  # the transaction is whole
    assert (out / "changes-000002.jsonl").stat().st_size == 0
    sink.change(change(10))
    state = commit(sink)
    assert state["file"] == "changes-000002.jsonl" and 0 < state["offset"] < 300
    sink.close()
    assert lines(out / "changes-000002.jsonl") == [change(10)]


def test_no_rotation_below_the_limit_or_with_zero_limit(out):
    sink = open_sink(out, max_file_bytes=0)
    for i in range(50):
        sink.change(change(i))
        assert commit(sink)["file"] == "changes-000001.jsonl"
    sink.close()
    assert files(out) == ["changes-000001.jsonl"]


def test_rotation_by_age_happens_at_commit(out, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(jsonl_mod.time, "monotonic", lambda: clock[0])
    sink = open_sink(out, max_file_bytes=0, max_file_seconds=60)
    sink.change(change(0))
    assert commit(sink)["file"] == "changes-000001.jsonl"
    clock[0] += 61
    sink.change(change(1))
    assert files(out) == ["changes-000001.jsonl"]
    assert commit(sink) == {"file": "changes-000002.jsonl", "offset": 0}
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
    assert commit(sink) == {"file": "changes-000002.jsonl", "offset": 16}
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
    assert commit(sink)["file"] == "changes-000008.jsonl"
    sink.close()
    for i in (1, 2, 7):  # nothing old is lost
        assert (out / f"changes-{i:06d}.jsonl").read_bytes() == b'{"old":%d}\n' % i


def test_commit_fsyncs_the_file(out, monkeypatch):
    sink = open_sink(out)
    calls = _fsync_recorder(monkeypatch)
    sink.change(change(0))
    assert calls == []  # writing is not committing
    commit(sink)
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
    commit(sink)  # rotates: a new file, so the directory again
    assert (st.st_dev, st.st_ino, True) in calls
    sink.close()


def test_fsync_false_never_fsyncs(out, monkeypatch):
    calls = _fsync_recorder(monkeypatch)
    sink = open_sink(out, fsync=False, max_file_bytes=10)
    sink.change(change(0))
    commit(sink)
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
    state = commit(sink)
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
    state = commit(sink)
    sink.change(change(1))
    disk["flush"] = True
    with pytest.raises(SinkError, match="No space left on device"):
        commit(sink)
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
        commit(sink)
    monkeypatch.undo()
    sink.close()


def test_unusable_directory_is_a_sink_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SinkError):
        JsonLinesSink(blocker / "changes").open(None)


# =========================================================================== archive



@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not __import__("shutil").which("fincore"),
                    reason="needs posix_fadvise and util-linux's fincore")
@pytest.mark.parametrize("bulk, fsync", [(True, True), (False, True), (False, False)])
def test_only_the_newest_durable_bytes_stay_cached(out, monkeypatch, bulk, fsync):
    """The durable bytes of a file more than KEEP_CACHED behind its end leave the page cache (fincore counts what
    is resident), in a bulk load (a snapshot) or not (a backlog); without fsync nothing is durable, and the file
    stays cached."""
    import subprocess

    monkeypatch.setattr(jsonl_mod, "KEEP_CACHED", 4 << 20)
    sink = open_sink(out, fsync=fsync)
    sink.bulk(bulk)
    block = b'{"x":"' + b"a" * 1000 + b'"}\n'
    for _ in range(3):
        sink.change_lines(block * 8192, **_at(8192))   # ~8 MB a commit
        sink.flush()
        sink.begin_sync()
        sink.sync()
    sink.bulk(False)
    sink.close()
    path = out / "changes-000001.jsonl"
    resident = int(subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                                  capture_output=True, text=True, check=True).stdout)
    size = path.stat().st_size
    if fsync:
        assert resident <= size // 3, (resident, size)   # ~KEEP_CACHED of 24 MB (fincore rounds up a little)
    else:
        assert resident > size - (1 << 20), (resident, size)


class _GatedWrites:
    """Wraps a file object; each write waits until ``gate`` is set (and notes the thread it ran in)."""

    gate = None
    threads: list = []

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        import threading

        self.threads.append(threading.current_thread().name)
        assert self.gate.wait(10)
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)


def test_bulk_writes_in_its_thread_and_sync_waits_for_them(out, monkeypatch):
    """In a bulk load change_lines returns before its bytes are written (the writer thread waits here on a
    gate), flush gives the offset they will end at, sync waits for them before its fsync, a later change is
    written after them, and a memoryview given is released once written."""
    import threading

    gate = threading.Event()
    monkeypatch.setattr(_GatedWrites, "gate", gate)
    monkeypatch.setattr(_GatedWrites, "threads", [])
    monkeypatch.setattr(jsonl_mod, "open", lambda *a, **kw: _GatedWrites(open(*a, **kw)), raising=False)
    gate.set()
    sink = open_sink(out)
    sink.change(change(0))
    before = commit(sink)["offset"]
    sink.bulk(True)
    gate.clear()
    buf = bytearray(b'{"n":1}\n' * 1000)
    sink.change_lines(memoryview(buf), **_at(1000))
    state = sink.flush()
    path = out / "changes-000001.jsonl"
    assert state["offset"] == before + len(buf) and path.stat().st_size == before  # not written yet
    sink.begin_sync()
    syncing = threading.Thread(target=sink.sync)
    syncing.start()
    syncing.join(0.3)
    assert syncing.is_alive(), "sync did not wait for the write"
    gate.set()
    syncing.join(10)
    assert path.stat().st_size == state["offset"]
    buf.extend(b"x")   # no view of it is held any more
    sink.change(change(1))
    sink.bulk(False)
    assert commit(sink)["offset"] == path.stat().st_size
    sink.close()
    assert lines(path) == [change(0)] + [{"n": 1}] * 1000 + [change(1)]
    assert _GatedWrites.threads[1].startswith("jsonl-writer") and _GatedWrites.threads[0] == "MainThread"


def test_bulk_write_failure_is_a_sink_error_at_sync(out, disk):
    """A write that fails in the writer thread fails the sync of the commit that covers it (and the sink's
    next call): the checkpoint never covers it, and reopening at the last state cuts it off."""
    sink = open_sink(out)
    sink.change(change(0))
    state = commit(sink)
    sink.bulk(True)
    disk["write"] = True
    sink.change_lines(b'{"n":1}\n' * 10, **_at(10))
    sink.flush()
    sink.begin_sync()
    with pytest.raises(SinkError, match="No space left on device"):
        sink.sync()
    with pytest.raises(SinkError, match="No space left on device"):
        sink.change_lines(b'{"n":2}\n', **_at(1))
    disk["write"] = False
    sink.bulk(False)
    sink.close()
    again = open_sink(out, state)
    again.close()
    assert lines(out / "changes-000001.jsonl") == [change(0)]


def test_bulk_rotation_waits_for_the_write(out):
    """A commit that rotates the file in a bulk load closes it only once the writer thread has written it."""
    sink = open_sink(out, max_file_bytes=1000)
    sink.bulk(True)
    for n in range(3):
        sink.change_lines(b'{"n":%d}\n' % n * 200, **_at(200))
        assert commit(sink) == {"file": f"changes-00000{n + 2}.jsonl", "offset": 0}
    sink.bulk(False)
    sink.close()
    assert [lines(out / f"changes-00000{n + 1}.jsonl") for n in range(3)] == [[{"n": n}] * 200 for n in range(3)]


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_change_lines_are_what_change_writes_in_the_binlogd_format_only(out, tmp_path, fmt):
    """Lines of the "binlogd" format are written as they are, the bytes change() writes for their dicts; a sink
    in another format declines them (False) and writes nothing."""
    from binlogd.library.serialize import dumps

    changes = [change(i) for i in range(5)]
    text = b"".join(dumps(c) + b"\n" for c in changes)
    by_lines, by_dicts = open_sink(out, format=fmt), open_sink(tmp_path / "dicts", format=fmt)
    took = by_lines.change_lines(memoryview(text), **_at(5))
    for c in changes if fmt == "binlogd" else ():
        by_dicts.change(c)
    commit(by_lines), commit(by_dicts)
    by_lines.close(), by_dicts.close()
    written = (out / "changes-000001.jsonl").read_bytes()
    assert took is (fmt == "binlogd")
    assert written == (text if took else b"")
    if took:
        assert written == (tmp_path / "dicts" / "changes-000001.jsonl").read_bytes()
