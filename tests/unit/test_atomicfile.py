"""binlogd.library.atomicfile: replace a file by its path, never what the path is not (issue 29)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading

import pytest

from binlogd.library import atomicfile


def test_a_regular_file_is_replaced_atomically(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    inode = path.stat().st_ino
    assert atomicfile.replace(path, b"new") == str(path)
    assert path.read_bytes() == b"new" and path.stat().st_ino != inode  # a new inode: renamed over
    assert os.listdir(tmp_path) == ["f"]


def test_a_new_file_is_created_with_its_mode(tmp_path):
    atomicfile.replace(tmp_path / "f", b"x", mode=0o600)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) & 0o077 == 0


def test_a_symlink_chain_is_followed_and_kept(tmp_path):
    (tmp_path / "vol").mkdir()
    target = tmp_path / "vol" / "real"
    target.write_bytes(b"old")
    os.symlink("vol/real", tmp_path / "middle")
    os.symlink(tmp_path / "middle", tmp_path / "link")
    assert atomicfile.replace(tmp_path / "link", b"new") == str(target)
    assert (tmp_path / "link").is_symlink() and (tmp_path / "middle").is_symlink()
    assert target.read_bytes() == b"new" and sorted(os.listdir(tmp_path / "vol")) == ["real"]


def test_a_dangling_symlink_gets_its_target(tmp_path):
    os.symlink("made", tmp_path / "link")
    atomicfile.replace(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "made").read_bytes() == b"new"


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomicfile.replace(fifo, b"through")
    reader.join(10)
    assert got == [b"through"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_character_device_is_written_through():
    before = os.lstat("/dev/null")
    atomicfile.replace("/dev/null", b"nothing")
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_own_descriptors_are_written_as_they_are(tmp_path):
    r, w = os.pipe()
    try:
        assert atomicfile.descriptor(f"/proc/self/fd/{w}") == w
        assert atomicfile.descriptor(f"/dev/fd/{w}") == w
        assert atomicfile.descriptor(f"/proc/{os.getpid()}/fd/{w}") == w
        assert atomicfile.descriptor("/dev/stdout") == 1
        assert atomicfile.descriptor("/proc/1/fd/1") in (-1, 1)  # another process's (or ours, as pid 1)
        assert atomicfile.descriptor(tmp_path) is None
        atomicfile.replace(f"/dev/fd/{w}", b"one ")
        atomicfile.replace(f"/proc/self/fd/{w}", b"two")
        assert os.read(r, 100) == b"one two"
    finally:
        os.close(r)
        os.close(w)


def test_a_file_descriptor_to_a_file_appends_at_its_offset(tmp_path):
    path = tmp_path / "log"
    with open(path, "ab") as fh:
        fh.write(b"kept\n")
        fh.flush()
        atomicfile.replace(f"/proc/self/fd/{fh.fileno()}", b"added\n")
    assert path.read_bytes() == b"kept\nadded\n"


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomicfile.replace(tmp_path, b"x")
    os.symlink(tmp_path, tmp_path / "to-dir")
    with pytest.raises(OSError) as info:
        atomicfile.replace(tmp_path / "to-dir", b"x")
    assert info.value.errno == errno.EISDIR


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(OSError) as info:
            atomicfile.replace(path, b"x")
    assert info.value.errno == errno.EINVAL and "socket" in str(info.value)
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_failed_write_leaves_the_old_content(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    (tmp_path / ".f.tmp").mkdir()  # the temp file cannot be made
    with pytest.raises(OSError):
        atomicfile.replace(path, b"new")
    assert path.read_bytes() == b"old"
