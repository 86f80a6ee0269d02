"""protocol.packet.BufferedPacketReader, received into as asyncio.BufferedProtocol does: payloads without copies.

Every stream is received through get_buffer() / buffer_updated() in many splittings, with buffers small
enough that the unparsed tail keeps moving to new buffers, and must give the payloads it was made of. A
payload is a view of the buffer it was received into (``payload.obj``): that is how buffer reuse is seen.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol.errors import ProtocolError, TruncatedError
from binlogd.protocol.packet import MAX_CHUNK, BufferedPacketReader


def header(length: int, seq: int) -> bytes:
    return struct.pack("<I", length)[:3] + bytes([seq])


def deliver(reader: BufferedPacketReader, data: bytes, sizes):
    """Deliver ``data`` through get_buffer/buffer_updated in pieces (sizes cycled), yielding after each."""
    pos, i = 0, 0
    while pos < len(data):
        region = reader.get_buffer(-1)
        n = min(sizes[i % len(sizes)], len(region), len(data) - pos)
        i += 1
        region[:n] = data[pos:pos + n]
        reader.buffer_updated(n)
        pos += n
        yield


def receive(reader: BufferedPacketReader, data: bytes, sizes) -> list:
    """Deliver ``data`` in pieces; drain the complete packets after each."""
    out = []
    for _ in deliver(reader, data, sizes):
        while (p := reader.next_payload()) is not None:
            out.append(p)
    return out


def stream(payloads: list[bytes]) -> bytes:
    return b"".join(header(len(p), i & 0xFF) + p for i, p in enumerate(payloads))


@pytest.mark.parametrize("buffer_size", [4, 64, 1000, 1 << 20])
@pytest.mark.parametrize("sizes", [[1], [7, 1, 4096, 3, 65537, 2], [1 << 20]])
def test_payloads_whatever_the_buffer_and_split(buffer_size, sizes):
    payloads = [b"", b"a", b"\x00" + bytes(range(256)) * 3, b"x" * 70_000, b"yz"] * 3
    data = stream(payloads)
    got = receive(BufferedPacketReader(buffer_size=buffer_size), data, sizes)
    assert [bytes(p) for p in got] == payloads


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=12), st.lists(st.integers(1, 5000), min_size=1, max_size=6),
       st.integers(4, 5000))
def test_any_split_any_buffer_size(payloads, sizes, buffer_size):
    data = stream(payloads)
    got = receive(BufferedPacketReader(buffer_size=buffer_size), data, sizes)
    assert [bytes(p) for p in got] == payloads


def test_payloads_are_read_only_views_that_stay_valid():
    r = BufferedPacketReader(buffer_size=64)
    payloads = [bytes([i]) * 50 for i in range(20)]
    got = receive(r, stream(payloads), [33])
    assert all(isinstance(p, memoryview) and p.readonly for p in got)
    assert [bytes(p) for p in got] == payloads  # still intact after many buffer moves


def buffer_of(reader: BufferedPacketReader, seq: int, size: int) -> bytearray:
    """Receive one 70,000-byte packet; the buffer its payload was received into (no view of it kept)."""
    (payload,) = receive(reader, header(70_000, seq) + bytes([seq]) * 70_000, [size])
    assert bytes(payload) == bytes([seq]) * 70_000
    return payload.obj


def test_spare_buffer_reused_only_when_no_view_is_alive():
    size = 1 << 17
    r = BufferedPacketReader(buffer_size=size)
    (a,) = receive(r, header(70_000, 0) + b"A" * 70_000, [size])
    first = a.obj
    second = buffer_of(r, 1, size)  # moves on; the first buffer is retired
    assert second is not first
    third = buffer_of(r, 2, size)  # a's view is alive: a new buffer
    assert third is not first and third is not second and bytes(a) == b"A" * 70_000
    del a
    assert buffer_of(r, 3, size) is first  # no view of the first buffer now: reused
    assert buffer_of(r, 4, size) is second  # then the oldest free one again


def test_feed_copies_and_matches():
    data = stream([b"abc", b"", b"q" * 300])
    r = BufferedPacketReader(buffer_size=8)
    out = []
    for i in range(0, len(data), 5):
        r.feed(data[i:i + 5])
        while (p := r.next_payload()) is not None:
            out.append(bytes(p))
    assert out == [b"abc", b"", b"q" * 300] and r.buffered == 0


def test_need_data_and_buffered():
    r = BufferedPacketReader()
    assert r.next_payload() is None
    r.feed(header(5, 0) + b"ab")
    assert r.next_payload() is None and r.buffered == 6
    r.feed(b"cde")
    assert bytes(r.next_payload()) == b"abcde" and r.buffered == 0


def test_get_buffer_has_room_for_the_whole_chunk():
    r = BufferedPacketReader(buffer_size=16)
    r.feed(header(100_000, 0))
    assert r.next_payload() is None
    assert len(r.get_buffer(-1)) >= 100_000


def test_eof_inside_a_packet_and_clean_eof():
    r = BufferedPacketReader()
    r.feed(header(3, 0) + b"abc" + b"\x10\x00")
    r.feed_eof()
    assert bytes(r.next_payload()) == b"abc"
    with pytest.raises(TruncatedError) as exc:
        r.next_payload()
    assert exc.value.offset == 7
    with pytest.raises(TruncatedError):  # broken for good
        r.next_payload()
    clean = BufferedPacketReader()
    clean.feed(header(1, 0) + b"a")
    clean.feed_eof()
    assert bytes(clean.next_payload()) == b"a" and clean.next_payload() is None
    with pytest.raises(ProtocolError):
        clean.feed(b"x")
    with pytest.raises(ProtocolError):
        clean.buffer_updated(1)


def test_continuation_chunks_are_joined_and_checked():
    big = b"\x01" * MAX_CHUNK
    data = header(MAX_CHUNK, 0) + big + header(3, 1) + b"end"
    r = BufferedPacketReader()
    got = receive(r, data, [1 << 22])
    assert len(got) == 1 and bytes(got[0]) == big + b"end"
    bad = BufferedPacketReader()
    bad.feed(header(MAX_CHUNK, 0) + big + header(3, 5) + b"end")
    with pytest.raises(ProtocolError, match="sequence id 5, expected 1"):
        bad.next_payload()


def test_limit():
    r = BufferedPacketReader(max_packet_size=10)
    r.feed(header(11, 0))
    with pytest.raises(ProtocolError, match="exceeds the limit of 10"):
        r.next_payload()
    with pytest.raises(ValueError):
        BufferedPacketReader(buffer_size=2)


def receive_ok_runs(reader: BufferedPacketReader, data: bytes, sizes, limit: int) -> list[tuple[str, bytes]]:
    """As the daemon's reader does: runs of event packets (next_ok_payloads), then next_payload for what
    stopped a run. Event packets come back as ("ok", payload without its 0x00), the rest as ("other", payload)."""
    out = []
    for _ in deliver(reader, data, sizes):
        while True:
            run = reader.next_ok_payloads(limit)
            assert all(isinstance(p, memoryview) and p.readonly for p in run)
            out += [("ok", bytes(p)) for p in run]
            if len(run) == limit:
                continue
            p = reader.next_payload()
            if p is None:
                break
            out.append(("ok", bytes(p[1:])) if p[:1] == b"\x00" else ("other", bytes(p)))
    return out


@pytest.mark.parametrize("loop", ["c", "python"])
@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=600).map(lambda b: b"\x00" + b), st.binary(max_size=40)), max_size=25),
       st.lists(st.integers(1, 3000), min_size=1, max_size=5), st.integers(4, 4000), st.integers(1, 6))
def test_ok_payload_runs_match_packet_by_packet(loop, payloads, sizes, buffer_size, limit):
    import binlogd.protocol.packet as P

    if loop == "c" and P._ok_payloads_c is None:
        pytest.skip("the C loop is off (not built, or BINLOGD_PURE_PYTHON=1)")
    saved = P._ok_payloads_c
    if loop == "python":
        P._ok_payloads_c = None
    try:
        got = receive_ok_runs(BufferedPacketReader(buffer_size=buffer_size), stream(payloads), sizes, limit)
    finally:
        P._ok_payloads_c = saved
    want = [("ok", p[1:]) if p[:1] == b"\x00" else ("other", p) for p in payloads]
    assert got == want


@pytest.mark.parametrize("loop", ["c", "python"])
def test_ok_payload_runs_stop_before_split_and_oversized_packets(loop, monkeypatch):
    import binlogd.protocol.packet as P

    if loop == "python":
        monkeypatch.setattr(P, "_ok_payloads_c", None)
    elif P._ok_payloads_c is None:
        pytest.skip("the C loop is off (not built, or BINLOGD_PURE_PYTHON=1)")
    big = b"\x00" + b"b" * (MAX_CHUNK + 9)
    data = stream([b"\x00a"]) + header(MAX_CHUNK, 1) + big[:MAX_CHUNK] + header(10, 2) + big[MAX_CHUNK:]
    r = BufferedPacketReader()
    r.feed(data + header(3, 3) + b"\x00cd")
    assert [bytes(p) for p in r.next_ok_payloads(10)] == [b"a"]
    assert r.next_ok_payloads(10) == [] and bytes(r.next_payload()) == big  # joined by next_payload
    assert [bytes(p) for p in r.next_ok_payloads(10)] == [b"cd"]
    small = BufferedPacketReader(max_packet_size=4)
    small.feed(stream([b"\x00abc", b"\x00abcd"]))
    assert [bytes(p) for p in small.next_ok_payloads(10)] == [b"abc"]
    with pytest.raises(ProtocolError, match="exceeds"):
        small.next_payload()


def test_spare_buffers_are_checked_and_reused_without_reallocating():
    """Whether a view of a retired buffer is alive is told without growing it: growing first would reallocate
    once per buffer (``bytearray(n)`` has no spare room), which may copy it to fresh pages."""
    import sys

    size = 1 << 17
    r = BufferedPacketReader(buffer_size=size)
    (a,) = receive(r, header(70_000, 0) + b"A" * 70_000, [size])
    first = a.obj
    allocated = sys.getsizeof(first)  # includes the allocation, not only the length
    for seq in (1, 2):  # each move checks the first buffer while a's view is alive: not reused
        assert buffer_of(r, seq, size) is not first
    assert bytes(a) == b"A" * 70_000 and len(first) == size and sys.getsizeof(first) == allocated
    del a
    assert buffer_of(r, 3, size) is first  # free now: reused
    assert len(first) == size and sys.getsizeof(first) == allocated


@pytest.mark.parametrize("size", [1 << 17, 1 << 22])
def test_spares_kept_are_bounded_in_bytes(size):
    """Retired buffers are kept up to 16 MiB (at least two): what the reader holds once no view is alive."""
    count = 12
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        r = BufferedPacketReader(buffer_size=size)
        held = []  # a view of every buffer: none can be reused, each move retires one
        for i in range(count):
            held += receive(r, header(size - 20_000, i) + bytes([i]) * (size - 20_000), [size])
        assert [bytes(p) for p in held] == [bytes([i]) * (size - 20_000) for i in range(count)]
        all_alive = tracemalloc.get_traced_memory()[0] - base
        del held
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    spares = max(2, (16 << 20) // size)
    assert all_alive >= count * size
    assert (min(spares, count - 1) + 1) * size <= kept < (min(spares, count - 1) + 1) * size + 100_000, kept
