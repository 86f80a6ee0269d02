"""Tests for protocol.packet: framing, continuation packets, limits and payload helpers.

As in h11's tests, every stream is read whole, one byte at a time and in
uneven pieces, with and without trailing garbage, and must give the same payloads.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol.errors import ProtocolError, ServerError, TruncatedError
from binlogd.protocol.packet import (
    DEFAULT_MAX_PACKET_SIZE,
    MAX_CHUNK,
    BufferedPacketReader,
    encode_packet,
    is_eof,
    is_err,
    parse_err,
)


def header(length: int, seq: int) -> bytes:
    return struct.pack("<I", length)[:3] + bytes([seq])


def next_bytes(reader: BufferedPacketReader) -> bytes | None:
    """The next payload as bytes, or None."""
    payload = reader.next_payload()
    return None if payload is None else bytes(payload)


def read_in_pieces(data: bytes, sizes, reader: BufferedPacketReader | None = None) -> list[bytes]:
    """Feed ``data`` in pieces of the given sizes (cycled), draining payloads after each feed."""
    reader = reader or BufferedPacketReader(buffer_size=1 << 16)
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        i += 1
        reader.feed(data[pos : pos + n])
        pos += n
        while (p := next_bytes(reader)) is not None:
            out.append(p)
    return out


def read_all_ways(data: bytes, *, bytewise: bool = True) -> list[bytes]:
    """Read ``data`` whole, in uneven pieces and (if small enough) byte by byte; assert all agree."""
    whole = read_in_pieces(data, [max(len(data), 1)])
    ways = [read_in_pieces(data, [7, 1, 4096, 3, 65537, 2])]
    if bytewise:
        ways.append(read_in_pieces(data, [1]))
    for other in ways:
        assert other == whole
    return whole


def test_single_packet():
    assert read_all_ways(header(3, 0) + b"abc") == [b"abc"]


def test_empty_payload_packet():
    assert read_all_ways(header(0, 9)) == [b""]


def test_several_packets_any_sequence_ids():
    data = header(1, 1) + b"x" + header(0, 7) + header(2, 3) + b"yz"   # only continuation chunks are checked
    assert read_all_ways(data) == [b"x", b"", b"yz"]


def test_need_data_returns_none_and_partial_is_buffered():
    r = BufferedPacketReader()
    assert r.next_payload() is None
    r.feed(header(5, 0) + b"ab")
    assert r.next_payload() is None
    assert r.buffered == 6
    r.feed(b"cde")
    assert next_bytes(r) == b"abcde"
    assert r.buffered == 0 and r.next_payload() is None


def test_trailing_garbage_does_not_change_earlier_packets():
    good = header(3, 0) + b"abc" + header(1, 1) + b"d"
    expected = read_all_ways(good)
    for garbage in (b"\x07", b"\xff\xff", b"\x10\x00\x00\x05partial", b"\x00\x00"):
        got = read_all_ways(good + garbage)
        assert got == expected
        r = BufferedPacketReader()
        r.feed(good + garbage)
        assert next_bytes(r) == b"abc" and next_bytes(r) == b"d"
        assert r.next_payload() is None
        r.feed_eof()
        with pytest.raises(TruncatedError) as exc:
            r.next_payload()
        assert exc.value.offset == len(good)


def test_extra_packets_after_are_returned_in_order():
    first = header(3, 0) + b"abc"
    extra = header(2, 1) + b"zz"
    assert read_all_ways(first + extra) == read_all_ways(first) + [b"zz"]


def test_clean_eof_returns_none():
    r = BufferedPacketReader()
    r.feed(header(1, 0) + b"a")
    r.feed_eof()
    assert next_bytes(r) == b"a"
    assert r.next_payload() is None
    with pytest.raises(ProtocolError):
        r.feed(b"more")


def test_eof_inside_header():
    r = BufferedPacketReader()
    r.feed(b"\x01\x00")
    r.feed_eof()
    with pytest.raises(TruncatedError):
        r.next_payload()


# ---------------------------------------------------------------- continuation


def big_stream(payload: bytes, seq: int = 0) -> bytes:
    return encode_packet(payload, seq)


def test_exact_max_chunk_payload_needs_empty_trailer():
    payload = bytes(range(256)) * (MAX_CHUNK // 256) + b"\x01" * (MAX_CHUNK % 256)
    assert len(payload) == MAX_CHUNK
    data = big_stream(payload, 3)
    assert len(data) == MAX_CHUNK + 8
    assert data[:4] == b"\xff\xff\xff\x03" and data[-4:] == b"\x00\x00\x00\x04"
    assert read_all_ways(data + header(1, 5) + b"n", bytewise=False) == [payload, b"n"]
    # without the trailer the packet is incomplete
    r = BufferedPacketReader()
    r.feed(data[:-4])
    assert r.next_payload() is None
    r.feed_eof()
    with pytest.raises(TruncatedError) as exc:
        r.next_payload()
    assert exc.value.offset == 0


def test_payload_spanning_three_chunks_with_seq_wrap():
    payload = b"\xab" * (2 * MAX_CHUNK + 10)
    data = big_stream(payload, 254)
    assert [data[3], data[MAX_CHUNK + 7], data[2 * MAX_CHUNK + 11]] == [254, 255, 0]
    assert read_all_ways(data, bytewise=False) == [payload]


def test_continuation_bytewise_around_chunk_boundary():
    payload = b"q" * (MAX_CHUNK + 3)
    data = big_stream(payload, 0)
    r = BufferedPacketReader()
    split = MAX_CHUNK + 4  # end of the first chunk
    r.feed(data[: split - 2])
    assert r.next_payload() is None
    for i in range(split - 2, len(data)):
        assert r.next_payload() is None
        r.feed(data[i : i + 1])
    assert next_bytes(r) == payload


def test_continuation_with_wrong_seq_is_rejected_and_error_sticks():
    data = header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(1, 5) + b"x"
    r = BufferedPacketReader()
    r.feed(data)
    with pytest.raises(ProtocolError) as first:
        r.next_payload()
    with pytest.raises(ProtocolError) as again:
        r.next_payload()
    assert again.value is first.value
    assert first.value.offset == MAX_CHUNK + 4   # where the out-of-order chunk starts


# ---------------------------------------------------------------- limits


def test_default_limit_is_one_gib():
    assert DEFAULT_MAX_PACKET_SIZE == 1 << 30


def test_declared_size_over_limit_rejected_before_body_arrives():
    r = BufferedPacketReader(max_packet_size=10)
    r.feed(header(11, 0))
    with pytest.raises(ProtocolError):
        r.next_payload()
    ok = BufferedPacketReader(max_packet_size=10)
    ok.feed(header(10, 0) + b"0123456789")
    assert next_bytes(ok) == b"0123456789"


def test_joined_size_over_limit_rejected():
    r = BufferedPacketReader(max_packet_size=MAX_CHUNK + 5)
    r.feed(header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(6, 1))
    with pytest.raises(ProtocolError) as exc:
        r.next_payload()
    assert not isinstance(exc.value, TruncatedError)
    r2 = BufferedPacketReader(max_packet_size=MAX_CHUNK + 5)
    r2.feed(header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(5, 1) + b"12345")
    assert len(r2.next_payload()) == MAX_CHUNK + 5


def test_memory_is_released_after_many_packets():
    """A feed larger than the buffer size gets a buffer of its own, which is let go once it is read."""
    one = header(100, 0) + b"p" * 100
    tracemalloc.start()
    try:
        r = BufferedPacketReader(buffer_size=1 << 16)
        base = tracemalloc.get_traced_memory()[0]
        r.feed(one * 20_000)   # 2 MB in one piece
        n = 0
        while r.next_payload() is not None:
            n += 1
        assert n == 20_000 and r.buffered == 0
        held = tracemalloc.get_traced_memory()[0] - base
        r.feed(one)  # the next feed moves on to a buffer of the usual size: the large one is let go
        assert next_bytes(r) == b"p" * 100
        after = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held > 2_000_000 and after < 200_000, (held, after)


# ---------------------------------------------------------------- encode_packet


def test_encode_small_and_empty():
    assert encode_packet(b"abc", 7) == b"\x03\x00\x00\x07abc"
    assert encode_packet(b"", 0) == b"\x00\x00\x00\x00"
    assert encode_packet(memoryview(b"xy"), 255) == b"\x02\x00\x00\xffxy"


def test_encode_just_over_one_chunk():
    data = encode_packet(b"z" * (MAX_CHUNK + 1), 0)
    assert len(data) == MAX_CHUNK + 1 + 8
    assert data[MAX_CHUNK + 4 : MAX_CHUNK + 8] == b"\x01\x00\x00\x01"


@pytest.mark.parametrize("seq", [-1, 256])
def test_encode_rejects_bad_seq(seq):
    with pytest.raises(ValueError):
        encode_packet(b"", seq)


@settings(max_examples=100)
@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(0, 255),
       st.lists(st.integers(1, 50), min_size=1, max_size=5))
def test_property_encode_then_read_any_split(payloads, seq, sizes):
    data = b"".join(encode_packet(p, (seq + i) & 0xFF) for i, p in enumerate(payloads))
    got = read_in_pieces(data, sizes)
    assert got == payloads
    assert got == read_in_pieces(data, [max(len(data), 1)])


# ---------------------------------------------------------------- payload helpers


def test_parse_err_with_sqlstate():
    payload = b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"Could not find first log file name"
    err = parse_err(payload)
    assert isinstance(err, ServerError)
    assert (err.code, err.sqlstate, err.message) == (1236, "HY000", "Could not find first log file name")
    assert "1236" in str(err) and "HY000" in str(err)


def test_parse_err_without_sqlstate_and_bad_utf8():
    err = parse_err(b"\xff\x15\x04" + b"Access denied \xff")
    assert (err.code, err.sqlstate) == (1045, None)
    assert err.message == "Access denied \ufffd"
    assert parse_err(b"\xff\x01\x00").message == ""


def test_parse_err_rejects_non_err():
    with pytest.raises(ProtocolError):
        parse_err(b"\x00\x00\x00\x02\x00\x00\x00")
    with pytest.raises(ProtocolError):
        parse_err(b"\xff\x01")
    with pytest.raises(ProtocolError):
        parse_err(b"")


def test_is_eof_is_err():
    assert is_eof(b"\xfe\x00\x00\x02\x00") and is_eof(b"\xfe")
    assert not is_eof(b"\xfe" + b"\x00" * 8) and not is_eof(b"") and not is_eof(b"\x00")
    assert is_err(b"\xff\x01\x00") and not is_err(b"") and not is_err(b"\x00")
