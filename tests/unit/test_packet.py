"""Tests for protocol.packet: framing, continuation packets, limits and payload helpers.

As in h11's tests, every stream is read whole, one byte at a time and in
uneven pieces, with and without trailing garbage, and must give the same packets.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol.errors import ProtocolError, ServerError, TruncatedError
from binlogd.protocol.packet import (
    DEFAULT_MAX_PACKET_SIZE,
    MAX_CHUNK,
    Packet,
    PacketReader,
    encode_packet,
    is_eof,
    is_err,
    is_ok,
    parse_err,
)


def header(length: int, seq: int) -> bytes:
    return struct.pack("<I", length)[:3] + bytes([seq])


def read_in_pieces(data: bytes, sizes, reader: PacketReader | None = None) -> list[Packet]:
    """Feed ``data`` in pieces of the given sizes (cycled), draining packets after each feed."""
    reader = reader or PacketReader()
    out: list[Packet] = []
    pos = 0
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        i += 1
        reader.feed(data[pos : pos + n])
        pos += n
        while (p := reader.next_packet()) is not None:
            out.append(p)
    return out


def read_all_ways(data: bytes, *, bytewise: bool = True) -> list[Packet]:
    """Read ``data`` whole, in uneven pieces and (if small enough) byte by byte; assert all agree."""
    whole = read_in_pieces(data, [max(len(data), 1)])
    ways = [read_in_pieces(data, [7, 1, 4096, 3, 65537, 2])]
    if bytewise:
        ways.append(read_in_pieces(data, [1]))
    for other in ways:
        assert other == whole
    return whole


def test_single_packet():
    data = header(3, 0) + b"abc"
    assert read_all_ways(data) == [Packet(b"abc", 0, 0, 0)]


def test_empty_payload_packet():
    assert read_all_ways(header(0, 9)) == [Packet(b"", 9, 9, 0)]


def test_several_packets_with_offsets_and_seq():
    data = header(1, 1) + b"x" + header(0, 2) + header(2, 3) + b"yz"
    pkts = read_all_ways(data)
    assert [p.payload for p in pkts] == [b"x", b"", b"yz"]
    assert [p.seq for p in pkts] == [1, 2, 3]
    assert [p.offset for p in pkts] == [0, 5, 9]
    assert pkts[2].next_seq == 4


def test_next_seq_wraps():
    assert read_all_ways(header(1, 255) + b"a")[0].next_seq == 0


def test_need_data_returns_none_and_partial_is_buffered():
    r = PacketReader()
    assert r.next_packet() is None
    r.feed(header(5, 0) + b"ab")
    assert r.next_packet() is None
    assert r.buffered == 6
    r.feed(b"cde")
    assert r.next_packet() == Packet(b"abcde", 0, 0, 0)
    assert r.buffered == 0 and r.next_packet() is None


def test_trailing_garbage_does_not_change_earlier_packets():
    good = header(3, 0) + b"abc" + header(1, 1) + b"d"
    expected = read_all_ways(good)
    for garbage in (b"\x07", b"\xff\xff", b"\x10\x00\x00\x05partial", b"\x00\x00"):
        got = read_all_ways(good + garbage)
        assert got == expected
        r = PacketReader()
        r.feed(good + garbage)
        assert r.next_packet() is not None and r.next_packet() is not None
        assert r.next_packet() is None
        r.feed_eof()
        with pytest.raises(TruncatedError) as exc:
            r.next_packet()
        assert exc.value.offset == len(good)


def test_extra_packets_after_are_returned_in_order():
    first = header(3, 0) + b"abc"
    extra = header(2, 1) + b"zz"
    assert read_all_ways(first + extra) == read_all_ways(first) + [Packet(b"zz", 1, 1, 7)]


def test_clean_eof_returns_none():
    r = PacketReader()
    r.feed(header(1, 0) + b"a")
    r.feed_eof()
    assert r.next_packet() == Packet(b"a", 0, 0, 0)
    assert r.next_packet() is None
    with pytest.raises(ProtocolError):
        r.feed(b"more")


def test_eof_inside_header():
    r = PacketReader()
    r.feed(b"\x01\x00")
    r.feed_eof()
    with pytest.raises(TruncatedError):
        r.next_packet()


# ---------------------------------------------------------------- continuation


def big_stream(payload: bytes, seq: int = 0) -> bytes:
    return encode_packet(payload, seq)


def test_exact_max_chunk_payload_needs_empty_trailer():
    payload = bytes(range(256)) * (MAX_CHUNK // 256) + b"\x01" * (MAX_CHUNK % 256)
    assert len(payload) == MAX_CHUNK
    data = big_stream(payload, 3)
    assert len(data) == MAX_CHUNK + 8
    assert data[:4] == b"\xff\xff\xff\x03" and data[-4:] == b"\x00\x00\x00\x04"
    pkts = read_all_ways(data + header(1, 5) + b"n", bytewise=False)
    assert len(pkts) == 2
    assert pkts[0].payload == payload and (pkts[0].seq, pkts[0].last_seq) == (3, 4)
    assert pkts[0].next_seq == 5 and pkts[1] == Packet(b"n", 5, 5, MAX_CHUNK + 8)
    # without the trailer the packet is incomplete
    r = PacketReader()
    r.feed(data[:-4])
    assert r.next_packet() is None
    r.feed_eof()
    with pytest.raises(TruncatedError) as exc:
        r.next_packet()
    assert exc.value.offset == 0


def test_payload_spanning_three_chunks_with_seq_wrap():
    payload = b"\xab" * (2 * MAX_CHUNK + 10)
    data = big_stream(payload, 254)
    assert [data[3], data[MAX_CHUNK + 7], data[2 * MAX_CHUNK + 11]] == [254, 255, 0]
    pkts = read_all_ways(data, bytewise=False)
    assert len(pkts) == 1 and pkts[0].payload == payload
    assert (pkts[0].seq, pkts[0].last_seq, pkts[0].next_seq) == (254, 0, 1)


def test_continuation_bytewise_around_chunk_boundary():
    payload = b"q" * (MAX_CHUNK + 3)
    data = big_stream(payload, 0)
    r = PacketReader()
    split = MAX_CHUNK + 4  # end of the first chunk
    r.feed(data[: split - 2])
    assert r.next_packet() is None
    for i in range(split - 2, len(data)):
        assert r.next_packet() is None
        r.feed(data[i : i + 1])
    assert r.next_packet() == Packet(payload, 0, 1, 0)


def test_continuation_with_wrong_seq_is_rejected_and_error_sticks():
    data = header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(1, 5) + b"x"
    r = PacketReader()
    r.feed(data)
    with pytest.raises(ProtocolError) as first:
        r.next_packet()
    with pytest.raises(ProtocolError) as again:
        r.next_packet()
    assert again.value is first.value


# ---------------------------------------------------------------- limits


def test_default_limit_is_one_gib():
    assert DEFAULT_MAX_PACKET_SIZE == 1 << 30


def test_declared_size_over_limit_rejected_before_body_arrives():
    r = PacketReader(max_packet_size=10)
    r.feed(header(11, 0))
    with pytest.raises(ProtocolError):
        r.next_packet()
    ok = PacketReader(max_packet_size=10)
    ok.feed(header(10, 0) + b"0123456789")
    assert ok.next_packet().payload == b"0123456789"


def test_joined_size_over_limit_rejected():
    r = PacketReader(max_packet_size=MAX_CHUNK + 5)
    r.feed(header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(6, 1))
    with pytest.raises(ProtocolError) as exc:
        r.next_packet()
    assert not isinstance(exc.value, TruncatedError)
    r2 = PacketReader(max_packet_size=MAX_CHUNK + 5)
    r2.feed(header(MAX_CHUNK, 0) + b"\x00" * MAX_CHUNK + header(5, 1) + b"12345")
    assert len(r2.next_packet().payload) == MAX_CHUNK + 5


def test_memory_is_released_after_many_packets():
    one = header(100, 0) + b"p" * 100
    r = PacketReader()
    r.feed(one * 2000)
    n = 0
    while r.next_packet() is not None:
        n += 1
    assert n == 2000 and r.buffered == 0
    r.feed(one)  # the next feed moves on to a buffer of the usual size: the large one is let go
    assert r.next_packet().payload == b"p" * 100 and len(r._buf) <= 1 << 16


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
    assert [p.payload for p in got] == payloads
    assert [p.seq for p in got] == [(seq + i) & 0xFF for i in range(len(payloads))]
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


def test_is_ok_is_eof_is_err():
    assert is_ok(b"\x00\x00\x00\x02\x00\x00\x00")
    assert not is_ok(b"\x00\x00") and not is_ok(b"") and not is_ok(b"\xfe\x00\x00\x02\x00\x00\x00")
    assert is_eof(b"\xfe\x00\x00\x02\x00") and is_eof(b"\xfe")
    assert not is_eof(b"\xfe" + b"\x00" * 8) and not is_eof(b"") and not is_eof(b"\x00")
    assert is_err(b"\xff\x01\x00") and not is_err(b"") and not is_err(b"\x00")
