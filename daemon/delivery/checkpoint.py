"""The durable checkpoint: where the daemon resumes, and how far its sink committed.

It is one small JSON file, replaced atomically: the new content goes to a temp
file, which is fsynced, renamed over the old one, and then the directory is
fsynced. A lock file (``<path>.lock``, held with ``flock`` for the daemon's
lifetime) makes a second daemon that points at the same checkpoint fail
loudly instead of interleaving writes.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from binlogd.daemon.state import CheckpointError
from binlogd.library import atomicfile
from binlogd.library.checkpointfile import Checkpoint


class CheckpointStore:
    """Reads and atomically replaces the checkpoint file at ``path``."""

    def __init__(self, path: str | os.PathLike, lock: bool = True):
        self.path = Path(path)
        self._lock_fd: int | None = None
        self._want_lock = lock

    def acquire(self) -> None:
        """Create the directory and take the exclusive lock.

        Raises:
            CheckpointError: another process holds the lock, or the directory is not writable.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._want_lock:
                return
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CheckpointError(f"checkpoint directory {self.path.parent}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise CheckpointError(f"checkpoint {self.path} is locked by another binlogd process "
                                  "(two daemons must not share a checkpoint)") from None
        self._lock_fd = fd

    def release(self) -> None:
        """Drop the lock (the process's exit drops it too)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> Checkpoint | None:
        """The saved checkpoint, or None when there is none yet.

        Raises:
            CheckpointError: the file exists but is unreadable or not a checkpoint.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror}") from exc
        try:
            return Checkpoint.parse(raw)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {self.path} is not valid: {exc}") from exc

    def save(self, checkpoint: Checkpoint) -> None:
        """Atomically replace the checkpoint (temp file, fsync, rename, fsync directory), by
        :func:`binlogd.library.atomicfile.replace`: a symlinked path replaces the link's target.

        Raises:
            CheckpointError: on any I/O failure; the previous checkpoint is then intact.
        """
        checkpoint.saved_at = time.time()
        body = checkpoint.to_bytes()
        try:
            atomicfile.replace(self.path, body)
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {exc.strerror}") from exc
