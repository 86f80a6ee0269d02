"""Row value decoders against independent encoders (DECIMAL, temporal types, FLOAT)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol.values import datetime2_text, decimal_text, float32, time2_text

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def encode_decimal(text: str, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL of a canonical decimal string, written from the format's definition
    (groups of 9 digits, 4 bytes each, shorter leading/trailing groups, sign bit, negatives inverted).
    Works on the text so that no float or Decimal context rounding is involved."""
    negative = text.startswith("-")
    int_digits, _, frac_digits = text.lstrip("-").partition(".")
    frac_digits = frac_digits.ljust(scale, "0")
    intg = precision - scale
    int_digits = int_digits.rjust(intg, "0") if intg else ""
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(int_digits[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for k in range(lead, intg, 9):
        out += int(int_digits[k:k + 9]).to_bytes(4, "big")
    for k in range(0, scale - scale % 9, 9):
        out += int(frac_digits[k:k + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_digits[scale - scale % 9:]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


@st.composite
def decimals(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    intg = precision - scale
    whole = draw(st.integers(0, 10**intg - 1)) if intg else 0
    frac = draw(st.integers(0, 10**scale - 1)) if scale else 0
    sign = draw(st.sampled_from(["", "-"]))
    text = f"{sign}{whole}" + (f".{frac:0{scale}d}" if scale else "")
    return precision, scale, text


@settings(max_examples=2000, deadline=None)
@given(decimals())
def test_decimal_matches_an_independent_encoder(case):
    precision, scale, text = case
    if text.startswith("-") and not text.strip("-0."):
        text = text[1:]  # MySQL never stores negative zero
    raw = b"\xaa" + encode_decimal(text, precision, scale) + b"\xbb"
    assert decimal_text(memoryview(raw), 1, precision, scale) == text


def test_known_decimals():
    assert decimal_text(memoryview(encode_decimal("-123.4500", 12, 4)), 0, 12, 4) == "-123.4500"
    assert decimal_text(memoryview(encode_decimal("0.10000", 10, 5)), 0, 10, 5) == "0.10000"
    big = "-" + "9" * 35 + "." + "0" * 29 + "1"
    assert decimal_text(memoryview(encode_decimal(big, 65, 30)), 0, 65, 30) == big


def _datetime2(y, mo, d, h, mi, s, usec, fsp) -> bytes:
    packed = ((y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | s) + 0x8000000000
    nbytes = (fsp + 1) // 2
    # The fraction is stored in units of 10000, 100 or 1 µs for 1, 2 or 3 bytes, truncated to fsp digits.
    truncated = usec // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    frac = truncated // (10000, 100, 1)[nbytes - 1] if nbytes else 0
    return packed.to_bytes(5, "big") + (frac.to_bytes(nbytes, "big") if nbytes else b"")


@settings(max_examples=500, deadline=None)
@given(st.integers(1000, 9999), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
       st.integers(0, 59), st.integers(0, 999999), st.integers(0, 6))
def test_datetime2(y, mo, d, h, mi, s, usec, fsp):
    text = datetime2_text(memoryview(_datetime2(y, mo, d, h, mi, s, usec, fsp)), 0, fsp)
    want = f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}"
    if fsp:
        want += "." + f"{usec:06d}"[:fsp]
    assert text == want


def test_time2_negative_and_long():
    # -838:59:59 with fsp 0: packed int part is hms with the sign applied around 0x800000
    hms = 838 << 12 | 59 << 6 | 59
    assert time2_text(memoryview((0x800000 - hms).to_bytes(3, "big")), 0, 0) == "-838:59:59"
    assert time2_text(memoryview((0x800000 + hms).to_bytes(3, "big")), 0, 0) == "838:59:59"


@settings(max_examples=500, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_is_shortest_round_trip(x):
    y = float32(x)
    assert struct.pack("<f", y) == struct.pack("<f", x)
    # shortest in significant digits (1e15 is shorter than 999999986991104.0, though its repr is not)
    assert _digits(y) <= _digits(x)


def _digits(x: float) -> int:
    """Significant decimal digits of repr(x)."""
    mantissa = repr(abs(x)).split("e")[0].replace(".", "").strip("0")
    return max(len(mantissa), 1)
