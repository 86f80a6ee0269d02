"""The error of ``binlogd sql``: input it cannot turn into SQL that is sure to be right."""

from __future__ import annotations

from binlogd.protocol.errors import BinlogError


class SqlOutError(BinlogError):
    """A range, event or value that ``binlogd sql`` cannot render exactly (the message names where)."""
