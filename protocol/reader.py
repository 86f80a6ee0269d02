"""Split binlog bytes into events and decode them: whole buffers and incremental feeds.

:func:`iter_events` walks a complete buffer (a file read or mmapped whole).
:class:`EventReader` takes bytes as they arrive (h11 style: ``feed()`` then
``next_event()`` until it returns None) and is what a growing file or a
stream with no packet framing uses.
"""

from __future__ import annotations

from collections.abc import Iterator

from .constants import MAGIC, EventType
from .decoder import Decoder
from .errors import ProtocolError, TruncatedError
from .events import Event
from .primitives import U32

_LENGTH_AT = 9  # event_length sits at the same offset in v1 and v4 headers
# Events before ``start`` that set decoder state (format, table maps) are still decoded.
_STATE_EVENTS = frozenset({EventType.FORMAT_DESCRIPTION, EventType.START_V3, EventType.TABLE_MAP})
# The message of a binlog that ends right after its magic (binlogd info and dump agree on it: exit 1).
ONLY_MAGIC = "holds only the 4-byte binlog magic: no FORMAT_DESCRIPTION, no events"


def check_magic(view, offset: int = 0) -> None:
    """Raise ProtocolError unless ``view`` starts with the binlog magic ``\\xfebin``."""
    head = bytes(view[:4])
    if head != MAGIC:
        if len(head) < 4 and MAGIC.startswith(head):
            raise TruncatedError(f"file ends inside the 4-byte binlog magic ({len(head)} bytes)", offset)
        raise ProtocolError(f"not a binlog file: magic is {head.hex()} instead of fe62696e", offset)


def event_bounds(view, pos: int, header_len: int, base: int = 0) -> int | None:
    """Length of the event at ``pos``, or None if the bytes there end before it does.

    ``base`` is added to ``pos`` in error offsets (the stream offset of ``view[0]``).

    Raises:
        ProtocolError: an event length smaller than a header (nothing sane follows).
    """
    if len(view) - pos < header_len:
        return None
    length = U32.unpack_from(view, pos + _LENGTH_AT)[0]
    if length < header_len:
        raise ProtocolError(f"event length {length} is shorter than the {header_len}-byte header", base + pos)
    return length if pos + length <= len(view) else None


def iter_events(data, decoder: Decoder | None = None, start: int = 4, stop: int | None = None,
                check_file_magic: bool = True) -> Iterator[Event]:
    """Decode every event of a complete binlog held in memory.

    Args:
        data: the file's bytes (bytes, mmap or memoryview), magic included.
        decoder: the Decoder to use (a fresh one by default).
        start: offset of the first event to yield (an event boundary); the FDE and
            TABLE_MAPs before it are decoded silently so that rows after it decode.
        stop: stop before the first event starting at or after this offset.
    Sending an offset (an event boundary after the event just yielded: ``walk.send(offset)``, which returns
    None) makes the walk go on from there, past events the caller took otherwise (:meth:`Decoder.rows_like`).
    Raises:
        TruncatedError: the data ends inside an event (naming its offset).
        ChecksumError, EventDecodeError, ProtocolError: from the decoder.
    """
    view = memoryview(data)
    decoder = decoder or Decoder()
    if check_file_magic:
        check_magic(view)
    pos = 4 if check_file_magic else 0
    size = len(view)
    end = size if stop is None else min(stop, size)
    unpack_length = U32.unpack_from
    while pos < end:
        # event_bounds' common case inline (a whole event, its length field past a 19-byte header's
        # room); anything else goes to it, for its result or its error.
        length = unpack_length(view, pos + _LENGTH_AT)[0] if size - pos >= 19 else 0
        if not decoder.header_len <= length <= size - pos:
            length = event_bounds(view, pos, decoder.header_len)
        if length is None:
            raise TruncatedError(f"binlog ends inside an event ({len(view) - pos} of {_declared(view, pos, decoder)} "
                                 "bytes present)", pos)
        if pos >= start:
            jump = yield decoder.decode(view[pos:pos + length], pos)
            if jump is not None:
                pos = jump
                yield None  # what send() returns
                continue
        elif view[pos + 4] in _STATE_EVENTS or pos == 4:
            decoder.decode(view[pos:pos + length], pos)
        pos += length


def _declared(view, pos: int, decoder: Decoder) -> str:
    if len(view) - pos >= decoder.header_len:
        return str(U32.unpack_from(view, pos + _LENGTH_AT)[0])
    return "an unknown number of"


class EventReader:
    """Incremental reader: bytes in through :meth:`feed`, events out of :meth:`next_event`.

    Args:
        decoder: the Decoder (a fresh one by default).
        expect_magic: the input starts with the 4-byte binlog magic (files).
        offset: the file/stream offset of the first byte fed (after the magic
            when ``expect_magic`` is False).
    Fields:
        offset: the offset of the next undecoded byte.
    """

    def __init__(self, decoder: Decoder | None = None, expect_magic: bool = True, offset: int = 0):
        self.decoder = decoder or Decoder()
        self.offset = offset
        self._buf = bytearray()
        self._start = 0  # bytes of _buf already returned as events
        self._need_magic = expect_magic

    def feed(self, data: bytes) -> None:
        """Append bytes that arrived."""
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete event."""
        return len(self._buf) - self._start

    def next_event(self) -> Event | None:
        """The next complete event, or None when more bytes are needed."""
        if self._need_magic:
            if len(self._buf) < 4:
                if not MAGIC.startswith(bytes(self._buf)):
                    check_magic(self._buf, self.offset)
                return None
            check_magic(self._buf, self.offset)
            del self._buf[:4]
            self.offset += 4
            self._need_magic = False
        start = self._start
        length = event_bounds(self._buf, start, self.decoder.header_len, self.offset - start)
        if length is None:
            if start and start * 2 >= len(self._buf):  # compact when the consumed part dominates
                del self._buf[:start]
                self._start = 0
            return None
        raw = bytes(self._buf[start:start + length])
        self._start = start + length
        pos, self.offset = self.offset, self.offset + length
        return self.decoder.decode(raw, pos)

    def close(self) -> None:
        """Declare the input complete.

        Raises:
            TruncatedError: when bytes of an incomplete event (or magic) remain.
        """
        if self._need_magic and self._buf:
            raise TruncatedError(f"input ends inside the binlog magic ({len(self._buf)} bytes)", self.offset)
        if self.buffered:
            raise TruncatedError(f"input ends inside an event ({self.buffered} bytes of it present)", self.offset)
