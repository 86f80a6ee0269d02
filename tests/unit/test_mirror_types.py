"""library/pgtypes: MySQL types as PostgreSQL types and values as PostgreSQL input text (the edges)."""

from __future__ import annotations

import pytest

from binlogd.library.pgtypes import copy_field, pg_text, pg_type, quote_ident
from binlogd.library.schema.model import ColumnDef as C


@pytest.mark.parametrize("col, want", [
    (C("a", "bigint", unsigned=True), "numeric(20)"), (C("a", "int", unsigned=True), "bigint"),
    (C("a", "tinyint"), "smallint"), (C("a", "decimal", precision=65, scale=30), "numeric(65,30)"),
    (C("a", "datetime", precision=6), "timestamp(6)"), (C("a", "timestamp"), "timestamptz(0)"),
    (C("a", "time", precision=3), "interval"), (C("a", "year"), "smallint"), (C("a", "bit", length=5), "bit(5)"),
    (C("a", "enum", values=("x",)), "text"), (C("a", "set"), "text[]"), (C("a", "json"), "jsonb"),
    (C("a", "vector", dimensions=3), "real[]"), (C("a", "varbinary", length=4), "bytea"),
    (C("a", "blob"), "bytea"), (C("a", "varchar", length=9, charset="utf8mb4"), "text"),
    (C("a", "varchar", length=9, charset="binary"), "bytea"),
])
def test_types(col, want):
    assert pg_type(col) == want


def test_values_at_the_edges():
    assert pg_text(C("a", "bigint", unsigned=True), 18446744073709551615) == "18446744073709551615"
    assert pg_text(C("a", "date"), "0000-00-00") == "-infinity"
    assert pg_text(C("a", "datetime"), "2020-00-10 00:00:00") == "-infinity"
    assert pg_text(C("a", "timestamp"), "2038-01-19 03:14:07") == "2038-01-19 03:14:07+00"
    assert pg_text(C("a", "time"), "-838:59:59") == "-838:59:59"
    assert pg_text(C("a", "bit", length=5), 5) == "00101"
    assert pg_text(C("a", "set"), ["a", 'b"c']) == '{"a","b\\"c"}'
    assert pg_text(C("a", "blob"), "AAE=") == "\\x0001"
    assert pg_text(C("a", "json"), {"a": [1, {"b": None}]}) == '{"a":[1,{"b":null}]}'
    assert pg_text(C("a", "text", charset="utf8mb4"), "😀") == "😀"
    assert pg_text(C("a", "text", charset="utf8mb4"), None) is None
    with pytest.raises(ValueError, match="NUL"):
        pg_text(C("a", "text", charset="utf8mb4"), "a\x00b")
    assert copy_field("a\tb\\") == "a\\tb\\\\" and copy_field(None) == "\\N"


def test_names():
    assert quote_ident('we"ird; select') == '"we""ird; select"'
    assert quote_ident("é" * 31) == '"' + "é" * 31 + '"'
    with pytest.raises(ValueError, match="over PostgreSQL's 63"):
        quote_ident("x" * 64)
