"""Column value decoders for row images, producing the JSON forms of DESIGN.md.

Each decoder takes ``(view, pos)`` (plus type metadata) and returns the value;
the compiled row decoders in :mod:`protocol.rowcodec` know each value's width.
"""

from __future__ import annotations

import struct
from base64 import b64encode
from datetime import datetime, timezone

from .errors import EventDecodeError

_F32 = struct.Struct("<f")
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def float32(x: float) -> float:
    """The shortest decimal that round-trips to the same float32 (1.1f → 1.1)."""
    if x != x or x in (float("inf"), float("-inf")):
        return x
    target = _F32.pack(x)
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        try:
            if _F32.pack(candidate) == target:
                return candidate
        except OverflowError:  # rounding FLT_MAX up leaves float32's range
            continue
    return x


def decimal_size(precision: int, scale: int) -> int:
    """Bytes a DECIMAL(precision, scale) value takes in a row image."""
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


def decimal_text(view: memoryview, pos: int, precision: int, scale: int) -> str:
    """A binary DECIMAL as its exact text with ``scale`` fraction digits (``"-123.4500"``).

    Raises:
        EventDecodeError: when precision/scale are impossible or the bytes run out.
    """
    if not 0 < precision <= 65 or not 0 <= scale <= 30 or scale > precision:
        raise EventDecodeError(f"invalid DECIMAL({precision},{scale})")
    size = decimal_size(precision, scale)
    if pos + size > len(view):
        raise EventDecodeError(f"DECIMAL({precision},{scale}) needs {size} bytes at row offset {pos}")
    raw = bytearray(view[pos:pos + size])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    intg = precision - scale
    lead = _DIG2BYTES[intg % 9]
    i = lead
    int_part = int.from_bytes(raw[:lead], "big") if lead else 0
    for _ in range(intg // 9):
        int_part = int_part * 1_000_000_000 + int.from_bytes(raw[i:i + 4], "big")
        i += 4
    sign = "-" if negative else ""
    if not scale:
        return f"{sign}{int_part}"
    frac = []
    for _ in range(scale // 9):
        frac.append(f"{int.from_bytes(raw[i:i + 4], 'big'):09d}")
        i += 4
    tail = scale % 9
    if tail:
        frac.append(f"{int.from_bytes(raw[i:i + _DIG2BYTES[tail]], 'big'):0{tail}d}")
    return f"{sign}{int_part}.{''.join(frac)}"


def _fraction(usec: int, fsp: int) -> str:
    return f".{usec:06d}"[: fsp + 1] if fsp else ""


def _frac_usec(view: memoryview, pos: int, fsp: int) -> int:
    """The fractional-seconds bytes (big-endian) of TIME2/DATETIME2/TIMESTAMP2 as microseconds."""
    if fsp <= 0:
        return 0
    n = (fsp + 1) // 2
    value = int.from_bytes(view[pos:pos + n], "big")
    return value * (10_000, 100, 1)[n - 1]


def date_text(packed: int) -> str:
    """DATE's 3-byte value (year<<9 | month<<5 | day) as ``YYYY-MM-DD``."""
    return f"{packed >> 9:04d}-{packed >> 5 & 15:02d}-{packed & 31:02d}"


def datetime2_text(view: memoryview, pos: int, fsp: int) -> str:
    """DATETIME2(fsp): 5 bytes big-endian (offset 0x8000000000) then the fraction."""
    packed = int.from_bytes(view[pos:pos + 5], "big") - 0x8000000000
    ymd, hms = packed >> 17, packed & 0x1FFFF
    ym = ymd >> 5
    return (f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d} "
            f"{hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}{_fraction(_frac_usec(view, pos + 5, fsp), fsp)}")


def time2_text(view: memoryview, pos: int, fsp: int) -> str:
    """TIME2(fsp): 3 bytes big-endian (offset 0x800000) plus a signed fraction; may be negative."""
    if fsp >= 5:
        packed = int.from_bytes(view[pos:pos + 6], "big") - 0x800000000000
    else:
        intpart = int.from_bytes(view[pos:pos + 3], "big") - 0x800000
        frac = 0
        if fsp in (1, 2):
            frac = view[pos + 3]
            if intpart < 0 and frac:
                intpart += 1
                frac -= 0x100
            frac *= 10_000
        elif fsp in (3, 4):
            frac = int.from_bytes(view[pos + 3:pos + 5], "big")
            if intpart < 0 and frac:
                intpart += 1
                frac -= 0x10000
            frac *= 100
        packed = (intpart << 24) + frac
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms, usec = packed >> 24, packed & 0xFFFFFF
    return f"{sign}{hms >> 12 & 0x3FF:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}{_fraction(usec, fsp)}"


def utc_text(seconds: int, usec: int = 0, fsp: int = 0) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS[.f]`` in UTC; 0 is MySQL's zero timestamp."""
    if seconds == 0 and usec == 0:
        return "0000-00-00 00:00:00" + (f".{'0' * fsp}" if fsp else "")
    dt = _EPOCH.fromtimestamp(seconds, timezone.utc)
    return f"{dt:%Y-%m-%d %H:%M:%S}{_fraction(usec, fsp)}"


def timestamp2_text(view: memoryview, pos: int, fsp: int) -> str:
    """TIMESTAMP2(fsp): 4 bytes big-endian unix seconds, then the fraction; in UTC."""
    return utc_text(int.from_bytes(view[pos:pos + 4], "big"), _frac_usec(view, pos + 4, fsp), fsp)


def old_time_text(value: int) -> str:
    """Pre-5.6 TIME: a signed integer HHMMSS."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}{value // 10000:02d}:{value // 100 % 100:02d}:{value % 100:02d}"


def old_datetime_text(value: int) -> str:
    """Pre-5.6 DATETIME: an integer YYYYMMDDhhmmss."""
    d, t = divmod(value, 1_000_000)
    return f"{d // 10000:04d}-{d // 100 % 100:02d}-{d % 100:02d} {t // 10000:02d}:{t // 100 % 100:02d}:{t % 100:02d}"


def year_value(value: int) -> int:
    """YEAR's one byte: 0 stays 0, else 1900 + value."""
    return 1900 + value if value else 0


def base64_text(raw: bytes | memoryview) -> str:
    """Binary data as a base64 string."""
    return b64encode(raw).decode("ascii")


def text_or_base64(raw: bytes | memoryview) -> str:
    """Charset unknown: UTF-8 when the bytes are valid UTF-8, else base64."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return base64_text(raw)


def padded_base64(raw: bytes | memoryview, length: int) -> str:
    """BINARY(n): the server strips trailing zero bytes when it logs the row; put them back."""
    return b64encode(bytes(raw).ljust(length, b"\0")).decode("ascii")


def vector_value(raw: memoryview) -> list[float]:
    """VECTOR: little-endian float32 values."""
    if len(raw) % 4:
        raise EventDecodeError(f"VECTOR value of {len(raw)} bytes is not a whole number of float32")
    return [float32(x) for x in struct.unpack(f"<{len(raw) // 4}f", raw)]
