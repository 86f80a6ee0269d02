"""Tests for daemon.checkpoint: atomic JSON checkpoint file and its flock lock."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from binlogd.daemon.delivery import checkpoint as checkpoint_mod
from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.state import CheckpointError
from binlogd.library.checkpointfile import FORMAT_VERSION, Checkpoint, jsonl_committed, jsonl_index, jsonl_name
from binlogd.protocol.position import Position
from tests.support.paths import REPO

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def sample(pos: int = 1234) -> Checkpoint:
    return Checkpoint(Position("binlog.000002", pos, f"{UUID}:1-42", "0-1-7"),
                      {"file": "changes-000003.jsonl", "offset": 9876},
                      {"flavor": "mysql", "server_uuid": UUID, "server_id": 1})


@pytest.fixture
def store(tmp_path):
    s = CheckpointStore(tmp_path / "state" / "checkpoint.json")
    s.acquire()  # as the daemon does before anything else: creates the directory, takes the lock
    yield s
    s.release()


def test_load_without_a_file_is_none(store):
    assert store.load() is None


def test_save_load_round_trip(store):
    cp = sample()
    before = time.time()
    store.save(cp)
    assert before <= cp.saved_at <= time.time()
    loaded = store.load()
    assert loaded == cp
    assert loaded.position == Position("binlog.000002", 1234, f"{UUID}:1-42", "0-1-7")
    assert loaded.sink == {"file": "changes-000003.jsonl", "offset": 9876}
    data = json.loads(store.path.read_text())
    assert data["version"] == FORMAT_VERSION
    assert data["position"] == {"file": "binlog.000002", "pos": 1234, "gtid_set": f"{UUID}:1-42",
                                "gtid_list": "0-1-7"}


def test_save_replaces_the_previous_checkpoint(store):
    store.save(sample(100))
    store.save(sample(200))
    assert store.load().position.pos == 200
    # No temp file is left next to it.
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["checkpoint.json", "checkpoint.json.lock"]


def test_save_fsyncs_file_and_directory(store, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else None)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.save(sample())
    monkeypatch.undo()
    assert len(synced) == 2
    if synced[0] is not None:
        assert synced == [False, True]  # the temp file, then the directory (after the rename)


@pytest.mark.parametrize("target", ["write", "fsync", "replace"])
def test_failed_save_leaves_the_old_checkpoint_intact(store, monkeypatch, target):
    old = sample(100)
    store.save(old)
    old_bytes = store.path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(checkpoint_mod.os, target, boom)
        with pytest.raises(CheckpointError) as info:
            store.save(sample(200))
    assert str(store.path) in str(info.value)
    assert "No space left on device" in str(info.value)
    assert store.path.read_bytes() == old_bytes
    assert store.load() == old


def test_half_written_temp_file_does_not_reach_the_checkpoint(store, monkeypatch):
    """A crash in the middle of writing: the temp file holds a prefix, the checkpoint the old state."""
    store.save(sample(100))
    real_write = os.write

    def half_write(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(checkpoint_mod.os, "write", half_write)
        with pytest.raises(CheckpointError):
            store.save(sample(200))
    assert store.load().position.pos == 100
    store.save(sample(300))  # the next save still works and replaces the leftover temp file
    assert store.load().position.pos == 300


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe", b"[]", b"null", b"42",
                                     b'{"version": 1}', b'{"version": 1, "position": {"pos": 4}}',
                                     b'{"version": 1, "position": {"file": "b.1", "pos": "x"}}',
                                     b'{"version": 1, "position": "b.1:4"}'])
def test_corrupt_checkpoint_is_an_error_naming_the_path(store, content):
    store.path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        store.load()
    assert str(store.path) in str(info.value)


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_unknown_version_is_an_error(store, version):
    store.save(sample())
    data = json.loads(store.path.read_text())
    data["version"] = version
    store.path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="version"):
        store.load()


def test_unreadable_checkpoint_is_an_error(store):
    store.path.mkdir()  # a directory where the file should be
    with pytest.raises(CheckpointError) as info:
        store.load()
    assert str(store.path) in str(info.value)


# --------------------------------------------------------------------------- the lock


def test_acquire_creates_directory_and_lock_file(store):
    assert store.path.parent.is_dir()
    assert (store.path.parent / "checkpoint.json.lock").exists()


def test_second_store_in_the_same_process_is_refused(tmp_path):
    """flock locks belong to the open file description: two stores in one process conflict too."""
    path = tmp_path / "checkpoint.json"
    first, second = CheckpointStore(path), CheckpointStore(path)
    first.acquire()
    try:
        with pytest.raises(CheckpointError, match="locked") as info:
            second.acquire()
        assert str(path) in str(info.value)
    finally:
        first.release()
    third = CheckpointStore(path)
    third.acquire()  # the refused store holds nothing: free once the first lets go
    with pytest.raises(CheckpointError, match="locked"):
        second.acquire()
    third.release()
    second.acquire()
    second.release()


def test_lock_held_by_another_process_is_refused(tmp_path):
    path = tmp_path / "checkpoint.json"
    holder = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from binlogd.daemon.delivery.checkpoint import CheckpointStore
        store = CheckpointStore({str(path)!r})
        store.acquire()
        print("locked", flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        store = CheckpointStore(path)
        with pytest.raises(CheckpointError, match="locked"):
            store.acquire()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    store.acquire()  # the holder exited: its lock went with it
    store.release()


def test_release_then_reacquire(tmp_path):
    store = CheckpointStore(tmp_path / "c.json")
    store.acquire()
    store.release()
    store.release()  # harmless twice
    other = CheckpointStore(tmp_path / "c.json")
    other.acquire()  # free after the release
    with pytest.raises(CheckpointError, match="locked"):
        store.acquire()  # and held again by the other store
    other.release()
    store.acquire()
    store.save(sample(7))
    assert store.load().position.pos == 7
    store.release()


def test_without_lock_two_stores_coexist_and_no_lock_file(tmp_path):
    a, b = CheckpointStore(tmp_path / "c.json", lock=False), CheckpointStore(tmp_path / "c.json", lock=False)
    a.acquire()
    b.acquire()
    assert not (tmp_path / "c.json.lock").exists()


# --------------------------------------------------------------------------- unwritable places


def test_directory_that_cannot_be_created_is_an_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file")
    store = CheckpointStore(blocker / "checkpoint.json")
    with pytest.raises(CheckpointError) as info:
        store.acquire()
    assert str(blocker) in str(info.value)
    with pytest.raises(CheckpointError):
        store.save(sample())


def test_unwritable_target_is_an_error_and_keeps_nothing_half_done(tmp_path, monkeypatch):
    """An EACCES from open (what a read-only directory gives a non-root user) becomes CheckpointError."""
    store = CheckpointStore(tmp_path / "checkpoint.json", lock=False)
    store.save(sample(100))
    real_open = os.open

    def deny(path, flags, *args):
        if flags & os.O_WRONLY:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    with monkeypatch.context() as m:
        m.setattr(checkpoint_mod.os, "open", deny)
        with pytest.raises(CheckpointError, match="Permission denied"):
            store.save(sample(200))
    assert store.load().position.pos == 100


# --------------------------------------------------------------------------- the pure reader (library.checkpointfile)


def test_parse_reads_what_the_store_writes_and_to_bytes_is_the_file(store):
    store.save(sample(321))
    raw = store.path.read_bytes()
    cp = Checkpoint.parse(raw)
    assert cp.position.pos == 321 and cp.to_bytes() == raw


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"version": 1}', b'{"version": 2, "position": {}}',
                                 b'{"version": 1, "position": {"file": "b.1"}}',
                                 b'{"version": 1, "position": {"file": "b.1", "pos": "x"}}'])
def test_parse_rejects_what_is_not_a_checkpoint_with_a_value_error(raw):
    with pytest.raises(ValueError):
        Checkpoint.parse(raw)


def test_jsonl_names_and_committed_state():
    assert jsonl_name(7) == "changes-000007.jsonl" and jsonl_index("changes-000007.jsonl") == 7
    assert jsonl_index("changes-7.jsonl") is None and jsonl_index("xchanges-000007.jsonl") is None
    assert jsonl_committed({"file": "changes-000002.jsonl", "offset": 16}) == (2, 16)
    for sink in ({}, {"file": "mysql-bin.000001", "size": 4}, {"file": "changes-000002.jsonl", "offset": "16"},
                 {"file": "changes-000002.jsonl", "offset": -1}, {"file": "changes-000002.jsonl", "offset": True}):
        assert jsonl_committed(sink) is None, sink


def test_the_pipeline_reads_the_committed_offset_from_the_daemons_checkpoint(store):
    from binlogd.pipeline.decode import committed_jsonl

    store.save(Checkpoint(Position("b.000001", 4), {"file": "changes-000003.jsonl", "offset": 99}, {}))
    assert committed_jsonl(str(store.path)) == (3, 99)
    store.save(Checkpoint(Position("b.000001", 4), {"file": "b.000001", "size": 120}, {}))
    assert committed_jsonl(str(store.path)) is None
