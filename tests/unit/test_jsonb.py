"""Tests for protocol.jsonb: MySQL binary JSON, JSON diffs, binary DECIMAL.

The documents are built by a small encoder written here from the format
description (not from the decoder), and checked against real MySQL binlogs.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass
from decimal import Decimal, localcontext
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlogd.protocol.errors import EventDecodeError, ProtocolError
from binlogd.protocol.jsonb import (
    MAX_DEPTH,
    JsonDiff,
    JsonDiffs,
    decode_json,
    decode_json_diff,
)
from binlogd.protocol.values import decimal_size as decimal_bin_size
from binlogd.protocol.values import decimal_text

BINLOGS = Path("/work/shared/binlogs/rust_mysql_common")

# --------------------------------------------------------------------------- encoder


@dataclass(frozen=True)
class Opaque:
    """An opaque value: MySQL field type + raw bytes."""

    field_type: int
    data: bytes


@dataclass(frozen=True)
class Large:
    """Wrap a dict/list to force the large (4-byte offset) format."""

    value: object


def varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def enc_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """MySQL decimal2bin, written from the format description."""
    with localcontext() as ctx:
        ctx.prec = 200
        sign, digits, exp = value.quantize(Decimal(1).scaleb(-scale)).as_tuple()
    text = "".join(map(str, digits)).rjust(precision, "0")
    intg = precision - scale
    int_part, frac_part = text[:intg], text[intg:]
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    groups = []
    lead = intg % 9
    if lead:
        groups.append((int_part[:lead], sizes[lead]))
    groups += [(int_part[i : i + 9], 4) for i in range(lead, intg, 9)]
    groups += [(frac_part[i : i + 9], 4) for i in range(0, scale - scale % 9, 9)]
    if scale % 9:
        groups.append((frac_part[scale - scale % 9 :], sizes[scale % 9]))
    out = bytearray()
    for digits_text, size in groups:
        out += int(digits_text).to_bytes(size, "big")
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def packed_datetime(y, mo, d, h=0, mi=0, s=0, us=0) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return struct.pack("<q", (((ymd << 17) | hms) << 24) + us)


def packed_time(h, mi, s, us=0, negative=False) -> bytes:
    value = ((((h << 12) | (mi << 6) | s)) << 24) + us
    return struct.pack("<q", -value if negative else value)


def dec_opaque(text: str) -> Opaque:
    value = Decimal(text)
    _, digits, exp = value.as_tuple()
    scale = max(0, -exp)
    precision = max(len(digits), scale + 1)
    return Opaque(246, bytes([precision, scale]) + enc_decimal(value, precision, scale))


def scalar(v, large: bool):
    """(type, bytes, inlinable) of a scalar."""
    if v is None or isinstance(v, bool):
        return 0x04, bytes([{None: 0, True: 1, False: 2}[v]]), True
    if isinstance(v, int):
        for code, fmt, lo, hi, inline in (
            (0x05, "<h", -(2**15), 2**15 - 1, True),
            (0x06, "<H", 0, 2**16 - 1, True),
            (0x07, "<i", -(2**31), 2**31 - 1, large),
            (0x08, "<I", 0, 2**32 - 1, large),
            (0x09, "<q", -(2**63), 2**63 - 1, False),
            (0x0A, "<Q", 0, 2**64 - 1, False),
        ):
            if lo <= v <= hi:
                return code, struct.pack(fmt, v), inline
        raise ValueError(v)
    if isinstance(v, float):
        return 0x0B, struct.pack("<d", v), False
    if isinstance(v, str):
        raw = v.encode()
        return 0x0C, varlen(len(raw)) + raw, False
    if isinstance(v, Decimal):
        v = dec_opaque(str(v))
    if isinstance(v, Opaque):
        return 0x0F, bytes([v.field_type]) + varlen(len(v.data)) + v.data, False
    raise TypeError(v)


def enc(v, large: bool = False) -> tuple[int, bytes]:
    """(type, value bytes) of any value; containers get ``large`` unless wrapped."""
    if isinstance(v, Large):
        return enc(v.value, True)
    if isinstance(v, (dict, list)):
        is_obj = isinstance(v, dict)
        items = list(v.items()) if is_obj else [(None, x) for x in v]
        w = 4 if large else 2
        off = "I" if large else "H"
        header = 2 * w + len(items) * ((w + 2 if is_obj else 0) + 1 + w)
        key_entries, value_entries, body = b"", b"", b""
        if is_obj:
            for k, _ in items:
                raw = k.encode()
                key_entries += struct.pack("<" + off + "H", header + len(body), len(raw))
                body += raw
        for _, x in items:
            t, data = enc(x, large) if isinstance(x, (dict, list, Large)) else (None, None)
            if t is None:
                t, data, inline = scalar(x, large)
                if inline:
                    value_entries += bytes([t]) + data.ljust(w, b"\0")[:w]
                    continue
            value_entries += bytes([t]) + struct.pack("<" + off, header + len(body))
            body += data
        size = header + len(body)
        code = (0x00 if is_obj else 0x02) | int(large)
        return code, struct.pack("<" + off * 2, len(items), size) + key_entries + value_entries + body
    t, data, _ = scalar(v, large)
    return t, data


def doc(v, large: bool = False) -> bytes:
    t, data = enc(v, large)
    return bytes([t]) + data


def unwrap(v):
    if isinstance(v, Large):
        return unwrap(v.value)
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def assert_json_equal(got, want):
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_json_equal(got[k], want[k])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_json_equal(g, w)
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want
        if isinstance(want, Decimal):
            assert str(got) == str(want)


# --------------------------------------------------------------------------- round trips

SCALARS = [
    None, True, False, 0, 1, -1, 32767, -32768, 32768, 65535, 65536, -32769,
    2**31 - 1, -(2**31), 2**31, 2**32 - 1, 2**32, -(2**31) - 1, 2**63 - 1, -(2**63),
    2**63, 2**64 - 1, 0.0, -0.0, 1.5, -1e300, 3.141592653589793, "", "a", "héllo ☃ 😀",
    "x" * 127, "y" * 128, "z" * 16384, "w" * 70000,
]


@pytest.mark.parametrize("value", SCALARS, ids=repr)
@pytest.mark.parametrize("large", [False, True])
def test_scalars_top_level_and_inside_containers(value, large):
    assert_json_equal(decode_json(doc(value)), value)
    if isinstance(value, str) and len(value) > 60000:
        large = True  # does not fit a small container
    assert_json_equal(decode_json(doc([value], large)), [value])
    assert_json_equal(decode_json(doc({"k": value}, large)), {"k": value})


def test_empty_input_is_null():
    assert decode_json(b"") is None
    assert decode_json(memoryview(b"")) is None


def test_nested_objects_and_arrays():
    value = {
        "a": [1, 2, {"b": None, "c": [True, False, "s"]}],
        "": {},
        "e": [],
        "unicode ключ": {"x": 2**40, "y": -2.5},
    }
    for large in (False, True):
        assert_json_equal(decode_json(doc(value, large)), value)
        assert_json_equal(decode_json(memoryview(doc(value, large))), value)
        assert_json_equal(decode_json(bytearray(doc(value, large))), value)


def test_mixed_small_and_large_containers():
    value = {"small": [1, Large({"big": [2**31 - 1, -(2**31), 2**32 - 1, Large([7])]})]}
    data = doc(value)
    assert data[0] == 0x00
    assert_json_equal(decode_json(data), unwrap(value))


def test_large_document_needs_large_format():
    value = {f"key{i}": "v" * 100 for i in range(800)}  # > 64 KiB
    data = doc(value, large=True)
    assert data[0] == 0x01 and len(data) > 65536
    assert decode_json(data) == value


def test_large_format_inlines_int32():
    data = doc([-(2**31), 2**32 - 1], large=True)
    # header 8 + two 5-byte entries, no value area: both inlined
    assert len(data) == 1 + 8 + 10
    assert decode_json(data) == [-(2**31), 2**32 - 1]
    small = doc([-(2**31), 2**32 - 1])
    assert len(small) == 1 + 4 + 6 + 8
    assert decode_json(small) == [-(2**31), 2**32 - 1]


OPAQUES = [
    (dec_opaque("9.00"), Decimal("9.00")),
    (dec_opaque("123.456"), Decimal("123.456")),
    (dec_opaque("-123.4500"), Decimal("-123.4500")),
    (dec_opaque("0.5"), Decimal("0.5")),
    (dec_opaque("-0.000000000012"), Decimal("-0.000000000012")),
    (dec_opaque("12345678901234567890.123456789012"), Decimal("12345678901234567890.123456789012")),
    (Opaque(10, packed_datetime(2012, 3, 18)), "2012-03-18"),
    (Opaque(10, packed_datetime(1, 1, 1)), "0001-01-01"),
    (Opaque(12, packed_datetime(2012, 3, 18, 11, 30, 45)), "2012-03-18 11:30:45.000000"),
    (Opaque(12, packed_datetime(9999, 12, 31, 23, 59, 59, 999999)), "9999-12-31 23:59:59.999999"),
    (Opaque(7, packed_datetime(2038, 1, 19, 3, 14, 7, 120)), "2038-01-19 03:14:07.000120"),
    (Opaque(11, packed_time(87, 31, 46, 654321)), "87:31:46.654321"),
    (Opaque(11, packed_time(838, 59, 59)), "838:59:59.000000"),
    (Opaque(11, packed_time(1, 2, 3, 4, negative=True)), "-01:02:03.000004"),
    (Opaque(11, packed_time(0, 0, 0, 500000, negative=True)), "-00:00:00.500000"),
    (Opaque(15, b"U"), "base64:type15:VQ=="),
    (Opaque(252, b"\x00\xff" * 3), "base64:type252:AP8A/wD/"),
    (Opaque(255, b""), "base64:type255:"),
    (Opaque(18, b"12345678"), "base64:type18:MTIzNDU2Nzg="),
]


@pytest.mark.parametrize("opaque,expected", OPAQUES, ids=lambda x: repr(x)[:40])
def test_opaque_values(opaque, expected):
    assert_json_equal(decode_json(doc(opaque)), expected)
    assert_json_equal(decode_json(doc({"o": [opaque]}, large=True)), {"o": [expected]})


# ------------------------------------------------------------------ DECIMAL (protocol.values, shared with rows)


def decode_decimal_bin(raw, precision: int, scale: int) -> Decimal:
    return Decimal(decimal_text(memoryview(bytes(raw)), 0, precision, scale))


def decode_decimal(raw, offset: int, precision: int, scale: int) -> tuple[Decimal, int]:
    return decode_decimal_bin(bytes(raw)[offset:], precision, scale), offset + decimal_bin_size(precision, scale)


def test_decimal_reference_vectors():
    # strings/decimal.cc's own example: DECIMAL(14,4)
    assert decode_decimal_bin(bytes.fromhex("810DFB38D204D2"), 14, 4) == Decimal("1234567890.1234")
    assert str(decode_decimal_bin(bytes.fromhex("7EF204C72DFB2D"), 14, 4)) == "-1234567890.1234"
    assert decimal_bin_size(14, 4) == 7
    assert decimal_bin_size(65, 30) == 30
    assert decimal_bin_size(10, 0) == 5
    assert decimal_bin_size(9, 9) == 4


@pytest.mark.parametrize(
    "text,precision,scale",
    [
        ("0", 1, 0), ("0.00", 5, 2), ("-9.99", 3, 2), ("99999", 5, 0), ("-123.4500", 10, 4),
        ("12345678901234567890123456789012345.123456789012345678901234567890", 65, 30),
        ("-0.123456789012345678901234567890", 30, 30), ("1", 65, 0), ("-1.000000000", 10, 9), ("-0.000000001", 10, 9),
    ],
)
def test_decimal_round_trip_with_offset(text, precision, scale):
    raw = enc_decimal(Decimal(text), precision, scale)
    assert len(raw) == decimal_bin_size(precision, scale)
    value, end = decode_decimal(b"xyz" + raw + b"tail", 3, precision, scale)
    assert end == 3 + len(raw)
    assert format(value, "f") == text
    assert format(decode_decimal_bin(memoryview(raw), precision, scale), "f") == text


@given(
    st.integers(1, 65).flatmap(
        lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)), st.integers(-(10**p) + 1, 10**p - 1))
    )
)
def test_decimal_property(args):
    precision, scale, unscaled = args
    with localcontext() as ctx:
        ctx.prec = 200
        value = Decimal(unscaled).scaleb(-scale)
    raw = enc_decimal(value, precision, scale)
    got = decode_decimal_bin(raw, precision, scale)
    assert got == value
    assert got.as_tuple().exponent == -scale


def test_decimal_errors():
    with pytest.raises(EventDecodeError):
        decode_decimal_bin(b"\x80", 14, 4)  # truncated
    with pytest.raises(EventDecodeError):
        decode_decimal_bin(b"\x80" * 10, 0, 0)
    with pytest.raises(EventDecodeError):
        decode_decimal_bin(b"\x80" * 10, 3, 4)
    with pytest.raises(EventDecodeError):
        decode_decimal_bin(b"\xff\xff\xff\xff\xff", 9, 0)  # group of 9 digits > 999999999
    with pytest.raises(EventDecodeError):
        decode_decimal_bin(b"\xe3", 1, 0)  # 99 in a 1-digit group


# --------------------------------------------------------------------------- malformed


def expect_error(data: bytes):
    with pytest.raises(EventDecodeError):
        decode_json(data)


def test_truncations_of_valid_documents_raise():
    value = {"a": [1, 2**40, "str", 1.5, None, {"b": dec_opaque("1.25")}], "c": "x" * 300}
    for large in (False, True):
        data = doc(value, large)
        for cut in range(1, len(data)):
            try:
                decode_json(data[:cut])
            except EventDecodeError:
                pass
            else:  # only acceptable if the cut left a shorter but complete top value
                pytest.fail(f"truncation at {cut} of {len(data)} decoded")


def test_bad_offsets_and_sizes():
    expect_error(b"\x02" + struct.pack("<HH", 1, 200) + b"\x0c\x07\x00")  # size > data
    expect_error(b"\x02" + struct.pack("<HH", 1, 7) + b"\x0c\x07\x00")  # offset == size
    expect_error(b"\x02" + struct.pack("<HH", 1, 7) + b"\x0c\xff\x7f")  # offset >> size
    expect_error(b"\x03" + struct.pack("<II", 1, 13) + b"\x0c\xff\xff\xff\xff" + b"\x00" * 4)
    # object key outside the container
    expect_error(b"\x00" + struct.pack("<HHHH", 1, 12, 40, 1) + b"\x04\x00\x00" + b"k")
    # string length runs past its container
    expect_error(b"\x02" + struct.pack("<HH", 1, 9) + b"\x0c\x07\x00" + b"\x05a")
    expect_error(b"\x0c\x05ab")
    expect_error(b"\x0c\x80\x80\x80\x80\x80\x01")  # varlen longer than 5 bytes
    expect_error(b"\x0c\xff\xff\xff\xff\x7f")  # varlen above 32 bits


def test_huge_counts():
    expect_error(b"\x02" + struct.pack("<HH", 0xFFFF, 8) + b"\0" * 8)
    expect_error(b"\x03" + struct.pack("<II", 0xFFFFFFFF, 20) + b"\0" * 20)
    expect_error(b"\x01" + struct.pack("<II", 0x10000000, 30) + b"\0" * 30)


def test_bad_types_literals_utf8_and_opaque():
    expect_error(b"\x0d\x00")  # unknown type
    expect_error(b"\xff")
    expect_error(b"\x04\x03")  # bad literal
    expect_error(b"\x04")  # truncated literal
    expect_error(b"\x09\x01\x02")  # truncated int64
    expect_error(b"\x0c\x02\xc3\x28")  # invalid UTF-8 string
    expect_error(b"\x00" + struct.pack("<HHHH", 1, 12, 11, 1) + b"\x04\x00\x00" + b"\xff")  # bad key
    expect_error(b"\x0f\x0a\x04\x00\x00\x00\x00")  # DATE of 4 bytes
    expect_error(b"\x0f\xf6\x01\x05")  # DECIMAL without scale
    expect_error(b"\x0f\xf6\x03\x05\x02\x80")  # DECIMAL(5,2) needs 3 bytes, has 1
    expect_error(b"\x0f")


def nested_arrays(depth: int) -> bytes:
    """``depth`` small arrays, each the only element of the one around it."""
    payload = struct.pack("<HH", 0, 4)
    for _ in range(depth - 1):
        payload = struct.pack("<HHBH", 1, 7 + len(payload), 0x02, 7) + payload
    return b"\x02" + payload


def test_depth_limit():
    deepest = decode_json(nested_arrays(MAX_DEPTH))
    for _ in range(MAX_DEPTH - 1):
        deepest = deepest[0]
    assert deepest == []
    assert decode_json(nested_arrays(3)) == [[[]]]
    expect_error(nested_arrays(MAX_DEPTH + 1))
    expect_error(nested_arrays(5000))


def test_aliased_offsets_do_not_blow_up():
    # Every level holds two entries that point at the same child: 2**24 paths,
    # which a decoder without a work budget would walk one by one (tens of seconds).
    body = b"\x02" + struct.pack("<HH", 0, 4)
    for _ in range(24):
        inner = body[1:]
        header = 4 + 2 * 3
        size = header + len(inner)
        body = b"\x02" + struct.pack("<HH", 2, size) + (b"\x02" + struct.pack("<H", header)) * 2 + inner
    start = time.monotonic()
    expect_error(body)
    assert time.monotonic() - start < 2


# --------------------------------------------------------------------------- hypothesis

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=8), children, max_size=6)
    | st.builds(Large, st.lists(children, max_size=4)),
    max_leaves=40,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.booleans())
def test_round_trip_property(value, large):
    assert_json_equal(decode_json(doc(value, large)), unwrap(value))


def decodes_or_protocol_error(fn, data):
    try:
        fn(data)
    except ProtocolError:
        pass


@settings(max_examples=1000)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_errors(data):
    decodes_or_protocol_error(decode_json, data)
    decodes_or_protocol_error(decode_json_diff, data)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.booleans(), st.data())
def test_mutated_documents_only_raise_protocol_errors(value, large, data):
    raw = bytearray(doc(value, large))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if not raw:
            break
        i = data.draw(st.integers(0, len(raw) - 1))
        if kind == "flip":
            raw[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del raw[i:]
        elif kind == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del raw[i]
    decodes_or_protocol_error(decode_json, bytes(raw))


# --------------------------------------------------------------------------- JSON diffs


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 2**16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 2**24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def diff(op: int, path: str, value=None, raw_value: bytes | None = None) -> bytes:
    out = bytes([op]) + lenenc(len(path.encode())) + path.encode()
    if op != 2:
        v = doc(value) if raw_value is None else raw_value
        out += lenenc(len(v)) + v
    return out


def test_json_diffs():
    big = "q" * 70000
    data = (
        diff(0, "$.a", 5)
        + diff(1, "$.b[0]", {"x": [1, "y"]})
        + diff(2, "$.c")
        + diff(0, "$.d", None)
        + diff(1, "$.e", raw_value=b"")  # empty value is JSON null
        + diff(0, "$.big", big)
    )
    assert list(decode_json_diff(data)) == [
        JsonDiff("REPLACE", "$.a", 5),
        JsonDiff("INSERT", "$.b[0]", {"x": [1, "y"]}),
        JsonDiff("REMOVE", "$.c", None),
        JsonDiff("REPLACE", "$.d", None),
        JsonDiff("INSERT", "$.e", None),
        JsonDiff("REPLACE", "$.big", big),
    ]
    assert decode_json_diff(b"") == JsonDiffs() and type(decode_json_diff(b"")) is JsonDiffs
    assert decode_json_diff(memoryview(diff(2, "$.é"))) == (JsonDiff("REMOVE", "$.é", None),)
    with pytest.raises(AttributeError):
        JsonDiff("REMOVE", "$", None).op = "x"  # frozen


def test_json_diff_errors():
    good = diff(0, "$.a", [1, 2])
    for cut in range(1, len(good)):
        with pytest.raises(EventDecodeError):
            decode_json_diff(good[:cut])
    for bad in (
        b"\x03\x01$",  # unknown operation
        b"\x02\xfb",  # NULL length
        b"\x02\xfc\x01",  # truncated 2-byte length
        b"\x02\x05$.a",  # path longer than the data
        b"\x02\x02\xff\xfe",  # path not UTF-8
        b"\x00\x01$\x02\x04\x07",  # bad literal in value
        b"\x00\x01$\xfe" + b"\xff" * 8,  # absurd value length
    ):
        with pytest.raises(EventDecodeError):
            decode_json_diff(bad)


# --------------------------------------------------------------------------- real binlogs


def events(path: Path):
    """(type, body without header and CRC32) of every event, by a minimal walk."""
    data = path.read_bytes()
    assert data[:4] == b"\xfebin"
    pos = 4
    while pos + 19 <= len(data):
        _ts, type_code, _sid, length, _next, _flags = struct.unpack_from("<IBIIIH", data, pos)
        assert length >= 23
        yield type_code, data[pos + 19 : pos + length - 4]
        pos += length
    assert pos == len(data)


def rows_header(body: bytes) -> tuple[int, int]:
    """(column count, offset of the first row) of a v2 rows event with < 251 columns."""
    extra = struct.unpack_from("<H", body, 8)[0]
    pos = 8 + extra
    ncols = body[pos]
    assert ncols < 251
    return ncols, pos + 1


def test_mysql_9_opaque_values():
    """json-opaque.binlog: eight WRITE_ROWS of a single JSON column (MySQL 9.0.1)."""
    expected = [
        {"a": "base64:type15:VQ=="},
        {"b": "2012-03-18"},
        {"c": "2012-03-18 11:30:45.000000"},
        {"c": "87:31:46.654321"},
        {"d": Decimal("123.456")},
        {"e": Decimal("9.00")},
        {"e": [0, 1, True, False]},
        {"e": None},
    ]
    got = []
    for type_code, body in events(BINLOGS / "json-opaque.binlog"):
        if type_code != 30:
            continue
        ncols, pos = rows_header(body)
        assert ncols == 1
        pos += 1  # columns-present bitmap
        assert body[pos] == 0  # null bitmap: not NULL
        length = struct.unpack_from("<I", body, pos + 1)[0]
        start = pos + 5
        assert start + length == len(body)
        got.append(decode_json(body[start : start + length]))
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        assert_json_equal(g, w)


def read_row(body: bytes, pos: int, partial: bool, present: int) -> tuple[dict, int]:
    """One row image of t(id INT, json_col JSON, name VARCHAR(100), age INT), by hand."""
    cols = [i for i in range(4) if present >> i & 1]
    nulls = body[pos]
    pos += 1
    row: dict = {}
    for n, col in enumerate(cols):
        if nulls >> n & 1:
            row[col] = None
        elif col in (0, 3):
            row[col] = struct.unpack_from("<i", body, pos)[0]
            pos += 4
        elif col == 1:
            length = struct.unpack_from("<I", body, pos)[0]
            raw = body[pos + 4 : pos + 4 + length]
            row[col] = decode_json_diff(raw) if partial else decode_json(raw)
            pos += 4 + length
        else:
            length = struct.unpack_from("<H", body, pos)[0]
            row[col] = body[pos + 2 : pos + 2 + length].decode()
            pos += 2 + length
    return row, pos


def test_mysql_8_rows_checked_against_generated_columns():
    """json.binlog.000001: name/age are generated from json_col in the same row."""
    full_images = diffs = 0
    for type_code, body in events(BINLOGS / "json.binlog.000001"):
        if type_code not in (30, 31, 39):
            continue
        ncols, pos = rows_header(body)
        assert ncols == 4
        before = body[pos]
        after = body[pos + 1] if type_code != 30 else before
        pos += 1 if type_code == 30 else 2
        while pos < len(body):
            if type_code == 30:
                row, pos = read_row(body, pos, False, before)
                images = [row]
            else:
                old, pos = read_row(body, pos, False, before)
                partial = False
                if type_code == 39:
                    options = body[pos]
                    pos += 1
                    if options & 1:
                        partial = body[pos] & 1 == 1
                        pos += 1
                new, pos = read_row(body, pos, partial, after)
                images = [old, new]
                if partial:
                    assert new[1] == (JsonDiff("REPLACE", "$.age", new[3]),)
                    diffs += 1
                    images = [old]
            for row in images:
                if 1 in row:
                    doc_value = row[1]
                    assert doc_value == {"age": row[3], "data": doc_value["data"], "name": row[2]}
                    assert len(doc_value["data"]) == 10 and len(set(doc_value["data"])) == 1
                    full_images += 1
        assert pos == len(body)
    assert full_images == 18 and diffs == 6
