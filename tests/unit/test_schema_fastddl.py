"""The sqlglot-free fast path for CREATE DATABASE / CREATE TABLE (binlogd.library.schema.fastddl) against its
reference twin binlogd.library.schema.ddl.parse: on every such statement of the corpus, of this repo's tests and
benchmarks, and on generated column definitions, it gives either None (the caller falls back to sqlglot)
or exactly what ddl.parse gives.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from importlib.metadata import version

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.decode import CREATE_TABLE
from binlogd.library.schema import ddl, fastddl
from binlogd.library.schema.changes import CreateDatabase, CreateTable
from binlogd.library.schema.sqltext import ddl_text
from binlogd.protocol import events as E
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.reader import iter_events
from tests.support import manifest as M
from tests.support.paths import REPO

MARIADB = "10.11.19-MariaDB-log"
_CREATE = re.compile(r"\s*CREATE\s+(TABLE|DATABASE|SCHEMA)\b", re.I)


def fast(sql: str, db: str = "d", sql_mode: int = 0, version: str = MARIADB):
    text = ddl_text(sql, sql_mode, version)
    return None if text is None else fastddl.parse(text, db)


def agrees(sql: str, db: str = "d", sql_mode: int = 0, version: str = MARIADB) -> bool:
    """True when the fast path reads ``sql``; asserts it reads it as ddl.parse does."""
    got = fast(sql, db, sql_mode, version)
    if got is not None:
        assert got == ddl.parse(sql, db, sql_mode, version), sql
    return got is not None


# ------------------------------------------------------------------ the corpus and the repo's own statements


@lru_cache(maxsize=None)
def corpus_creates() -> tuple[tuple[str, str, int, str], ...]:
    """(statement, default db, sql_mode, server version) of every CREATE TABLE/DATABASE/SCHEMA QUERY event."""
    out = []
    for entry in M.entries_or_empty():
        if entry.negative:
            continue
        version = ""
        try:
            for event in iter_events(M.data(entry.path)):
                for e in event.events if isinstance(event, E.TransactionPayloadEvent) else (event,):
                    if isinstance(e, E.FormatDescriptionEvent):
                        version = e.server_version
                    elif isinstance(e, E.QueryEvent) and _CREATE.match(
                            ddl_text(e.query, e.status.get("sql_mode", 0), version) or ""):
                        out.append((e.query, e.schema, e.status.get("sql_mode", 0), version))
        except BinlogError:
            continue  # the corrupt relay log: its events up to the damage are taken
    return tuple(out)


def test_corpus_statements_are_read_as_ddl_parse_reads_them():
    statements = corpus_creates()
    if not statements:
        pytest.skip("no corpus")
    taken = sum(agrees(sql, db, mode, version) for sql, db, mode, version in statements)
    print(f"corpus: {len(statements)} CREATE TABLE/DATABASE statements, fast path {taken}, "
          f"fallback {len(statements) - taken}")
    assert taken >= 0.8 * len(statements)   # 85 of 94 when written; most corpus DDL is plain


def _strings_of(path) -> list[str]:
    """String constants of a Python file (f-strings with each placeholder as ``x1``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "x1" for v in node.values))
    return out


def repo_creates() -> list[str]:
    files = [*sorted((REPO / "tests").rglob("*.py")), *sorted((REPO / "bench").glob("*.py"))]
    return sorted({s for f in files for s in _strings_of(f) if _CREATE.match(s)})


def test_the_repos_own_create_statements_are_read_as_ddl_parse_reads_them():
    statements = repo_creates()
    assert len(statements) > 50
    taken = sum(agrees(sql) for sql in statements)
    assert taken > len(statements) // 2, taken


# ------------------------------------------------------------------ statements it must read


BENCH_TABLE = CREATE_TABLE  # the benchmark's table


@pytest.mark.parametrize("sql", [
    "CREATE DATABASE bench", "create schema IF NOT EXISTS `we``ird` DEFAULT CHARACTER SET = latin1",
    "CREATE DATABASE x DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_bin", "CREATE DATABASE x COLLATE=latin1_bin",
    BENCH_TABLE,
    "CREATE TABLE `erosa`.`f` (\n  `id` int(11) NOT NULL,\n  `r` varchar(50) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n)"
    " ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8 COLLATE=utf8_bin COMMENT='x' ROW_FORMAT=DYNAMIC",
    "CREATE TABLE t (id INT UNSIGNED NOT NULL AUTO_INCREMENT, a VARCHAR(20) CHARACTER SET latin1, "
    "e ENUM('x','y''z', 'a\\'b', 'c\\\\d') NOT NULL, s SET('a','b'), d DECIMAL(10,2) UNSIGNED ZEROFILL, "
    "n NUMERIC(5), f FLOAT, g FLOAT(30), r REAL, dt DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE "
    "CURRENT_TIMESTAMP(3), ts TIMESTAMP NULL DEFAULT '2000-01-01 00:00:00', b BIT(9) DEFAULT 1, y YEAR, j JSON, "
    "p POINT, i6 INET6, tx TEXT COMMENT 'it''s', bl LONGBLOB, c CHAR(3) BINARY, bn BINARY(4), bo BOOL DEFAULT TRUE, "
    "v VARCHAR(3) CHARSET binary, x DOUBLE PRECISION DEFAULT -1.5, sr SERIAL, vc VECTOR(4) NOT NULL, "
    "PRIMARY KEY (id), KEY k (a(5), dt DESC), UNIQUE KEY u (y), FULLTEXT INDEX (tx), "
    "CONSTRAINT fk FOREIGN KEY (b) REFERENCES o.u (z) ON DELETE SET NULL ON UPDATE CASCADE) CHARSET latin1",
    "CREATE TABLE IF NOT EXISTS t (a INT PRIMARY KEY, B INT, PRIMARY KEY (b), c INT PRIMARY KEY)",
    "CREATE TABLE t (a INT NULL NOT NULL, b INT NOT NULL NULL, c INT PRIMARY KEY NULL, d INT UNIQUE KEY INVISIBLE)",
    "CREATE TABLE t (a FLOAT(24), b FLOAT(25), c FLOAT(53), d FLOAT(7,4), e DOUBLE(10,2) ZEROFILL, f BIT, g CHAR)",
    "CREATE TABLE `t` (\n  `id` bigint(20) NOT NULL,\n  `c_json` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin "
    "DEFAULT NULL CHECK (json_valid(`c_json`)),\n  `j` longtext NOT NULL CHECK (JSON_VALID(j)),\n  PRIMARY KEY (`id`)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",   # MariaDB's SHOW CREATE TABLE of JSON
])
def test_plain_statements_take_the_fast_path(sql):
    assert agrees(sql)


def test_what_it_reads_is_right_on_its_own():
    """A few values written out by hand, so the two twins cannot agree on a wrong answer unseen."""
    [c] = fast("CREATE TABLE t (a INT PRIMARY KEY, B INT, e ENUM('y''z'), PRIMARY KEY (b), c INT PRIMARY KEY) "
               "COLLATE latin1_bin")
    assert isinstance(c, CreateTable) and c.primary_key == ("b", "c") and c.charset == "latin1"
    assert [(x.name, x.nullable) for x in c.columns] == [("a", False), ("B", False), ("e", True), ("c", False)]
    assert c.columns[2].values == ("y'z",)
    assert fast("CREATE SCHEMA IF NOT EXISTS x DEFAULT COLLATE utf8mb4_bin") == [CreateDatabase("x", "utf8mb4", True)]
    [c] = fast("CREATE TABLE t (a FLOAT(24), b FLOAT(25), c FLOAT(7,4), d DECIMAL(5), e VARCHAR(3) CHARSET binary, "
               "f POINT, g SERIAL, h INT ZEROFILL, i TEXT(9))")
    assert [(x.type, x.length, x.precision, x.scale, x.unsigned, x.nullable, x.charset) for x in c.columns] == [
        ("float", None, None, None, False, True, None), ("double", None, None, None, False, True, None),
        ("float", None, None, None, False, True, None), ("decimal", None, 5, 0, False, True, None),
        ("varbinary", 3, None, None, False, True, "binary"), ("geometry", None, None, None, False, True, None),
        ("bigint", None, None, None, True, False, None), ("int", None, None, None, True, True, None),
        ("text", 9, None, None, False, True, None)]


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t (a INT) PARTITION BY HASH(a) PARTITIONS 2", "CREATE TABLE t LIKE u", "CREATE TABLE t AS SELECT 1",
    "CREATE TABLE t (a INT, b INT AS (a + 1))", "CREATE TABLE t (a INT CHECK (a > 0))", "CREATE TABLE t (a INT, CHECK (a > 0))",
    "CREATE TABLE t (a FLOAT UNSIGNED)", "CREATE TABLE t (a VARCHAR)", "CREATE TABLE t (a INT ZEROFILL UNSIGNED)",
    "CREATE TABLE t (v VARCHAR(3) DEFAULT 'x' COLLATE latin1_bin)",  # sqlglot reads the COLLATE into the default
    "CREATE TABLE t (a INT --c\n)", "CREATE TABLE t (`a` INT, \"b\" INT)", "CREATE TABLE t (date DATE)",
    "CREATE TABLE t (e ENUM('a\\nb'))", "CREATE TABLE t (a INT DEFAULT 1 .5)", "CREATE TABLE t (a INT KEY)",
    "CREATE TEMPORARY TABLE t (a INT)", "CREATE OR REPLACE TABLE t (a INT)", "CREATE TABLE t (a INT),",
    "CREATE TABLE t (a INT) ENGINE=InnoDB, CHARSET=latin1", "CREATE TABLE t (a INT) CHARSET a CHARSET b",
    "CREATE TABLE t (a MIDDLEINT, b LONG)", "CREATE TABLE t (a VARCHAR(3) CHARACTER SET = latin1)",
    "CREATE DATABASE x COMMENT 'y'", "CREATE DATABASE a.b", "CREATE TABLE t (a INT DEFAULT (1 + 1))",
    "CREATE TABLE t (a é INT)", "CREATE TABLE t (a INT) KEY_BLOCK_SIZE=8",
    "CREATE TABLE t (a LONGTEXT CHECK (json_valid(b)), b INT)", "CREATE TABLE t (a TEXT CHECK (json_valid(a) > 0))",
    "CREATE TABLE t (a TEXT CHECK (json_valid(a, 1)))",
])
def test_anything_else_falls_back(sql):
    assert fast(sql) is None
    assert ddl.parse(sql, "d", 0, MARIADB) is not None   # the reference twin still reads (or reports) it


def test_the_reserved_words_cover_sqlglots_keywords():
    """An unquoted identifier that sqlglot reads as a keyword, constraint or property is left to sqlglot: the
    list in fastddl must hold every such word of the sqlglot installed (the version constraints.txt pins: the
    next test)."""
    parser, words = ddl._Dialect.Parser, set()
    for table in (ddl._Dialect.Tokenizer.KEYWORDS, parser.CONSTRAINT_PARSERS, parser.PROPERTY_PARSERS,
                  parser.SCHEMA_UNNAMED_CONSTRAINTS, parser.NO_PAREN_FUNCTION_PARSERS):
        words |= {w.upper() for key in table if isinstance(key, str) for w in key.split()
                  if w.replace("_", "").isalnum()}
    assert words <= fastddl._RESERVED, sorted(words - fastddl._RESERVED)
    for word in ("release", "savepoint", "Savepoint"):  # sqlglot 30.31's commands: never a column name here
        assert fast(f"CREATE TABLE t (id INT, {word} INT)") is None
        assert fast(f"CREATE TABLE t (id INT, `{word}` INT)") is not None


def test_the_reserved_words_are_checked_against_the_pinned_sqlglot():
    """The test above compares with the sqlglot installed: it is the one constraints.txt pins, so a new sqlglot
    release changes nothing until the pin (and this list) change together."""
    pins = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert pins.get("sqlglot") == version("sqlglot"), (
        f"sqlglot {version('sqlglot')} is installed, constraints.txt pins {pins.get('sqlglot')}: "
        "run ./scripts/test, which installs the pinned versions")


# ------------------------------------------------------------------ generated statements

# Each pair: forms the fast path reads (drawn seven times as often), then forms it must leave to sqlglot.
_NAMES = (["c0", "c1", "C0", "`c1`", "`c 2`", "`we``ird`", "id", "x_1", "_y", "`key`", "`select`"],
          ["name", "title", "comment", "date", "key", "data", "value", "1a", "`c\\d`"])
_TYPES = (["TINYINT", "TINYINT(1)", "SMALLINT(6)", "MEDIUMINT", "INT", "int(11)", "INTEGER", "BIGINT(20)", "BOOL",
           "BOOLEAN", "DECIMAL", "DECIMAL(12,4)", "NUMERIC(5)", "Decimal(65, 30)", "FLOAT", "FLOAT(24)", "FLOAT(25)",
           "FLOAT(7,4)", "DOUBLE", "DOUBLE(10,2)", "DOUBLE PRECISION", "REAL", "BIT", "BIT(1)", "BIT(64)", "DATE",
           "YEAR", "YEAR(4)", "TIME", "TIME(3)", "DATETIME", "DATETIME(6)", "TIMESTAMP", "TIMESTAMP(0)", "CHAR",
           "CHAR(0)", "CHAR(255)", "VARCHAR(64)", "varchar(1)", "BINARY", "BINARY(16)", "VARBINARY(8)", "TINYTEXT",
           "TEXT", "TEXT(100)", "MEDIUMTEXT", "LONGTEXT", "TINYBLOB", "BLOB", "BLOB(70000)", "MEDIUMBLOB",
           "LONGBLOB", "JSON", "GEOMETRY", "POINT", "INET6", "INET4", "UUID", "VECTOR", "VECTOR(3)", "SERIAL",
           "ENUM('a','b''c')", "SET('x', 'y\\'z', '')", "ENUM('a\\\\b', 'q\\\"')"],
          ["DEC", "FIXED", "NCHAR", "MIDDLEINT", "LONG", "LINESTRING", "ENUM()", "SET('a\\nb')", "ENUM(\"q\")",
           "CHARACTER VARYING(3)", "NATIONAL CHAR", "INT1", "VARCHAR", "VARBINARY", "INT(3, 1, 2)", "TEXT()",
           "DECIMAL(1.5)", "CHAR(-1)", "BIT(a)", "LONGTEXT(10)", "DOUBLE(5)", "POINT(1)", "TIMESTAMP(1, 2)"])
_NUMERIC = (["TINYINT UNSIGNED", "SMALLINT(6) SIGNED", "MEDIUMINT(8) UNSIGNED ZEROFILL", "INT unsigned",
             "INTEGER ZEROFILL", "BIGINT(20) UNSIGNED", "DECIMAL(10,2) UNSIGNED", "NUMERIC SIGNED ZEROFILL",
             "FLOAT ZEROFILL", "DOUBLE UNSIGNED", "DOUBLE PRECISION UNSIGNED", "REAL(10,2) UNSIGNED"],
            ["FLOAT UNSIGNED", "BIT UNSIGNED", "BOOL SIGNED", "YEAR UNSIGNED", "INT ZEROFILL UNSIGNED",
             "INT UNSIGNED UNSIGNED", "CHAR(3) UNSIGNED", "DATE ZEROFILL"])
_ATTRS = (["NULL", "NOT NULL", "DEFAULT NULL", "DEFAULT 0", "DEFAULT -1", "DEFAULT 1.5", "DEFAULT 'x'",
           "DEFAULT ''", "DEFAULT CURRENT_TIMESTAMP", "DEFAULT CURRENT_TIMESTAMP(6)", "DEFAULT current_timestamp()",
           "ON UPDATE CURRENT_TIMESTAMP", "ON UPDATE CURRENT_TIMESTAMP(3)", "AUTO_INCREMENT", "PRIMARY KEY",
           "UNIQUE", "UNIQUE KEY", "COMMENT 'c'", "COMMENT 'it''s'", "CHARACTER SET latin1", "CHARSET utf8mb4",
           "CHARSET utf8", "CHARSET binary", "CHARSET ucs2", "COLLATE utf8mb4_bin", "COLLATE latin1_general_ci",
           "CHARSET unknownx", "COLLATE unknown_ci", "INVISIBLE", "BINARY", "DEFAULT TRUE", "DEFAULT FALSE",
           "not null default '0'", "DEFAULT 'a''b'", "DEFAULT '\\\\'", "CHECK (json_valid(`c0`))",
           "CHECK (JSON_VALID(c0))"],
          ["KEY", "COMMENT \"d\"", "CHARACTER SET ascii", "COLLATE binary", "CHARACTER SET = latin1",
           "CHARACTER SET 'latin1'", "ZEROFILL", "CHECK (c0 > 0)", "GENERATED ALWAYS AS (1)", "AS (1) VIRTUAL",
           "REFERENCES u (a)", "DEFAULT b'1'", "DEFAULT 1e3", "DEFAULT NOW()", "DEFAULT 0x1F", "DEFAULT _utf8'x'",
           "DEFAULT (1)", "COLUMN_FORMAT FIXED", "DEFAULT - 1", "DEFAULT 1. 5", "SRID 0", "/* c */", "-- c\n",
           "DEFAULT +1", "DEFAULT 'x' COLLATE latin1_bin", "UNSIGNED", "ON UPDATE NOW()", "DEFAULT 1 .5"])
_KEYS = (["PRIMARY KEY (c0)", "PRIMARY KEY (c0, c1)", "PRIMARY KEY (`c1`(10))", "PRIMARY KEY (C1)",
          "CONSTRAINT pk PRIMARY KEY (c0)", "CONSTRAINT PRIMARY KEY (c1)", "CONSTRAINT `p k` PRIMARY KEY (c1, c0)",
          "KEY k (c0)", "INDEX (c0, c1 DESC)", "KEY (c0 ASC)", "UNIQUE KEY u (c0(5))", "UNIQUE (c1)",
          "UNIQUE INDEX ui (c1)", "CONSTRAINT uq UNIQUE KEY (c0)", "FULLTEXT KEY f (c0)", "FULLTEXT (c1)",
          "CONSTRAINT fk FOREIGN KEY (c0) REFERENCES o (a) ON DELETE CASCADE",
          "FOREIGN KEY fk2 (c1) REFERENCES d2.o (a, b) ON UPDATE SET NULL ON DELETE NO ACTION",
          "FOREIGN KEY (c1) REFERENCES o (a) ON DELETE RESTRICT ON UPDATE SET DEFAULT", "primary key (c1,c0)",
          "UNIQUE uq (c1)", "FULLTEXT INDEX fi (c0)", "INDEX `i x` (c0)", "CONSTRAINT `u` UNIQUE (c0, c1)"],
         ["PRIMARY KEY (c0 DESC)", "KEY k USING BTREE (c0)", "CHECK (c0 > 1)", "SPATIAL KEY (c0)",
          "KEY k (c0) COMMENT 'x'", "PRIMARY KEY (c0), PRIMARY KEY (c1)", "PERIOD FOR p (c0, c1)",
          "CONSTRAINT c CHECK (c0 > 1)", "FOREIGN KEY (c0) REFERENCES o (a) MATCH FULL"])
_OPTIONS = (["ENGINE=InnoDB", "ENGINE = MyISAM", "ENGINE Aria", "AUTO_INCREMENT=5", "AUTO_INCREMENT 7",
             "DEFAULT CHARSET=utf8mb4", "CHARSET latin1", "CHARACTER SET = utf8", "DEFAULT CHARACTER SET binary",
             "COLLATE=utf8mb4_bin", "DEFAULT COLLATE latin1_bin", "COMMENT='t'", "COMMENT 'x'",
             "ROW_FORMAT=DYNAMIC", "ROW_FORMAT COMPRESSED", "ROW_FORMAT=FIXED", "ROW_FORMAT=PAGE",
             "ROW_FORMAT=COMPACT", "ROW_FORMAT=DEFAULT", "ROW_FORMAT=REDUNDANT", "CHARSET=unknownx",
             "engine=innodb default charset=latin1"],
            ["ENGINE=MEMORY", "KEY_BLOCK_SIZE=8", "STATS_PERSISTENT=0", "PARTITION BY HASH(c0) PARTITIONS 2",
             "COLLATE 'latin1_bin'", "ENGINE='InnoDB'", "WITH SYSTEM VERSIONING", "AS SELECT 1"])
_SPACES = st.sampled_from([" ", "  ", "\n  ", "\t", ""])


def pick(forms: tuple[list[str], list[str]]):
    plain, odd = (st.sampled_from(f) for f in forms)
    return st.integers(0, 7).flatmap(lambda k: odd if k == 0 else plain)


@st.composite
def column(draw, i: int) -> str:
    name = draw(pick(_NAMES)) if draw(st.booleans()) else f"c{i}"
    kind = draw(pick(_TYPES if draw(st.integers(0, 3)) else _NUMERIC))
    attrs = draw(st.lists(pick(_ATTRS), max_size=4))
    return " ".join([name, kind, *attrs])


@st.composite
def create_table(draw) -> str:
    n = draw(st.integers(1, 4))
    items = [draw(column(i)) for i in range(n)] + draw(st.lists(pick(_KEYS), max_size=3))
    items = draw(st.permutations(items)) if draw(st.booleans()) else items
    space = draw(_SPACES)
    head = draw(st.sampled_from(["CREATE TABLE", "create table", "CREATE TABLE IF NOT EXISTS", "Create Table"]))
    name = draw(pick((["t", "`t`", "o.t", "`o`.`t 1`", "o . t", "`select`", "T1"], ["data", "o.", "a.b.c"])))
    options = draw(st.lists(pick(_OPTIONS), max_size=3))
    return (f"{head} {name}{draw(st.sampled_from(['', ' ']))}({space}{(',' + space).join(items)}{space})"
            + draw(st.sampled_from([" ", ", ", "\n"])).join(["", *options]))


@st.composite
def create_database(draw) -> str:
    head = draw(st.sampled_from(["CREATE DATABASE", "create schema", "CREATE DATABASE IF NOT EXISTS"]))
    name = draw(pick((["x", "`x y`", "`we``ird`", "Bench", "`data`"], ["data", "a.b", "'x'"])))
    options = draw(st.lists(pick((["DEFAULT CHARSET utf8mb4", "CHARACTER SET = latin1", "CHARSET binary",
                                   "DEFAULT CHARACTER SET utf8", "COLLATE utf8mb4_bin", "DEFAULT COLLATE = latin1_bin",
                                   "CHARSET unknownx", "default charset=latin1 collate=latin1_bin"],
                                  ["COMMENT 'x'", "DEFAULT ENCRYPTION='N'", "CHARACTER SET 'latin1'",
                                   "CHARSET DEFAULT"])), max_size=3))
    return " ".join([head, name, *options])


_PROPERTY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(create_table())
def test_generated_create_tables_are_read_as_ddl_parse_reads_them(sql):
    agrees(sql)


@_PROPERTY
@given(create_database())
def test_generated_create_databases_are_read_as_ddl_parse_reads_them(sql):
    agrees(sql)


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda numeric: pick(_NUMERIC if numeric else _TYPES)), st.lists(pick(_ATTRS), max_size=3))
def test_generated_single_columns_are_read_as_ddl_parse_reads_them(kind, attrs):
    agrees(f"CREATE TABLE t (c0 {kind} {' '.join(attrs)})")
