"""Change events as JSON lines on standard output.

Standard output cannot be truncated, so after a crash the transaction between
the last flush and the checkpoint may be printed again: consumers that need
exactly-once de-duplicate by ``source.file``/``source.pos``/``source.row``.
"""

from __future__ import annotations

import sys

from binlogd.library.jsonrows import change_lines
from binlogd.library.serialize import dumps
from binlogd.protocol.events import RowsEvent

from .base import Sink, SinkError


class StdoutSink(Sink):
    def __init__(self, stream=None):
        self._out = stream or sys.stdout.buffer

    def change(self, change: dict) -> None:
        self._out.write(dumps(change) + b"\n")

    def rows(self, event: RowsEvent, file: str, gtid: str | None) -> int:
        lines, n = change_lines(event, file, gtid)
        self._out.write(lines)
        return n

    def flush(self) -> dict:
        try:
            self._out.flush()
        except OSError as exc:
            raise SinkError(f"cannot write to standard output: {exc.strerror}") from exc
        return {}
