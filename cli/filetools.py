"""The file tools' files: ``binlogd info`` and ``binlogd dump`` open what they read here.

The decoding is binlogd.protocol's: :func:`binlogd.protocol.fileinfo.describe` for ``info``
(it seeks, so ``info`` needs a regular file) and the event readers for ``dump``. ``dump`` maps a
regular file whole; a pipe, a FIFO, a character device or standard input (``-``) is read as a
stream through :class:`binlogd.protocol.reader.EventReader`, which needs no size and holds one
event at a time. A file that holds only the binlog magic is truncated for both tools (exit 1).
Object-store URIs (``s3://`` ..., :mod:`binlogd.library.storage`) are read with ranged requests: ``info``
asks for the first events and the last few KB, ``dump`` streams the object in bounded blocks.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Iterator

from binlogd.library import storage
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, TruncatedError
from binlogd.protocol.events import Event
from binlogd.protocol.fileinfo import BinlogInfo, describe
from binlogd.protocol.reader import ONLY_MAGIC, EventReader, check_magic, iter_events

TYPE_CHECKING = False  # typing itself is not imported at run time (start-up: `binlogd info`)
if TYPE_CHECKING:
    from typing import BinaryIO

STDIN = "-"          # the file name that means standard input
_CHUNK = 1 << 20     # bytes asked for per read of a stream


def _open(path: str | os.PathLike) -> BinaryIO:
    """``path`` open for binary reading; ``-`` is standard input (left open when this is closed)."""
    if path == STDIN:
        return open(0, "rb", closefd=False)
    return open(path, "rb")


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages ("a pipe", ...)."""
    for test, kind in ((stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


class StartPositionError(Exception):
    """``--start-position`` is not an event boundary of the file (a usage error: exit 2).

    Fields: ``start`` (the offset asked for), ``before`` (the start of the event that holds it, or of the
    last event when it is past the end; None before the first event), ``after`` (the next event boundary;
    None past the end of the file).
    """

    def __init__(self, start: int, before: int | None, after: int | None):
        self.start, self.before, self.after = start, before, after
        if before is None:
            where = f"the first event starts at {after}"
        elif after is None:
            where = f"it is past the end of the events (the last one starts at {before})"
        else:
            where = f"the nearest are {before} (before) and {after} (after)"
        super().__init__(f"--start-position {start} is not an event boundary: {where}")


def _check_start(view: memoryview, start: int) -> None:
    """Raise StartPositionError unless ``start`` is where an event of ``view`` starts, or its end.
    Walks the headers' lengths up to ``start``; damage on the way is left to the decoder to report."""
    pos, before, size = 4, None, len(view)
    while pos < start and size - pos >= 13:  # room for a header (v1: 13 bytes; the length is at 9 in every version)
        length = int.from_bytes(view[pos + 9:pos + 13], "little")
        if length < 13 or pos + length > size:
            return  # truncated or corrupt before ``start``: the decoder names it
        before, pos = pos, pos + length
    if pos > start:
        raise StartPositionError(start, before, pos)
    if pos < start and pos == size:
        raise StartPositionError(start, before, None)


def info(path: str | os.PathLike) -> BinlogInfo:
    """Describe one binlog file or object: :func:`measured_info` without the byte count."""
    return measured_info(path)[0]


def measured_info(path: str | os.PathLike) -> tuple[BinlogInfo, int]:
    """Describe one binlog file (``-``: standard input redirected from a file) or object-store URI,
    seeking (ranged reads) where it can.

    Returns:
        (the :class:`BinlogInfo`, ``file`` being ``path`` as given; the bytes read to describe it).
    Raises:
        BinlogError: not a binlog, or no complete FORMAT_DESCRIPTION at its start;
            :class:`binlogd.library.storage.StorageError` for a missing, refused or unreadable object.
        OSError: the file cannot be read, or is not a regular file (a pipe cannot be sought in).
    """
    if storage.scheme(path):  # s3://, file:// ...: the remote code path, file:// read locally
        with storage.open_input(path) as fh:
            return describe(fh, os.fspath(path)), fh.bytes_read
    with _open(path) as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.ESPIPE, f"{_kind(mode)}, not a regular file: info seeks in files "
                                        "(binlogd dump reads pipes and standard input)")
        counted = storage.CountingReader(fh, os.fstat(fh.fileno()).st_size)
        return describe(counted, os.fspath(path)), counted.bytes_read


def mapped(path: str | os.PathLike) -> memoryview:
    """The whole file as a read-only memoryview (mmap; an empty file gives an empty view).

    The mapping is released when the last event referring to it is gone, not
    before: row events decode lazily from it.
    """
    with open(path, "rb") as fh:
        return _map(fh)


def _map(fh: BinaryIO) -> memoryview:
    if os.fstat(fh.fileno()).st_size == 0:
        return memoryview(b"")
    return memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))


def dump_events(path: str | os.PathLike, start_position: int | None = None,
                stop_position: int | None = None, schema_source=None) -> Iterator[Event]:
    """Decode the events of one file from ``start_position`` (an event boundary) to before ``stop_position``.

    ``path`` may be a regular file (mapped), or a pipe, FIFO, device or ``-`` (standard input),
    read as a stream, or a URI (``s3://``, ``file://`` ...), streamed in blocks of a MiB. Consume each
    event before asking for the next: rows are decoded lazily.
    ``schema_source`` names the columns of TABLE_MAPs without names (see :class:`Decoder`).

    Raises:
        BinlogError: bad magic; input that ends inside the magic or an event, or holds only the
            magic; checksum or decode errors; each naming the offset.
        StartPositionError: ``start_position`` is not an event boundary (naming the nearest ones); for a
            stream, raised when the stream reaches it.
        OSError: the file cannot be opened or read.
    """
    decoder, start = Decoder(schema_source=schema_source), start_position or 4
    if start < 4:
        raise StartPositionError(start, None, 4)
    if storage.scheme(path):
        with storage.open_input(path, block_size=_CHUNK) as fh:
            yield from _stream(fh, os.fspath(path), decoder, start, stop_position)
        return
    with _open(path) as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            yield from _stream(fh, _kind(mode), decoder, start, stop_position)
            return
        view = _map(fh)
    check_magic(view)
    if len(view) == 4:
        raise TruncatedError(ONLY_MAGIC, 4)
    _check_start(view, start)
    yield from iter_events(view, decoder, start=start, stop=stop_position)


def _stream(fh: BinaryIO, kind: str, decoder: Decoder, start: int, stop: int | None) -> Iterator[Event]:
    """The events of a stream, decoded as its bytes arrive; ``kind`` names it in messages."""
    reader, total, before = EventReader(decoder), 0, None
    while chunk := fh.read1(_CHUNK):
        total += len(chunk)
        reader.feed(chunk)
        while (event := reader.next_event()) is not None:
            pos = event.header.pos
            if pos > start and (before is None or before < start):
                raise StartPositionError(start, before, pos)
            if stop is not None and pos >= stop:
                return
            if pos >= start:
                yield event
            before = pos
    if total == 0:
        raise TruncatedError(f"read 0 bytes from {kind}: no binlog magic", 0)
    reader.close()
    if total == 4:
        raise TruncatedError(ONLY_MAGIC, 4)
    if before is not None and before < start < total:
        raise StartPositionError(start, before, total)
    if start > total >= 4:
        raise StartPositionError(start, before, None)


__all__ = ["STDIN", "BinlogInfo", "BinlogError", "StartPositionError", "dump_events", "info", "mapped",
           "measured_info"]
