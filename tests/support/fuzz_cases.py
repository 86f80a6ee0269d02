"""Fuzz cases for the decoder: corpus events, mutations, generators, guards and the case runners.

Shared by the hypothesis tests (tests/faults/test_fuzz_decoder.py) and the soak runner
(tests/support/fuzz_soak.py). A case is a plain tuple, so a failing one can be pasted into an
``@example`` or a ``PINNED_*`` list:

* event case ``(file, event index, ops)``: :func:`run_event_case` primes a real :class:`Decoder` with
  the file's state before that event (its FORMAT_DESCRIPTION and table maps), decodes the mutated
  event and the next few original ones, and materialises everything (rows, inner events, dict, JSON);
* cut case ``(file, cut)``: :func:`run_cut_case` reads the file's first ``cut`` bytes;
* damaged case ``(file, flips, seed)``: :func:`run_damaged_case` reads a file with bytes XORed through
  iter_events and the incremental EventReader and compares what both give.

Every runner executes inside :func:`guarded` (hang watchdog and heap limit) and raises AssertionError
(or DecoderHang / DecoderMemoryBlowUp) when a property fails.
"""

from __future__ import annotations

import functools
import random
import signal
import time
import tracemalloc
from contextlib import contextmanager

from hypothesis import strategies as st

from binlogd.library.serialize import dumps, event_to_dict, flatten
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, TruncatedError
from binlogd.protocol.events import FormatDescriptionEvent, TableMapEvent
from binlogd.protocol.reader import EventReader, iter_events
from tests.support.fuzz_mutations import MARIADB_COMPRESSED, aim_regions, mutate
from tests.support.paths import CORPUS

DEADLINE_MS = 2000
WATCHDOG_S = 5
MEMORY_LIMIT = 64 * 1024 * 1024
FOLLOWING = 3  # original events decoded after the mutated one

FUZZ_FILES = [
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32",       # 5.7 CRC32, rows v2
    "mysql-binlog-connector-java/mysql-bin.checksum-none",        # 5.7 no checksum
    "mysql-binlog-connector-java/mysql-bin.compressed",           # 8.0.28 TRANSACTION_PAYLOAD
    "mysql-binlog-connector-rust/mysql-bin.000057",               # 8.0.31 two TRANSACTION_PAYLOADs
    "rust_mysql_common/transaction_compression.000001",           # 8.0.32 TRANSACTION_PAYLOAD
    "rust_mysql_common/mariadb-bin.000001",                       # MariaDB 10.5 GTID, ANNOTATE_ROWS, FULL metadata
    "canal/mysql-bin.000001",                                     # 5.1 v1 rows
    "rust_mysql_common/update-partial-row.binlog",                # 5.1 partial row images
    "rust_mysql_common/write-partial-row.binlog",
    "rust_mysql_common/ver_5_1-wl2325_s.001",                     # 5.2.2 tree with renumbered types 16-22
    "rust_mysql_common/ver_5_1_23.001",                           # LOAD DATA blocks, USER_VAR, RAND
    "rust_mysql_common/ver_trunk_row_v2.001",                     # 5.6.4 rows v2
    "rust_mysql_common/json.binlog.000001",                       # JSON + PARTIAL_UPDATE_ROWS
    "rust_mysql_common/json-opaque.binlog",                       # JSON opaque scalars
    "rust_mysql_common/vector.binlog",                            # VECTOR
    "rust_mysql_common/mysql-enum-string-set.000001",             # ENUM/SET with value names
    "rust_mysql_common/mysql_type_bit.000001",                    # BIT
    "rust_mysql_common/time_issue.000001",                        # negative TIME2
    "rust-mysql-binlog/bin-log.000001",                           # DECIMAL
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",  # GTID_TAGGED, tagged PREVIOUS_GTIDS
    "rust_mysql_common/binlog-invisible-columns.000001",          # optional metadata: visibility
    "rust_mysql_common/minimal_row_metadata.000001",
    "rust_mysql_common/rpl_cross_version_default_utf8mb4_collation.000001",  # QUERY status vars, INTVAR
    "rust_mysql_common/bug11747887-bin.000003",                   # USER_VAR
    "rust_mysql_common/bug40482-bin.000001",                      # INCIDENT
    "rust_mysql_common/bug33029-slave-relay-bin.000001",          # 5.0 relay log, two FDEs
    "mysql-binlog-connector-java/mysql-bin.aurora-padding",       # vendor type 100
    "mysql-binlog-connector-java/mysql-bin.sakila",               # 5.5 bulk rows
]
PER_TYPE = 3  # events of each type taken from each file


# ==================================================================================== corpus


@functools.lru_cache(maxsize=None)
def corpus_bytes(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


@functools.lru_cache(maxsize=None)
def event_layout(name: str) -> list[tuple[int, int, int]]:
    """(pos, length, type_code) of every top-level event of a corpus file."""
    return [(e.header.pos, e.header.event_length, e.header.type_code) for e in iter_events(corpus_bytes(name))]


@functools.lru_cache(maxsize=None)
def _kinds(name: str) -> tuple[list[bool], list[bool]]:
    """Per event: is it a FORMAT_DESCRIPTION / START_V3, is it a TABLE_MAP."""
    events = list(iter_events(corpus_bytes(name)))
    return ([isinstance(e, FormatDescriptionEvent) for e in events],
            [isinstance(e, TableMapEvent) for e in events])


def _targets() -> list[tuple[str, int]]:
    out = []
    for name in FUZZ_FILES:
        if not (CORPUS / name).is_file():
            continue
        by_type: dict[int, list[int]] = {}
        for i, (_, _, tc) in enumerate(event_layout(name)):
            by_type.setdefault(tc, []).append(i)
        for indexes in by_type.values():
            picks = {indexes[0], indexes[len(indexes) // 2], indexes[-1]}
            out.extend((name, i) for i in sorted(picks)[:PER_TYPE])
    return out


def _positive_files() -> list[str]:
    manifest = CORPUS / "MANIFEST.md"
    if not manifest.is_file():
        return []
    out = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.startswith("- `") and "clean walk to EOF" in line and "NEGATIVE" not in line:
            name = line[3:line.index("`", 3)]
            if name != "rust_mysql_common/corrupt-relay-bin.000624" and (CORPUS / name).is_file():
                out.append(name)
    return out


TARGETS = _targets() if CORPUS.is_dir() else []
ALL_FILES = _positive_files()
SMALL_FILES = [n for n in ALL_FILES if (CORPUS / n).stat().st_size <= 8192]


def _state_prefix(name: str, index: int) -> list[int]:
    """Indexes of the events that set the decoder's state before ``index``: the last FDE, then the table maps."""
    is_fde, is_map = _kinds(name)
    last_fde = max((i for i in range(index) if is_fde[i]), default=None)
    if last_fde is None:
        return []
    return [last_fde] + [i for i in range(last_fde + 1, index) if is_map[i]]


def event_at(name: str, index: int) -> tuple[bytes, int]:
    pos, length, _ = event_layout(name)[index]
    return corpus_bytes(name)[pos:pos + length], pos


def primed_decoder(name: str, index: int, rows: bool = True) -> Decoder:
    decoder = Decoder(verify_checksums=False, rows=rows)
    for i in _state_prefix(name, index):
        decoder.decode(*event_at(name, i))
    return decoder





# ==================================================================================== case generators
#
# The generators are plain functions over a Source, so the same cases come from hypothesis (which
# shrinks a failure to a minimal case) in the test suite, and from random.Random in the soak runner
# (tests/support/fuzz_soak.py), which is ~10x faster per case and runs the million-case soak.


class Source:
    """Where a generator's choices come from. Subclasses implement ``int`` and ``blob``."""

    def int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        raise NotImplementedError

    def blob(self, lo: int, hi: int) -> bytes:
        """Random bytes, between lo and hi of them."""
        raise NotImplementedError

    def pick(self, seq):
        """One element of a non-empty sequence."""
        return seq[self.int(0, len(seq) - 1)]

    def flag(self) -> bool:
        return self.int(0, 1) == 1


class RandomSource(Source):
    """Choices from a seeded random.Random (soak runs: a failure is reproduced by its seed)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def blob(self, lo: int, hi: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(lo, hi))


class HypothesisSource(Source):
    """Choices drawn by hypothesis (inside an ``st.composite``), so failures shrink."""

    def __init__(self, draw):
        self.draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def blob(self, lo: int, hi: int) -> bytes:
        return self.draw(st.binary(min_size=lo, max_size=hi))


_HUGE = (0xFF, 0x80, 0x7F, 0xFFFF, 0x8000, 0x7FFF, 0xFFFFFF, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF,
         0xFFFFFFFFFFFFFFFF, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF, 0)
_HUGE_PACKED = (b"\xfe" + b"\xff" * 8, b"\xfe" + b"\x00" * 7 + b"\x80", b"\xfe\xff\xff\xff\x7f\0\0\0\0",
                b"\xfd\xff\xff\xff", b"\xfc\xff\xff", b"\xfb", b"\xff", b"\xfa")
_MASKS = (1, 2, 4, 8, 16, 32, 64, 128, 0xFF)
_TYPE_CODES = tuple(int(t) for t in ET)
_OP_KINDS = ("set", "xor", "xor", "type", "typebit", "int", "raw", "truncate", "extend", "insert", "delete")


def _op(s: Source, body_len: int, regions: list[tuple[int, int]]) -> tuple:
    """One byte-level op for a body of ``body_len`` bytes, aimed at ``regions`` two times in three."""

    def body_pos() -> int:
        if regions and s.int(0, 2) < 2:
            lo, hi = s.pick(regions)
            return s.int(lo, max(lo, hi - 1))
        return s.int(0, max(body_len - 1, 0))

    def junk() -> bytes:
        return s.blob(1, 64) if s.flag() else s.pick((b"\xff" * 300, b"\x00" * 300))

    kind = s.pick(_OP_KINDS)
    if kind == "set":
        return kind, s.int(0, max(body_len + 19, 1) * 2), s.int(0, 255)
    if kind == "xor":
        return kind, body_pos(), s.pick(_MASKS)
    if kind == "type":
        return kind, s.pick(_TYPE_CODES) if s.flag() else s.int(0, 255)
    if kind == "typebit":
        return kind, s.int(0, 7)
    if kind == "int":
        pos, width = body_pos(), s.pick((1, 2, 3, 4, 8))
        return kind, pos, width, s.pick(_HUGE) & ((1 << (8 * width)) - 1)
    if kind == "raw":
        return kind, body_pos(), s.pick(_HUGE_PACKED)
    if kind == "truncate":
        return kind, s.int(0, max(body_len - 1, 0))
    if kind == "extend":
        return kind, junk()
    if kind == "insert":
        return kind, body_pos(), junk()
    return kind, body_pos(), s.int(1, 16)  # delete


def _ops(s: Source, body_len: int, regions: list[tuple[int, int]], lo: int, hi: int) -> list[tuple]:
    return [_op(s, body_len, regions) for _ in range(s.int(lo, hi))]


def event_case(s: Source) -> tuple:
    """(file, event index, ops): one corpus event and the mutations to apply to it."""
    name, index = s.pick(TARGETS)
    raw, _ = event_at(name, index)
    decoder = primed_decoder(name, index)
    tc = event_layout(name)[index][2]  # the decoder's type code (5.1 pre-GA trees renumbered theirs)
    footer = footer_len(decoder, name, index)
    body = raw[decoder.header_len:len(raw) - footer]
    regions = aim_regions(tc, body, decoder.post_header_len(tc))
    ops: list = []
    if tc in MARIADB_COMPRESSED and s.int(0, 3) == 0:
        ops.append(("mariadb_compress",))
    if tc == ET.TRANSACTION_PAYLOAD and s.flag():
        inner_ops = tuple(_ops(s, 200, [(0, 48)], 1, 3))
        ops.append(("inner", s.int(0, 8), inner_ops, s.flag()))
        if s.flag():
            return name, index, tuple(ops)
    ops += _ops(s, len(body), regions, 1, 4)
    if s.int(0, 15) == 0:
        ops.append(("set_length", s.pick((0, 1, 18, 19, 20, len(raw) - 1, len(raw) + 1, 0x7FFFFFFF, 0xFFFFFFFF))))
    return name, index, tuple(ops)


def cut_case(s: Source, files: list[str]) -> tuple[str, int]:
    """(file, cut): a corpus file cut after ``cut`` bytes, aimed at event starts two times in three."""
    name = s.pick(files)
    size = len(corpus_bytes(name))
    choice = s.int(0, 2)
    if choice == 0:
        cut = s.int(1, size)
    elif choice == 1:
        pos, length, _ = s.pick(event_layout(name))
        cut = s.int(pos + 1, pos + min(length, 40))
    else:
        cut = s.pick((1, 2, 3, 4, 5, size - 1, size))
    return name, min(max(cut, 1), size)


def damaged_case(s: Source, files: list[str]) -> tuple[str, tuple, int]:
    """(file, flips, seed): up to 4 bytes XORed, and the seed of the incremental reader's feed sizes."""
    name = s.pick(files)
    size = len(corpus_bytes(name))
    flips = tuple((s.int(4, size - 1), s.int(1, 255)) for _ in range(s.int(1, 4)))
    return name, flips, s.int(0, 2**16)


def footer_len(decoder: Decoder, name: str, index: int) -> int:
    """4 when the event carries a CRC32 footer (per the decoder's state, or the FDE's own)."""
    raw, pos = event_at(name, index)
    if raw[4] == ET.FORMAT_DESCRIPTION:
        probe = Decoder(verify_checksums=False)
        return 4 if probe.decode(raw, pos).checksum_alg == 1 else 0
    return 4 if decoder.checksum_alg == 1 else 0


# ==================================================================================== guards


class DecoderHang(Exception):
    """The watchdog fired: decoding one case took longer than WATCHDOG_S seconds."""


class DecoderMemoryBlowUp(Exception):
    """The Python heap grew past MEMORY_LIMIT while decoding one case."""


@contextmanager
def guarded():
    """Watchdog against hangs and runaway memory, plus a peak-memory check at the end.

    A SIGALRM timer ticks every 50 ms: it raises DecoderMemoryBlowUp as soon as the traced heap has
    grown by MEMORY_LIMIT since the case began (an endless loop that allocates is stopped long before
    it exhausts the machine) and DecoderHang after WATCHDOG_S seconds (an endless loop that does not
    allocate would otherwise never return to hypothesis, whose deadline is only checked after the call).

    tracemalloc is started for the case and stopped after it, unless it was already tracing. Each
    start/stop leaves ~3 KB behind, so the soak runner recycles its worker processes.
    """
    started = time.monotonic()
    owner = not tracemalloc.is_tracing()
    if owner:
        tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()

    def _tick(signum, frame):
        grown = tracemalloc.get_traced_memory()[0] - base
        if grown > MEMORY_LIMIT:
            raise DecoderMemoryBlowUp(f"Python heap grew by {grown / 2**20:.0f} MB while decoding one case "
                                      f"(limit {MEMORY_LIMIT / 2**20:.0f} MB): runaway allocation or endless loop")
        if time.monotonic() - started > WATCHDOG_S:
            raise DecoderHang(f"decoding one case took more than {WATCHDOG_S} s")

    previous = signal.signal(signal.SIGALRM, _tick)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1] - base
        assert peak < MEMORY_LIMIT, f"decoding one case peaked at {peak / 2**20:.1f} MB of Python heap"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if owner:
            tracemalloc.stop()


def touch(event) -> None:
    """Everything a consumer does with an event: rows, inner events, dict form, JSON."""
    for x in flatten(event):
        rows = getattr(x, "rows", None)
        if rows is not None:
            len(rows)
        dumps(event_to_dict(x))


def run_event_case(name: str, index: int, ops) -> list:
    """Decode the mutated event and the next few originals; returns the outcomes (for debugging).

    The raw archive's decoder (``rows=False``) reads the same events: it may accept what the full
    decoder rejects (it reads no rows), never the reverse, and its skim never takes an event it rejects.
    """
    decoder = primed_decoder(name, index)
    rowless = primed_decoder(name, index, rows=False)
    raw, pos = event_at(name, index)
    footer = footer_len(decoder, name, index)
    mutated = mutate(raw, ops, decoder.header_len, footer, decoder.post_header_len)
    layout = event_layout(name)
    todo = [(mutated, pos)] + [event_at(name, i) for i in range(index + 1, min(index + 1 + FOLLOWING, len(layout)))]
    outcomes = []
    with guarded():
        for data, at in todo:
            try:
                touch(decoder.decode(data, at))
                outcomes.append("ok")
            except BinlogError as exc:
                assert exc.offset == at, f"{type(exc).__name__} names offset {exc.offset}, the event is at {at}: {exc}"
                outcomes.append(type(exc).__name__)
            skimmed = rowless.skim_run([data], 0, 1, at).stop == 1
            try:
                rowless.decode(data, at)
            except BinlogError as exc:
                assert not skimmed, f"skim took the event at {at}, which the row-less decoder rejects: {exc}"
                assert outcomes[-1] == type(exc).__name__, \
                    f"row-less decoder: {type(exc).__name__} ({exc}); full decoder: {outcomes[-1]}"
    return outcomes


# ==================================================================================== truncated files


def run_cut_case(name: str, cut: int) -> str:
    """Read the first ``cut`` bytes of a corpus file; returns "TruncatedError" or "ok" (a cut at a boundary)."""
    data = corpus_bytes(name)[:cut]
    layout = event_layout(name)
    ends = {4} | {pos + length for pos, length, _ in layout}
    n = 0
    with guarded():
        try:
            for _ in iter_events(data):
                n += 1
        except TruncatedError as exc:
            start = 0 if cut < 4 else max(pos for pos, _, _ in layout if pos < cut)
            assert cut not in ends, f"cut at the boundary {cut} raised {exc}"
            assert exc.offset == start, (f"cut at {cut}: TruncatedError names {exc.offset}, "
                                         f"the cut event starts at {start}")
            assert n == sum(1 for pos, length, _ in layout if pos + length <= cut)
            return "TruncatedError"
    assert cut in ends, f"cut at {cut} (inside an event) raised nothing after {n} events"
    assert n == sum(1 for pos, length, _ in layout if pos + length <= cut)
    return "ok"


# ==================================================================================== damaged files, two readers


def _outcomes(events_iter) -> list:
    """What a consumer sees: each event (dict form, or the error its rows raise), then the final error."""
    out = []
    try:
        for event in events_iter:
            try:
                out.append((event.header, [event_to_dict(x) for x in flatten(event)]))
            except BinlogError as exc:
                out.append((event.header, ("error", type(exc).__name__, exc.offset, str(exc))))
    except BinlogError as exc:  # the wording may differ between the readers; the kind and offset may not
        out.append(("error", type(exc).__name__, exc.offset))
    return out


def _reader_events(data: bytes, decoder: Decoder, seed: int):
    rng = random.Random(seed)
    reader, pos = EventReader(decoder), 0
    while pos < len(data):
        n = rng.choice([1, 3, 19, 64, 500, 4096])
        reader.feed(data[pos:pos + n])
        pos += n
        while (event := reader.next_event()) is not None:
            yield event
    reader.close()


@st.composite
def damaged_files(draw, files):
    name = draw(st.sampled_from(files))
    size = len(corpus_bytes(name))
    flips = draw(st.lists(st.tuples(st.integers(4, size - 1), st.integers(1, 255)), min_size=1, max_size=4))
    return name, tuple(flips), draw(st.integers(0, 2**16))


def run_damaged_case(name: str, flips, seed: int) -> str:
    """Read a damaged corpus file through both readers; returns the error that ended it, or "ok"."""
    data = bytearray(corpus_bytes(name))
    for pos, mask in flips:
        data[pos] ^= mask
    data = bytes(data)
    with guarded():
        whole = _outcomes(iter_events(data, Decoder(verify_checksums=False)))
        incremental = _outcomes(_reader_events(data, Decoder(verify_checksums=False), seed))
    # repr, not ==: a damaged float can decode to NaN, which is never equal to itself
    assert repr(incremental) == repr(whole)
    last = whole[-1] if whole else None
    return last[1] if last and last[0] == "error" else "ok"
