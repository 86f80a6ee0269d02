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
* a case finishes within the hypothesis deadline (2 s) and a SIGALRM watchdog (10 s) catches a
  real hang, which the deadline alone would wait for forever;
* the Python heap peak (tracemalloc) stays under 64 MB per case;
* whole files cut at any byte fail with TruncatedError whose offset is the start of the cut event;
* a file with random bytes flipped reads the same through iter_events and the incremental
  EventReader (same events, same error at the same offset).

The default run is modest (300 cases per property). The slow variants (``@pytest.mark.slow``) run
``BINLOGD_FUZZ_EXAMPLES`` cases each (default 1,000,000)::

    BINLOGD_FUZZ_EXAMPLES=1000000 .venv/bin/pytest tests/faults/test_fuzz_decoder.py --runslow -m slow -q

(set it lower, e.g. 20000, for a quicker soak). A failing case is printed by hypothesis as an
``@example(...)`` line: pin it above the test so it stays reproducible.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import struct
import sys
import time
import tracemalloc
import zlib
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from protocol.constants import EventType as ET
from protocol.decoder import Decoder
from protocol.errors import BinlogError, TruncatedError
from protocol.events import FormatDescriptionEvent, TableMapEvent
from protocol.reader import EventReader, iter_events
from protocol.serialize import dumps, event_to_dict, flatten
from tests.conftest import CORPUS

FAST_EXAMPLES = 300
SLOW_EXAMPLES = int(os.environ.get("BINLOGD_FUZZ_EXAMPLES", "1000000"))
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
def _bytes(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


@functools.lru_cache(maxsize=None)
def _layout(name: str) -> list[tuple[int, int, int]]:
    """(pos, length, type_code) of every top-level event of a corpus file."""
    return [(e.header.pos, e.header.event_length, e.header.type_code) for e in iter_events(_bytes(name))]


@functools.lru_cache(maxsize=None)
def _kinds(name: str) -> tuple[list[bool], list[bool]]:
    """Per event: is it a FORMAT_DESCRIPTION / START_V3, is it a TABLE_MAP."""
    events = list(iter_events(_bytes(name)))
    return ([isinstance(e, FormatDescriptionEvent) for e in events],
            [isinstance(e, TableMapEvent) for e in events])


def _targets() -> list[tuple[str, int]]:
    out = []
    for name in FUZZ_FILES:
        if not (CORPUS / name).is_file():
            continue
        by_type: dict[int, list[int]] = {}
        for i, (_, _, tc) in enumerate(_layout(name)):
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


def _event(name: str, index: int) -> tuple[bytes, int]:
    pos, length, _ = _layout(name)[index]
    return _bytes(name)[pos:pos + length], pos


def _primed_decoder(name: str, index: int) -> Decoder:
    decoder = Decoder(verify_checksums=False)
    for i in _state_prefix(name, index):
        decoder.decode(*_event(name, i))
    return decoder


# ==================================================================================== light parsers


def _packed_at(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first, 0)
    return int.from_bytes(buf[pos + 1:pos + 1 + width], "little"), pos + 1 + width


def _packed(value: int) -> bytes:
    if value < 0xFB:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


_ROWS_V2 = {ET.WRITE_ROWS, ET.UPDATE_ROWS, ET.DELETE_ROWS, ET.PARTIAL_UPDATE_ROWS}
_ROWS_V1 = {ET.WRITE_ROWS_V1, ET.UPDATE_ROWS_V1, ET.DELETE_ROWS_V1}
_ROWS_ALL = _ROWS_V1 | _ROWS_V2 | {ET.PRE_GA_WRITE_ROWS, ET.PRE_GA_UPDATE_ROWS, ET.PRE_GA_DELETE_ROWS}
_UPDATES = {ET.UPDATE_ROWS, ET.UPDATE_ROWS_V1, ET.PARTIAL_UPDATE_ROWS}
_MARIADB_COMPRESSED = {ET.QUERY: ET.QUERY_COMPRESSED,
                       ET.WRITE_ROWS_V1: ET.WRITE_ROWS_COMPRESSED_V1, ET.UPDATE_ROWS_V1: ET.UPDATE_ROWS_COMPRESSED_V1,
                       ET.DELETE_ROWS_V1: ET.DELETE_ROWS_COMPRESSED_V1, ET.WRITE_ROWS: ET.WRITE_ROWS_COMPRESSED,
                       ET.UPDATE_ROWS: ET.UPDATE_ROWS_COMPRESSED, ET.DELETE_ROWS: ET.DELETE_ROWS_COMPRESSED}


def _rows_layout(tc: int, body: bytes, post_len: int) -> tuple[list[tuple[int, int]], int]:
    """Regions (bitmaps, first row's NULL bitmap) of a rows body, and where the row data starts."""
    id_size = 4 if post_len == 6 else 6
    pos = id_size + 2
    regions = [(0, pos)]
    if tc in _ROWS_V2:
        extra = int.from_bytes(body[pos:pos + 2], "little")
        regions.append((pos, pos + 2))
        pos += extra
    width_at = pos
    width, pos = _packed_at(body, pos)
    regions.append((width_at, pos))
    nbytes = (width + 7) // 8
    regions.append((pos, pos + nbytes))
    present = int.from_bytes(body[pos:pos + nbytes], "little")
    pos += nbytes
    if tc in _UPDATES:
        regions.append((pos, pos + nbytes))
        pos += nbytes
    data_start = pos
    null_bytes = (bin(present).count("1") + (1 if tc in (20, 21, 22) else 0) + 7) // 8
    regions.append((pos, pos + max(null_bytes, 1)))
    return regions, data_start


def _table_map_regions(body: bytes, post_len: int) -> list[tuple[int, int]]:
    """Regions of a TABLE_MAP body: post-header, names, column count, types, metadata, NULL bitmap,
    optional metadata."""
    id_size = 4 if post_len == 6 else 6
    pos = id_size + 2
    regions = [(0, pos)]
    for _ in range(2):  # schema, table: length byte, name, NUL
        regions.append((pos, pos + 1))
        pos += 1 + body[pos] + 1
    ncols_at = pos
    ncols, pos = _packed_at(body, pos)
    regions.append((ncols_at, pos))
    regions.append((pos, pos + ncols))
    pos += ncols
    if pos < len(body):
        meta_at = pos
        mlen, pos = _packed_at(body, pos)
        regions.append((meta_at, pos + mlen))
        pos += mlen
        regions.append((pos, pos + (ncols + 7) // 8))
        pos += (ncols + 7) // 8
        if pos < len(body):
            regions.append((pos, len(body)))
    return regions


def _regions(tc: int, body: bytes, post_len: int) -> list[tuple[int, int]]:
    """Body regions worth aiming at (lengths, counts, bitmaps); always includes the early body."""
    out = [(0, min(len(body), 48))]
    try:
        if tc in _ROWS_ALL:
            out += _rows_layout(tc, body, post_len)[0]
        elif tc == ET.TABLE_MAP:
            out += _table_map_regions(body, post_len)
        elif tc == ET.QUERY:
            out += [(8, 9), (11, 13), (post_len, post_len + int.from_bytes(body[11:13], "little"))]
        elif tc == ET.TRANSACTION_PAYLOAD:
            out += [(0, min(len(body), 32))]
        elif tc in (ET.USER_VAR, ET.BINLOG_CHECKPOINT):
            out += [(0, 4)]
        elif tc == ET.PREVIOUS_GTIDS:
            out += [(0, 8), (24, 32)]
        elif tc == ET.FORMAT_DESCRIPTION:
            out += [(0, 2), (56, 57), (57, len(body))]
    except (IndexError, ValueError):
        pass
    return [(a, min(b, len(body))) for a, b in out if 0 <= a < min(b, len(body))]


# ==================================================================================== mutations
#
# A case is (file, event index, ops); ops are plain tuples applied in order by mutate(), so a case
# printed by hypothesis can be pasted into an @example. Positions are taken modulo the current
# length, so every op applies to every event.


def _mariadb_compress(tc: int, body: bytes, post_len: int) -> tuple[int, bytes]:
    """The MariaDB *_COMPRESSED form of a QUERY or rows body (zlib after a size header)."""
    if tc == ET.QUERY:
        split = post_len + int.from_bytes(body[11:13], "little") + body[8] + 1
    else:
        split = _rows_layout(tc, body, post_len)[1]
    plain = body[split:]
    size = len(plain).to_bytes(4, "big").lstrip(b"\0") or b"\0"
    return _MARIADB_COMPRESSED[tc], body[:split] + bytes([0x80 | len(size)]) + size + zlib.compress(plain)


def _split_payload(body: bytes) -> tuple[dict[int, int], bytes]:
    fields, pos = {}, 0
    while pos < len(body):
        ftype, pos = _packed_at(body, pos)
        if ftype == 0:
            break
        flen, pos = _packed_at(body, pos)
        fields[ftype], _ = _packed_at(body[pos:pos + flen], 0)
        pos += flen
    return fields, body[pos:]


def _build_payload(inner: bytes, compress: bool) -> bytes:
    if compress:
        import zstandard

        payload, ctype = zstandard.ZstdCompressor().compress(inner), 0
    else:
        payload, ctype = inner, 255
    out = b""
    for ftype, value in ((2, ctype), (3, len(inner)), (1, len(payload))):
        enc = _packed(value)
        out += _packed(ftype) + _packed(len(enc)) + enc
    return out + b"\x00" + payload


def _split_events(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 19 <= len(stream):
        length = int.from_bytes(stream[pos + 9:pos + 13], "little")
        if length < 19:
            break
        out.append(stream[pos:pos + length])
        pos += length
    return out


def _apply_ops(header: bytearray, body: bytearray, ops) -> int | None:
    """Apply byte-level ops to (header, body) in place; returns an event_length override if any."""
    length_override = None
    for op in ops:
        kind = op[0]
        if kind == "set":       # ("set", pos, value): a byte anywhere (header then body)
            _, pos, value = op
            total = len(header) + len(body)
            if total:
                pos %= total
                (header if pos < len(header) else body)[pos if pos < len(header) else pos - len(header)] = value
        elif kind == "xor":     # ("xor", body_pos, mask)
            if body:
                body[op[1] % len(body)] ^= op[2]
        elif kind == "type":    # ("type", code)
            header[4] = op[1]
        elif kind == "typebit":  # ("typebit", bit)
            header[4] ^= 1 << op[1]
        elif kind == "int":     # ("int", body_pos, width, value): a little-endian integer
            _, pos, width, value = op
            if len(body) >= width:
                pos %= len(body) - width + 1
                body[pos:pos + width] = value.to_bytes(width, "little")
        elif kind == "raw":     # ("raw", body_pos, bytes): overwrite (e.g. a huge packed integer)
            if body:
                pos = op[1] % len(body)
                body[pos:pos + len(op[2])] = op[2]
        elif kind == "truncate":
            del body[op[1] % (len(body) + 1):]
        elif kind == "extend":
            body += op[1]
        elif kind == "insert":
            pos = op[1] % (len(body) + 1)
            body[pos:pos] = op[2]
        elif kind == "delete":
            if body:
                pos = op[1] % len(body)
                del body[pos:pos + op[2]]
        elif kind == "set_length":
            length_override = op[1]
        else:
            raise AssertionError(f"unknown op {op!r}")
    return length_override


def mutate(raw: bytes, ops, header_len: int, footer: int, post_len) -> bytes:
    """The event ``raw`` after ``ops``; event_length is fixed up unless an op sets it."""
    header = bytearray(raw[:header_len])
    body = bytearray(raw[header_len:len(raw) - footer])
    tail = raw[len(raw) - footer:] if footer else b""
    byte_ops = []
    for op in ops:
        if op[0] == "mariadb_compress":
            tc = header[4]
            if tc in _MARIADB_COMPRESSED:
                try:
                    new_tc, new_body = _mariadb_compress(tc, bytes(body), post_len(tc))
                except (IndexError, ValueError):
                    continue
                header[4], body = new_tc, bytearray(new_body)
        elif op[0] == "inner":  # ("inner", index, ops, recompress): mutate an event inside a payload
            if header[4] != ET.TRANSACTION_PAYLOAD:
                continue
            fields, payload = _split_payload(bytes(body))
            if fields.get(2, 0) == 0:
                import zstandard

                payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 24)
            inner = _split_events(payload)
            if inner:
                k = op[1] % len(inner)
                ev = inner[k]
                inner[k] = mutate(ev, op[2], 19, 0, post_len)
            body = bytearray(_build_payload(b"".join(inner), op[3]))
        else:
            byte_ops.append(op)
    override = _apply_ops(header, body, byte_ops)
    out = bytearray(header + body + tail)
    if len(out) >= 13:
        out[9:13] = ((len(out) if override is None else override) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)


_HUGE = st.sampled_from([0xFF, 0x80, 0x7F, 0xFFFF, 0x8000, 0x7FFF, 0xFFFFFF, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF,
                         0xFFFFFFFFFFFFFFFF, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF, 0])
_HUGE_PACKED = st.sampled_from([b"\xfe" + b"\xff" * 8, b"\xfe" + b"\x00" * 7 + b"\x80", b"\xfe\xff\xff\xff\x7f\0\0\0\0",
                                b"\xfd\xff\xff\xff", b"\xfc\xff\xff", b"\xfb", b"\xff", b"\xfa"])


def _op(body_len: int, regions: list[tuple[int, int]]):
    anywhere = st.integers(0, max(body_len + 19, 1) * 2)
    in_body = st.integers(0, max(body_len - 1, 0))
    if regions:
        aimed = st.sampled_from(regions).flatmap(lambda r: st.integers(r[0], max(r[0], r[1] - 1)))
        body_pos = st.one_of(aimed, aimed, in_body)
    else:
        body_pos = in_body
    junk = st.one_of(st.binary(min_size=1, max_size=64), st.sampled_from([b"\xff" * 300, b"\x00" * 300]))
    return st.one_of(
        st.tuples(st.just("set"), anywhere, st.integers(0, 255)),
        st.tuples(st.just("xor"), body_pos, st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 0xFF])),
        st.tuples(st.just("xor"), body_pos, st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 0xFF])),
        st.tuples(st.just("type"), st.one_of(st.sampled_from([int(t) for t in ET]), st.integers(0, 255))),
        st.tuples(st.just("typebit"), st.integers(0, 7)),
        st.tuples(st.just("int"), body_pos, st.sampled_from([1, 2, 3, 4, 8]), _HUGE).map(
            lambda t: (t[0], t[1], t[2], t[3] & ((1 << (8 * t[2])) - 1))),
        st.tuples(st.just("raw"), body_pos, _HUGE_PACKED),
        st.tuples(st.just("truncate"), in_body),
        st.tuples(st.just("extend"), junk),
        st.tuples(st.just("insert"), body_pos, junk),
        st.tuples(st.just("delete"), body_pos, st.integers(1, 16)),
    )


def _post_len_fn(decoder: Decoder):
    return decoder.post_header_len


@st.composite
def event_cases(draw):
    name, index = draw(st.sampled_from(TARGETS))
    raw, _ = _event(name, index)
    decoder = _primed_decoder(name, index)
    tc = _layout(name)[index][2]  # the decoder's type code (5.1 pre-GA trees renumbered theirs)
    footer = _footer(decoder, name, index)
    body = raw[decoder.header_len:len(raw) - footer]
    regions = _regions(tc, body, decoder.post_header_len(tc))
    ops: list = []
    if tc in _MARIADB_COMPRESSED and draw(st.integers(0, 3)) == 0:
        ops.append(("mariadb_compress",))
    if tc == ET.TRANSACTION_PAYLOAD and draw(st.booleans()):
        inner_ops = tuple(draw(st.lists(_op(200, [(0, 48)]), min_size=1, max_size=3)))
        ops.append(("inner", draw(st.integers(0, 8)), inner_ops, draw(st.booleans())))
        if draw(st.booleans()):
            return name, index, tuple(ops)
    ops += draw(st.lists(_op(len(body), regions), min_size=1, max_size=4))
    if draw(st.integers(0, 15)) == 0:
        ops.append(("set_length", draw(st.sampled_from([0, 1, 18, 19, 20, len(raw) - 1, len(raw) + 1,
                                                         0x7FFFFFFF, 0xFFFFFFFF]))))
    return name, index, tuple(ops)


def _footer(decoder: Decoder, name: str, index: int) -> int:
    """4 when the event carries a CRC32 footer (per the decoder's state, or the FDE's own)."""
    raw, pos = _event(name, index)
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

    A SIGALRM timer ticks every 50 ms: it raises DecoderMemoryBlowUp as soon as the traced heap
    passes MEMORY_LIMIT (an endless loop that allocates is stopped long before it exhausts the
    machine) and DecoderHang after WATCHDOG_S seconds (an endless loop that does not allocate would
    otherwise never return to hypothesis, whose deadline is only checked after the call).
    """
    started = time.monotonic()

    def _tick(signum, frame):
        current, _ = tracemalloc.get_traced_memory()
        if current > MEMORY_LIMIT:
            raise DecoderMemoryBlowUp(f"Python heap at {current / 2**20:.0f} MB while decoding one case "
                                      f"(limit {MEMORY_LIMIT / 2**20:.0f} MB): runaway allocation or endless loop")
        if time.monotonic() - started > WATCHDOG_S:
            raise DecoderHang(f"decoding one case took more than {WATCHDOG_S} s")

    previous = signal.signal(signal.SIGALRM, _tick)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
        assert peak < MEMORY_LIMIT, f"decoding one case peaked at {peak / 2**20:.1f} MB of Python heap"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        tracemalloc.stop()


def touch(event) -> None:
    """Everything a consumer does with an event: rows, inner events, dict form, JSON."""
    for x in flatten(event):
        rows = getattr(x, "rows", None)
        if rows is not None:
            len(rows)
        dumps(event_to_dict(x))


def run_event_case(name: str, index: int, ops) -> list:
    """Decode the mutated event and the next few originals; returns the outcomes (for debugging)."""
    decoder = _primed_decoder(name, index)
    raw, pos = _event(name, index)
    footer = _footer(decoder, name, index)
    mutated = mutate(raw, ops, decoder.header_len, footer, decoder.post_header_len)
    layout = _layout(name)
    todo = [(mutated, pos)] + [_event(name, i) for i in range(index + 1, min(index + 1 + FOLLOWING, len(layout)))]
    outcomes = []
    with guarded():
        for data, at in todo:
            try:
                touch(decoder.decode(data, at))
                outcomes.append("ok")
            except BinlogError as exc:
                assert exc.offset == at, f"{type(exc).__name__} names offset {exc.offset}, the event is at {at}: {exc}"
                outcomes.append(type(exc).__name__)
    return outcomes


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


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **_COMMON)
@given(case=event_cases())
@_pinned(PINNED_EVENT_CASES)
def test_mutated_event_raises_only_binlog_errors_slow(corpus, case):
    run_event_case(*case)


def test_every_target_decodes_unmutated(corpus):
    """The fuzzer's harness itself: every target event, unmutated, decodes and materialises cleanly."""
    assert len(TARGETS) > 100
    types = set()
    for name, index in TARGETS:
        assert run_event_case(name, index, ()) == ["ok"] * min(1 + FOLLOWING, len(_layout(name)) - index)
        types.add(_layout(name)[index][2])
    assert {ET.TRANSACTION_PAYLOAD, ET.TABLE_MAP, ET.WRITE_ROWS, ET.WRITE_ROWS_V1, ET.PARTIAL_UPDATE_ROWS,
            ET.MARIADB_GTID, ET.GTID_TAGGED, ET.FORMAT_DESCRIPTION, ET.EXECUTE_LOAD_QUERY} <= types


def test_mutations_reach_the_body_decoders(corpus):
    """The rebuild helpers produce events the decoder accepts (so mutations are not all rejected early)."""
    seen = set()
    for name, index in TARGETS:
        raw = _event(name, index)[0]
        tc = raw[4]
        if tc in _MARIADB_COMPRESSED:
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
    next(iter_events(_bytes(name), decoder))
    return decoder


def _table_map_body(types: bytes, optional: bytes = b"", table_id: int = 7) -> bytes:
    n = len(types)
    return (table_id.to_bytes(6, "little") + b"\1\0" + b"\1a\0" + b"\1b\0" + _packed(n) + types
            + b"\0" + bytes((n + 7) // 8) + optional)


def _write_rows_body(ncols: int, row: bytes, table_id: int = 7) -> bytes:
    nbytes = (ncols + 7) // 8
    return (table_id.to_bytes(6, "little") + b"\1\0" + b"\2\0" + _packed(ncols) + b"\xff" * nbytes
            + bytes(nbytes) + row)


def test_bug_column_name_cannot_inject_code(corpus):
    """Column names come from the binlog (TABLE_MAP optional metadata): they must never be executed.

    A column of an unknown type makes the row-decoder generator embed the column's label in the
    generated source; a name that closes the string literal runs arbitrary Python when rows decode."""
    marker = "binlogd_fuzz_injected"
    sys.modules.pop(marker, None)
    name = f'+str(__import__("sys").modules.__setitem__("{marker}", 1))+'.encode()
    optional = bytes([4]) + _packed(len(name) + 1) + _packed(len(name)) + name  # COLUMN_NAME
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
    body = _build_payload(inner, compress)
    return struct.pack("<IBIIIH", 0, ET.TRANSACTION_PAYLOAD, 1, 19 + len(body), 0, 0) + body


@pytest.mark.parametrize("depth", [2, 50, 2000])
def test_nested_transaction_payloads(corpus, depth):
    """A TRANSACTION_PAYLOAD inside a TRANSACTION_PAYLOAD (never written by a server): a BinlogError or
    a decoded event, never a RecursionError, however deep the nesting."""
    name = "rust_mysql_common/transaction_compression.000001"
    index = next(i for i, (_, _, tc) in enumerate(_layout(name)) if tc == ET.TRANSACTION_PAYLOAD)
    decoder = _primed_decoder(name, index)
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


@st.composite
def cuts(draw, files):
    name = draw(st.sampled_from(files))
    size = len(_bytes(name))
    layout = _layout(name)
    aimed = st.sampled_from(layout).flatmap(lambda e: st.integers(e[0] + 1, e[0] + min(e[1], 40)))
    cut = draw(st.one_of(st.integers(1, size), aimed, st.sampled_from([1, 2, 3, 4, 5, size - 1, size])))
    return name, min(max(cut, 1), size)


def run_cut_case(name: str, cut: int) -> None:
    data = _bytes(name)[:cut]
    layout = _layout(name)
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
            return
    assert cut in ends, f"cut at {cut} (inside an event) raised nothing after {n} events"
    assert n == sum(1 for pos, length, _ in layout if pos + length <= cut)


@settings(max_examples=FAST_EXAMPLES, **_COMMON)
@given(case=cuts(ALL_FILES or ["none"]))
def test_truncated_file_names_the_cut_event(corpus, case):
    run_cut_case(*case)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **_COMMON)
@given(case=cuts(ALL_FILES or ["none"]))
def test_truncated_file_names_the_cut_event_slow(corpus, case):
    run_cut_case(*case)


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
    size = len(_bytes(name))
    flips = draw(st.lists(st.tuples(st.integers(4, size - 1), st.integers(1, 255)), min_size=1, max_size=4))
    return name, tuple(flips), draw(st.integers(0, 2**16))


def run_damaged_case(name: str, flips, seed: int) -> None:
    data = bytearray(_bytes(name))
    for pos, mask in flips:
        data[pos] ^= mask
    data = bytes(data)
    with guarded():
        whole = _outcomes(iter_events(data, Decoder(verify_checksums=False)))
        incremental = _outcomes(_reader_events(data, Decoder(verify_checksums=False), seed))
    assert incremental == whole


PINNED_DAMAGED_CASES: list[tuple] = [
    # a column type byte of a TABLE_MAP flipped (3 -> 131): SyntaxError from the generated row decoder
    ("rust_mysql_common/update-full-row.binlog", ((208, 128),), 0),
    # a rows event's columns-present bitmap loses its only bit: endless row loop
    ("rust_mysql_common/update-full-row.binlog", ((499, 1),), 0),
]


@settings(max_examples=FAST_EXAMPLES, **_COMMON)
@given(case=damaged_files(SMALL_FILES or ["none"]))
@_pinned(PINNED_DAMAGED_CASES)
def test_damaged_file_same_through_both_readers(corpus, case):
    run_damaged_case(*case)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **_COMMON)
@given(case=damaged_files(SMALL_FILES or ["none"]))
@_pinned(PINNED_DAMAGED_CASES)
def test_damaged_file_same_through_both_readers_slow(corpus, case):
    run_damaged_case(*case)
