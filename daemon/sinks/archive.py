"""A raw binlog archive: byte-exact copies of the primary's files, like ``mysqlbinlog --raw --stop-never``.

Every event the primary's files hold is appended, with its checksum, to a file
of the same name; artificial events (the ROTATE at the start of a dump, an FDE
re-sent with position 0) and heartbeats are not in the primary's files and are
not written. One byte differs from the primary's active file: the FDE's
LOG_EVENT_BINLOG_IN_USE_F flag (file offset 21), which the server sets on disk
while the file is open and clears in what it sends. Its CRC32 is computed
with the flag clear, so the checksum bytes agree.
"""

from __future__ import annotations

import os
from pathlib import Path

from protocol.constants import LOG_EVENT_ARTIFICIAL_F, MAGIC
from protocol.constants import EventType as ET
from protocol.events import Event, RotateEvent

from .base import Sink, SinkError, close_all, fsync_dir, sync_all

_ROTATE = int(ET.ROTATE)  # plain ints: an IntEnum member lookup costs ~0.2 µs on 3.11, per event here
_HEARTBEATS = frozenset({ET.HEARTBEAT, ET.HEARTBEAT_V2})
_BUFFER = 1 << 20  # one write(2) per MiB instead of one per event


class ArchiveSink(Sink):
    """Raw copies of the primary's binlog files in ``directory``. Decodes no rows."""

    wants_rows = False

    def __init__(self, directory: str | os.PathLike, fsync: bool = True):
        self.directory = Path(directory)
        self.fsync = fsync
        self._fh = None
        self._name: str | None = None
        self._size = 0
        self._next: str | None = None  # where the stream continues after a ROTATE
        self._unsynced: list[int] = []  # descriptors (dups) that sync() fsyncs and closes

    def open(self, state: dict | None) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if state:
                path = self.directory / state["file"]
                size = int(state["size"])
                if not path.exists() or path.stat().st_size < size:
                    raise SinkError(f"archive file {path} is shorter than the checkpointed {size} bytes")
                with open(path, "r+b") as fh:
                    fh.truncate(size)
                self._name, self._size = state["file"], size
        except OSError as exc:
            raise SinkError(f"archive in {self.directory}: {exc.strerror}") from exc

    def _switch(self, name: str, pos: int) -> None:
        """Continue writing in ``name`` at offset ``pos`` (4 means a new file)."""
        self._close_file()
        path = self.directory / name
        size = path.stat().st_size if path.exists() else 0
        if pos <= 4:
            self._fh = open(path, "wb", buffering=_BUFFER)
            self._fh.write(MAGIC)
            size = 4
            if self.fsync:
                fsync_dir(self.directory)
        elif size < pos:
            raise SinkError(f"archive file {path} has {size} bytes, the stream continues at {pos}")
        else:
            self._fh = open(path, "r+b", buffering=_BUFFER)
            self._fh.truncate(pos)
            self._fh.seek(pos)
            size = pos
        self._name, self._size = name, size

    def event(self, raw: bytes | memoryview, event: Event) -> None:
        h = event.header
        try:
            if h.type_code == _ROTATE and (h.flags & LOG_EVENT_ARTIFICIAL_F or h.timestamp == 0):
                if event.next_file != self._name or event.position != self._size or self._fh is None:
                    self._switch(event.next_file, event.position)
                return
            if h.type_code in _HEARTBEATS or h.flags & LOG_EVENT_ARTIFICIAL_F or h.next_position == 0:
                return
            if self._next is not None:
                self._switch(self._next, 4)
                self._next = None
            if self._fh is None:
                raise SinkError("archive received an event before knowing its file (no ROTATE first)")
            if h.next_position != self._size + len(raw):
                raise SinkError(f"archive out of step in {self._name}: event ends at {h.next_position}, "
                                f"file would end at {self._size + len(raw)}", fatal=True)
            self._fh.write(raw)
            self._size += len(raw)
            if isinstance(event, RotateEvent):
                self._next = event.next_file
        except OSError as exc:
            raise SinkError(f"cannot write archive file {self._name}: {exc.strerror}") from exc

    def flush(self) -> dict:
        if self._fh is None:
            return {"file": self._name, "size": self._size} if self._name else {}
        try:
            self._fh.flush()
            if self.fsync:
                self._unsynced.append(os.dup(self._fh.fileno()))  # the file may be closed before sync()
        except OSError as exc:
            raise SinkError(f"cannot write archive file {self._name}: {exc.strerror}") from exc
        return {"file": self._name, "size": self._size}

    def sync(self) -> None:
        sync_all(self._unsynced, f"archive file {self._name}")

    def _close_file(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        try:
            self._close_file()
        except OSError:
            self._fh = None
        close_all(self._unsynced)
