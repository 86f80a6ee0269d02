"""JSON-lines change events in rotating files, committed by byte offset.

Rows of the transaction in progress are appended to the current file as they
arrive (its uncommitted tail is the staging area, so a transaction never has
to fit in memory). ``flush`` writes and returns ``{file, offset}`` (in a bulk
load the sink's writer thread may still be writing up to it); ``sync`` fsyncs
what ``begin_sync`` handed it, once written. ``open`` truncates the file back
to the checkpointed offset and removes later files, so a transaction the
checkpoint does not cover is written once, when it is read again.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from binlogd.daemon.sinks.base import Sink, SinkError, close_all, sync_all
from binlogd.library.atomicfile import fsync_dir
from binlogd.library.checkpointfile import jsonl_committed, jsonl_index, jsonl_name
from binlogd.library.debezium import DEFAULT_SERVER_NAME, formatter, meta_formatter, rows_writer, transaction_lines
from binlogd.library.serialize import dumps
from binlogd.protocol.events import RowsEvent

KEEP_CACHED = 64 << 20  # bytes of each file kept in the page cache behind its durable end


class JsonLinesSink(Sink):
    """Files ``<directory>/changes-NNNNNN.jsonl``, rotated after ``max_file_bytes`` or ``max_file_seconds``.

    Rotation happens at a commit, so a transaction never spans two files; 0 means no limit. ``format``:
    "binlogd" (ARCHITECTURE.md's change events) or "debezium" (:mod:`library.debezium`, whose ``source.name``
    is ``server_name``). Once a file's bytes are durable, all but its last :data:`KEEP_CACHED` are dropped from
    the page cache (``POSIX_FADV_DONTNEED``): a backlog or a snapshot does not fill the machine's memory, and its
    writes reuse the pages just freed, which is much quicker than new ones on a VM (a reader that tails the files
    reads the newest bytes from the cache, older ones from the disk). In a :meth:`bulk` load
    :meth:`change_lines` writes in a thread of the sink's, one call at a time, so that the caller goes on (reading
    the next chunk) while the kernel copies the lines; :meth:`flush` does not wait for that write, :meth:`sync`
    does.

    Raises (construction):
        ValueError: an unknown format.
    """

    def __init__(self, directory: str | os.PathLike, max_file_bytes: int = 256 << 20,
                 max_file_seconds: float = 3600, fsync: bool = True, format: str = "binlogd",
                 server_name: str = DEFAULT_SERVER_NAME):
        self.directory = Path(directory)
        self.max_file_bytes, self.max_file_seconds, self.fsync = max_file_bytes, max_file_seconds, fsync
        self._json, self._lines = formatter(format, server_name), rows_writer(format, server_name)
        self._meta, self._server_name = meta_formatter(format, server_name), server_name
        self._fh = None
        self._unsynced: list[int] = []  # flushed, not yet handed over: dups of the file descriptors (consumer only)
        self._ends: list[int] = []      # the offset each of those was flushed to (consumer only)
        self._syncing: list[int] = []   # handed over by begin_sync(): what sync() fsyncs and closes (worker only)
        self._synced_ends: list[int] = []  # handed over with them (worker only)
        self._writer: ThreadPoolExecutor | None = None  # in a bulk load: its writes (one thread, in order)
        self._writing: Future | None = None   # the write in that thread, until a call on the consumer waits for it
        self._written: Future | None = None   # the last write flush() covered: what the next sync waits for
        self._syncing_after: Future | None = None  # handed over by begin_sync(): what sync() waits for first
        self._end = 0                          # the file's offset once _writing is done
        self._index = 1
        self._opened_at = 0.0

    def _path(self, index: int) -> Path:
        return self.directory / jsonl_name(index)

    def _existing(self) -> list[int]:
        return sorted(i for p in self.directory.iterdir() if (i := jsonl_index(p.name)) is not None)

    def open(self, state: dict | None) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = self._existing()
            if state:
                committed = jsonl_committed(state)
                if committed is None:
                    raise SinkError(f"checkpoint's sink state {state!r} is not a JSON-lines sink's "
                                    "(was the sink kind changed? move the checkpoint away to start over)")
                self._index, offset = committed
                path = self._path(self._index)
                size = path.stat().st_size if path.exists() else 0
                if size < offset:
                    raise SinkError(f"{path} has {size} bytes but the checkpoint says {offset} were committed: "
                                    "the sink lost data it had made durable")
                for later in (i for i in existing if i > self._index):
                    self._path(later).unlink()
                with open(path, "ab") as fh:
                    fh.truncate(offset)
            else:
                self._index = existing[-1] + 1 if existing else 1
            self._open_current()
        except OSError as exc:
            raise SinkError(f"JSON-lines sink in {self.directory}: {exc.strerror or exc}") from exc

    def _open_current(self) -> None:
        path = self._path(self._index)
        created = not path.exists()
        self._fh = open(path, "ab", buffering=1 << 20)
        self._opened_at = time.monotonic()
        if created and self.fsync:
            fsync_dir(self.directory)

    def change(self, change: dict) -> None:
        self.change_bytes(self._json(change) + b"\n")

    def change_bytes(self, line: bytes) -> None:
        """Write one line as it is."""
        self._wait_write()
        try:
            self._fh.write(line)
        except OSError as exc:
            raise SinkError(f"cannot write {self._path(self._index)}: {exc.strerror}") from exc

    def change_lines(self, lines, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """:meth:`Sink.change_lines`: written as they are (False, nothing written, when this sink writes another
        format). In a bulk load they are written in the sink's thread after this returns (a memoryview is
        released once written)."""
        if self._json is not dumps:
            return False
        self._wait_write()
        if self._writer is not None:
            self._end = self._fh.tell() + len(lines)
            self._writing = self._writer.submit(self._write_through, lines)
            return True
        try:
            self._fh.write(lines)
        except OSError as exc:
            raise SinkError(f"cannot write {self._path(self._index)}: {exc.strerror}") from exc
        return True

    def _write_through(self, lines) -> None:
        """In the writer thread: write ``lines`` and hand them to the kernel; release them if a memoryview."""
        try:
            self._fh.write(lines)
            self._fh.flush()
        finally:
            if isinstance(lines, memoryview):
                lines.release()

    def _wait_write(self) -> None:
        """Wait for the write in the writer thread, if any.

        Raises:
            SinkError: it failed.
        """
        job, self._writing = self._writing, None
        if job is not None:
            _result(job, f"cannot write {self._path(self._index)}")

    def meta(self, event: dict) -> None:
        self.change_bytes(self._meta(event) + b"\n")

    def rows(self, event: RowsEvent, file: str, gtid: str | None, inner: int = 0, order: tuple | None = None) -> int:
        if order is None:
            lines, n = self._lines(event, file, gtid, inner)
        else:
            lines, n = transaction_lines(event, file, gtid, inner, order, self._server_name)
        self._wait_write()
        try:
            self._fh.write(lines)
        except OSError as exc:
            raise SinkError(f"cannot write {self._path(self._index)}: {exc.strerror}") from exc
        return n

    def flush(self) -> dict:
        try:
            if self._writing is not None:   # the writer thread writes up to _end; sync() waits for it
                self._written, offset = self._writing, self._end
            else:
                self._fh.flush()
                offset = self._fh.tell()
            too_big = self.max_file_bytes and offset >= self.max_file_bytes
            too_old = self.max_file_seconds and time.monotonic() - self._opened_at >= self.max_file_seconds
            if self.fsync:
                self._unsynced.append(os.dup(self._fh.fileno()))  # rotation may close the file before sync()
                self._ends.append(offset)
            if too_big or too_old:
                self._wait_write()
                self._fh.close()
                self._index += 1
                self._open_current()
                offset = 0
        except OSError as exc:
            raise SinkError(f"cannot commit {self._path(self._index)}: {exc.strerror}") from exc
        return {"file": self._path(self._index).name, "offset": offset}

    def bulk(self, on: bool) -> None:
        if on and self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="jsonl-writer")
        elif not on and self._writer is not None:
            try:
                self._wait_write()
            finally:
                self._writer.shutdown()
                self._writer = None

    def begin_sync(self) -> None:
        self._syncing, self._unsynced = self._unsynced, []
        self._synced_ends, self._ends = self._ends, []
        self._syncing_after, self._written = self._written, None

    def sync(self) -> None:
        job, self._syncing_after = self._syncing_after, None
        if job is not None:
            try:
                _result(job, f"cannot write {self._path(self._index)}")
            except SinkError:
                close_all(self._syncing)
                raise
        drop = [max(0, end - KEEP_CACHED) for end in self._synced_ends]
        self._synced_ends = []
        sync_all(self._syncing, f"the JSON-lines files in {self.directory}", drop)

    def close(self) -> None:
        try:
            self._wait_write()
        except SinkError:
            pass  # uncommitted data is discarded on the next open anyway
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass  # uncommitted data is discarded on the next open anyway
            self._fh = None
        close_all(self._unsynced)
        close_all(self._syncing)
        self._ends, self._synced_ends = [], []
        self._written = self._syncing_after = None


def _result(job: Future, what: str) -> None:
    """Wait for a write of the writer thread.

    Raises:
        SinkError: it failed (``what``, with the error).
    """
    try:
        job.result()
    except (OSError, ValueError) as exc:   # ValueError: the file was closed under it
        raise SinkError(f"{what}: {getattr(exc, 'strerror', None) or exc}") from exc
