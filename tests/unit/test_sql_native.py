"""The C SQL writer (``library._sqlrows`` through ``binlogd.library.sqlwriter.native``) against the reference path.

The reference is what ``binlogd sql`` wrote before the C writer: rows decoded into dicts by the
generated Python decoders (no C at all), each value rendered by :mod:`binlogd.library.sqlwriter.literals`. Both
must give the same bytes, or the reference must fail where the C writer does:
- ``binlogd sql`` of every file of the shared corpus: replay, flashback and flashback --skip-unsafe give
  the same exit code, output and messages;
- synthetic tables of every column type (hypothesis): whole and partial images, with and without a
  primary key (from the TABLE_MAP or a schema history), inserts, updates and deletes replayed and
  inverted, plausible and mutated bytes;
- text (every byte, invalid UTF-8), every double and float, and the ANNOTATE_ROWS comment lines.
The every-type tables of a real server are in tests/integration/test_sql_native_every_type.py.
"""

from __future__ import annotations

import math
import random
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from binlogd.library.sqlwriter import native
from binlogd.library.sqlwriter.literals import literal_kind, quote
from binlogd.library.sqlwriter.rowsql import TablePlan
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol import events as E
from binlogd.protocol import rowcodec
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.errors import EventDecodeError
from binlogd.protocol.rowcodec import TableCodec
from binlogd.protocol.rows import RowImages
from binlogd.protocol.tablemap import Column
from tests.support.paths import CORPUS
from tests.support.rowfuzz import COLUMN_SPECS, mutate, value_bytes
from tests.support.sqlout import counting_c_writer
from tests.support.sqlout import speedups as _mode
from tests.support.sqlout import sql_main as _sql

C = pytest.importorskip("binlogd.library._sqlrows", reason="the C extension is not built (pip install -e .)")

CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".txt",
                                                                                          ".json", ".py", ".result"))
_HEADER = E.EventHeader(1700000000, 30, 7, 100, 0, 0, 1234)


# --------------------------------------------------------------------------- whole files


@pytest.fixture
def c_rows(monkeypatch):
    return counting_c_writer(monkeypatch)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_same_sql(path, capsysbinary, c_rows) -> None:
    for options in ([], ["--flashback"], ["--flashback", "--skip-unsafe"]):
        with _mode(False):
            reference = _sql(capsysbinary, [*options, path])
        c_rows["raised"].clear()
        with _mode(True):
            written = _sql(capsysbinary, [*options, path])
        assert written[0] == reference[0], (options, written[2], reference[2])
        assert written[2] == reference[2], options
        assert written[1] == reference[1], options
        assert not c_rows["raised"] or reference[0] != 0, f"the C writer raised {c_rows['raised'][0]!r} ({options})"


def test_corpus_goes_through_c(capsysbinary, c_rows) -> None:
    """The corpus comparison is worth something only if the C writer wrote (nearly) every rows event."""
    if not CORPUS_FILES:
        pytest.skip("no corpus")
    with _mode(True):
        for path in CORPUS_FILES:
            _sql(capsysbinary, [path])
    assert c_rows["ok"] > 1000 and c_rows["runs"] > 0, c_rows


# --------------------------------------------------------------------------- synthetic tables


def _table(data, most: int) -> tuple[tuple, tuple[Column, ...]]:
    """1 to ``most`` columns of any type, oddly named, some of them the primary key: (specs, columns)."""
    specs = data.draw(st.lists(COLUMN_SPECS, min_size=1, max_size=most), label="columns")
    key = data.draw(st.sets(st.integers(0, len(specs) - 1), max_size=2), label="key")
    names = data.draw(st.lists(st.sampled_from(["c", "we`ird", "é", "a b", "'q'"]), min_size=len(specs),
                               max_size=len(specs)))
    columns = tuple(Column(i, t, m, nullable=data.draw(st.booleans()), name=f"{names[i]}{i}", primary_key=i in key,
                           **kw) for i, (t, m, kw) in enumerate(specs))
    return specs, columns


def _image(data, specs, columns, present: list[int], null_offset: int) -> bytes:
    nulls, values = 0, b""
    for bit, i in enumerate(present):
        if columns[i].nullable and data.draw(st.booleans()):
            nulls |= 1 << (bit + null_offset)
        else:
            values += value_bytes(data.draw, specs[i][0], specs[i][1])
    return nulls.to_bytes((len(present) + null_offset + 7) // 8, "little") + values


def _present(data, n: int) -> int:
    """A presence bitmap: mostly every column, sometimes a part of them (MINIMAL images)."""
    every = (1 << n) - 1
    return data.draw(st.sampled_from([every, every]) | st.integers(1, every), label="present")


def _outcome(fn):
    try:
        return "ok", fn()
    except (EventDecodeError, SqlOutError) as exc:
        return "error", type(exc)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_synthetic_tables(data) -> None:
    """Up to 8 columns and 4 rows, sometimes mutated: what is written, and what is refused."""
    _check_synthetic(data, 8, 4, mutated=True)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_small_tables(data) -> None:
    """One or two columns and rows, not mutated: most of them are written, every type many times."""
    _check_synthetic(data, 2, 2, mutated=False)


def _check_synthetic(data, most_columns: int, most_rows: int, mutated: bool) -> None:
    specs, columns = _table(data, most_columns)
    kind = data.draw(st.sampled_from(["insert", "update", "delete"]), label="kind")
    null_offset = data.draw(st.sampled_from([0, 0, 1]), label="null_offset")
    before = _present(data, len(columns))
    after = _present(data, len(columns)) if kind == "update" else None
    images = []
    for _ in range(data.draw(st.integers(1, most_rows))):
        images.append(_image(data, specs, columns, [i for i in range(len(columns)) if before >> i & 1], null_offset))
        if kind == "update":
            images.append(_image(data, specs, columns, [i for i in range(len(columns)) if after >> i & 1],
                                 null_offset))
    raw = b"".join(images)
    if mutated and data.draw(st.booleans(), label="mutate"):
        raw = mutate(raw, data.draw(st.lists(st.tuples(st.integers(0, 999), st.integers(0, 255)), max_size=2)),
                     data.draw(st.none() | st.integers(1, 999)), data.draw(st.binary(max_size=3)))
    if not raw:
        return  # an event without rows: the renderer writes nothing for it, on either path
    flavor = data.draw(st.sampled_from(["mariadb", "mysql"]), label="flavor")
    history_key = data.draw(st.sampled_from([(), (columns[0].name,), (columns[-1].name, columns[0].name)]))
    tmap = E.TableMapEvent(_HEADER, 70, 0, "db", "t", columns)
    try:
        plan = TablePlan(tmap, flavor, "f:4", history_key)
    except SqlOutError:
        event("no plan")
        return  # a type no row holds: both paths stop here
    invert = data.draw(st.booleans(), label="invert")

    def rows_event() -> E.RowsEvent:
        codec = TableCodec(columns)
        images = RowImages(codec, kind, raw, before, after, False, _HEADER, null_offset)
        return E.RowsEvent(_HEADER, kind, 70, 0, "db", "t", codec.labels, images)

    def reference():
        rows = rows_event().rows
        statements = plan.invert(kind, rows) if invert else plan.replay(kind, rows)
        return None if statements is None else "\n".join(s + ";" for s in statements).encode("utf-8", "surrogateescape")

    with _mode(False):
        expected = _outcome(reference)
    with _mode(True):
        try:
            written = native.row_lines(plan, rows_event(), invert)
        except Exception as exc:  # noqa: BLE001 - the caller falls back on the reference
            assert expected[0] == "error", f"the C writer raised {exc!r} on rows the reference writes"
            event("C raised")
            return
    if written is None:
        full = lambda bits: bits == (1 << len(columns)) - 1  # noqa: E731
        keyed = lambda bits: full(bits) or bool(plan.pk) and all(  # noqa: E731
            bits >> next(c.index for c in columns if c.name == k) & 1 for k in plan.pk)
        invertible = {"insert": keyed(before), "delete": full(before),
                      "update": after is not None and full(before) and keyed(after)}[kind]
        assert invert and not invertible or any(literal_kind(c) == "signed?" for c in columns), expected
        event("reference path")
        return
    assert expected == ("ok", written[0])
    event("written")
    for c in columns:
        event(f"written: {literal_kind(c)}")


def _one_column_lines(col: Column, values: list[bytes], kind: str = "update", key: bool = False) -> tuple:
    """(reference, native) statements for rows of one column holding ``values`` (raw value bytes)."""
    col = Column(0, col.type, col.meta, nullable=False, name="v", unsigned=col.unsigned, collation=col.collation,
                 primary_key=key)
    columns = (col,)
    if kind == "update":  # each value, updated to the next
        values = [v for pair in zip(values, values[1:] + values[:1]) for v in pair]
    raw = b"".join(b"\x00" + v for v in values)
    plan = TablePlan(E.TableMapEvent(_HEADER, 70, 0, "db", "t", columns), "mariadb", "f:4")

    def rows_event():
        codec = TableCodec(columns)
        images = RowImages(codec, kind, raw, 1, 1 if kind == "update" else None, False, _HEADER, 0)
        return E.RowsEvent(_HEADER, kind, 70, 0, "db", "t", codec.labels, images)

    with _mode(False):
        reference = "\n".join(s + ";" for s in plan.replay(kind, rows_event().rows)).encode("utf-8", "surrogateescape")
    with _mode(True):
        written = native.row_lines(plan, rows_event(), False)
    return reference, written[0]


@pytest.mark.parametrize("collation", [45, 33, 8, 11])  # utf8mb4, utf8mb3, latin1, ascii
def test_text_every_byte_and_invalid_utf8(collation) -> None:
    texts = [bytes(range(256)), "é€😀\u2028'\\\"".encode(), b"\xc3\x28\xe2\x82\xf0\x9f\x98\xed\xa0\x80",
             b"\xf4\x90\x80\x80\xc0\xaf\xff\xe0\x80\x80\xf0\x80\x80\x80\xc3", b"", b"\x00\n\r\x1a'\\"]
    values = [len(t).to_bytes(2, "little") + t for t in texts]
    reference, written = _one_column_lines(Column(0, T.VARCHAR, 300, collation=collation), values)
    assert written == reference
    if collation == 45:
        assert b"'\\\\xc3(" in written and b" COLLATE utf8mb4_bin" in written and b"\\0\\n\\r\\Z\\'\\\\" in written


_TEXT_BYTES = st.lists(st.sampled_from([b"a", b"Z0 ", b"\x00", b"\n", b"\r", b"\x1a", b"'", b"\\", b'"', b"\x7f", "é".encode(),
                                        "€".encode(), "😀".encode(), b"\xff", b"\xc3", b"\xed\xa0\x80"]),
                       max_size=60).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT_BYTES | st.binary(max_size=70), min_size=1, max_size=4), st.sampled_from([45, 8]))
def test_text_runs(texts, collation) -> None:
    """Text of plain runs of every length between the bytes quote() escapes and the non-ASCII ones."""
    values = [len(t).to_bytes(2, "little") + t for t in texts]
    reference, written = _one_column_lines(Column(0, T.VARCHAR, 300, collation=collation), values)
    assert written == reference


@pytest.mark.parametrize("collation", [45, 8])  # utf8mb4: read in place, 16 bytes at a time; latin1: decoded first
def test_text_characters_around_blocks(collation) -> None:
    """Text the C writer copies 16 bytes at a time (reading ahead into the next row's bytes): a multi-byte
    character at every offset around 16 and 32, running past a block and past the value's end, then a
    malformed byte, a stray continuation byte, a character cut short, an escaped byte, a tab, or more text."""
    texts = []
    for char in ("é", "€", "😀"):
        c = char.encode()
        for lead in range(36):
            for tail in (b"", b"\xff", b"\x80", c[:-1], b"'", b"\x00", b"\t", b"\\", b"z" * 17, c * 9):
                texts += [b"a" * lead + c + tail, c * (lead // len(c) + 1) + tail, b"'" * lead + c + tail]
    values = [len(t).to_bytes(2, "little") + t for t in texts]
    reference, written = _one_column_lines(Column(0, T.VARCHAR, 300, collation=collation), values, "insert")
    assert written == reference


def test_text_read_ahead_is_not_written() -> None:
    """The 16-byte blocks of a text may reach into the bytes after it (here an INT's): continuation bytes,
    letters or bytes quote() escapes there change nothing, wherever the text's last character ends."""
    plan = rowcodec.image_plan((Column(0, T.VARCHAR, 300, nullable=False, name="v", collation=45),
                                Column(1, T.LONG, 0, nullable=False, unsigned=True, name="n")), [0, 1])
    image = C.Image(plan, 0, ((C.F_TEXT, b"`v`", None), (C.F_NATIVE, b"`n`", None)), None)
    for c in ("é".encode(), "€".encode(), "😀".encode()):
        for lead in range(36):
            for tail in (b"", b"\xff", c[:-1], c[:1], b"'", b"\t", b"z" * 17):
                for after in (b"\xa9\xa9\xa9\xa9", b"z\xa9'\x00", b"zz\\\n", c[1:] + b"\x80" * (5 - len(c))):
                    text = b"a" * lead + c + tail
                    data = b"\x00" + len(text).to_bytes(2, "little") + text + after
                    expected = f"INSERT ({quote(text.decode('utf-8', 'backslashreplace'))},{int.from_bytes(after, 'little')});"
                    assert C.rows(image, None, data, C.W_VALUES, b"INSERT ", False) == (expected.encode(), 1), text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(min_size=8, max_size=8), min_size=1, max_size=5),
       st.lists(st.binary(min_size=4, max_size=4), min_size=1, max_size=5))
def test_every_double_and_float(doubles, floats) -> None:
    for col, values in ((Column(0, T.DOUBLE, 8), doubles), (Column(0, T.FLOAT, 4), floats)):
        for kind, key in (("insert", False), ("update", False), ("delete", True)):
            reference, written = _one_column_lines(col, values, kind, key)
            assert written == reference


def _double_families(rnd: random.Random) -> list[int]:
    """Bits of doubles where a shortest-digits writer goes wrong if it does: every binary exponent (its
    smallest, largest and some random fractions, both signs), the neighbours of short decimals from 1e-325
    to 1e308 (powers of ten, exact ties), random decimals of up to 18 digits, and random bit patterns."""
    bits = [sign << 63 | e << 52 | m for e in range(2047) for sign in (0, 1)
            for m in (0, 1, 2, (1 << 52) - 1, 1 << 51, rnd.getrandbits(52), rnd.getrandbits(52))]
    for k in range(-325, 309):
        for digits in (1, 2, 5, 9, 125, 4999, 5001):
            x = float(f"{digits}e{k}")
            if not math.isinf(x):
                b = struct.unpack("<Q", struct.pack("<d", x))[0]
                bits += [b, b + 1, max(b - 1, 0)]
    bits += [struct.unpack("<Q", struct.pack("<d", rnd.randint(-10**18, 10**18) / 10 ** rnd.randint(0, 12)))[0]
             for _ in range(5000)]
    # Doubles m * 2^e above 2^54 whose value or gap ends (4m, 4m - 2 and 4m + 2, times 2^(e - 2)) are multiples
    # of the power of 5 they are scaled by: those decide ties and whether an end is in.
    for biased in range(1077, 1160):
        e2 = biased - 1077
        q = math.floor(e2 * math.log10(2)) - (e2 > 3)
        for end in (0, -2, 2):
            first = end * pow(-4, -1, 5**q) % 5**q  # 4m + end = 0 (mod 5^q)
            first += (((1 << 52) - first) // 5**q + 1) * 5**q
            bits += [biased << 52 | (m & ((1 << 52) - 1)) for m in range(first, first + 4 * 5**q, 5**q) if m < 1 << 53]
    bits += [rnd.getrandbits(64) for _ in range(20000)]
    return [b for b in bits if b >> 52 & 0x7FF != 0x7FF]


def test_doubles_and_floats_by_family() -> None:
    """DOUBLE and FLOAT as repr() writes them, without repr(): families of values against the reference."""
    rnd = random.Random(20261126)
    doubles = [struct.pack("<Q", b) for b in _double_families(rnd)]
    floats = [struct.pack("<I", sign << 31 | e << 23 | m) for e in range(255) for sign in (0, 1)
              for m in (0, 1, (1 << 23) - 1, rnd.getrandbits(23))]
    floats += [struct.pack("<I", b) for b in (rnd.getrandbits(32) for _ in range(20000)) if b >> 23 & 0xFF != 0xFF]
    for col, values in ((Column(0, T.DOUBLE, 8), doubles), (Column(0, T.FLOAT, 4), floats)):
        reference, written = _one_column_lines(col, values, "insert")
        assert written == reference


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=20).map(lambda s: s.encode()) | _TEXT_BYTES)
def test_comment_lines(raw) -> None:
    query = raw.decode("utf-8", "backslashreplace")
    with _mode(False):
        reference = native.comment(query, raw)
    with _mode(True):
        written = native.comment(query, raw)
        assert (b"".join(written) if type(written) is tuple else written) == reference
        assert (C.comment(raw) is None) == (query.encode() != raw)
        assert C.one_line(raw) == (C.comment(raw) is not None and b"\n" not in raw and b"\r" not in raw)
        assert (type(written) is tuple) == C.one_line(raw)


# Well-formed characters at the ends of Unicode's ranges, every kind of byte sequence Python's UTF-8 decoder
# refuses (stray continuation bytes, C0/C1 and other overlongs, surrogates, above U+10FFFF, F5..FF, characters
# cut short by an ASCII byte), and the bytes one_line() looks at besides: CR, LF, a tab, NUL.
_UTF8_PIECES = ["é", "€", "😀", "\x80", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"]
_UTF8_PIECES = [c.encode() for c in _UTF8_PIECES] + [
    b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xc2\x7f", b"\xc2\xc0", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe1\x7f\x80",
    b"\xe1\x80\x7f", b"\xe1\x80\xc0", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xef\xbf", b"\xf0\x80\x80\x80",
    b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x7f", b"\xf0\x90\x80", b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xc0", b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xe2\x82a", b"\xf0\x9f\x98a",
    b"\r", b"\n", b"\r\n", b"\t", b"\x00", b"\x0b\x0c\x0e"]


def _one_line(raw: bytes) -> bool:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return "\n" not in text and "\r" not in text


def test_one_line_and_comment_around_blocks() -> None:
    """one_line() and comment() of text looked at 64 and 16 bytes at a time: each piece at every offset around
    the blocks' ends (16, 32, 64, 128), after ASCII or after multi-byte characters (which then run past a
    block), followed by nothing (a character cut short by the end), by ASCII or by more characters."""
    checked = 0
    for piece in _UTF8_PIECES:
        for lead in [*range(0, 72), *range(110, 132)]:
            whole = ("ß€" * lead).encode()[:lead].decode("utf-8", "ignore").encode()  # whole characters
            for before in (b"a" * lead, whole, ("€" * lead).encode()[:lead]):
                for after in (b"", b"z", b"z" * 17, b"z" * 70, "€".encode() * 23, piece, b"\t" * 3):
                    raw = before + piece + after
                    expected = _one_line(raw)
                    assert C.one_line(raw) is expected, raw
                    # not at the start of a bytes object, and followed by continuation bytes not to be read
                    inside = memoryview(b"." + raw + b"\x80\x80\x80")[1:-3]
                    assert C.one_line(inside) is expected, raw
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        assert C.comment(raw) is None and C.comment(inside) is None, raw
                    else:
                        lines = ("-- " + text.replace("\r", " ").replace("\n", "\n-- ")).encode()
                        assert C.comment(raw) == lines and C.comment(inside) == lines, raw
                    checked += 1
    assert checked > 40000


def test_forms_that_do_not_fit_the_plan_are_refused() -> None:
    plan = rowcodec.image_plan((Column(0, T.LONG, 0, unsigned=False, name="a"),), [0])
    for form in [(C.F_TEXT, b"`a`", None), (C.F_CALL, b"`a`", (str, str)), (C.F_NATIVE, "`a`", None), (99, b"", None)]:
        with pytest.raises((ValueError, TypeError)):
            C.Image(plan, 0, (form,), None)
    image = C.Image(plan, 0, ((C.F_NATIVE, b"`a`", None),), (0,))
    with pytest.raises(ValueError):
        C.rows(image, image, b"\x00\x01\x00\x00\x00", C.W_DELETE, b"", False)
    assert C.rows(image, None, b"\x00\xff\xff\xff\xff" * 2, C.W_DELETE, b"DELETE", True) == (
        b"DELETE WHERE `a`=-1;\nDELETE WHERE `a`=-1;", 2)
