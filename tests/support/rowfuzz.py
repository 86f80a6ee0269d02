"""Hypothesis strategies for row images: synthetic tables of every column type and plausible value
bytes (often well-formed, sometimes not), and byte mutations. Shared by the C-versus-Python tests of
the row image decoders (test_rowimage_speedup) and of the JSON row writer (test_jsonrows)."""

from __future__ import annotations

from hypothesis import strategies as st

from binlogd.protocol import values as V
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.tablemap import Column


def mutate(data: bytes, edits, cut: int | None, extra: bytes) -> bytes:
    """``data`` with bytes overwritten (``edits``: (where, value)), cut at ``cut`` and ``extra`` appended."""
    buf = bytearray(data)
    for where, value in edits:
        if buf:
            buf[where % len(buf)] = value
    if cut is not None and buf:
        del buf[cut % len(buf):]
    return bytes(buf) + extra


COLLATIONS = st.sampled_from([None, 45, 33, 8, 63, 35, 54, 28, 3])
COLUMN_SPECS = st.one_of(
    st.builds(lambda t, u: (t, 0, {"unsigned": u}), st.sampled_from([T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG]),
              st.sampled_from([None, False, True])),
    st.builds(lambda t: (t, 0, {}), st.sampled_from([T.FLOAT, T.DOUBLE, T.YEAR, T.DATE, T.NEWDATE, T.TIME,
                                                     T.DATETIME, T.TIMESTAMP, T.NULL, T.DECIMAL, T.TYPED_ARRAY])),
    st.builds(lambda t, m: (t, m, {}), st.sampled_from([T.TIME2, T.DATETIME2, T.TIMESTAMP2]), st.integers(0, 7)),
    st.builds(lambda p, s: (T.NEWDECIMAL, (p, s), {}), st.integers(0, 66), st.integers(0, 31)),
    st.builds(lambda b, n: (T.BIT, (b, n), {}), st.integers(0, 7), st.integers(0, 9)),
    st.builds(lambda m, n: (T.ENUM, m, {"enum_values": n}), st.integers(0, 3),
              st.none() | st.lists(st.text(max_size=3), max_size=5).map(tuple)),
    st.builds(lambda m, n: (T.SET, m, {"set_values": n}), st.integers(0, 9),
              st.none() | st.lists(st.text(max_size=3), max_size=70).map(tuple)),
    st.builds(lambda t, m, c: (t, m, {"collation": c}), st.sampled_from([T.VARCHAR, T.VAR_STRING, T.STRING]),
              st.sampled_from([3, 255, 256, 300]), COLLATIONS),
    st.builds(lambda t, m, c: (t, m, {"collation": c}), st.sampled_from([T.BLOB, T.TINY_BLOB, T.GEOMETRY]),
              st.integers(0, 5), COLLATIONS),
    st.builds(lambda t, m: (t, m, {}), st.sampled_from([T.JSON, T.VECTOR]), st.integers(1, 4)),
)


def value_bytes(draw, t, m) -> bytes:
    """Plausible bytes for one value (a random length, often within bounds)."""
    fixed = {T.TINY: 1, T.SHORT: 2, T.INT24: 3, T.LONG: 4, T.LONGLONG: 8, T.FLOAT: 4, T.DOUBLE: 8, T.YEAR: 1,
             T.DATE: 3, T.NEWDATE: 3, T.TIME: 3, T.DATETIME: 8, T.TIMESTAMP: 4}
    if t in fixed:
        return draw(st.binary(min_size=fixed[t], max_size=fixed[t]))
    if t in (T.NULL, T.DECIMAL, T.TYPED_ARRAY):
        return b""
    if t in (T.TIME2, T.DATETIME2, T.TIMESTAMP2):
        fixed = {T.TIME2: 3, T.DATETIME2: 5, T.TIMESTAMP2: 4}[t] + ((m if 0 <= m <= 6 else 0) + 1) // 2
    elif t == T.NEWDECIMAL:
        fixed = V.decimal_size(*m) if 0 < m[0] <= 65 and 0 <= m[1] <= min(m[0], 30) else 0
    elif t == T.BIT:
        fixed = (m[1] * 8 + m[0] + 7) // 8
    elif t in (T.ENUM, T.SET):
        fixed = m if 1 <= m <= (2 if t == T.ENUM else 8) else 1
    else:
        fixed = None
    if t == T.NEWDECIMAL and fixed and draw(st.booleans()):
        return decimal_bytes(draw, *m)
    if fixed is not None:
        return draw(st.binary(min_size=fixed, max_size=fixed) | st.binary(max_size=12))
    prefix = 1 if t in (T.VARCHAR, T.VAR_STRING, T.STRING) and m < 256 else 2 if m < 256 else 4
    body = draw(st.binary(max_size=12) | st.text(max_size=6).map(lambda s: s.encode()))
    if t == T.JSON and draw(st.booleans()):   # a few valid binary JSON values: null, 1, "abc", [true]
        body = draw(st.sampled_from([b"\x04\x00", b"\x05\x01\x00", b"\x0c\x03abc", b"\x02\x01\x00\x08\x00\x04\x01\x00"]))
    elif t == T.VECTOR:
        body = body[:len(body) // 4 * 4]
    return len(body).to_bytes(4, "little")[:prefix] + body


def decimal_bytes(draw, precision: int, scale: int) -> bytes:
    """A well-formed binary DECIMAL (digit groups in range), positive or negative."""
    intg, dig2bytes = precision - scale, (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    sizes = ([intg % 9] if intg % 9 else []) + [9] * (intg // 9) + [9] * (scale // 9) + \
        ([scale % 9] if scale % 9 else [])
    raw = b"".join(draw(st.integers(0, 10 ** d - 1)).to_bytes(dig2bytes[d], "big") for d in sizes)
    raw = bytes([raw[0] | 0x80]) + raw[1:]
    return bytes(b ^ 0xFF for b in raw) if draw(st.booleans()) else raw



def synthetic_rows(data) -> tuple[tuple[Column, ...], str, int, bytes]:
    """A table of 1 to 8 columns of any type and the images of 1 to 4 rows (updates: pairs) of it,
    sometimes mutated: (columns, kind, null_offset, images). ``data`` is hypothesis' ``st.data()``."""
    specs = data.draw(st.lists(COLUMN_SPECS, min_size=1, max_size=8), label="columns")
    nullable = data.draw(st.lists(st.booleans(), min_size=len(specs), max_size=len(specs)))
    columns = tuple(Column(i, t, m, nullable=n, name=data.draw(st.sampled_from([None, f"c{i}"])), **kw)
                    for i, ((t, m, kw), n) in enumerate(zip(specs, nullable)))
    kind = data.draw(st.sampled_from(["insert", "update"]))
    null_offset = data.draw(st.sampled_from([0, 0, 1]))
    images = []
    for _ in range(data.draw(st.integers(1, 4)) * (2 if kind == "update" else 1)):
        nulls, values = 0, b""
        for k, ((t, m, _), n) in enumerate(zip(specs, nullable)):
            if n and data.draw(st.booleans()):
                nulls |= 1 << (k + null_offset)
            else:
                values += value_bytes(data.draw, t, m)
        images.append(nulls.to_bytes((len(columns) + null_offset + 7) // 8, "little") + values)
    raw = b"".join(images)
    if data.draw(st.booleans(), label="mutate"):
        raw = mutate(raw, data.draw(st.lists(st.tuples(st.integers(0, 999), st.integers(0, 255)), max_size=2)),
                      data.draw(st.none() | st.integers(0, 999)), data.draw(st.binary(max_size=3)))
    return columns, kind, null_offset, raw
