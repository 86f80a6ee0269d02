"""Bounded readers for the binlog's primitive encodings, on memoryview.

Every reader takes ``(view, pos)`` and returns ``(value, new_pos)``; reading
past the end raises :class:`EventDecodeError` instead of returning short data.
"""

from __future__ import annotations

import struct

from .errors import EventDecodeError

try:  # ISA-L's CRC32 (the binlog's, zlib's polynomial) runs ~3x faster than zlib 1.2's
    from isal.isal_zlib import crc32  # noqa: F401 (used by decoder and filetools)
except ImportError:  # pragma: no cover - isal has wheels for the usual platforms
    from zlib import crc32  # noqa: F401

U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
I64 = struct.Struct("<q")
HEADER_V4 = struct.Struct("<IBIIIH")  # event header: timestamp, type, server id, length, next position, flags
HEADER_V1 = struct.Struct("<IBII")    # the v1 header: no next position, no flags


def need(view: memoryview, pos: int, n: int, what: str = "field") -> None:
    """Raise EventDecodeError unless ``n`` bytes are available at ``pos``."""
    if n < 0 or pos + n > len(view):
        raise EventDecodeError(f"{what} needs {n} bytes at body offset {pos}, only {len(view) - pos} left")


def take(view: memoryview, pos: int, n: int, what: str = "field") -> tuple[memoryview, int]:
    """Return ``(view[pos:pos+n], pos+n)``, checking the bound."""
    need(view, pos, n, what)
    return view[pos:pos + n], pos + n


def uint(view: memoryview, pos: int, n: int) -> tuple[int, int]:
    """Little-endian unsigned integer of ``n`` bytes."""
    need(view, pos, n, "integer")
    return int.from_bytes(view[pos:pos + n], "little"), pos + n


def packed_int(view: memoryview, pos: int) -> tuple[int | None, int]:
    """MySQL length-encoded integer; None for the NULL marker 0xFB."""
    need(view, pos, 1, "packed integer")
    first = view[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    if first == 0xFC:
        return uint(view, pos + 1, 2)
    if first == 0xFD:
        return uint(view, pos + 1, 3)
    if first == 0xFE:
        return uint(view, pos + 1, 8)
    raise EventDecodeError(f"invalid packed integer prefix 0xff at body offset {pos}")


def packed_len(view: memoryview, pos: int) -> tuple[int, int]:
    """A packed integer that must be a length (not NULL)."""
    value, pos = packed_int(view, pos)
    if value is None:
        raise EventDecodeError(f"unexpected NULL length at body offset {pos - 1}")
    return value, pos


def packed_bytes(view: memoryview, pos: int) -> tuple[memoryview, int]:
    """A packed length followed by that many bytes."""
    n, pos = packed_len(view, pos)
    return take(view, pos, n, "packed string")


def text(raw: bytes | memoryview, codec: str = "utf-8") -> str:
    """Decode identifiers and statements without ever failing (bad bytes are escaped)."""
    return bytes(raw).decode(codec, "backslashreplace")


def uuid_text(raw: bytes | memoryview) -> str:
    """16 raw bytes as a lowercase UUID string."""
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
