"""The raw path's shortcuts against the full decoder, on every binlog of the corpus.

``Decoder(rows=False)`` must give the full decoder's header (and the rows' flags) for every event and
raise the same framing errors; ``Decoder.skim_run`` (C and Python loops alike) must take only events
that such a decoder accepts, stop before anything else, and leave the decoder as decoding them would.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol import events as E
from binlogd.protocol import skim
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, ChecksumError, EventDecodeError, ProtocolError
from binlogd.protocol.reader import event_bounds
from binlogd.protocol.rows import ROWS_TYPES
from tests.support.paths import CORPUS

SKIMMED = ROWS_TYPES | {ET.TABLE_MAP, ET.ANNOTATE_ROWS, ET.ROWS_QUERY}
LOOPS = [False] + ([True] if skim.C is not None else [])


def corpus_files():
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\xfebin")


def split(data: bytes, decoder: Decoder) -> list[tuple[int, memoryview]]:
    """(offset, bytes) of each whole event, up to the first the full decoder rejects."""
    view, pos, out = memoryview(data), 4, []
    while pos < len(view):
        try:
            length = event_bounds(view, pos, decoder.header_len)
            if length is None:
                break
            decoder.decode(view[pos:pos + length], pos)
        except BinlogError:
            break
        out.append((pos, view[pos:pos + length]))
        pos += length
    return out


def same_but_rows(got: E.Event, want: E.Event) -> None:
    """``got`` (row-less decoder) is ``want`` (full decoder) with the rows and their context left undecoded."""
    assert got.header == want.header
    if isinstance(want, E.RowsEvent):
        assert type(got) is E.UndecodedRowsEvent and got.flags == want.flags
    elif want.header.type_code in SKIMMED:
        assert type(got) is E.Event
    elif isinstance(want, E.TransactionPayloadEvent):
        assert len(got.events) == len(want.events)
        for inner_got, inner_want in zip(got.events, want.events):
            same_but_rows(inner_got, inner_want)
    else:
        assert got == want


def errors_of(fn):
    try:
        fn()
    except (ChecksumError, EventDecodeError, ProtocolError) as exc:
        return type(exc), exc.args
    return None


@pytest.mark.usefixtures("corpus")
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_rowless_decoder_and_skim_runs_agree_with_the_full_decoder(path, monkeypatch):
    data = path.read_bytes()
    events = split(data, Decoder())
    raws = [raw for _, raw in events]
    full, rowless, walker = Decoder(), Decoder(rows=False), Decoder(rows=False)
    taken = 0
    index = 0
    while index < len(events):
        pos, raw = events[index]
        runs = []
        for use_c in LOOPS:
            monkeypatch.setattr(skim, "_USE_C", use_c)
            runs.append(walker.skim_run(raws, index, len(raws), pos))
        assert all(run == runs[0] for run in runs), f"C and Python skim differ at {pos}"
        run = runs[0]
        for i in range(index, run.stop):  # each event taken: one the row-less decoder passes undecoded
            p, r = events[i]
            got, want = rowless.decode(r, p), full.decode(r, p)
            assert type(got) is (E.UndecodedRowsEvent if want.header.type_code in ROWS_TYPES else E.Event)
            assert got.header == want.header
        if run.stop > index:
            end_pos, end_raw = events[run.stop - 1]
            assert run.next_position == struct.unpack_from("<I", end_raw, 13)[0]
            assert run.nbytes == sum(len(r) for r in raws[index:run.stop])
            assert sum(run.counts.values()) == run.stop - index
            taken += run.stop - index
            index = run.stop
            continue
        walker.decode(raw, pos)
        same_but_rows(rowless.decode(raw, pos), full.decode(raw, pos))
        index += 1
    plain = [p for p, r in events if r[4] in ROWS_TYPES and struct.unpack_from("<I", r, 13)[0] == p + len(r)
             and struct.unpack_from("<I", r, 0)[0] and not r[17] & 0x20]
    if plain and rowless.header_len == 19 and not rowless._type_permutation and rowless.encrypted_at is None:
        assert taken, f"rows events in place (at {plain[:3]}…) and none skimmed"


def event(type_code: int, body: bytes, pos: int, ts: int = 1_700_000_000, flags: int = 0) -> bytes:
    length = 19 + len(body) + 4
    raw = struct.pack("<IBIIIH", ts, type_code, 1, length, pos + length, flags) + body
    return raw + struct.pack("<I", zlib.crc32(raw))


def rows_stream(n: int, start: int = 1000) -> list[bytes]:
    out, pos = [], start
    for _ in range(n):
        raw = event(ET.WRITE_ROWS, b"\x01\x00\x00\x00\x00\x00\x00\x00" + b"\x02\x00" + b"\x09" * 30, pos)
        out.append(raw)
        pos += len(raw)
    return out


def fde_decoder() -> Decoder:
    """A row-less decoder after the FDE of the first corpus file with CRC32 on."""
    for path in corpus_files():
        data = path.read_bytes()
        decoder = Decoder(rows=False)
        length = event_bounds(memoryview(data), 4, 19)
        decoder.decode(data[4:4 + length], 4)
        if decoder.checksum_alg == 1 and decoder.verify_checksums and not decoder._type_permutation:
            return decoder
    pytest.skip("no corpus file with CRC32")


def damaged(kind: str, raw: bytes) -> bytes:
    b = bytearray(raw)
    if kind == "crc":
        b[30] ^= 1
    elif kind == "length":
        b[9] += 1
    elif kind == "gap":
        struct.pack_into("<I", b, 13, struct.unpack_from("<I", b, 13)[0] + 1)
        b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
    elif kind == "artificial":
        b[17] |= 0x20
        b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
    elif kind == "no timestamp":
        b[0:4] = b"\0\0\0\0"
        b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
    elif kind == "other type":
        b[4] = ET.XID
        b[-4:] = struct.pack("<I", zlib.crc32(bytes(b[:-4])))
    elif kind == "short body":
        return event(ET.WRITE_ROWS, b"\x01\x00\x00", struct.unpack_from("<I", raw, 13)[0] - len(raw))
    elif kind == "short":
        return raw[:15]
    return bytes(b)


@pytest.mark.usefixtures("corpus")
@pytest.mark.parametrize("kind", ["crc", "length", "gap", "artificial", "no timestamp", "other type",
                                  "short body", "short"])
@pytest.mark.parametrize("use_c", LOOPS)
def test_skim_stops_before_a_damaged_or_different_event(kind, use_c, monkeypatch):
    monkeypatch.setattr(skim, "_USE_C", use_c)
    decoder = fde_decoder()
    raws = rows_stream(6)
    raws[3] = damaged(kind, raws[3])
    run = decoder.skim_run(raws, 0, len(raws), 1000)
    assert run.stop == 3 and run.counts == {ET.WRITE_ROWS: 3}
    assert run.next_position == struct.unpack_from("<I", raws[2], 13)[0]
    assert decoder.skim_run(raws, 0, len(raws), 999).stop == 0  # not where the stream is
    if kind in ("crc", "length", "short"):  # and decoding it raises what the full decoder raises
        error = errors_of(lambda: decoder.decode(raws[3], 1000))
        assert error is not None and error == errors_of(lambda: Decoder(checksum_alg=1).decode(raws[3], 1000))


def test_skim_takes_nothing_from_a_decoder_with_rows_or_before_an_fde():
    raws = rows_stream(3)
    assert Decoder().skim_run(raws, 0, 3, 1000).stop == 0
    assert Decoder(checksum_alg=1, rows=False).skim_run(raws, 0, 3, 1000).stop == 0


@pytest.mark.parametrize("use_c", LOOPS)
def test_skim_without_verification_takes_a_bad_crc(use_c, monkeypatch):
    monkeypatch.setattr(skim, "_USE_C", use_c)
    raws = rows_stream(2)
    raws[1] = damaged("crc", raws[1])
    table = bytes(256)[:ET.WRITE_ROWS] + b"\x09" + bytes(256)[ET.WRITE_ROWS + 1:]
    assert skim.skim_run(raws, 0, 2, table, 4, None, 1000).stop == 2
    assert skim.skim_run(raws, 0, 2, table, 4, zlib.crc32, 1000).stop == 1


@pytest.mark.usefixtures("corpus")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6 * 63 - 1), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, 5))
def test_skim_never_takes_an_event_the_decoder_rejects(flips, cut):
    """Random byte changes (and a cut) in a run of rows events: C and Python agree, and every event
    taken decodes without error and starts where the one before it ended."""
    decoder = fde_decoder()
    raws = [bytearray(r) for r in rows_stream(6)]
    for at, value in flips:
        raws[at // 63][at % 63] = value
    raws[cut] = raws[cut][:len(raws[cut]) - cut]
    raws = [bytes(r) for r in raws]
    runs, saved = [], skim._USE_C
    for use_c in LOOPS:
        skim._USE_C = use_c
        try:
            runs.append(decoder.skim_run(raws, 0, len(raws), 1000))
        finally:
            skim._USE_C = saved
    assert all(run == runs[0] for run in runs)
    pos = 1000
    for raw in raws[:runs[0].stop]:
        assert type(decoder.decode(raw, pos)) is E.UndecodedRowsEvent
        pos = struct.unpack_from("<I", raw, 13)[0] or pos + len(raw)  # 0: MariaDB 11.4+ inside a transaction
    assert pos == runs[0].next_position
