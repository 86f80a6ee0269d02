"""Text-protocol rows as PostgreSQL COPY text (library.textcopy, C twin ``_textcopy``), and the mirror's choice of
that path (daemon.sinks.mirrortables.copy_kinds).

- each kind's values, NULLs, long values, a row of several packets: C and Python give the same bytes, and each
  field is what the JSON path gives PostgreSQL (:func:`pg_text` of the value the snapshot's JSON holds, through
  :func:`copy_field`), for floats the same number;
- a text that is not well-formed UTF-8 or holds NUL gives None in both (the mirror then takes the JSON path,
  which names the value); malformed rows raise ValueError in both;
- copy_kinds: a kind per column, BYTEA for text in the binary charset, None for a type left to pg_text or a
  column the table lacks.
"""

from __future__ import annotations

import random
import struct

import orjson
import pytest

from binlogd.daemon.sinks.mirrortables import copy_kinds
from binlogd.daemon.snapshot.tables import TableInfo
from binlogd.daemon.snapshot.wire import plan
from binlogd.library import textcopy, textjson
from binlogd.library.pgtypes import copy_field, pg_text
from binlogd.library.schema.model import ColumnDef, TableDef
from tests.support.textproto import lenenc, packets, row_packets

C = textcopy.C

#: (MySQL column, information_schema DATA_TYPE, raw values as the snapshot reads them)
COLUMNS = [
    (ColumnDef("u", "bigint", unsigned=True), "bigint", [b"18446744073709551615", b"0"]),
    (ColumnDef("s", "bigint"), "bigint", [b"-9223372036854775808", b"7"]),
    (ColumnDef("y", "year"), "year", [b"0", b"2155"]),
    (ColumnDef("d", "decimal", precision=65, scale=30), "decimal", [b"-1.000000000000000000000000000001", b"0.5"]),
    (ColumnDef("f", "float"), "float", [b"1.100000023841858", b"-0", b"3.4028234663852886e38", b"1e-45"]),
    (ColumnDef("g", "double"), "double", [b"0.30000000000000004", b"-1.7976931348623157e308", b"5e-324", b"1e16"]),
    (ColumnDef("dt", "datetime", precision=6), "datetime",
     [b"9999-12-31 23:59:59.999999", b"0000-00-00 00:00:00", b"2020-00-10 00:00:00"]),
    (ColumnDef("ts", "timestamp", precision=3), "timestamp", [b"2038-01-19 03:14:07.999", b"0000-00-00 00:00:00"]),
    (ColumnDef("da", "date"), "date", [b"2020-02-29", b"2020-01-00", b"0000-00-00"]),
    (ColumnDef("tm", "time", precision=6), "time", [b"838:59:59.000000", b"-838:59:59"]),
    (ColumnDef("e", "enum", values=("a", "b c")), "enum", [b"b c"]),
    (ColumnDef("tx", "text", charset="utf8mb4"), "text",
     ["tab\there\r\n\\N \\. 😀 ü \u2028".encode(), b"", b"\x7f\x1f"]),
    (ColumnDef("c", "char", length=5, charset="utf8mb4"), "char", [b"ab", "é".encode()]),
    (ColumnDef("vb", "varbinary", length=20), "varbinary", [b"\x00\xff\t\n\\", b""]),
    (ColumnDef("bl", "blob", charset="binary"), "blob", [bytes(range(256))]),
    (ColumnDef("bt", "text", charset="binary"), "blob", [b"\x00\x01"]),
]
TABLE = TableDef("d", "t", tuple(c for c, _t, _v in COLUMNS), primary_key=("u",))
INFO = TableInfo("d", "t", tuple(c.name for c, _t, _v in COLUMNS), tuple(t for _c, t, _v in COLUMNS), ("u",))
KINDS = copy_kinds(TABLE, INFO.columns)


def _rows(count: int, seed: int = 1) -> list[list]:
    rnd = random.Random(seed)
    return [[None if rnd.random() < 0.1 else rnd.choice(values) for _c, _t, values in COLUMNS] for _ in range(count)]


def _both(buf: bytes, kinds: bytes = KINDS) -> bytes | None:
    """rows() in Python and (when built) in C: the same result, returned."""
    want = textcopy.py_rows(buf, 0, len(buf), kinds)
    if C is not None:
        assert C.rows(buf, 0, len(buf), kinds) == want
        assert C.rows(bytearray(buf), 0, len(buf), kinds) == want
    return want


def _json_path_fields(buf: bytes) -> list[list[str]]:
    """The fields the JSON path gives PostgreSQL for the rows of ``buf``: the snapshot's JSON of each value
    (library.textjson), then pg_text and copy_field, as daemon.sinks.mirrortables does."""
    data = textjson.py_lines(buf, 0, len(buf), plan(INFO), b"", None, b"\n", 0)
    return [[copy_field(pg_text(col, after[col.name])) for col in TABLE.columns]
            for after in map(orjson.loads, data.splitlines())]


def _same_value(col: ColumnDef, ours: str, theirs: str) -> bool:
    if ours == theirs:
        return True
    if col.type == "float":  # the server's DOUBLE text of a FLOAT and its shortest float32 text: one real
        return struct.pack("<f", float(ours)) == struct.pack("<f", float(theirs))
    return col.type == "double" and float(ours) == float(theirs)


def test_kinds_of_the_columns():
    k = textcopy
    assert KINDS == bytes([k.RAW] * 6 + [k.DATE, k.UTC, k.DATE, k.RAW, k.TEXT, k.TEXT, k.TEXT, k.BYTEA, k.BYTEA,
                           k.BYTEA])


def test_c_equals_python_equals_the_json_path():
    rows = _rows(400) + [[values[0] for _c, _t, values in COLUMNS], [None] * len(COLUMNS)]
    buf = row_packets(rows)
    got = _both(buf)
    lines = got.decode().split("\n")
    assert lines.pop() == ""
    want = _json_path_fields(buf)
    assert len(lines) == len(want) == len(rows)
    for ours, theirs in zip(lines, want):
        fields = ours.split("\t")
        assert len(fields) == len(COLUMNS)
        for col, a, b in zip(TABLE.columns, fields, theirs):
            assert _same_value(col, a, b), (col.name, a, b)


@pytest.mark.parametrize("size", [250, 251, 65535, 65536, 1 << 24])
def test_long_values_and_a_row_of_several_packets(size):
    row = [v[0] for _c, _t, v in COLUMNS]
    row[11] = b"a\tb" * (size // 3) + b"z" * (size % 3)
    buf = row_packets([row, row])
    if size == 1 << 24:
        assert buf.count(b"\xff\xff\xff") >= 2   # several packets a row
    got = _both(buf)
    assert got.count(b"\n") == 2 and got.split(b"\n")[0].split(b"\t")[11] == b"a\\tb" * (size // 3) + b"z" * (size % 3)


@pytest.mark.parametrize("bad", [b"a\x00b", b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80"])
def test_nul_or_ill_formed_text_is_left_to_the_json_path(bad):
    rows = _rows(5)
    rows[3][11] = bad
    assert _both(row_packets(rows)) is None


@pytest.mark.parametrize("payload", [
    b"", lenenc(b"1"), lenenc(b"1") * (len(COLUMNS) + 1), b"\xff", b"\xfc\x05", b"\x05ab",
])
def test_malformed_rows_raise_in_both(payload):
    buf = packets(payload)
    with pytest.raises(ValueError, match="malformed text-protocol row"):
        textcopy.py_rows(buf, 0, len(buf), KINDS)
    if C is not None:
        with pytest.raises(ValueError, match="malformed text-protocol row"):
            C.rows(buf, 0, len(buf), KINDS)


def test_cut_rows_and_bad_arguments_raise_in_both():
    buf = row_packets(_rows(2))
    for fn in filter(None, (textcopy.py_rows, C and C.rows)):
        with pytest.raises(ValueError, match="not whole"):
            fn(buf, 0, len(buf) - 1, KINDS)
        with pytest.raises(ValueError, match="outside"):
            fn(buf, 0, len(buf) + 1, KINDS)
        with pytest.raises(ValueError, match="kind out of range"):
            fn(buf, 0, len(buf), bytes([9]) * len(COLUMNS))


@pytest.mark.parametrize("col", [ColumnDef("b", "bit", length=3), ColumnDef("st", "set", values=("x",)),
                                 ColumnDef("j", "json"), ColumnDef("v", "vector", dimensions=2),
                                 ColumnDef("g", "geometry"), ColumnDef("i", "inet6"), ColumnDef("w", "uuid")])
def test_types_left_to_pg_text(col):
    table = TableDef("d", "t", (ColumnDef("id", "int"), col), primary_key=("id",))
    assert copy_kinds(table, ("id",)) == bytes([textcopy.RAW])
    assert copy_kinds(table, ("id", col.name)) is None


def test_a_column_the_table_lacks():
    assert copy_kinds(TABLE, ("u", "gone")) is None


def test_pure_python_turns_the_c_twin_off(monkeypatch):
    import subprocess
    import sys

    code = "from binlogd.library import textcopy; print(textcopy.C is None, textcopy.rows is textcopy.py_rows)"
    out = subprocess.run([sys.executable, "-c", code], env={"BINLOGD_PURE_PYTHON": "1", "PATH": ""},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]
