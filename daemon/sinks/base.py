"""The sink interface."""

from __future__ import annotations

from protocol.errors import BinlogError
from protocol.events import Event


class SinkError(BinlogError):
    """The sink cannot take or keep data (disk full, permission, …).

    Fields:
        fatal: retrying cannot help (the sink's files disagree with the stream); the daemon stops.
    """

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


class Sink:
    """Base class of sinks. Blocking I/O is fine: the daemon runs ``commit`` in a worker thread.

    Fields:
        wants_rows: False when the sink never looks at row values (the daemon then
            skips decoding rows, which is the expensive part, and passes ANNOTATE_ROWS and
            ROWS_QUERY events as a bare :class:`protocol.events.Event`: header only, their
            length and CRC32 checked, the statement text not decoded).
    """

    wants_rows = True

    def open(self, state: dict | None) -> None:
        """Prepare to write; ``state`` is what the last durable ``commit`` returned (None at first start).

        Must discard anything written after that state.
        """

    def event(self, raw: bytes, event: Event) -> None:
        """Every event of the stream, with its exact bytes (checksum included)."""

    def change(self, change: dict) -> None:
        """One row change (DESIGN.md's change-event shape) of the current transaction."""

    def commit(self) -> dict:
        """Make everything received so far durable; return the state to store in the checkpoint.

        Raises:
            SinkError: nothing was committed; the daemon retries after discarding (re-``open``).
        """
        return {}

    def close(self) -> None:
        """Release files and buffers (without committing)."""
