"""Partial JSON updates (PARTIAL_UPDATE_ROWS) in every output: a diff is never taken for a document.

A synthetic event of t(id INT, j JSON, k JSON) holds three updates: j partially updated by three diffs while
k is set to a document that looks like diffs; j partially updated by no diff; j set whole. Every writer (change
events in both formats, dump --json and its text, Spark's columns, binlogd sql) must keep the diffs apart from
the after image. The corpus's MySQL 8.0.22 event is checked by applying its diffs to the row's before value.
"""

from __future__ import annotations

import struct
from pathlib import Path

import orjson
import pytest

from binlogd.cli.textformat import format_event
from binlogd.library import debezium, jsonrows
from binlogd.library.serialize import change_events, dumps, event_to_dict, flatten
from binlogd.library.sqlwriter.rowsql import TablePlan
from binlogd.protocol import events as E
from binlogd.protocol import rowcodec
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.jsonb import JsonDiff, JsonDiffs
from binlogd.protocol.reader import iter_events
from binlogd.protocol.rowcodec import TableCodec
from binlogd.protocol.rows import RowImages
from binlogd.protocol.tablemap import Column
from tests.support.jsondiff import apply_json_diffs, path_legs
from tests.support.paths import CORPUS
from tests.unit.test_jsonb import diff, doc

HEADER = E.EventHeader(1700000000, ET.PARTIAL_UPDATE_ROWS, 7, 400, 0, 0, 1234)
COLUMNS = (Column(0, T.LONG, 0, nullable=False, name="id", primary_key=True), Column(1, T.JSON, 4, name="j"),
           Column(2, T.JSON, 4, name="k"))
LOOKALIKE = [{"op": "replace", "path": "$.a", "value": 1}]  # a document, not a diff
J0 = {"a": 1, "b": [1, 2, 3], "c": "x"}
DIFFS = [{"op": "replace", "path": "$.a", "value": 2}, {"op": "insert", "path": "$.b[7]", "value": 10},
         {"op": "remove", "path": "$.c"}]


def json_value(raw: bytes) -> bytes:
    return struct.pack("<I", len(raw)) + raw


def image(nulls: int, *values: bytes) -> bytes:
    return bytes([nulls]) + b"".join(values)


def rows_bytes() -> bytes:
    """Three rows, every column in both images: before, value_options (1: partial JSON) and the JSON columns'
    partial bits (j is bit 0, k bit 1), after."""
    diffs = diff(0, "$.a", 2) + diff(1, "$.b[7]", 10) + diff(2, "$.c")
    before = image(0, struct.pack("<i", 1), json_value(doc(J0)), json_value(doc(None)))
    row1 = before + b"\x01\x01" + image(0, struct.pack("<i", 1), json_value(diffs), json_value(doc(LOOKALIKE)))
    row2 = before + b"\x01\x01" + image(0b100, struct.pack("<i", 2), json_value(b""))  # k NULL, j no diff
    row3 = before + b"\x00" + image(0b100, struct.pack("<i", 3), json_value(doc(LOOKALIKE)))
    return row1 + row2 + row3


def partial_event() -> E.RowsEvent:
    codec = TableCodec(COLUMNS)
    images = RowImages(codec, "update", rows_bytes(), 0b111, 0b111, True, HEADER, 0)
    return E.RowsEvent(HEADER, "update", 70, 1, "db", "t", codec.labels, images)


@pytest.fixture(params=[True, False], ids=["C", "pure-python"])
def speedups(request):
    rowcodec.use_speedups(request.param)
    jsonrows.use_speedups(request.param)
    yield request.param
    rowcodec.use_speedups(True)
    jsonrows.use_speedups(True)


def test_the_decoder_gives_diffs_a_type_of_their_own(speedups) -> None:
    rows = partial_event().rows
    assert type(rows[0][1]["j"]) is JsonDiffs and rows[0][1]["j"] == (
        JsonDiff("REPLACE", "$.a", 2), JsonDiff("INSERT", "$.b[7]", 10), JsonDiff("REMOVE", "$.c", None))
    assert rows[0][1]["k"] == LOOKALIKE and type(rows[0][1]["k"]) is list
    assert type(rows[1][1]["j"]) is JsonDiffs and rows[1][1]["j"] == () and rows[1][1]["k"] is None
    assert rows[2][1] == {"id": 3, "j": LOOKALIKE, "k": None}
    with pytest.raises(TypeError):
        dumps(rows[0][1])  # a writer that forgot to set the diffs apart fails instead of writing a list


def test_change_events_set_the_diffs_apart(speedups) -> None:
    changes = list(change_events(partial_event(), "f.000001", None))
    first, second, third = changes
    assert list(first)[:7] == ["op", "schema", "table", "before", "after", "json_diffs", "ts"]
    assert first["after"] == {"id": 1, "k": LOOKALIKE} and first["json_diffs"] == {"j": DIFFS}
    assert first["before"]["j"] == J0 and apply_json_diffs(J0, first["json_diffs"]["j"]) == {
        "a": 2, "b": [1, 2, 3, 10]}
    assert second["after"] == {"id": 2, "k": None} and second["json_diffs"] == {"j": []}
    assert third["after"] == {"id": 3, "j": LOOKALIKE, "k": None} and "json_diffs" not in third
    lines, n = jsonrows.change_lines(partial_event(), "f.000001", None)
    assert n == 3 and lines == b"".join(dumps(c) + b"\n" for c in changes)
    assert [orjson.loads(line) for line in lines.splitlines()] == changes


def test_debezium_envelopes_carry_the_diffs_after_after(speedups) -> None:
    changes = list(change_events(partial_event(), "f.000001", None))
    lines, n = debezium.change_lines(partial_event(), "f.000001", None, now_ns=10**18)
    assert n == 3 and lines == b"".join(debezium.debezium_json(c, now_ns=10**18) + b"\n" for c in changes)
    envelopes = [orjson.loads(line) for line in lines.splitlines()]
    assert list(envelopes[0])[:4] == ["before", "after", "json_diffs", "source"]
    assert envelopes[0]["json_diffs"] == {"j": DIFFS} and envelopes[0]["after"] == {"id": 1, "k": LOOKALIKE}
    assert "json_diffs" not in envelopes[2] and envelopes[2]["after"]["j"] == LOOKALIKE


def test_dump_json_and_text(speedups) -> None:
    event = partial_event()
    text = jsonrows.event_json(event, "f.000001")
    assert text == dumps(event_to_dict(event, "f.000001"))
    rows = orjson.loads(text)["rows"]
    assert rows[0] == {"before": {"id": 1, "j": J0, "k": None}, "after": {"id": 1, "k": LOOKALIKE},
                       "json_diffs": {"j": DIFFS}}
    assert rows[1]["json_diffs"] == {"j": []} and "json_diffs" not in rows[2]
    lines = format_event(event).splitlines()
    assert """###   j=JSON_REMOVE(JSON_ARRAY_INSERT(JSON_REPLACE(j, '$.a', '2'), '$.b[7]', '10'), '$.c')""" in lines
    assert """###   k='[{"op":"replace","path":"$.a","value":1}]'""" in lines
    assert "###   j=j" in lines


def test_spark_columns(speedups) -> None:
    event = partial_event()
    images = jsonrows.images_json(event)
    assert orjson.loads(images[1]) == {"id": 1, "k": LOOKALIKE} and orjson.loads(images[5])["j"] == LOOKALIKE
    assert jsonrows.json_diffs_json(event) == [dumps({"j": DIFFS}), b'{"j":[]}', None]


def test_sql_applies_the_diffs_to_the_column() -> None:
    plan = TablePlan(E.TableMapEvent(HEADER, 70, 0, "db", "t", COLUMNS), "mysql", "f:4")
    first, second, third = plan.replay("update", partial_event().rows)
    assert first == ("UPDATE `db`.`t` SET `id`=1,`j`=JSON_REMOVE(JSON_ARRAY_INSERT(JSON_REPLACE(`j`, '$.a', "
                     "CAST('2' AS JSON)), '$.b[7]', CAST('10' AS JSON)), '$.c'),`k`=CAST('[{\"op\":\"replace\","
                     "\"path\":\"$.a\",\"value\":1}]' AS JSON) WHERE `id`=1")
    assert "`j`=`j`," in second
    assert "`j`=CAST('[{" in third


def test_corpus_diffs_applied_to_the_before_value_give_the_row() -> None:
    """json.binlog.000001 (MySQL 8.0.22, t(@1 id, @2 json_col, @3 name, @4 age), name and age generated from
    json_col): each partially updated row's age is what its diffs make of the document the stream last gave."""
    path = Path(CORPUS) / "rust_mysql_common/json.binlog.000001"
    if not path.exists():
        pytest.skip(f"no {path}")
    docs, seen = {}, 0
    for ev in iter_events(path.read_bytes()):
        for item in flatten(ev):
            if not isinstance(item, E.RowsEvent):
                continue
            for change in change_events(item, "json.binlog.000001", None):
                key = (change["before"] or change["after"])["@1"]
                if "json_diffs" in change:
                    (column, diffs), = change["json_diffs"].items()
                    assert column == "@2" and "@2" not in change["after"] and diffs[0]["op"] == "replace"
                    docs[key] = apply_json_diffs(docs[key], diffs)
                    seen += 1
                elif change["after"] is not None:
                    docs[key] = change["after"]["@2"]
                if change["after"] is not None:
                    assert (docs[key]["name"], docs[key]["age"]) == (change["after"]["@3"], change["after"]["@4"])
    assert seen >= 2


def test_the_diff_applier_follows_the_server() -> None:
    """tests/support/jsondiff against sql/json_diff.cc's unit cases (json_diff-t.cc)."""
    assert path_legs('$.a[2]."b c"[last-1][last]') == ["a", 2, "b c", -2, -1]
    ins = [{"op": "insert", "path": "$.a[2]", "value": 3}]
    assert apply_json_diffs({"a": []}, ins) == {"a": [3]}
    assert apply_json_diffs({"a": [1, 2, 4]}, ins) == {"a": [1, 2, 3, 4]}
    for bad in ({"a": 1, "b": 2}, [], {"a": {"b": 1}}):
        with pytest.raises(ValueError):
            apply_json_diffs(bad, ins)
    with pytest.raises(ValueError):
        apply_json_diffs({"a": {"b": 1}}, [{"op": "insert", "path": "$.a.b", "value": 2}])
    with pytest.raises(ValueError):
        apply_json_diffs({"a": [1]}, [{"op": "remove", "path": "$.a[1]"}])
    assert apply_json_diffs({"a": [1, 2]}, [{"op": "remove", "path": "$.a[last]"}]) == {"a": [1]}


def test_spark_changes_shape_from_the_binlog_and_from_json_lines(tmp_path, speedups) -> None:
    """pipeline.decode (no Spark): the json_diffs column next to after, from row images, from change dicts (a
    typed after) and from the daemon's JSON lines alike."""
    from pyspark.sql.types import MapType, StringType

    from binlogd.pipeline import decode as D
    from binlogd.pipeline.convert import pair_converter

    want = [dumps({"j": DIFFS}), b'{"j":[]}', None]
    by_images = D.ChangeRows("f.000001")
    by_images.add(partial_event())
    by_dicts = D.ChangeRows("f.000001", convert=pair_converter(StringType(), MapType(StringType(), StringType())))
    by_dicts.add(partial_event())
    path = tmp_path / "changes-000001.jsonl"
    path.write_bytes(jsonrows.change_lines(partial_event(), "f.000001", None)[0])
    from_lines = D.ChangeRows(str(path))
    [cols] = list(D.read_jsonl(str(path), from_lines))
    for columns in (dict(zip(by_images.names, by_images.take())), dict(zip(by_dicts.names, by_dicts.take())),
                    dict(zip(from_lines.names, cols))):
        assert columns["json_diffs"] == want
    assert orjson.loads(cols[D.CHANGES_COLUMNS.index("after")][0]) == {"id": 1, "k": LOOKALIKE}
