"""Schema history on real servers, read from their binlog files: ``binlogd dump``, ``schema build``, Spark.

The oracle is the server logging FULL row metadata: its TABLE_MAPs carry every column's name,
ENUM/SET strings and signedness, so ``binlogd dump`` of its files needs no history. The same
statements on the MINIMAL server (which logs no names, and compresses its events) must give the same
change events, event for event, names and values, from the DDL the files hold.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlogd.library.schema import agrees, ddl
from binlogd.library.schema.catalog import Catalog
from binlogd.protocol.events import TableMapEvent, TransactionPayloadEvent
from tests.support import every_type
from tests.support.flavour import skip_unless_flavour
from tests.support.schema_workload import WORKLOAD, dump_changes, positional, run


def _db(tag: str) -> str:
    return f"sh_{tag}_{uuid.uuid4().hex[:8]}"


def _both(mariadb, mariadb_minimal, statements, tag):
    db = _db(tag)
    full = run(mariadb, db, statements)
    minimal = run(mariadb_minimal, db, statements)
    return db, full, minimal


def test_minimal_server_changes_equal_full_server_changes(mariadb, mariadb_minimal, tmp_path):
    db, full_files, minimal_files = _both(mariadb, mariadb_minimal, WORKLOAD, "eq")
    full, _ = dump_changes(full_files, schema=db)
    minimal, err = dump_changes(minimal_files, schema=db)
    assert len(full) == 18 and not any(positional(c) for c in full)
    assert minimal == full, err


@pytest.fixture(scope="module")
def mariadb_no_log():
    """A server logging no TABLE_MAP metadata at all (MariaDB's default, binlog_row_metadata=NO_LOG): neither
    names nor signedness nor charsets; everything comes from the schema history."""
    from binlogd.cli.localserver import LocalServer

    server = LocalServer(extra_args=["--binlog-row-metadata=NO_LOG"])
    try:
        yield server.start()
    finally:
        server.cleanup()


def test_no_log_server_changes_equal_full_server_changes(mariadb, mariadb_no_log):
    db = _db("nolog")
    full, _ = dump_changes(run(mariadb, db, WORKLOAD), schema=db)
    bare, err = dump_changes(run(mariadb_no_log, db, WORKLOAD), schema=db)
    assert bare == full, err        # unsigned 4000000000, ENUM/SET strings, latin1 text: all from the DDL


def test_collate_after_a_default_sets_the_column_charset(mariadb, mariadb_no_log):
    # MariaDB reads `DEFAULT 'x' COLLATE latin1_bin` as the column's collation (SHOW CREATE TABLE says
    # CHARACTER SET latin1); sqlglot reads the COLLATE as part of the default value
    statements = ["CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(8) DEFAULT 'x' COLLATE latin1_bin)",
                  "INSERT INTO c VALUES (1, _latin1 0xE9C0), (2, DEFAULT)"]
    db = _db("coll")
    full, _ = dump_changes(run(mariadb, db, statements), schema=db)
    bare, err = dump_changes(run(mariadb_no_log, db, statements), schema=db)
    assert [c[4]["v"] for c in full] == ["\u00e9\u00c0", "x"]
    assert bare == full, err


def test_schema_build_then_dump_from_the_middle_names_every_column(mariadb_minimal, mariadb, tmp_path):
    db, full_files, files = _both(mariadb, mariadb_minimal, WORKLOAD, "mid")
    from binlogd.cli import main

    history = tmp_path / "history.jsonl"
    assert main(["schema", "build", *map(str, files), "--out", str(history)]) == 0
    full, _ = dump_changes(full_files, schema=db)
    # start at the second rows event's transaction: the CREATE TABLE and first ALTER are behind the start
    starts = _transaction_starts(files[0])
    start = starts[3]
    alone, _ = dump_changes(files, "--start-position", str(start), schema=db)
    assert alone and all(positional(c) for c in alone[:2])          # no DDL seen: positional, never wrong
    named, err = dump_changes(files, "--start-position", str(start), "--schema-history", str(history), schema=db)
    assert named == full[len(full) - len(named):] and not any(positional(c) for c in named), err


def _transaction_starts(path) -> list[int]:
    """Positions of the GTID events (MariaDB's or MySQL's) of a file (transaction starts)."""
    from binlogd.cli.filetools import dump_events
    from binlogd.protocol.events import GtidEvent, MariadbGtidEvent

    return [ev.header.pos for ev in dump_events(path) if isinstance(ev, (MariadbGtidEvent, GtidEvent))]


def test_unparseable_ddl_never_stops_the_stream(mariadb_minimal, mariadb):
    skip_unless_flavour(mariadb, "mariadb", "SYSTEM VERSIONING (the DDL the parser does not read)")
    statements = [
        "CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(5))",
        "INSERT INTO u VALUES (1, 'a')",
        # valid MariaDB that the parser does not read (it adds hidden row_start/row_end columns too)
        "ALTER TABLE u ADD COLUMN w INT, ADD SYSTEM VERSIONING",
        "INSERT INTO u (id, v, w) VALUES (2, 'b', 3)",
        "CREATE TABLE k (id INT PRIMARY KEY)",
        "INSERT INTO k VALUES (5)",
        "ALTER TABLE u DROP SYSTEM VERSIONING",
        "CREATE OR REPLACE TABLE u (id INT PRIMARY KEY, z INT)",   # a definition again
        "INSERT INTO u VALUES (6, 7)",
    ]
    db, full_files, files = _both(mariadb, mariadb_minimal, statements, "bad")
    full, _ = dump_changes(full_files, schema=db)
    changes, err = dump_changes(files, schema=db)
    assert len(changes) == len(full) == 4
    assert changes[0] == full[0] and changes[2:] == full[2:]          # before, other tables, after
    assert positional(changes[1]) or changes[1] == full[1]
    if positional(changes[1]):
        assert 1 <= err.count("cannot parse DDL") <= 2 and f"{db}.u" in err


def test_every_type_create_table_agrees_with_its_table_map(mariadb_minimal):
    """The parsed CREATE TABLE of the every-type table agrees with the TABLE_MAP the server logged for it,
    and a definition with any one column changed does not."""
    mariadb_types = "" if mariadb_minimal.flavor == "mysql" else ", u6 INET6, uu UUID, i4 INET4"  # MariaDB's only
    create = ("CREATE TABLE et (" + ", ".join(f"`{c.name}` {c.ddl}" for c in every_type.COLUMNS)
              + f", vl2 VARCHAR(7) CHARACTER SET latin1, c4 CHAR(4){mariadb_types})")
    statements = [create, "INSERT INTO et (id) VALUES (1)"]
    db = _db("types")
    files = run(mariadb_minimal, db, statements)
    from binlogd.cli.filetools import dump_events

    events = [inner for f in files for ev in dump_events(f)  # MySQL's compressed transactions: their inner events
              for inner in (ev.events if isinstance(ev, TransactionPayloadEvent) else (ev,))]
    maps = [ev for ev in events if isinstance(ev, TableMapEvent) and ev.schema == db]
    assert maps
    catalog = Catalog()
    for change in ddl.parse("CREATE DATABASE x CHARACTER SET utf8mb4", db) + ddl.parse(create, db):
        catalog.apply(change)
    table = catalog.tables[(db, "et")]
    columns = maps[0].columns
    assert agrees(table, columns), [(c, t) for c, t in zip(table.columns, columns) if not agrees(
        replace(table, columns=(c,)), (t,))]
    for i, col in enumerate(table.columns):
        for other in ("int", "varchar", "datetime", "enum"):
            if other == col.type:
                continue
            changed = replace(col, type=other, length=col.length or 3, precision=col.precision or 0,
                              values=col.values or ("a",), charset="utf8mb4")
            stale = replace(table, columns=table.columns[:i] + (changed,) + table.columns[i + 1:])
            assert not agrees(stale, columns), (col, other)
    assert not agrees(replace(table, columns=table.columns[:-1]), columns)


# ---------------------------------------------------------------------- property: random ALTERs and DML

_TYPES = ["INT", "INT UNSIGNED", "BIGINT", "TINYINT", "VARCHAR(12)", "VARCHAR(30) CHARACTER SET latin1",
          "CHAR(4)", "ENUM('a','b','c')", "SET('x','y')", "DECIMAL(9,3)", "DATETIME(3)", "TEXT", "DOUBLE"]
_VALUES = {"INT": "-7", "INT UNSIGNED": "4000000001", "BIGINT": "-9000000000", "TINYINT": "-3",
           "VARCHAR(12)": "'vé'", "VARCHAR(30) CHARACTER SET latin1": "'ça'", "CHAR(4)": "'ch'",
           "ENUM('a','b','c')": "'c'", "SET('x','y')": "'x,y'", "DECIMAL(9,3)": "-12.345",
           "DATETIME(3)": "'2024-02-29 12:34:56.789'", "TEXT": "'long text'", "DOUBLE": "0.5"}


@st.composite
def _program(draw):
    """A sequence of ALTERs and DML on table p (columns tracked here so that each statement is valid)."""
    cols = {"id": "INT"}
    order = ["id"]
    out, next_id, counter = [], 1, 0
    for _ in range(draw(st.integers(3, 8))):
        kind = draw(st.sampled_from(["add", "add", "drop", "rename", "modify", "insert", "insert", "update"]))
        others = [c for c in order if c != "id"]
        if kind == "add" or (kind in ("drop", "rename", "modify") and not others):
            counter += 1
            name, typ = f"c{counter}", draw(st.sampled_from(_TYPES))
            where = draw(st.sampled_from(["", " FIRST", f" AFTER {draw(st.sampled_from(order))}"]))
            out.append(f"ALTER TABLE p ADD COLUMN {name} {typ}{where}")
            cols[name] = typ
            if where == " FIRST":
                order.insert(0, name)
            elif where:
                order.insert(order.index(where.split()[-1]) + 1, name)
            else:
                order.append(name)
        elif kind == "drop":
            name = draw(st.sampled_from(others))
            out.append(f"ALTER TABLE p DROP COLUMN {name}")
            order.remove(name)
            del cols[name]
        elif kind == "rename":
            counter += 1
            name, new = draw(st.sampled_from(others)), f"r{counter}"
            out.append(f"ALTER TABLE p RENAME COLUMN {name} TO {new}")
            order[order.index(name)] = new
            cols[new] = cols.pop(name)
        elif kind == "modify":
            name, typ = draw(st.sampled_from(others)), draw(st.sampled_from(["VARCHAR(40)", "TEXT", "BIGINT"]))
            if typ == "BIGINT" and cols[name] not in ("INT", "TINYINT", "BIGINT"):
                typ = "VARCHAR(40)"
            out.append(f"ALTER TABLE p MODIFY {name} {typ}")
            cols[name] = typ
        elif kind == "insert":
            values = ", ".join(str(next_id) if c == "id" else _VALUES.get(cols[c], "'9'") for c in order)
            out.append(f"INSERT INTO p ({', '.join(order)}) VALUES ({values})")
            next_id += 1
        else:
            out.append(f"UPDATE p SET id = id + 100 WHERE id = {next_id - 1}")
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=_program())
def test_random_alter_sequences_name_like_full_metadata(mariadb, mariadb_minimal, program):
    statements = ["CREATE TABLE p (id INT PRIMARY KEY)", "INSERT INTO p (id) VALUES (0)", *program,
                  "INSERT INTO p (id) VALUES (1000)"]
    db, full_files, minimal_files = _both(mariadb, mariadb_minimal, statements, "prop")
    full, _ = dump_changes(full_files, schema=db)
    minimal, err = dump_changes(minimal_files, schema=db)
    assert not any(positional(c) for c in full)
    assert minimal == full, (program, err)


# ---------------------------------------------------------------------- Spark


def test_spark_names_minimal_files_like_dump_with_the_same_history(mariadb_minimal, mariadb, spark, tmp_path):
    import json

    from binlogd.cli import main

    db, full_files, files = _both(mariadb, mariadb_minimal, WORKLOAD, "spark")
    history = tmp_path / "history.jsonl"
    assert main(["schema", "build", *map(str, files), "--out", str(history)]) == 0
    full, _ = dump_changes(full_files, schema=db)
    rows = (spark.read.format("binlog").option("shape", "changes").option("schemaHistory", str(history))
            .load([str(f) for f in files]).where(f"schema = '{db}'").orderBy("file", "pos", "row").collect())
    got = [(r["op"], r["schema"], r["table"], json.loads(r["before"]) if r["before"] else None,
            json.loads(r["after"]) if r["after"] else None) for r in rows]
    assert got == full
