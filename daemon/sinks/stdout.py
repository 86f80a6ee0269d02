"""Change events as JSON lines on standard output.

Standard output cannot be truncated, so after a crash the transaction between
the last flush and the checkpoint may be printed again: consumers that need
exactly-once de-duplicate by ``source.file``/``source.pos``/``source.row``.
"""

from __future__ import annotations

import sys

from binlogd.daemon.sinks.base import Sink, SinkError
from binlogd.library.debezium import DEFAULT_SERVER_NAME, formatter, meta_formatter, rows_writer, transaction_lines
from binlogd.library.serialize import dumps
from binlogd.protocol.events import RowsEvent


class StdoutSink(Sink):
    """Change events on ``stream`` (default: standard output's bytes), in ``format`` "binlogd" or "debezium"
    (:mod:`library.debezium`, whose ``source.name`` is ``server_name``).

    Fields:
        stream: where the lines go (a binary file object); the demo replaces it with one that notices a closed
            standard output.
    Raises (construction):
        ValueError: an unknown format.
    """

    def __init__(self, stream=None, format: str = "binlogd", server_name: str = DEFAULT_SERVER_NAME):
        self.stream = stream or sys.stdout.buffer
        self._json, self._lines = formatter(format, server_name), rows_writer(format, server_name)
        self._meta, self._server_name = meta_formatter(format, server_name), server_name

    def change(self, change: dict) -> None:
        self.stream.write(self._json(change) + b"\n")

    def change_lines(self, lines, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """:meth:`Sink.change_lines`: written as they are, unless this sink writes another format (False)."""
        if self._json is not dumps:
            return False
        self.stream.write(lines)
        return True

    def meta(self, event: dict) -> None:
        self.stream.write(self._meta(event) + b"\n")

    def rows(self, event: RowsEvent, file: str, gtid: str | None, inner: int = 0, order: tuple | None = None) -> int:
        if order is None:
            lines, n = self._lines(event, file, gtid, inner)
        else:
            lines, n = transaction_lines(event, file, gtid, inner, order, self._server_name)
        self.stream.write(lines)
        return n

    def flush(self) -> dict:
        try:
            self.stream.flush()
        except OSError as exc:
            raise SinkError(f"cannot write to standard output: {exc.strerror}") from exc
        return {}
