"""Text checked 32 bytes at a time (``library/_utf8simd.h``, AVX2) gives what the byte-by-byte code gives.

``one_line`` and ``comment`` (ANNOTATE_ROWS text) and quoted VARCHAR values are compared with Python's own
UTF-8 decoder and ``literals.quote``, with the blocks on and off: every pair of bytes, and the three- and
four-byte forms whose second byte is near the ends of Unicode's ranges (overlongs, surrogates, above
U+10FFFF, cut short), each at the offsets around the end of a 32-byte block, between ASCII or between
multi-byte characters. The other text tests of the C writer are in test_sql_native.py.
"""

from __future__ import annotations

import pytest

from binlogd.library.sqlwriter.literals import quote
from binlogd.protocol import rowcodec
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.tablemap import Column

C = pytest.importorskip("binlogd.library._sqlrows", reason="the C extension is not built (pip install -e .)")

_PIECES = [bytes([a, b]) for a in range(256) for b in range(256)] + [
    bytes([a, b, c, *d]) for a in range(0xE0, 0x100) for b in range(0x70, 0xC8) for c in (0x41, 0x80, 0xBF, 0xC0)
    for d in ((), (0x41,), (0x80,), (0xBF,))]
_OFFSETS = [0, 29, 30, 31, 32, 33, 62, 63]


@pytest.fixture(params=[True, False], ids=["blocks", "bytewise"])
def blocks(request):
    on = C.utf8_blocks(request.param)
    yield on
    C.utf8_blocks(True)


def test_blocks_are_on_where_the_cpu_has_avx2() -> None:
    with open("/proc/cpuinfo") as fh:
        avx2 = " avx2" in fh.read()
    assert C.utf8_blocks(True) is avx2 and C.utf8_blocks(False) is False
    C.utf8_blocks(True)


def _decoded(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


@pytest.mark.parametrize("offset", _OFFSETS)
@pytest.mark.parametrize("around", [b"a", "é".encode()], ids=["ascii", "two-byte"])
def test_one_line_and_comment_of_every_piece(offset, around, blocks) -> None:
    before = (around * offset)[:offset]
    before = before[:-1] if before.endswith(b"\xc3") else before  # whole characters only
    for piece in _PIECES:
        raw = before + piece + around * 24
        text = _decoded(raw)
        assert C.one_line(raw) is (text is not None and "\n" not in text and "\r" not in text), raw
        lines = C.comment(raw)
        assert lines == (None if text is None else ("-- " + text.replace("\r", " ").replace("\n", "\n-- ")).encode())


@pytest.mark.parametrize("offset", _OFFSETS)
def test_quoted_values_of_every_piece(offset, blocks) -> None:
    plan = rowcodec.image_plan((Column(0, T.VARCHAR, 300, nullable=False, name="v", collation=45),), [0])
    image = C.Image(plan, 0, ((C.F_TEXT, b"`v`", None),), None)
    texts = [b"x" * offset + piece + b"y" * 40 for piece in _PIECES]
    data = b"".join(b"\x00" + len(t).to_bytes(2, "little") + t for t in texts)
    written, rows = C.rows(image, None, data, C.W_VALUES, b"INSERT ", False)
    expected = "INSERT " + ",".join(f"({quote(t.decode('utf-8', 'backslashreplace'))})" for t in texts) + ";"
    assert rows == len(texts) and written == expected.encode("utf-8", "surrogateescape")
