"""The schema history file (entries, torn lines, durable appends) and the tracker that follows a stream.

Events are built by hand here (a QUERY, GTIDs, an FDE) to drive the tracker position by position; the
real-server tests check the same paths against real binlogs.
"""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from binlogd.library.schema import (
    ColumnDef,
    Entry,
    HistoryWriter,
    SchemaHistoryError,
    SchemaTracker,
    TableDef,
    read_history,
)
from binlogd.library.schema.history import position_key
from binlogd.library.schema.model import column_agrees, compile_schema
from binlogd.protocol import events as E
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.tablemap import Column, apply_schema

T1 = TableDef("d", "t", (ColumnDef("id", "int", nullable=False), ColumnDef("e", "enum", values=("a", "b"),
                                                                          charset="utf8mb4")), ("id",), "utf8mb4")


def header(tc: int, pos: int, length: int = 50) -> E.EventHeader:
    return E.EventHeader(0, tc, 1, length, pos + length, 0, pos)


def query(sql: str, pos: int, db: str = "d") -> E.QueryEvent:
    return E.QueryEvent(header(ET.QUERY, pos), 1, 0, 0, db, sql, {"charset": {"client": 45, "connection": 45,
                                                                               "server": 45}})


def gtid(seq: int, pos: int) -> E.MariadbGtidEvent:
    return E.MariadbGtidEvent(header(ET.MARIADB_GTID, pos), 0, seq, 1)


def feed(tracker: SchemaTracker, file: str, *events) -> list[Entry]:
    out = []
    for ev in events:
        out.extend(tracker.observe(ev, file))
    return out


def test_position_key_orders_files_by_number():
    assert position_key("mysql-bin.999999", 10**9) < position_key("mysql-bin.1000000", 4)
    assert position_key("b.000002", 4) < position_key("b.000002", 5) < position_key("b.000003", 4)


def test_entries_round_trip_through_json():
    entries = [Entry("b.000001", 120, "0-1-5", "d", "t", T1, "seed"), Entry("b.000001", 300, None, "d", "t", "unknown"),
               Entry("b.000002", 4, "0-1-9", "d", "t", "dropped"), Entry("b.000002", 4, None, "d", None, "latin1"),
               Entry("b.000002", 9, None, "d", None, None, dropped=True)]
    for entry in entries:
        assert Entry.from_json(orjson.loads(entry.to_json())) == entry


def test_read_history_ignores_a_torn_last_line_and_names_a_bad_one(tmp_path):
    path = tmp_path / "h.jsonl"
    good = Entry("b.000001", 120, None, "d", "t", T1).to_json()
    path.write_bytes(good + good[:30])
    assert len(read_history(path)) == 1
    path.write_bytes(good + b"{not json}\n" + good)
    with pytest.raises(SchemaHistoryError, match="line 2"):
        read_history(path)


def test_writer_cuts_a_torn_tail_then_appends_whole_lines(tmp_path):
    path = tmp_path / "h.jsonl"
    good = Entry("b.000001", 120, None, "d", "t", T1).to_json()
    path.write_bytes(good + b'{"file": "b.0')
    writer = HistoryWriter(path)
    writer.append([Entry("b.000001", 300, None, "d", "t", "dropped")])
    writer.close()
    assert [e.state for e in read_history(path)] == [T1, "dropped"]
    assert path.read_bytes().count(b"\n") == 2


def test_tracker_follows_ddl_and_returns_entries_at_the_end_of_each_ddl():
    tracker = SchemaTracker()
    fde = E.FormatDescriptionEvent(header(ET.FORMAT_DESCRIPTION, 4), 4, "10.11.19-MariaDB-log", 0, 19, b"", 1)
    entries = feed(tracker, "b.000001", fde, gtid(1, 100), query("CREATE DATABASE d", 150),
                   gtid(2, 200), query("CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'))", 250),
                   gtid(3, 300), query("INSERT INTO t VALUES (1, 'a')", 350))
    assert [(e.pos, e.gtid, e.table, e.state) for e in entries] == [
        (200, "0-1-1", None, "utf8mb4"), (300, "0-1-2", "t", T1)]
    assert tracker.lookup("d", "t") is tracker.lookup("d", "t")   # one object while the table is unchanged
    assert tracker.lookup("d", "t").names == ("id", "e") and tracker.lookup("d", "t").enum_values[1] == ("a", "b")
    rename = feed(tracker, "b.000001", gtid(4, 400), query("RENAME TABLE t TO u", 450))
    assert [(e.table, e.state) for e in rename] == [("t", "dropped"), ("u", replace(T1, table="u"))]
    assert tracker.lookup("d", "t") is None and tracker.lookup("d", "u").names == ("id", "e")


def test_unparseable_ddl_is_reported_once_and_makes_its_table_positional():
    warnings = []
    tracker = SchemaTracker(warn=warnings.append)
    feed(tracker, "b.000001", query("CREATE TABLE t (id INT)", 100), query("CREATE TABLE k (id INT)", 200))
    entries = feed(tracker, "b.000001", query("ALTER TABLE t ADD SYSTEM VERSIONING", 300))
    assert [(e.table, e.state) for e in entries] == [("t", "unknown")]
    assert len(warnings) == 1 and "b.000001:300" in warnings[0] and "d.t" in warnings[0]
    assert tracker.lookup("d", "t") is None and tracker.lookup("d", "k") is not None and tracker.unparsed == 1


def test_a_saved_history_applies_up_to_the_start_and_then_as_the_stream_passes_its_entries():
    t2 = TableDef("d", "t", T1.columns + (ColumnDef("z", "int"),), ("id",), "utf8mb4")
    entries = [Entry("b.000001", 120, None, "d", "t", T1), Entry("b.000001", 500, None, "d", "t", t2)]
    tracker = SchemaTracker(entries)
    tracker.start_at("b.000001", 300)
    assert tracker.lookup("d", "t").names == ("id", "e")
    # the DDL that made the second entry is covered by the history: applied from it, not parsed again
    out = feed(tracker, "b.000001", gtid(7, 400), query("ALTER TABLE t ADD z INT", 450))
    assert out == [] and tracker.lookup("d", "t").names == ("id", "e", "z")
    # past the history's end, DDL is parsed and makes entries again
    out = feed(tracker, "b.000001", gtid(8, 600), query("ALTER TABLE t DROP z", 650))
    assert [(e.pos, e.state.columns) for e in out] == [(700, T1.columns)]


def test_checked_schema_names_only_the_table_maps_it_agrees_with():
    schema = compile_schema(T1)
    right = (Column(0, T.LONG, 0, False), Column(1, T.ENUM, 1))
    named = apply_schema(right, schema)
    assert [c.name for c in named] == ["id", "e"] and named[1].enum_values == ("a", "b")
    for stale in ((Column(0, T.LONG, 0),), (Column(0, T.LONGLONG, 0), Column(1, T.ENUM, 1)),
                  (Column(0, T.LONG, 0), Column(1, T.SET, 1)), (Column(0, T.LONG, 0), Column(1, T.ENUM, 2))):
        with pytest.raises(Exception, match="do not fit"):
            apply_schema(stale, schema)


@pytest.mark.parametrize("col, tm, ok", [
    (ColumnDef("v", "varchar", length=10, charset="utf8mb4"), Column(0, T.VARCHAR, 40), True),
    (ColumnDef("v", "varchar", length=10, charset="utf8mb4"), Column(0, T.VARCHAR, 10), False),
    (ColumnDef("v", "varchar", length=10), Column(0, T.VARCHAR, 30), True),               # charset unknown
    (ColumnDef("v", "varchar", length=10), Column(0, T.VARCHAR, 30, collation=8), False),  # latin1: 10 bytes
    (ColumnDef("v", "varchar", length=10, charset="latin1"), Column(0, T.VARCHAR, 10, collation=45), False),
    (ColumnDef("c", "char", length=100, charset="utf8mb4"), Column(0, T.STRING, 400), True),
    (ColumnDef("d", "decimal", precision=10, scale=2), Column(0, T.NEWDECIMAL, (10, 2)), True),
    (ColumnDef("d", "decimal", precision=10, scale=2), Column(0, T.NEWDECIMAL, (10, 3)), False),
    (ColumnDef("t", "datetime", precision=3), Column(0, T.DATETIME2, 3), True),
    (ColumnDef("t", "datetime", precision=0), Column(0, T.DATETIME, 0), True),              # 5.5 format
    (ColumnDef("t", "timestamp", precision=6), Column(0, T.TIMESTAMP2, 3), False),
    (ColumnDef("b", "bit", length=17), Column(0, T.BIT, (1, 2)), True),
    (ColumnDef("s", "set", values=tuple("abcdefghi")), Column(0, T.SET, 2), True),
    (ColumnDef("e", "enum", values=tuple(map(str, range(300)))), Column(0, T.ENUM, 2), True),
    (ColumnDef("x", "mediumtext", charset="utf8mb4"), Column(0, T.BLOB, 3), True),
    (ColumnDef("x", "text", charset="utf8mb4"), Column(0, T.BLOB, 3), False),
    (ColumnDef("j", "json"), Column(0, T.BLOB, 4), True), (ColumnDef("j", "json"), Column(0, T.JSON, 4), True),
    (ColumnDef("i", "inet6"), Column(0, T.STRING, 16), True),
    (ColumnDef("v", "vector", dimensions=3), Column(0, T.VARCHAR, 12, collation=63), True),
    (ColumnDef("g", "geometry"), Column(0, T.GEOMETRY, 4), True),
])
def test_column_agreement(col, tm, ok):
    assert column_agrees(col, tm) is ok


def test_the_schema_layer_imports_only_the_protocol_sqlglot_and_the_standard_library():
    import ast
    import sys
    from pathlib import Path

    allowed = {"binlogd", "sqlglot", "orjson", "__future__"} | set(sys.stdlib_module_names)
    for path in (Path(__file__).resolve().parents[2] / "binlogd" / "schema").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                assert name.split(".")[0] in allowed, (path.name, name)
                assert not name.startswith("binlogd.") or name.startswith(("binlogd.protocol", "binlogd.library.schema")), \
                    (path.name, name)
