"""The single error hierarchy of binlogd.

Every error binlogd raises on purpose derives from :class:`BinlogError`, so
callers (the CLI, the daemon, Spark readers) catch one type and print one line.
"""

from __future__ import annotations


class BinlogError(Exception):
    """Base of every binlogd error.

    Fields:
        offset: byte offset in the file or stream the error refers to, or None.
    """

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset

    def __str__(self) -> str:
        msg = super().__str__()
        return msg if self.offset is None else f"{msg} (at offset {self.offset})"


class ProtocolError(BinlogError):
    """Bytes that do not follow the binlog or client/server protocol."""


class TruncatedError(ProtocolError):
    """The input ended inside an event or packet."""


class ChecksumError(ProtocolError):
    """An event's CRC32 footer does not match its bytes."""


class EventDecodeError(ProtocolError):
    """An event's body could not be decoded.

    Fields:
        type_code: the event's type code.
        offset: position of the event's first header byte.
    """

    def __init__(self, message: str, offset: int | None = None, type_code: int | None = None):
        super().__init__(message, offset)
        self.type_code = type_code


class UnknownEventError(ProtocolError):
    """An event type the decoder does not know, where the caller forbids skipping it."""


class ServerError(BinlogError):
    """An ERR packet sent by the server.

    Fields:
        code: the MySQL error number (1236 = binlog purged or missing).
        sqlstate: five-character SQLSTATE or None.
        message: the server's text.
    """

    def __init__(self, code: int, message: str, sqlstate: str | None = None):
        super().__init__(f"server error {code}" + (f" ({sqlstate})" if sqlstate else "") + f": {message}")
        self.code = code
        self.sqlstate = sqlstate
        self.message = message
