"""Column value decoders for row images, producing the JSON forms of README.md ("Values").

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
_POW10 = tuple(10 ** i for i in range(10))
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
    return decimal_decoder(precision, scale)(view, pos)


def decimal_decoder(precision: int, scale: int):
    """A function ``(view, pos) -> str`` for DECIMAL(precision, scale), layout worked out once.

    The value is stored big-endian in groups of 9 decimal digits per 4 bytes (a
    shorter group for the leading integer and trailing fraction digits), with
    the sign in the top bit and negative values stored inverted. It is read as
    one integer and split with shifts.

    Raises:
        EventDecodeError: (when called) for impossible precision/scale or short data.
    """
    if not 0 < precision <= 65 or not 0 <= scale <= 30 or scale > precision:
        def invalid(view, pos):
            raise EventDecodeError(f"invalid DECIMAL({precision},{scale})")
        return invalid
    size = decimal_size(precision, scale)
    intg = precision - scale
    lead_bytes, tail_bytes = _DIG2BYTES[intg % 9], _DIG2BYTES[scale % 9]
    int_groups, frac_groups, tail_digits = intg // 9, scale // 9, scale % 9
    sign_bit, all_bits = 1 << (8 * size - 1), (1 << (8 * size)) - 1
    frac_bits = 8 * (4 * frac_groups + tail_bytes)
    frac_mask = (1 << frac_bits) - 1
    simple = int_groups <= 1 and frac_groups == 0 and not (int_groups and lead_bytes)
    int_limit, frac_limit = 10 ** intg, 10 ** scale  # simple layouts: one group each

    def bad(value: int) -> EventDecodeError:
        return EventDecodeError(f"DECIMAL({precision},{scale}) has an out-of-range digit group ({value})")

    def decode(view, pos):
        if pos + size > len(view):
            raise EventDecodeError(f"DECIMAL({precision},{scale}) needs {size} bytes at row offset {pos}")
        x = int.from_bytes(view[pos:pos + size], "big")
        if x & sign_bit:
            x ^= sign_bit
            sign = ""
        else:
            x ^= sign_bit ^ all_bits
            sign = "-"
        whole, frac = x >> frac_bits, x & frac_mask
        if simple:
            if whole >= int_limit or frac >= frac_limit:
                raise bad(x)
        else:
            int_part = whole >> (32 * int_groups) if lead_bytes else 0
            if int_part >= _POW10[intg % 9]:
                raise bad(int_part)
            for k in range(int_groups - 1, -1, -1):
                group = whole >> (32 * k) & 0xFFFFFFFF
                if group >= 1_000_000_000:
                    raise bad(group)
                int_part = int_part * 1_000_000_000 + group
            whole = int_part
            if frac_groups:
                groups = [frac >> (8 * tail_bytes + 32 * k) & 0xFFFFFFFF for k in range(frac_groups - 1, -1, -1)]
                tail = frac & ((1 << 8 * tail_bytes) - 1)
                if max(groups) >= 1_000_000_000 or tail >= _POW10[tail_digits]:
                    raise bad(max(groups + [tail]))
                parts = [f"{g:09d}" for g in groups]
                if tail_digits:
                    parts.append(f"{tail:0{tail_digits}d}")
                return f"{sign}{whole}.{''.join(parts)}"
            if frac >= frac_limit:
                raise bad(frac)
        if sign and not whole and not frac:
            sign = ""  # never print negative zero
        if not scale:
            return f"{sign}{whole}"
        return f"{sign}{whole}.{frac:0{scale}d}"

    return decode


def _fraction(usec: int, fsp: int) -> str:
    return f".{usec:06d}"[: fsp + 1] if fsp else ""


def _frac_usec(view: memoryview, pos: int, fsp: int) -> int:
    """The fractional-seconds bytes (big-endian) of TIME2/DATETIME2/TIMESTAMP2 as microseconds."""
    if fsp <= 0:
        return 0
    n = (fsp + 1) // 2
    value = int.from_bytes(view[pos:pos + n], "big")
    return value * (10_000, 100, 1)[n - 1]


DATE_TEXTS: dict[int, str] = {}  # DATE's packed value → text (the generated row decoders read these caches too)
YMD_TEXTS: dict[int, str] = {}   # DATETIME2's date part → text
HMS_TEXTS: dict[int, str] = {}   # DATETIME2's time part → text
_CACHE_MAX = 1 << 17


def date_text(packed: int) -> str:
    """DATE's 3-byte value (year<<9 | month<<5 | day) as ``YYYY-MM-DD`` (cached: dates repeat)."""
    text = DATE_TEXTS.get(packed)
    if text is None:
        if len(DATE_TEXTS) >= _CACHE_MAX:
            DATE_TEXTS.clear()
        text = DATE_TEXTS[packed] = f"{packed >> 9:04d}-{packed >> 5 & 15:02d}-{packed & 31:02d}"
    return text


def ymd_text(ymd: int) -> str:
    """DATETIME2's year*13+month / day part (the bits above the 17 time bits) as ``YYYY-MM-DD`` (cached)."""
    text = YMD_TEXTS.get(ymd)
    if text is None:
        if len(YMD_TEXTS) >= _CACHE_MAX:
            YMD_TEXTS.clear()
        ym = ymd >> 5
        text = YMD_TEXTS[ymd] = f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d}"
    return text


def hms_text(hms: int) -> str:
    """DATETIME2's 17-bit hour/minute/second part as ``HH:MM:SS`` (cached)."""
    text = HMS_TEXTS.get(hms)
    if text is None and len(HMS_TEXTS) >= _CACHE_MAX:
        HMS_TEXTS.clear()
    if text is None:
        text = HMS_TEXTS[hms] = f"{hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}"
    return text


def datetime2_text(view: memoryview, pos: int, fsp: int) -> str:
    """DATETIME2(fsp): 5 bytes big-endian (offset 0x8000000000) then the fraction."""
    packed = int.from_bytes(view[pos:pos + 5], "big") - 0x8000000000
    text = f"{ymd_text(packed >> 17)} {hms_text(packed & 0x1FFFF)}"
    if fsp:
        return f"{text}{_fraction(_frac_usec(view, pos + 5, fsp), fsp)}"
    return text


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
