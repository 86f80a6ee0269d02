"""MySQL client/server packet framing, sans-I/O (h11 style).

Every packet on the wire is a 3-byte little-endian payload length, a 1-byte
sequence id and the payload. A payload of 2**24-1 bytes or more is split into
chunks of exactly 0xFFFFFF bytes, each with the next sequence id; the chunk
that is shorter than 0xFFFFFF (possibly empty) ends the logical packet.

Usage::

    reader = BufferedPacketReader()
    reader.feed(data)                    # or get_buffer() + buffer_updated(n), as asyncio.BufferedProtocol
    while (payload := reader.next_payload()) is not None:
        handle(payload)                  # a read-only memoryview of the reader's buffer
    ...
    reader.feed_eof()                    # the peer closed the connection
    reader.next_payload()                # None, or TruncatedError mid-packet

The reader receives into buffers of its own and returns payloads as memoryviews of them: no copy
between the socket and the consumer.

This module also holds the generic payload helpers: ERR/OK/EOF recognition and
length-encoded integers and strings.
"""

from __future__ import annotations

import struct

from . import speedups
from .errors import ProtocolError, ServerError, TruncatedError

try:
    from ._skim import ok_payloads as _ok_payloads_c
except ImportError:  # not built: BufferedPacketReader.next_ok_payloads loops in Python
    _ok_payloads_c = None
if not speedups.ENABLED:
    _ok_payloads_c = None

__all__ = [
    "DEFAULT_MAX_PACKET_SIZE",
    "MAX_CHUNK",
    "BufferedPacketReader",
    "encode_packet",
    "is_eof",
    "is_err",
    "parse_err",
]

#: Largest payload of a single wire chunk; a chunk this long is continued.
MAX_CHUNK = 0xFFFFFF
#: Default bound on a logical (joined) packet's payload.
DEFAULT_MAX_PACKET_SIZE = 1 << 30

_HEADER = struct.Struct("<HBB")  # low 16 bits of length, high 8 bits, seq id
_U16 = struct.Struct("<H")

# BufferedPacketReader: the least free space get_buffer() offers (one socket read's worth).
_MIN_FREE = 1 << 16
_SPARE_BYTES = 16 << 20  # retired receive buffers kept for reuse: this many bytes of them (at least 2)


class BufferedPacketReader:
    """Packet parser that owns its receive buffers and returns payloads without copying them.

    Continuation chunks must carry consecutive sequence ids (mod 256). The input comes through
    :meth:`get_buffer` + :meth:`buffer_updated` (the socket writes straight into the buffer) or
    :meth:`feed`, and :meth:`next_payload` returns the payload alone as a read-only memoryview
    of the buffer. Bytes once returned are never written again: a view stays valid for as long
    as it is kept. When a buffer's free space runs out, the unparsed tail moves to a new buffer
    (retired buffers are kept, up to 16 MiB of them, and reused once no view of them is alive:
    a fresh buffer costs its page faults again). A payload split into
    continuation chunks (16 MiB and more) is joined into ``bytes``.

    Args:
        max_packet_size: largest joined payload accepted (bytes); more raises ProtocolError.
        buffer_size: bytes per receive buffer (a larger one is made for a larger packet).
    """

    __slots__ = ("_buf", "_view", "_ro", "_pos", "_end", "_consumed", "_spares", "_size", "_want", "_max", "_eof",
                 "_error", "_parts", "_parts_len", "_first_seq", "_last_seq", "_start")

    def __init__(self, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE, buffer_size: int = 1 << 20) -> None:
        if max_packet_size < 0 or buffer_size < 4:
            raise ValueError("max_packet_size must be >= 0 and buffer_size >= 4")
        self._size = buffer_size
        self._buf = bytearray(buffer_size)
        self._view = memoryview(self._buf)
        self._ro = self._view.toreadonly()  # what payloads are slices of
        self._pos = 0  # first unparsed byte of _buf
        self._end = 0  # end of the bytes received into _buf
        self._consumed = 0  # stream offset of _buf[0]
        self._spares: list[bytearray] = []  # retired buffers, reused once no view of them is alive
        self._want = 4  # bytes from _pos the next step of parsing needs in one piece
        self._max = max_packet_size
        self._eof = False
        self._error: ProtocolError | None = None
        self._parts: list[bytes] = []
        self._parts_len = 0
        self._first_seq = -1
        self._last_seq = -1
        self._start = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a packet (including a partial packet's chunks)."""
        return self._end - self._pos + self._parts_len

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """The free space to receive into (at least 64 KiB, and room for the whole chunk being read);
        then call :meth:`buffer_updated` with the number of bytes written."""
        need = max(self._want - (self._end - self._pos), sizehint, _MIN_FREE)
        if len(self._buf) - self._end < need:
            self._move(need)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` bytes were written at the start of the last :meth:`get_buffer` region.

        Raises:
            ProtocolError: after :meth:`feed_eof`.
        """
        if self._eof:
            raise ProtocolError("data fed after end of stream")
        self._end += nbytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes (a copy). Raises ProtocolError after :meth:`feed_eof`."""
        if self._eof:
            raise ProtocolError("data fed after end of stream")
        n = len(data)
        if len(self._buf) - self._end < n:
            self._move(max(n, self._want - (self._end - self._pos)))  # room for the whole chunk being read
        self._view[self._end:self._end + n] = data
        self._end += n

    def feed_eof(self) -> None:
        """Mark the end of the stream: later :meth:`next_payload` calls raise TruncatedError mid-packet."""
        self._eof = True

    def next_payload(self) -> memoryview | bytes | None:
        """The next complete packet's payload, or None when more data is needed (or at a clean EOF).

        Raises ProtocolError when a packet exceeds ``max_packet_size`` or a continuation chunk's
        sequence id is out of order; TruncatedError when the stream ended inside a packet. Once it
        has raised, it raises the same error again.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ProtocolError as exc:
            self._error = exc
            raise

    def next_ok_payloads(self, limit: int) -> list[memoryview]:
        """The complete packets already received whose payload starts with 0x00 (a binlog stream's
        event packets), each payload without that byte, at most ``limit`` of them, in one call.

        Stops before any other packet (ERR, EOF, a packet split into chunks or over the size limit,
        one not complete yet), which :meth:`next_payload` then returns or raises.
        """
        if self._error is not None or self._first_seq >= 0 or limit <= 0:
            return []
        if _ok_payloads_c is not None:
            out, self._pos = _ok_payloads_c(self._ro, self._pos, self._end, limit, self._max)
            return out
        out, buf, ro, pos, end = [], self._buf, self._ro, self._pos, self._end
        while len(out) < limit and end - pos >= 5:
            length = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
            if not 0 < length < MAX_CHUNK or length > self._max or end - pos - 4 < length or buf[pos + 4]:
                break
            out.append(ro[pos + 5 : pos + 4 + length])
            pos += 4 + length
        self._pos = pos
        return out

    def _next(self) -> memoryview | bytes | None:
        buf = self._buf
        while True:
            pos = self._pos
            if self._end - pos < 4:
                self._want = 4
                return self._need_data()
            lo, hi, seq = _HEADER.unpack_from(buf, pos)
            length = lo | (hi << 16)
            offset = self._consumed + pos
            if self._first_seq < 0:
                self._start = offset
            elif seq != (self._last_seq + 1) & 0xFF:
                raise ProtocolError(
                    f"continuation chunk has sequence id {seq}, expected {(self._last_seq + 1) & 0xFF}",
                    offset,
                )
            total = self._parts_len + length
            if total > self._max:
                raise ProtocolError(f"packet of {total}+ bytes exceeds the limit of {self._max}", self._start)
            if self._end - pos - 4 < length:
                self._want = 4 + length
                return self._need_data()
            chunk = self._ro[pos + 4 : pos + 4 + length]
            self._pos = pos + 4 + length
            if self._first_seq < 0:
                self._first_seq = seq
            self._last_seq = seq
            if length == MAX_CHUNK:
                self._parts.append(bytes(chunk))
                self._parts_len = total
                continue
            if self._parts:
                self._parts.append(bytes(chunk))
                chunk = b"".join(self._parts)
                self._parts.clear()
                self._parts_len = 0
            self._first_seq = self._last_seq = -1
            return chunk

    def _need_data(self) -> None:
        if self._eof and (self._pos < self._end or self._parts):
            offset = self._start if self._parts else self._consumed + self._pos
            raise TruncatedError("stream ended inside a packet", offset)
        return None

    def _move(self, need: int) -> None:
        """Continue in another buffer with at least ``need`` free bytes after the unparsed tail."""
        tail = self._end - self._pos
        size = max(self._size, tail + need)
        buf = None
        if size == self._size:
            for index, spare in enumerate(self._spares):
                if _unshared(spare):
                    buf = self._spares.pop(index)
                    break
        if buf is None:
            buf = bytearray(size)
        view = memoryview(buf)
        view[:tail] = self._view[self._pos:self._end]
        old = self._buf
        self._view.release()  # views already returned keep ``old`` alive on their own
        self._ro.release()
        if len(old) == self._size:
            self._spares.append(old)
            if len(self._spares) > max(2, _SPARE_BYTES // self._size):
                del self._spares[0]
        self._buf, self._view, self._ro = buf, view, view.toreadonly()
        self._consumed += self._pos
        self._pos, self._end = 0, tail


def _unshared(buf: bytearray) -> bool:
    """True when no memoryview of ``buf`` is alive (a bytearray with exports cannot change size).

    Shrinks it by one byte and grows it back, which never reallocates; growing first would, once
    per buffer (``bytearray(n)`` has no room to spare), and realloc may copy all of it to fresh pages.
    Its last byte is 0 afterwards.
    """
    try:
        del buf[-1]
    except BufferError:
        return False
    buf.append(0)
    return True


def encode_packet(payload: bytes | bytearray | memoryview, seq: int) -> bytes:
    """Frame ``payload`` for the wire starting at sequence id ``seq`` (0..255).

    Payloads of 0xFFFFFF bytes or more are split into 0xFFFFFF-byte chunks with
    increasing sequence ids; when the length is a multiple of 0xFFFFFF an empty
    chunk ends the packet. Raises ValueError for a ``seq`` outside 0..255.
    """
    if not 0 <= seq <= 0xFF:
        raise ValueError(f"sequence id out of range 0..255: {seq}")
    mv = memoryview(payload).cast("B")
    out = bytearray()
    pos = 0
    while True:
        n = min(len(mv) - pos, MAX_CHUNK)
        out += _HEADER.pack(n & 0xFFFF, n >> 16, seq)
        out += mv[pos : pos + n]
        pos += n
        seq = (seq + 1) & 0xFF
        if n < MAX_CHUNK:
            return bytes(out)


# ---------------------------------------------------------------- payload helpers


def is_err(payload: bytes | bytearray | memoryview) -> bool:
    """True when ``payload`` is an ERR packet (first byte 0xFF)."""
    return len(payload) > 0 and payload[0] == 0xFF


def is_eof(payload: bytes | bytearray | memoryview) -> bool:
    """True when ``payload`` is an EOF packet (0xFE header, shorter than 9 bytes).

    In a binlog stream it means the server has no more events (non-blocking dump).
    """
    return 0 < len(payload) < 9 and payload[0] == 0xFE


def parse_err(payload: bytes | bytearray | memoryview) -> ServerError:
    """Decode an ERR packet: 0xFF, u16 error code, optional ``#`` + 5-char SQLSTATE, message.

    Returns the ServerError (the caller raises it). The message is decoded as
    UTF-8, undecodable bytes replaced. Raises ProtocolError if ``payload`` is not
    an ERR packet or is shorter than 3 bytes.
    """
    if not is_err(payload):
        raise ProtocolError("not an ERR packet")
    if len(payload) < 3:
        raise TruncatedError(f"ERR packet of {len(payload)} bytes", 0)
    raw = bytes(payload)
    (code,) = _U16.unpack_from(raw, 1)
    sqlstate = None
    pos = 3
    if len(raw) >= 9 and raw[3:4] == b"#":
        sqlstate = raw[4:9].decode("ascii", "replace")
        pos = 9
    return ServerError(code, raw[pos:].decode("utf-8", "replace"), sqlstate)
