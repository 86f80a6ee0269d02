"""The sink interface."""

from __future__ import annotations

import os

from binlogd.library.serialize import change_events
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.events import Event, RowsEvent


class SinkError(BinlogError):
    """The sink cannot take or keep data (disk full, permission, …).

    Fields:
        fatal: retrying cannot help (the sink's files disagree with the stream); the daemon stops.
        exit_code: what the daemon exits with when it stops on this error (None: 8, EXIT_CHECKPOINT).
    """

    def __init__(self, message: str, fatal: bool = False, exit_code: int | None = None):
        super().__init__(message)
        self.fatal, self.exit_code = fatal, exit_code


class Sink:
    """Base class of sinks. Blocking I/O belongs in ``sync``, which the daemon runs in a worker thread.

    The order of calls: ``open``; then per transaction ``event``/``event_run`` and ``change``; at a
    commit ``flush``; to make commits durable ``begin_sync`` (consumer) and ``sync`` (worker thread),
    one sync at a time, while later transactions and flushes go on; ``close`` when no sync runs.

    Fields:
        commits_position: True when the sink commits the checkpoint with its data (:meth:`remote_checkpoint`).
        wants_rows: False when the sink never looks at row values: the daemon then decodes
            with ``Decoder(rows=False)``, so rows events arrive as
            :class:`protocol.events.UndecodedRowsEvent` and TABLE_MAP, ANNOTATE_ROWS and
            ROWS_QUERY as a bare :class:`protocol.events.Event` (length and CRC32 checked).
    """

    wants_rows = True
    commits_position = False

    def open(self, state: dict | None) -> None:
        """Prepare to write; ``state`` is what the last durable ``commit`` returned (None at first start).

        Must discard anything written after that state.
        """

    def event(self, raw: bytes, event: Event) -> None:
        """Every event of the stream, with its exact bytes (checksum included); ``event.header.pos`` is
        where it starts in the primary's file, counted from the stream (MariaDB 11.4+ logs end_log_pos 0
        inside transactions, so the header's next_position alone does not tell)."""

    def event_run(self, raws: list, start: int, end: int) -> None:
        """Only for sinks with ``wants_rows = False``, in place of :meth:`event`: consecutive events
        inside a transaction that carry nothing but rows or their context (rows events, TABLE_MAP,
        ANNOTATE_ROWS, ROWS_QUERY), each checked whole. ``raws``: their exact bytes; ``start`` and
        ``end``: the stream positions where the first begins and the last ends."""

    def change(self, change: dict) -> None:
        """One row change (ARCHITECTURE.md's change-event shape) of the current transaction."""

    def meta(self, event: dict) -> None:
        """One event beyond rows (:mod:`library.metaevents`: a transaction's begin or commit, a schema change,
        a heartbeat), in stream order with the changes; the jsonl, stdout and bus sinks write them.

        Raises:
            SinkError: this sink does not write them (the configuration check keeps this from happening).
        """
        raise SinkError(f"the {type(self).__name__} writes no {event['op']} events")

    def rows(self, event: RowsEvent, file: str, gtid: str | None, inner: int = 0, order: tuple | None = None) -> int:
        """The row changes of one rows event of the current transaction (``file`` and ``gtid``: where it
        is in the primary's log; ``inner``: its offset inside its TRANSACTION_PAYLOAD, 0 outside one);
        returns how many. The default gives each one to :meth:`change`; sinks that write JSON lines take
        them as bytes (:func:`library.jsonrows.change_lines`). ``order``: with the Debezium format and
        ``[sink] transaction_events``, the changes' transaction block (:func:`library.debezium.transaction_lines`).

        Raises:
            EventDecodeError: malformed rows (nothing of the event was written).
        """
        changes = list(change_events(event, file, gtid, inner))
        for change in changes:
            self.change(change)
        return len(changes)

    def change_lines(self, lines, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """``count`` row changes of table ``schema.table`` already written as JSON lines of the "binlogd" format
        (bytes-like, each line what :meth:`change` writes for its change dict; the snapshot's chunks), whose ids are
        ``<prefix>:<first>``, ``<prefix>:<first + 1>``, ... in order. The bytes stay as they are until the sink's
        next call returns (a sink may still write them meanwhile, then lets go of them).

        Returns:
            True when the sink took them; False, with nothing written, when it writes another format or takes
            no rows (the default): the caller then gives it the change dicts one by one (:meth:`change`).
        Raises:
            SinkError: as :meth:`change`.
        """
        return False

    def text_rows(self, rows, columns, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """A snapshot chunk's ``count`` rows of table ``schema.table`` as the server sent them: ``rows.buf[
        rows.start:rows.end]``, text-protocol row packets whose values are ``columns`` (names), as the snapshot
        selects them (FLOAT as a DOUBLE, YEAR as a number, TIMESTAMP in UTC); ids as :meth:`change_lines`. The
        bytes are only valid during the call.

        Returns:
            True when the sink took them; False, with nothing written, when it takes them in another form (the
            default): the caller then offers them to :meth:`change_lines`.
        Raises:
            SinkError: as :meth:`change`.
        """
        return False

    def over(self) -> bool:
        """True when the sink holds more than it may before the broker takes it: the caller then awaits
        :meth:`room` before it hands over more (the default never is)."""
        return False

    async def room(self) -> None:
        """Return once :meth:`over` is no longer true.

        Raises:
            SinkError: the sink failed, or the broker took nothing for too long.
        """

    def flush(self) -> dict:
        """Hand everything received so far on to storage (``write(2)``, a producer's send) and return
        the state that covers it. Runs on the consumer between events, so it must be quick. (In a
        :meth:`bulk` load a file sink may hand it on in a thread of its own: :meth:`sync` waits for it.)

        Raises:
            SinkError: nothing was handed on; the daemon retries after discarding (re-``open``).
        """
        return {}

    def bulk(self, on: bool) -> None:
        """A bulk load (the initial snapshot) begins (``on``) or ends: a file sink may then keep its newest
        bytes only in the page cache (the default does nothing)."""

    def begin_sync(self) -> None:
        """Hand what the flushes so far made readable over to the next :meth:`sync`.

        Runs on the consumer right before a sync starts, never while one runs. It is the one hand-off
        between the two: afterwards ``flush`` fills what the next ``begin_sync`` takes, and ``sync``
        touches only what this one handed over.
        """

    def sync(self) -> None:
        """Make durable what the last :meth:`begin_sync` handed over (``fsync``, a producer's flush).

        Runs in a worker thread while the consumer may already pass later events to :meth:`event`,
        :meth:`change` and :meth:`flush`, so it must touch nothing those touch. Never runs twice at once.

        Raises:
            SinkError: not durable; the daemon retries after discarding (re-``open``).
        """

    def flushed(self, checkpoint) -> None:
        """The checkpoint (:class:`library.checkpointfile.Checkpoint`) that the last :meth:`flush` reaches;
        the Committer calls it right after each flush. Sinks that commit the position with the data (the bus
        sinks) commit it there; others ignore it."""

    def use_schema(self, lookup) -> None:
        """The schema history's lookup (``(schema, table) -> CheckedSchema | None`` at the stream's position), handed
        over by the daemon when it keeps one: the mirror creates its tables from it; others ignore it."""

    def remote_checkpoint(self):
        """The checkpoint the sink's own store committed with the data (read by :meth:`open`), or None when
        it keeps none (the default). The daemon resumes from it (daemon/delivery/resumerule.py)."""
        return None

    def close(self) -> None:
        """Release files and buffers (without committing)."""


def sync_all(fds: list[int], what: str, drop_before: list[int] | None = None) -> None:
    """fsync and close each descriptor, emptying ``fds`` (the dups a file sink's flush took, handed over
    by its begin_sync). ``drop_before``: for each descriptor, an offset: once it is durable, its file's
    pages before that offset are dropped from the page cache (advice; a refusal is ignored).

    Raises:
        SinkError: an fsync failed (every descriptor is closed all the same).
    """
    drop = iter((drop_before or ()) if hasattr(os, "posix_fadvise") else ())
    try:
        while fds:
            os.fsync(fds[0])
            end = next(drop, 0)
            if end > 0:
                try:
                    os.posix_fadvise(fds[0], 0, end, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
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
