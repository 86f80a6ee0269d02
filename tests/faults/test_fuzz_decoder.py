"""Fuzzing the decoder with mutated real events: only BinlogError may come out, never a hang or a memory blow-up.

Each case takes one event of a real corpus file (MySQL 5.7 CRC32, 8.0 TRANSACTION_PAYLOAD, MariaDB,
5.1 v1 rows, JSON and partial JSON, VECTOR, ENUM/SET, BIT, DECIMAL, tagged GTIDs, LOAD
DATA, relay logs…), brings a real :class:`Decoder` (``verify_checksums=False``, so mutations reach the
body decoders) to the state the file had before that event (its FORMAT_DESCRIPTION and table maps),
mutates the event's bytes and decodes it, then decodes the next few original events with the same
decoder (a mutated TABLE_MAP or FDE must not break them in any other way). Every event that comes
out is materialised: its rows, the events inside a TRANSACTION_PAYLOAD, its ``event_to_dict`` and
its JSON (``serialize.dumps``), as ``binlogd dump --json`` and the sinks would.

Mutations: random bytes set or XORed anywhere; bits flipped in the type code, in the length fields
and in the bitmaps (rows columns-present and NULL bitmaps; TABLE_MAP types, metadata and NULL
bitmap); integers and packed integers overwritten with huge values; the body cut short, extended with
junk, bytes inserted or deleted; the header's event_length fixed up (so the body decoders see the
mutation) or set to something else. TRANSACTION_PAYLOAD events also get their *inner* events
mutated and are rebuilt (uncompressed or re-compressed with zstd); QUERY and rows events are also
turned into MariaDB's zlib-compressed variants first.

Properties:
* only :class:`protocol.errors.BinlogError` subclasses escape, and their ``offset`` names the event;
* a case finishes within the hypothesis deadline (2 s) and a SIGALRM watchdog (5 s) catches a
  real hang, which the deadline alone would wait for forever;
* the Python heap peak (tracemalloc) stays under 64 MB per case;
* whole files cut at any byte fail with TruncatedError whose offset is the start of the cut event;
* a file with random bytes flipped reads the same through iter_events and the incremental
  EventReader (same events, same error at the same offset).

The cases, mutations and guards live in fuzz_cases.py and fuzz_mutations.py. Every test run draws
300 cases per property through hypothesis, which shrinks a failure and prints it as an
``@example(...)`` line: pin it above the test so it stays reproducible. The long run
(``test_soak``, ``@pytest.mark.slow``) draws ``BINLOGD_FUZZ_EXAMPLES`` cases per property (default
1,000,000) from seeded random generators on every core, through fuzz_soak.py::

    BINLOGD_FUZZ_EXAMPLES=1000000 .venv/bin/pytest tests/faults/test_fuzz_decoder.py --runslow -m slow -q -s
    .venv/bin/python -m tests.support.fuzz_soak --cases 1000000          # the same, with progress lines
"""

from __future__ import annotations

import os
import struct
import sys
import time
import zlib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.reader import iter_events
from tests.support import fuzz_soak
from tests.support.fuzz_cases import (
    ALL_FILES,
    DEADLINE_MS,
    FOLLOWING,
    SMALL_FILES,
    TARGETS,
    DecoderMemoryBlowUp,
    HypothesisSource,
    corpus_bytes,
    cut_case,
    damaged_case,
    event_at,
    event_case,
    event_layout,
    guarded,
    primed_decoder,
    run_cut_case,
    run_damaged_case,
    run_event_case,
    touch,
)
from tests.support.fuzz_mutations import MARIADB_COMPRESSED, build_payload, packed

FAST_EXAMPLES = 300
SLOW_EXAMPLES = int(os.environ.get("BINLOGD_FUZZ_EXAMPLES", "1000000"))


@st.composite
def event_cases(draw):
    return event_case(HypothesisSource(draw))


@st.composite
def cuts(draw, files):
    return cut_case(HypothesisSource(draw), files)


@st.composite
def damaged_files(draw, files):
    return damaged_case(HypothesisSource(draw), files)


@pytest.mark.slow
@pytest.mark.parametrize("prop", ["event", "cut", "damaged"])
def test_soak(corpus, prop):
    """The long run: BINLOGD_FUZZ_EXAMPLES cases of each property through the soak runner, on every core."""
    result = fuzz_soak.soak(prop, SLOW_EXAMPLES, seed=int(os.environ.get("BINLOGD_FUZZ_SEED", time.time())),
                  jobs=os.cpu_count() or 1)
    print(result.report())
    assert not result.failures, result.report()



# ==================================================================================== mutated events

# Minimal failing cases found by this fuzzer, pinned so they are re-run every time. Each has a
# dedicated regression test below (test_bug_*) that says what is wrong.
_CRC32_57 = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
PINNED_EVENT_CASES: list[tuple] = [
    # WRITE_ROWS_V2 with its columns-present bitmap zeroed: the row loop never advances (endless, allocating).
    (_CRC32_57, 5, (("int", 11, 2, 0),)),
    # TABLE_MAP whose 2nd column type becomes 143: the generated row decoder is not valid Python (SyntaxError).
    (_CRC32_57, 299, (("xor", 33, 128),)),
    # PREVIOUS_GTIDS with one trailing byte: ProtocolError whose offset is inside the body (8), not the event.
    (_CRC32_57, 1, (("extend", b"\0"),)),
]


def _pinned(cases, arg="case"):
    def deco(fn):
        for case in reversed(cases):
            fn = example(**{arg: case})(fn)
        return fn
    return deco


_COMMON = dict(deadline=DEADLINE_MS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                            HealthCheck.filter_too_much])


@settings(max_examples=FAST_EXAMPLES, **_COMMON)
@given(case=event_cases())
@_pinned(PINNED_EVENT_CASES)
def test_mutated_event_raises_only_binlog_errors(corpus, case):
    run_event_case(*case)



def test_every_target_decodes_unmutated(corpus):
    """The fuzzer's harness itself: every target event, unmutated, decodes and materialises cleanly."""
    assert len(TARGETS) > 100
    types = set()
    for name, index in TARGETS:
        assert run_event_case(name, index, ()) == ["ok"] * min(1 + FOLLOWING, len(event_layout(name)) - index)
        types.add(event_layout(name)[index][2])
    assert {ET.TRANSACTION_PAYLOAD, ET.TABLE_MAP, ET.WRITE_ROWS, ET.WRITE_ROWS_V1, ET.PARTIAL_UPDATE_ROWS,
            ET.MARIADB_GTID, ET.GTID_TAGGED, ET.FORMAT_DESCRIPTION, ET.EXECUTE_LOAD_QUERY} <= types


def test_mutations_reach_the_body_decoders(corpus):
    """The rebuild helpers produce events the decoder accepts (so mutations are not all rejected early)."""
    seen = set()
    for name, index in TARGETS:
        raw = event_at(name, index)[0]
        tc = raw[4]
        if tc in MARIADB_COMPRESSED:
            assert run_event_case(name, index, (("mariadb_compress",),))[0] == "ok", (name, index)
            seen.add("mariadb")
        if tc == ET.TRANSACTION_PAYLOAD:
            for recompress in (False, True):
                assert run_event_case(name, index, (("inner", 0, (), recompress),))[0] == "ok", (name, index)
            seen.add("payload")
    assert seen == {"mariadb", "payload"}


# ==================================================================================== what the fuzzer found


def test_bug_rows_image_with_no_columns_present_terminates(corpus):
    """A rows event whose columns-present bitmap is all zero has zero-byte row images: decoding must
    end (an error, or the rows up to the end of the event), not loop forever appending empty rows."""
    run_event_case(*PINNED_EVENT_CASES[0])


def test_bug_unknown_column_type_is_an_event_decode_error(corpus):
    """A TABLE_MAP column of an unknown type (143): its rows raise EventDecodeError, not the
    SyntaxError of a row decoder generated with unbalanced quotes."""
    run_event_case(*PINNED_EVENT_CASES[1])


def test_bug_previous_gtids_error_names_the_event(corpus):
    """A malformed PREVIOUS_GTIDS: the error's offset is the event's position, not a body offset."""
    run_event_case(*PINNED_EVENT_CASES[2])


def _crafted(tc: int, body: bytes, pos: int) -> bytes:
    """An event with a valid CRC32 footer (the decoder checks it here: these are not mutations)."""
    n = 19 + len(body) + 4
    raw = struct.pack("<IBIIIH", 0, tc, 1, n, pos + n, 0) + body
    return raw + struct.pack("<I", zlib.crc32(raw))


def _mysql8_decoder() -> Decoder:
    name = "rust_mysql_common/minimal_row_metadata.000001"
    decoder = Decoder()
    next(iter_events(corpus_bytes(name), decoder))
    return decoder


def _table_map_body(types: bytes, optional: bytes = b"", table_id: int = 7) -> bytes:
    n = len(types)
    return (table_id.to_bytes(6, "little") + b"\1\0" + b"\1a\0" + b"\1b\0" + packed(n) + types
            + b"\0" + bytes((n + 7) // 8) + optional)


def _write_rows_body(ncols: int, row: bytes, table_id: int = 7) -> bytes:
    nbytes = (ncols + 7) // 8
    return (table_id.to_bytes(6, "little") + b"\1\0" + b"\2\0" + packed(ncols) + b"\xff" * nbytes
            + bytes(nbytes) + row)


def test_bug_column_name_cannot_inject_code(corpus):
    """Column names come from the binlog (TABLE_MAP optional metadata): they must never be executed.

    A column of an unknown type makes the row-decoder generator embed the column's label in the
    generated source; a name that closes the string literal runs arbitrary Python when rows decode."""
    marker = "binlogd_fuzz_injected"
    sys.modules.pop(marker, None)
    name = f'+str(__import__("sys").modules.__setitem__("{marker}", 1))+'.encode()
    optional = bytes([4]) + packed(len(name) + 1) + packed(len(name)) + name  # COLUMN_NAME
    decoder = _mysql8_decoder()
    decoder.decode(_crafted(ET.TABLE_MAP, _table_map_body(bytes([143]), optional), 1000), 1000)
    rows = decoder.decode(_crafted(ET.WRITE_ROWS, _write_rows_body(1, b"\0xxxx"), 2000), 2000)
    try:
        with pytest.raises(BinlogError):
            touch(rows)
        assert marker not in sys.modules, "a column name from the binlog was executed as Python code"
    finally:
        sys.modules.pop(marker, None)


@pytest.mark.parametrize("ncols", [1017, 20000])
def test_bug_huge_column_count_is_bounded(corpus, ncols):
    """A TABLE_MAP of ``ncols`` TINYINT columns and one row (a 25 KB event for 20000 columns):
    decoding stays within the deadline and the memory limit, or is refused with a BinlogError
    (MySQL allows at most 4096 columns; InnoDB 1017)."""
    decoder = _mysql8_decoder()
    started = time.monotonic()
    with guarded():
        try:
            decoder.decode(_crafted(ET.TABLE_MAP, _table_map_body(bytes([1]) * ncols), 1000), 1000)
            touch(decoder.decode(_crafted(ET.WRITE_ROWS, _write_rows_body(ncols, bytes(ncols)), 2000), 2000))
        except BinlogError:
            pass
    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE_MS / 1000, f"{ncols} columns took {elapsed:.1f} s to decode one row"


# ==================================================================================== adversarial shapes


def _xid_event() -> bytes:
    body = (7).to_bytes(8, "little")
    return struct.pack("<IBIIIH", 0, ET.XID, 1, 19 + len(body), 0, 0) + body


def _payload_event(inner: bytes, compress: bool = False) -> bytes:
    body = build_payload(inner, compress)
    return struct.pack("<IBIIIH", 0, ET.TRANSACTION_PAYLOAD, 1, 19 + len(body), 0, 0) + body


@pytest.mark.parametrize("depth", [2, 50, 2000])
def test_nested_transaction_payloads(corpus, depth):
    """A TRANSACTION_PAYLOAD inside a TRANSACTION_PAYLOAD (never written by a server): a BinlogError or
    a decoded event, never a RecursionError, however deep the nesting."""
    name = "rust_mysql_common/transaction_compression.000001"
    index = next(i for i, (_, _, tc) in enumerate(event_layout(name)) if tc == ET.TRANSACTION_PAYLOAD)
    decoder = primed_decoder(name, index)
    event = _xid_event()
    for _ in range(depth):
        event = _payload_event(event)
    event += b"\0\0\0\0"  # CRC32 footer (not verified)
    event = event[:9] + len(event).to_bytes(4, "little") + event[13:]
    with guarded():
        try:
            touch(decoder.decode(event, 1234))
        except BinlogError as exc:
            assert exc.offset == 1234


# ==================================================================================== truncated files



@settings(max_examples=FAST_EXAMPLES, **_COMMON)
@given(case=cuts(ALL_FILES or ["none"]))
def test_truncated_file_names_the_cut_event(corpus, case):
    run_cut_case(*case)





PINNED_DAMAGED_CASES: list[tuple] = [
    # a column type byte of a TABLE_MAP flipped (3 -> 131): SyntaxError from the generated row decoder
    ("rust_mysql_common/update-full-row.binlog", ((208, 128),), 0),
    # a rows event's columns-present bitmap loses its only bit: endless row loop
    ("rust_mysql_common/update-full-row.binlog", ((499, 1),), 0),
    # a VECTOR float becomes NaN: both readers give it, but NaN != NaN (the harness compared with ==)
    ("rust_mysql_common/vector.binlog", ((3193, 192), (2858, 214), (3433, 198), (1426, 225)), 17007),
]


@settings(max_examples=FAST_EXAMPLES, **_COMMON)
@given(case=damaged_files(SMALL_FILES or ["none"]))
@_pinned(PINNED_DAMAGED_CASES)
def test_damaged_file_same_through_both_readers(corpus, case):
    run_damaged_case(*case)



# ==================================================================================== the soak runner


def test_soak_cases_are_reproducible_from_seed_and_index(corpus):
    for prop in fuzz_soak.PROPERTIES:
        assert [fuzz_soak.make_case(prop, 42, i) for i in range(20)] == \
            [fuzz_soak.make_case(prop, 42, i) for i in range(20)]
        assert fuzz_soak.make_case(prop, 42, 0) != fuzz_soak.make_case(prop, 43, 0) or prop == "cut"


def test_soak_reports_an_escaping_exception_with_its_case(corpus, monkeypatch):
    def broken(name, index, ops):
        if index % 2:
            raise ValueError("not a BinlogError")
        return ["ok"]

    monkeypatch.setattr(fuzz_soak, "run_event_case", broken)
    result = fuzz_soak.soak_range("event", 1, 0, 200)
    assert result.failures and len(result.failures) == fuzz_soak.MAX_FAILURES
    i, case, error = result.failures[0]
    assert case == fuzz_soak.make_case("event", 1, i) and case[1] % 2 == 1
    assert error == "ValueError: not a BinlogError"
    assert f"FAILED case #{i}" in result.report()


@pytest.mark.parametrize("already_tracing", [False, True])
def test_guard_stops_a_runaway_allocation(already_tracing):
    """The heap guard fires whether or not tracemalloc was already on (the soak keeps it on)."""
    import tracemalloc

    if already_tracing:
        tracemalloc.start()
    try:
        with pytest.raises((DecoderMemoryBlowUp, AssertionError)):
            with guarded():
                hog = [bytes(1 << 20) for _ in range(80)]
                time.sleep(0.2)
                del hog
        assert tracemalloc.is_tracing() == already_tracing
    finally:
        tracemalloc.stop()


# =========================================================================== 5. bad input (found by the fuzz run)


def test_fuzz_found_zstd_frame_size_is_bounded(corpus):
    """Found by the one-million-case run of ``test_damaged_file_same_through_both_readers_slow``
    (pinned here).

    Bit 7 of byte 273 of ``mysql-bin.compressed`` is bit 7 of the zstd Frame_Header_Descriptor inside
    the TRANSACTION_PAYLOAD at 236. Flipped, the frame declares a 4-byte content size read from the
    bytes that follow (0xa6000dbc, 2.6 GB). The payload's own uncompressed-size field still says 960.
    The decoder must fail with its own error, without allocating what a corrupt header claims.
    """
    from tests.support.fuzz_cases import run_damaged_case

    run_damaged_case("mysql-binlog-connector-java/mysql-bin.compressed", ((273, 128),), 0)



