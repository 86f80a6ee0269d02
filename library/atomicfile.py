"""Replacing a file by its path, atomically, without ever replacing what the path is not.

Every writer that replaces a whole file (``binlogd schema build --out``, the daemon's checkpoint) goes
through :func:`replace`. The rule:

- a regular file (or none yet): the new content goes to ``.NAME.tmp`` beside it, is fsynced and renamed
  over it, then the directory is fsynced: a crash leaves the old content or the new, never a mix;
- a symlink is followed (a chain of them too, relative or absolute): the temp file is made beside the
  final target and renamed over the target, so the link stays a link and its target is replaced
  atomically; a dangling link gets its target created;
- a FIFO or a character device (a terminal, ``/dev/null``) is written through: opened for writing and
  written in place, never renamed over; so is an open file descriptor named as a path (``/dev/stdout``,
  ``/dev/fd/N``, ``/proc/self/fd/N``, reached directly or through links), whatever it is open on: this
  process's own descriptor is written to as it is (at its offset, in its mode);
- a directory, a socket or a block device is refused (``IsADirectoryError``, or ``OSError`` with EINVAL
  naming what it is).
"""

from __future__ import annotations

import errno
import os
import re
import stat

__all__ = ["descriptor", "real_target", "replace"]

_DESCRIPTOR = re.compile(r"^/(dev/fd|proc/([^/]+)/fd)/(\d+)$")

_REFUSED = ((stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"))


def real_target(path: str | os.PathLike) -> str:
    """The path a replacement of ``path`` lands on: ``path`` with its symlinks resolved (the last component's
    included, also when the final target does not exist yet: a dangling link's target); ``path`` when it
    is not a link."""
    path = os.fspath(path)
    return os.path.realpath(path) if os.path.islink(path) else path


def descriptor(path: str | os.PathLike) -> int | None:
    """The file descriptor of this process that ``path`` names (``/dev/stdout`` is 1, ``/dev/fd/N`` and
    ``/proc/self/fd/N`` are N), followed through symlinks; -1 for another process's descriptor
    (``/proc/PID/fd/N``); None when it names no descriptor."""
    p = os.path.normpath(os.path.abspath(os.fspath(path)))
    for _ in range(40):  # the kernel's own limit on a chain of links
        match = _DESCRIPTOR.match(p)
        if match:
            pid, number = match.group(2), int(match.group(3))
            return number if pid in (None, "self", "thread-self", str(os.getpid())) else -1
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def replace(path: str | os.PathLike, data: bytes, *, mode: int = 0o644, fsync: bool = True) -> str:
    """Make ``data`` the content of the file ``path`` names, by the rule in this module's docstring.

    Args:
        path: the file; a symlink is followed, a FIFO or character device is written through.
        data: the whole new content.
        mode: the permission bits of a file created (the umask applies).
        fsync: fsync the temp file before the rename and the directory after it.
    Returns:
        The path actually written: the symlink's final target, or ``path``.
    Raises:
        OSError: cannot write (the old content is then intact: the temp file is removed when it can be);
            a directory (EISDIR), socket or block device (EINVAL) at ``path`` (or its target).
    """
    fd = descriptor(path)
    if fd is not None and fd >= 0:
        _write_all(fd, data)  # this process's own descriptor, as it is
        return os.fspath(path)
    try:
        st = os.stat(path)  # through every link, /proc's too
    except FileNotFoundError:
        st = None
    if fd is not None or (st is not None and not stat.S_ISREG(st.st_mode)):
        for test, kind in _REFUSED:
            if st is not None and test(st.st_mode):
                raise OSError(errno.EISDIR if kind == "a directory" else errno.EINVAL,
                              f"is {kind}: not replaced, not written", os.fspath(path))
        _write_through(os.fspath(path), data)  # a FIFO, a character device, another process's descriptor
        return os.fspath(path)
    target = real_target(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        dfd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return target


def _write_through(target: str, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that a file created or renamed in it survives a crash.

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
