"""The optional C row-image decoder (protocol._rowimage) against the generated Python decoders.

Both paths must give identical rows (same keys in the same order, same values, same types, floats
bit for bit) or both raise EventDecodeError:
- on every binlog of the shared corpus (../shared/binlogs);
- on the MariaDB every-type table of tests/integration/test_row_values.py (server tests:
  tests/integration/test_rowimage_every_type.py);
- on hand-picked edge values (negative zero DECIMALs, the zero TIMESTAMP, negative TIME2, garbage
  DATETIME2 dates, ENUM indexes past the names, ...);
- under hypothesis: mutated real row data and synthetic tables of every column type.
"""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from binlogd.protocol import rowcodec
from binlogd.protocol import rows as R
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.errors import EventDecodeError
from binlogd.protocol.rowcodec import TableCodec
from binlogd.protocol.tablemap import Column
from tests.support.paths import CORPUS, REPO
from tests.support.rowcompare import file_rows, outcome, same
from tests.support.rowfuzz import mutate, synthetic_rows

C = pytest.importorskip("binlogd.protocol._rowimage", reason="the C extension is not built (pip install -e .)")

CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".txt",
                                                                                          ".json", ".py"))


@pytest.fixture(autouse=True)
def _restore_mode():
    before = rowcodec.speedups_enabled()
    yield
    rowcodec.use_speedups(before)


def _both(fn):
    rowcodec.use_speedups(False)
    py = outcome(fn)
    rowcodec.use_speedups(True)
    native = outcome(fn)
    return py, native


def assert_sameoutcome(py, native) -> None:
    assert py[0] == native[0], f"python: {py!r:.300}\nnative: {native!r:.300}"
    if py[0] == "ok":
        assert same(py[1], native[1]), f"python: {py[1]!r:.300}\nnative: {native[1]!r:.300}"


# --------------------------------------------------------------------------- whole files


def _read(path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def test_mode_switch() -> None:
    assert rowcodec.use_speedups(True) is True
    assert type(TableCodec((Column(0, T.LONG, 0),)).image(1)) is C.Image
    assert rowcodec.use_speedups(False) is False
    assert type(TableCodec((Column(0, T.LONG, 0),)).image(1)) is not C.Image


def test_environment_turns_speedups_off() -> None:
    code = "from binlogd.protocol import rowcodec; print(rowcodec.speedups_enabled())"
    env = dict(os.environ, BINLOGD_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    env.pop("BINLOGD_PURE_PYTHON")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_rows_identical(path) -> None:
    data = _read(path)
    rowcodec.use_speedups(False)
    py = file_rows(data)
    rowcodec.use_speedups(True)
    native = file_rows(data)
    assert len(py) == len(native)
    for (pos, a), (_, b) in zip(py, native):
        assert a[0] == b[0], f"event ending at {pos}: python {a!r:.200}, native {b!r:.200}"
        if a[0] == "ok":
            assert same(a[1], b[1]), f"rows of the event ending at {pos} differ"


def test_corpus_has_rows() -> None:
    if not CORPUS_FILES:
        pytest.skip("no corpus")
    rowcodec.use_speedups(True)
    assert sum(len(r[1][1]) for p in CORPUS_FILES for r in file_rows(_read(p)) if r[0] != "stopped"
               and r[1][0] == "ok") > 1000


# --------------------------------------------------------------------------- single values


def _decode(columns, data: bytes, kind: str = "insert", null_offset: int = 0):
    codec = TableCodec(tuple(columns))
    bits = (1 << len(columns)) - 1
    h = SimpleNamespace(pos=4, type_code=30)
    return lambda: R._decode_rows(codec, kind, data, bits, bits if kind == "update" else None, False, h, null_offset)


def _one(col: Column, raw: bytes) -> list:
    """Decode one NOT NULL value in both modes; assert they agree; return the python outcome."""
    py, native = _both(_decode([col], raw))
    assert_sameoutcome(py, native)
    return py


def _col(t, meta=0, **kw) -> Column:
    return Column(0, t, meta, nullable=False, name="c", **kw)


def _dec_bytes(digits: bytes, negative: bool) -> bytes:
    raw = bytearray(digits)
    raw[0] |= 0x80
    return bytes(b ^ 0xFF for b in raw) if negative else bytes(raw)


EDGES = [
    # values.decimal_decoder keeps the sign of a zero with 9+ fraction digits (the inline form does not)
    (_col(T.NEWDECIMAL, (20, 10)), b"\x00" + _dec_bytes(bytes(10), True), "-0.0000000000"),
    (_col(T.NEWDECIMAL, (12, 9)), b"\x00" + _dec_bytes(bytes(6), True), "0.000000000"),
    (_col(T.NEWDECIMAL, (12, 4)), b"\x00" + _dec_bytes(bytes(6), True), "0.0000"),
    (_col(T.NEWDECIMAL, (12, 4)), b"\x00" + _dec_bytes(b"\x05\xf5\xe0\xff\x27\x0f", False), "99999999.9999"),
    (_col(T.NEWDECIMAL, (10, 0)), b"\x00" + _dec_bytes(b"\x00\x00\x00\x00\x2a", True), "-42"),
    (_col(T.NEWDECIMAL, (4, 2)), b"\x00" + _dec_bytes(b"\x63\x64", False), None),   # fraction 100 >= 10^2
    (_col(T.NEWDECIMAL, (66, 2)), b"\x00" + bytes(40), None),
    (_col(T.TIMESTAMP2, 3), b"\x00" + bytes(6), "0000-00-00 00:00:00.000"),
    (_col(T.TIMESTAMP2, 3), b"\x00" + bytes(4) + b"\x00\x0a", "1970-01-01 00:00:00.001"),
    (_col(T.TIMESTAMP2, 6), b"\x00\xff\xff\xff\xff\xff\xff\xff", "2106-02-07 06:28:15.167772"),
    (_col(T.TIMESTAMP2, 0), b"\x00" + (2147483647).to_bytes(4, "big"), "2038-01-19 03:14:07"),
    (_col(T.TIMESTAMP, 0), b"\x00" + bytes(4), "0000-00-00 00:00:00"),
    (_col(T.TIME2, 2), b"\x00\x7f\xff\xff\xce", "-00:00:00.50"),
    (_col(T.TIME2, 6), b"\x00" + (0x800000000000 - (5 << 24) - 1).to_bytes(6, "big"), None),
    (_col(T.TIME2, 0), b"\x00\x00\x00\x00", None),
    (_col(T.DATETIME2, 6), b"\x00" + bytes(5) + b"\xff\xff\xff", None),
    (_col(T.DATETIME2, 4), b"\x00" + b"\xff" * 7, None),
    (_col(T.DATETIME2, 1), b"\x00\x80\x00\x00\x00\x00\x63", None),
    (_col(T.DATE), b"\x00\xff\xff\xff", None),
    (_col(T.YEAR), b"\x00\x00", 0),
    (_col(T.INT24, unsigned=False), b"\x00\x00\x00\x80", -(1 << 23)),
    (_col(T.LONGLONG, unsigned=True), b"\x00" + b"\xff" * 8, (1 << 64) - 1),
    (_col(T.LONGLONG), b"\x00" + bytes(7) + b"\x80", -(1 << 63)),
    (_col(T.TINY, unsigned=None), b"\x00\xff", -1),
    (_col(T.BIT, (1, 8)), b"\x00" + b"\xff" * 9, (1 << 72) - 1),
    (_col(T.ENUM, 1, enum_values=("a", "b")), b"\x00\x03", 3),
    (_col(T.ENUM, 2, enum_values=("a", "b")), b"\x00\x02\x00", "b"),
    (_col(T.SET, 8, set_values=tuple("abc")), b"\x00\x05" + bytes(6) + b"\x80", ["a", "c"]),
    (_col(T.VARCHAR, 20, collation=8), b"\x00\x03\x81\xe9a", "\\x81éa"),
    (_col(T.VARCHAR, 20, collation=45), b"\x00\x02\xff\x41", "\\xffA"),
    (_col(T.VARCHAR, 20, collation=None), b"\x00\x02\xff\x41", "/0E="),
    (_col(T.STRING, 4, collation=63), b"\x00\x01a", "YQAAAA=="),
    (_col(T.FLOAT), b"\x00" + struct.pack("<f", 1.1), 1.1),
    (_col(T.DOUBLE), b"\x00" + struct.pack("<d", -0.0), -0.0),
    (_col(T.NULL), b"\x00", None),
    (_col(T.DECIMAL, (4, 2)), b"\x00\x00", None),
]


@pytest.mark.parametrize("col, raw, want", EDGES, ids=lambda x: getattr(x, "type", None) and T(x.type).name)
def test_edge_values(col, raw, want) -> None:
    outcome = _one(col, raw)
    if want is not None:
        assert outcome[0] == "ok" and same(outcome[1][0]["c"], want), outcome


def test_image_call_and_update_pairs() -> None:
    cols = [Column(0, T.LONG, 0, nullable=False, name="id"), Column(1, T.VARCHAR, 10, collation=45, name="v")]
    data = b"\x00\x01\x00\x00\x00\x02hi" + b"\x02\x01\x00\x00\x00"
    py, native = _both(_decode(cols, data * 2, "update"))
    assert_sameoutcome(py, native)
    assert native[1] == [({"id": 1, "v": "hi"}, {"id": 1, "v": None})] * 2
    rowcodec.use_speedups(True)
    image = TableCodec(tuple(cols)).image(3)
    assert image(data, 0, frozenset()) == ({"id": 1, "v": "hi"}, 8)
    with pytest.raises(EventDecodeError):
        image(data, len(data) + 1, frozenset())
    with pytest.raises(EventDecodeError):
        image(data[:7], 0, None)


@pytest.mark.parametrize("plan", [
    ((99, False, (), "k"),), ((C.OP_INT, False, (5, True), "k"),), ((C.OP_INT, False, (), "k"),),
    ((C.OP_DECIMAL, False, (70, 2, True), "k"),), ((C.OP_TEXT, False, (1, None), "k"),),
    ((C.OP_BYTES_CALL, False, (1, 5), "k"),), ("not an entry",), ((C.OP_NONE, False, (), 5),),
])
def test_bad_plans_are_rejected(plan) -> None:
    with pytest.raises((TypeError, ValueError)):
        C.Image(plan, 0)


def test_empty_images_raise() -> None:
    codec = TableCodec((Column(0, T.LONG, 0),))
    h = SimpleNamespace(pos=4, type_code=30)
    for native in (False, True):
        rowcodec.use_speedups(native)
        with pytest.raises(EventDecodeError, match="empty"):
            R._decode_rows(codec, "insert", b"\x00", 0, None, False, h, 0)


# --------------------------------------------------------------------------- hypothesis


def _recorded_events() -> list:
    """(codec, kind, data, present_before, present_after, partial, null_offset) of corpus rows events."""
    recorded = []
    original = R._decode_rows

    def record(codec, kind, data, before, after, partial, h, null_offset):
        recorded.append((codec, kind, bytes(data), before, after, partial, null_offset))
        return original(codec, kind, data, before, after, partial, h, null_offset)

    R._decode_rows = record
    try:
        for path in CORPUS_FILES:
            file_rows(_read(path))
    finally:
        R._decode_rows = original
    # one sample per (table shape, kind): enough variety, small enough to draw from
    seen, out = set(), []
    for item in recorded:
        key = (tuple(item[0].columns), item[1], item[3], item[4], item[5])
        if key not in seen and len(item[2]) < 20000:
            seen.add(key)
            out.append(item)
    return out


_SAMPLES: list | None = None


def _samples() -> list:
    global _SAMPLES
    if _SAMPLES is None:
        _SAMPLES = _recorded_events()
    return _SAMPLES


def _run(sample, data: bytes):
    codec, kind, _, before, after, partial, null_offset = sample
    h = SimpleNamespace(pos=4, type_code=30)
    return lambda: R._decode_rows(codec, kind, data, before, after, partial, h, null_offset)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_corpus_rows(data) -> None:
    samples = _samples()
    if not samples:
        pytest.skip("no corpus rows")
    sample = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]
    edits = data.draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6))
    cut = data.draw(st.none() | st.integers(0, 1 << 20))
    extra = data.draw(st.binary(max_size=8))
    py, native = _both(_run(sample, mutate(sample[2], edits, cut, extra)))
    assert_sameoutcome(py, native)
    event(py[0])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_synthetic_tables(data) -> None:
    columns, kind, null_offset, raw = synthetic_rows(data)
    py, native = _both(_decode(columns, raw, kind, null_offset))
    assert_sameoutcome(py, native)
    event(py[0])
