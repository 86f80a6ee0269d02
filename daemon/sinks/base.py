"""The sink interface."""

from __future__ import annotations

import os

from binlogd.protocol.errors import BinlogError
from binlogd.protocol.events import Event


class SinkError(BinlogError):
    """The sink cannot take or keep data (disk full, permission, …).

    Fields:
        fatal: retrying cannot help (the sink's files disagree with the stream); the daemon stops.
    """

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


class Sink:
    """Base class of sinks. Blocking I/O belongs in ``sync``, which the daemon runs in a worker thread.

    Fields:
        wants_rows: False when the sink never looks at row values: the daemon then decodes
            with ``Decoder(rows=False)``, so rows events arrive as
            :class:`protocol.events.UndecodedRowsEvent` and TABLE_MAP, ANNOTATE_ROWS and
            ROWS_QUERY as a bare :class:`protocol.events.Event` (length and CRC32 checked).
    """

    wants_rows = True

    def open(self, state: dict | None) -> None:
        """Prepare to write; ``state`` is what the last durable ``commit`` returned (None at first start).

        Must discard anything written after that state.
        """

    def event(self, raw: bytes, event: Event) -> None:
        """Every event of the stream, with its exact bytes (checksum included)."""

    def event_run(self, raws: list, start: int, end: int) -> None:
        """Only for sinks with ``wants_rows = False``, in place of :meth:`event`: consecutive events
        inside a transaction that carry nothing but rows or their context (rows events, TABLE_MAP,
        ANNOTATE_ROWS, ROWS_QUERY), each checked whole. ``raws``: their exact bytes; ``start`` and
        ``end``: the stream positions where the first begins and the last ends."""

    def change(self, change: dict) -> None:
        """One row change (DESIGN.md's change-event shape) of the current transaction."""

    def flush(self) -> dict:
        """Hand everything received so far on to storage (``write(2)``, a producer's send) and return
        the state that covers it. Runs on the consumer between events, so it must be quick.

        Raises:
            SinkError: nothing was handed on; the daemon retries after discarding (re-``open``).
        """
        return {}

    def sync(self) -> None:
        """Make everything up to the last :meth:`flush` durable (``fsync``, a producer's flush).

        Runs in a worker thread while the consumer may already pass later events to :meth:`event`
        and :meth:`change`, so it must touch nothing those touch. Never runs twice at once.

        Raises:
            SinkError: not durable; the daemon retries after discarding (re-``open``).
        """

    def commit(self) -> dict:
        """:meth:`flush` then :meth:`sync`: the state once it is durable."""
        state = self.flush()
        self.sync()
        return state

    def close(self) -> None:
        """Release files and buffers (without committing)."""


def fsync_dir(path: os.PathLike) -> None:
    """fsync a directory (a file created or renamed in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_all(fds: list[int], what: str) -> None:
    """fsync and close each descriptor, emptying ``fds`` (the dups a file sink's flush() took).

    Raises:
        SinkError: an fsync failed (every descriptor is closed all the same).
    """
    try:
        while fds:
            os.fsync(fds[0])
            os.close(fds.pop(0))
    except OSError as exc:
        close_all(fds)
        raise SinkError(f"cannot sync {what}: {exc.strerror}") from exc


def close_all(fds: list[int]) -> None:
    """Close each descriptor, emptying ``fds``."""
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass
