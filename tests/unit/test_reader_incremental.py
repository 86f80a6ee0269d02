"""EventReader (incremental) against iter_events (whole buffer) on every real binlog of the corpus.

As in h11's test helper, each file is fed whole, one byte at a time (the smaller files, to keep the
run short), and in seeded random chunk sizes (some of them empty); every way must give exactly the
events iter_events gives: same headers and the same ``event_to_dict`` (rows materialised, inner
events of TRANSACTION_PAYLOAD included, in order). With trailing garbage (a partial header or a
partial event) every complete event still comes out and ``close()`` raises TruncatedError naming the
offset where the garbage starts; input that is not a binlog raises ProtocolError at offset 0.

Files come from the corpus MANIFEST (those the manifest walks cleanly to EOF, so the NEGATIVE ones
are left out); ``corrupt-relay-bin.000624`` holds a genuinely corrupt QUERY at 91204 and has its own
test: the incremental reader must fail there exactly like iter_events.
"""

from __future__ import annotations

import functools
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.library.serialize import event_to_dict, flatten
from binlogd.protocol.constants import MAGIC
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, EventDecodeError, ProtocolError, TruncatedError
from binlogd.protocol.reader import EventReader, iter_events
from tests.support.paths import CORPUS

CORRUPT = "rust_mysql_common/corrupt-relay-bin.000624"
CORRUPT_OFFSET = 91204
BYTEWISE_MAX_SIZE = 8 * 1024  # files fed one byte at a time (and the largest for the slow variants)
SEEDS = (1, 2, 3)


def _manifest_files() -> tuple[list[str], list[str]]:
    """(positive files, NEGATIVE files) named in the corpus MANIFEST, relative to the corpus."""
    manifest = CORPUS / "MANIFEST.md"
    if not manifest.is_file():
        return [], []
    positive, negative = [], []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        m = re.match(r"- `([^`]+)` — ", line)
        if not m or not (CORPUS / m.group(1)).is_file():
            continue
        if "clean walk to EOF" in line and "NEGATIVE" not in line:
            positive.append(m.group(1))
        else:
            negative.append(m.group(1))
    return positive, negative


_POSITIVE, _NEGATIVE = _manifest_files()
FILES = [f for f in _POSITIVE if f != CORRUPT] or [pytest.param(None, id="no-corpus")]
SMALL_FILES = [f for f in _POSITIVE if f != CORRUPT and (CORPUS / f).stat().st_size <= BYTEWISE_MAX_SIZE]
SMALL_FILES = SMALL_FILES or [pytest.param(None, id="no-corpus")]


# ------------------------------------------------------------------------------------ helpers


@functools.lru_cache(maxsize=None)
def _bytes(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def materialise(events) -> list:
    """Everything a consumer can see of the events: headers and JSON forms, rows decoded."""
    return [(x.header, event_to_dict(x)) for e in events for x in flatten(e)]


@functools.lru_cache(maxsize=None)
def expected(name: str) -> tuple[list, list]:
    """(events, their materialised form) by iter_events over the whole file."""
    events = list(iter_events(_bytes(name)))
    return events, materialise(events)


def read_chunks(chunks, reader: EventReader | None = None, out: list | None = None,
                close: bool = True) -> tuple[EventReader, list]:
    """Feed every chunk, draining events after each; ``out`` keeps what came out even if it raises."""
    reader = reader or EventReader()
    out = [] if out is None else out
    for chunk in chunks:
        reader.feed(chunk)
        while (event := reader.next_event()) is not None:
            out.append(event)
    if close:
        reader.close()
    return reader, out


def whole(data: bytes):
    return [data]


def bytewise(data: bytes):
    return [data[i:i + 1] for i in range(len(data))]


def random_chunks(data: bytes, seed: int) -> list[bytes]:
    """Seeded uneven pieces: mostly tiny (splitting headers), some mid-sized, some large; a few empty."""
    rng = random.Random(seed)
    out, pos = [], 0
    while pos < len(data):
        r = rng.random()
        if r < 0.05:
            n = 0
        elif r < 0.45:
            n = rng.randint(1, 20)
        elif r < 0.75:
            n = rng.randint(21, 300)
        else:
            n = rng.randint(301, 70_000)
        out.append(data[pos:pos + n])
        pos += n
    return out


@functools.lru_cache(maxsize=None)
def _header_len(name: str) -> int:
    """The common-header length the file's events use (19 for v3/v4, 13 for v1)."""
    decoder = Decoder()
    for _ in iter_events(_bytes(name), decoder):
        pass
    return decoder.header_len


def _require(corpus, name):
    if name is None:
        pytest.skip("no corpus")
    return name


# ------------------------------------------------------------------------------------ same events


@pytest.mark.parametrize("name", FILES)
def test_whole_feed_matches_iter_events(corpus, name):
    _require(corpus, name)
    data = _bytes(name)
    events, want = expected(name)
    assert events, "iter_events found no events: nothing to compare"
    reader, got = read_chunks(whole(data))
    assert materialise(got) == want
    assert reader.offset == len(data) and reader.buffered == 0


@pytest.mark.parametrize("name", FILES)
def test_stream_without_magic_at_offset_matches(corpus, name):
    """A stream with no magic (expect_magic=False, offset=4) gives the same events and positions."""
    _require(corpus, name)
    data = _bytes(name)
    _, got = read_chunks(random_chunks(data[4:], 99), EventReader(expect_magic=False, offset=4))
    assert materialise(got) == expected(name)[1]


@pytest.mark.parametrize("name", SMALL_FILES)
def test_bytewise_feed_matches_iter_events(corpus, name):
    _require(corpus, name)
    data = _bytes(name)
    reader, got = read_chunks(bytewise(data))
    assert materialise(got) == expected(name)[1]
    assert reader.offset == len(data)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", FILES)
def test_random_chunks_match_iter_events(corpus, name, seed):
    _require(corpus, name)
    data = _bytes(name)
    chunks = random_chunks(data, seed)
    assert b"".join(chunks) == data
    _, got = read_chunks(chunks)
    assert materialise(got) == expected(name)[1]


@pytest.mark.parametrize("name", FILES)
def test_events_come_out_as_soon_as_complete(corpus, name):
    """An event is returned when its last byte arrives, not later (no lookahead), and not earlier."""
    _require(corpus, name)
    data = _bytes(name)
    events, _ = expected(name)
    ends = {e.header.pos + e.header.event_length for e in events}
    reader, seen = EventReader(), 0
    cuts = sorted(ends | {e.header.pos + e.header.event_length - 1 for e in events} | {4})
    prev = 0
    for cut in cuts:
        reader.feed(data[prev:cut])
        prev = cut
        got = []
        while (event := reader.next_event()) is not None:
            got.append(event)
        if cut in ends:
            assert [e.header.pos for e in got] == [events[seen].header.pos], f"at {cut}"
            seen += 1
        else:
            assert got == [], f"event returned before its last byte (cut at {cut})"
    reader.close()
    assert seen == len(events)


# ------------------------------------------------------------------------------------ trailing garbage


def _garbage(name: str, kind: str, rng: random.Random) -> bytes:
    """A partial header (1..header_len-1 bytes) or a partial event (a real event cut short)."""
    events, _ = expected(name)
    header_len = _header_len(name)
    data = _bytes(name)
    if kind == "partial-header":
        # A real header's first bytes, or random ones: fewer than a header either way.
        n = rng.randint(1, header_len - 1)
        src = events[rng.randrange(len(events))].header.pos
        return data[src:src + n] if rng.random() < 0.5 else rng.randbytes(n)
    # kind == "partial-event": a real event of at least header_len + 1 bytes, cut inside.
    longest = max(events, key=lambda e: e.header.event_length)
    start, length = longest.header.pos, longest.header.event_length
    cut = rng.randint(header_len, length - 1)
    return data[start:start + cut]


@pytest.mark.parametrize("kind", ["partial-header", "partial-event"])
@pytest.mark.parametrize("name", FILES)
def test_trailing_garbage_truncated_after_all_events(corpus, name, kind):
    _require(corpus, name)
    data = _bytes(name)
    rng = random.Random(f"{name}/{kind}")
    _, want = expected(name)
    garbage = _garbage(name, kind, rng)
    assert garbage
    feeds = {"bytewise-tail": random_chunks(data, 8) + bytewise(garbage)}
    if len(data) <= 64 * 1024:  # the biggest files are already fed whole and in chunks above
        feeds["whole"] = whole(data + garbage)
        feeds["chunks"] = random_chunks(data + garbage, 7)
    if len(data) <= BYTEWISE_MAX_SIZE:
        feeds["bytewise"] = bytewise(data + garbage)
    for how, chunks in feeds.items():
        out: list = []
        reader, _ = read_chunks(chunks, out=out, close=False)
        assert materialise(out) == want, how
        assert reader.offset == len(data), how
        assert reader.buffered == len(garbage), how
        with pytest.raises(TruncatedError) as info:
            reader.close()
        assert info.value.offset == len(data), how
    # iter_events over the same bytes agrees on the kind of error and its offset.
    got: list = []
    with pytest.raises(TruncatedError) as info:
        for event in iter_events(data + garbage):
            got.append(event)
    assert info.value.offset == len(data)
    assert materialise(got) == want


@pytest.mark.parametrize("name", SMALL_FILES)
def test_truncation_points_incremental(corpus, name):
    """Cut the file inside each event's header and body, and at its end: the complete events come
    out, and close() names the start of the cut event (0 inside the magic), or succeeds at a boundary."""
    _require(corpus, name)
    data = _bytes(name)
    events, want = expected(name)
    header_len = _header_len(name)
    cuts = {1, 2, 3, 4}
    rng = random.Random(name)
    for e in events:
        start, end = e.header.pos, e.header.pos + e.header.event_length
        cuts |= {start + 1, start + header_len - 1, start + header_len, end - 1, end,
                 rng.randint(start + 1, end - 1)}
    ends = {4} | {e.header.pos + e.header.event_length for e in events}
    for cut in sorted(c for c in cuts if 0 < c <= len(data)):
        n_complete = sum(1 for e in events if e.header.pos + e.header.event_length <= cut)
        chunks = whole(data[:cut]) if cut % 2 else random_chunks(data[:cut], cut)
        reader, got = read_chunks(chunks, close=False)
        assert len(got) == n_complete, f"cut at {cut}"
        if cut in ends:
            reader.close()
            continue
        with pytest.raises(TruncatedError) as info:
            reader.close()
        want_offset = 0 if cut < 4 else max(e.header.pos for e in events if e.header.pos < cut)
        assert info.value.offset == want_offset, f"cut at {cut}"
    assert materialise(got) == want


def test_impossible_event_length_names_its_offset(corpus):
    """A header whose length is shorter than a header is a ProtocolError at that event, not at 0."""
    name = "rust_mysql_common/bug32407.001"
    data = _bytes(name)
    bad = bytes(9) + (5).to_bytes(4, "little") + bytes(6)  # a 19-byte header declaring 5 bytes
    for chunks in (whole(data + bad), [data] + bytewise(bad)):
        out: list = []
        with pytest.raises(ProtocolError) as info:
            read_chunks(chunks, out=out)
        assert not isinstance(info.value, TruncatedError)
        assert info.value.offset == len(data)
        assert materialise(out) == expected(name)[1]


# ------------------------------------------------------------------------------------ not a binlog


NOT_MAGIC = [b"\x00", b"\xfe", b"\xfebi\x00", b"\xfeBIN", b"bin\xfe", b"\x1f\x8b\x08\x08rest", b"\xef\xbf\xbdbin",
             b"\xfe" + b"bin"[::-1] + MAGIC + bytes(40)]


@pytest.mark.parametrize("junk", NOT_MAGIC, ids=lambda b: b[:8].hex())
def test_not_magic_is_protocol_error_at_zero(junk):
    if MAGIC.startswith(junk):  # a strict prefix of the magic is merely truncated
        with pytest.raises(TruncatedError) as info:
            read_chunks(whole(junk))
        assert info.value.offset == 0
        return
    for chunks in (whole(junk), bytewise(junk), random_chunks(junk, 5)):
        out: list = []
        with pytest.raises(ProtocolError) as info:
            read_chunks(chunks, out=out)
        assert not isinstance(info.value, TruncatedError)
        assert info.value.offset == 0
        assert out == []


@pytest.mark.parametrize("n", [1, 2, 3])
def test_partial_magic_then_close_is_truncated_at_zero(n):
    reader, got = read_chunks(bytewise(MAGIC[:n]), close=False)
    assert got == []
    with pytest.raises(TruncatedError) as info:
        reader.close()
    assert info.value.offset == 0


def test_negative_corpus_files_with_bad_magic(corpus):
    """The gzip file and the UTF-8-mangled file of the corpus are not binlogs: ProtocolError at 0."""
    names = [n for n in _NEGATIVE if not _bytes(n).startswith(MAGIC)]
    assert names, "the corpus has no bad-magic files"
    for name in names:
        data = _bytes(name)
        for chunks in (whole(data), random_chunks(data[:64], 3)):
            with pytest.raises(ProtocolError) as info:
                read_chunks(chunks)
            assert not isinstance(info.value, TruncatedError), name
            assert info.value.offset == 0, name


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(min_size=1, max_size=64).filter(lambda b: not b.startswith(MAGIC[:min(len(b), 4)])),
       seed=st.integers(0, 1000))
def test_any_non_magic_input_is_protocol_error_at_zero(junk, seed):
    with pytest.raises(ProtocolError) as info:
        read_chunks(random_chunks(junk, seed))
    assert not isinstance(info.value, TruncatedError)
    assert info.value.offset == 0


# ------------------------------------------------------------------------------------ the corrupt file


def test_corrupt_relay_log_fails_at_the_same_event(corpus):
    data = _bytes(CORRUPT)
    want_events: list = []
    with pytest.raises(EventDecodeError) as whole_info:
        for event in iter_events(data):
            want_events.append(event)
    ref = whole_info.value
    assert ref.offset == CORRUPT_OFFSET
    want = materialise(want_events)
    for how, chunks in {"whole": whole(data), "chunks-1": random_chunks(data, 1),
                        "chunks-2": random_chunks(data, 2), "bytewise": bytewise(data)}.items():
        out: list = []
        with pytest.raises(BinlogError) as info:
            read_chunks(chunks, out=out)
        err = info.value
        assert type(err) is type(ref), how
        assert err.offset == CORRUPT_OFFSET, how
        assert err.type_code == ref.type_code, how
        assert str(err) == str(ref), how
        assert materialise(out) == want, how
