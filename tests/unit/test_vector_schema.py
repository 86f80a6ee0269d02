"""A schema source turns MariaDB's binary VARCHAR of 4n bytes into the VECTOR(n) it is (MariaDB 11.7+).

The TABLE_MAP alone cannot tell VECTOR(3) from VARBINARY(12); :func:`apply_schema` takes the schema's
``vector_dimensions`` and the row image then decodes to float32 values, in the C and the Python codec.
"""

from __future__ import annotations

import struct

import pytest

from binlogd.protocol import rowcodec
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.tablemap import Column, TableSchema, apply_schema, may_hide_vectors

LOGGED = (Column(0, T.LONG, 0, False), Column(1, T.VARCHAR, 12, False, collation=63),
          Column(2, T.VARCHAR, 400, True, collation=63), Column(3, T.VARCHAR, 12, True, collation=63),
          Column(4, T.VARCHAR, 12, True, collation=45))
SCHEMA = TableSchema(names=("id", "v", "w", "b", "s"), vector_dimensions=(None, 3, 100, None, None))


def test_the_schema_says_which_binary_varchars_are_vectors():
    cols = apply_schema(LOGGED, SCHEMA)
    assert [(c.name, c.type, c.meta, c.vector_dimensions) for c in cols] == [
        ("id", T.LONG, 0, None), ("v", T.VECTOR, 1, 3), ("w", T.VECTOR, 2, 100),
        ("b", T.VARCHAR, 12, None), ("s", T.VARCHAR, 12, None)]


def test_a_schema_that_disagrees_with_the_logged_size_or_charset_changes_nothing():
    wrong = TableSchema(names=SCHEMA.names, vector_dimensions=(None, 4, None, None, 3))  # 16 bytes; utf8mb4
    assert [c.type for c in apply_schema(LOGGED, wrong)] == [c.type for c in LOGGED]


def test_may_hide_vectors():
    assert may_hide_vectors(LOGGED)
    assert not may_hide_vectors((LOGGED[0], LOGGED[4], Column(1, T.VARCHAR, 10, True, collation=63)))


@pytest.mark.parametrize("speedups", [False, True], ids=["python", "c"])
def test_the_row_image_decodes_to_float32_lists(speedups):
    if speedups and not rowcodec.use_speedups(True):
        pytest.skip("protocol._rowimage is not built")
    saved = rowcodec.use_speedups(speedups)
    try:
        codec = rowcodec.TableCodec(apply_schema(LOGGED, SCHEMA))
        v = struct.pack("<3f", 1.0, -0.1, 3.5)
        w = struct.pack("<100f", *(i / 7 for i in range(100)))
        image = (bytes([0b10000]) + struct.pack("<i", 7) + bytes([12]) + v + struct.pack("<H", 400) + w
                 + bytes([3]) + b"abc")  # null bits: only s is NULL
        row, end = codec.image(0b11111)(memoryview(image), 0, frozenset())
    finally:
        rowcodec.use_speedups(saved)
    assert end == len(image)
    assert row["id"] == 7 and row["v"] == [1.0, -0.1, 3.5] and row["s"] is None and row["b"] == "YWJj"
    assert struct.pack("<100f", *row["w"]) == w
