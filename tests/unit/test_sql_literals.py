"""SQL literals of ``binlogd sql``: one renderer per column type, from the decoder's JSON forms.

Each expectation is written out by hand from MySQL's literal syntax; the integration tests check that
a server stores what these literals say (test_sql_replay, test_sql_flashback).
"""

from __future__ import annotations

import base64
import struct

import pytest

from binlogd.library.sqlwriter.literals import ident, is_json_diff, json_diff_sql, quote, renderer
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.jsonb import JsonDiff, JsonDiffs
from binlogd.protocol.tablemap import Column

UTF8MB4, LATIN1, BINARY, UCS2, ARMSCII8 = 45, 8, 63, 35, 32


def render(ctype, value, *, meta=0, unsigned=False, collation=None, flavor="mariadb", match=False):
    col = Column(0, ctype, meta, unsigned=unsigned, collation=collation, name="c")
    return renderer(col, flavor, "db.t.c at f:4", match=match)(value)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_identifiers_and_strings_are_escaped():
    assert ident("we`ird") == "`we``ird`"
    assert quote("it's \\ \0 \n \r \x1a ok") == "'it\\'s \\\\ \\0 \\n \\r \\Z ok'"


@pytest.mark.parametrize("ctype, value, expected", [
    (T.LONG, -2147483648, "-2147483648"),
    (T.LONGLONG, 18446744073709551615, "18446744073709551615"),
    (T.NEWDECIMAL, "-12345678901234.567891", "-12345678901234.567891"),
    (T.DOUBLE, 0.1, "0.1"),
    (T.DOUBLE, -1.7976931348623157e308, "-1.7976931348623157e+308"),
    (T.YEAR, 0, "0"),
    (T.TIME2, "-838:59:59.999999", "'-838:59:59.999999'"),
    (T.DATETIME2, "0000-00-00 00:00:00", "'0000-00-00 00:00:00'"),
    (T.TIMESTAMP2, "2038-01-19 03:14:07.999", "'2038-01-19 03:14:07.999'"),
    (T.BIT, 2 ** 64 - 1, "b'" + "1" * 64 + "'"),
    (T.BIT, 0, "b'0'"),
    (T.ENUM, "blue", "'blue'"),
    (T.ENUM, 3, "3"),                  # value names unknown: the index, which the server takes as such
    (T.SET, ["a", "i"], "'a,i'"),
    (T.SET, [], "''"),
    (T.SET, 257, "257"),
    (T.GEOMETRY, b64(b"\x00\x00\x00\x00\x01"), "X'0000000001'"),
    (T.LONG, None, "NULL"),
])
def test_values(ctype, value, expected):
    assert render(ctype, value, unsigned=True if ctype in (T.LONG, T.LONGLONG) else None) == expected


def test_float_is_the_exact_double_of_its_float32():
    text = render(T.FLOAT, 1.1)
    assert float(text) == struct.unpack("<f", struct.pack("<f", 1.1))[0] and text == "1.100000023841858"


def test_integer_of_unknown_signedness_is_refused_when_negative():
    assert render(T.TINY, 5, unsigned=None) == "5"
    with pytest.raises(SqlOutError, match=r"db\.t\.c at f:4: a negative value \(-1\)"):
        render(T.TINY, -1, unsigned=None)


@pytest.mark.parametrize("ctype", [T.VARCHAR, T.STRING, T.BLOB])
def test_text_binary_and_other_charsets(ctype):
    assert render(ctype, "café ' \\", collation=UTF8MB4) == "'café \\' \\\\'"
    assert render(ctype, "café €", collation=LATIN1) == "'café €'"  # the server converts UTF-8 to latin1
    assert render(ctype, b64(b"\x00'\xff"), collation=BINARY) == "X'0027ff'"
    assert render(ctype, "ab", collation=UCS2) == "_ucs2 X'00610062'"
    assert render(ctype, b64(b"\xa1"), collation=ARMSCII8) == "_armscii8 X'a1'"
    assert render(ctype, "a", collation=UTF8MB4, match=True) == "'a' COLLATE utf8mb4_bin"


def test_text_of_unknown_charset_is_its_bytes():
    assert render(T.VARCHAR, "one") == "X'6f6e65'"  # not base64: text, as the decoder found it valid UTF-8
    assert render(T.VARCHAR, "é") == "X'c3a9'"
    assert render(T.VARCHAR, "YWJj") == "X'59574a6a'"  # base64 of UTF-8 ("abc") would have come as text
    # The decoder's base64 of bytes that are not UTF-8, or text that reads as such base64: it cannot tell.
    for value in (b64(b"\xe9t\xe9"), "test"):
        with pytest.raises(SqlOutError, match="may be text or the base64 of other bytes"):
            render(T.VARCHAR, value)


def test_json_and_vector():
    assert render(T.JSON, {"a": [1, 2.5, "ü"], "b": None}) == """CAST('{"a":[1,2.5,"ü"],"b":null}' AS JSON)"""
    assert render(T.JSON, "it's") == """CAST('"it\\'s"' AS JSON)"""
    assert render(T.VECTOR, [1.1, -1.0], flavor="mysql") == "STRING_TO_VECTOR('[1.1,-1.0]')"
    assert render(T.VECTOR, [1.1, -1.0], flavor="mariadb") == "VEC_FromText('[1.1,-1.0]')"


def test_json_diffs_apply_in_order():
    diffs = [JsonDiff("REPLACE", "$.a", 1), JsonDiff("INSERT", "$.b", [True]), JsonDiff("REMOVE", "$.c", None)]
    assert json_diff_sql("`j`", diffs) == (
        "JSON_REMOVE(JSON_INSERT(JSON_REPLACE(`j`, '$.a', CAST('1' AS JSON)), '$.b', CAST('[true]' AS JSON)), '$.c')")


def test_json_diff_inserting_an_array_element_is_an_array_insert():
    """The server inserts at the index (shifting the rest, or appending past the end): JSON_ARRAY_INSERT."""
    diffs = [JsonDiff("INSERT", "$.b[7]", 10), JsonDiff("INSERT", '$."k]"', 1), JsonDiff("REPLACE", "$.c[0]", 2)]
    assert json_diff_sql("`j`", diffs) == (
        "JSON_REPLACE(JSON_INSERT(JSON_ARRAY_INSERT(`j`, '$.b[7]', CAST('10' AS JSON)), '$.\"k]\"', "
        "CAST('1' AS JSON)), '$.c[0]', CAST('2' AS JSON))")


def test_only_json_diffs_are_diffs():
    """A JSON document that is a list of diff-like objects is a value; an empty JsonDiffs is diffs."""
    assert is_json_diff(JsonDiffs()) and is_json_diff(JsonDiffs([JsonDiff("REMOVE", "$.a", None)]))
    assert not is_json_diff([{"op": "replace", "path": "$.a", "value": 1}])
    assert not is_json_diff([JsonDiff("REMOVE", "$.a", None)]) and not is_json_diff([])
