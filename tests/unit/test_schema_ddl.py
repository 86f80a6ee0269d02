"""The DDL parser (binlogd.library.schema.ddl) on each statement form, and the catalog it moves forward.

Expected values are written out by hand from the MySQL/MariaDB manuals' semantics for each form; the
real-server tests (tests/integration/test_schema_history*.py) check the same against TABLE_MAPs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from binlogd.library.schema import ddl
from binlogd.library.schema.catalog import DROPPED, UNKNOWN, Catalog
from binlogd.library.schema.changes import (
    AddColumn,
    AlterDatabase,
    AlterTable,
    ChangeColumn,
    Charset,
    CreateDatabase,
    CreateTable,
    DropColumn,
    DropDatabase,
    DropTables,
    PrimaryKey,
    RenameColumn,
    RenameTables,
    RenameTo,
    Unparsed,
)
from binlogd.library.schema.model import ColumnDef
from binlogd.library.schema.sqltext import split_statements

MARIADB = "10.11.19-MariaDB-log"


def one(sql: str, db: str = "d", **kw):
    changes = ddl.parse(sql, db, server_version=kw.pop("version", MARIADB), **kw)
    assert len(changes) == 1, changes
    return changes[0]


def cols(table) -> list[tuple]:
    return [(c.name, c.type) for c in table.columns]


# ------------------------------------------------------------------ CREATE TABLE


def test_create_table_columns_types_and_key():
    c = one("CREATE TABLE t (id INT UNSIGNED NOT NULL AUTO_INCREMENT, a VARCHAR(20) CHARACTER SET latin1, "
            "e ENUM('x','y''z') NOT NULL, s SET('a','b'), d DECIMAL(10,2), n NUMERIC(5), f FLOAT, g FLOAT(30), "
            "r REAL, dt DATETIME(3), ts TIMESTAMP NULL, b BIT(9), y YEAR, j JSON, p POINT, i6 INET6, "
            "tx TEXT, bl LONGBLOB, c CHAR(3) BINARY, bn BINARY(4), m MIDDLEINT, l LONG, bo BOOL, "
            "PRIMARY KEY (id), KEY k (a)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    assert isinstance(c, CreateTable) and c.name == ("d", "t") and c.charset == "utf8mb4"
    assert c.primary_key == ("id",)
    by = {x.name: x for x in c.columns}
    assert [x.name for x in c.columns] == ["id", "a", "e", "s", "d", "n", "f", "g", "r", "dt", "ts", "b", "y", "j",
                                           "p", "i6", "tx", "bl", "c", "bn", "m", "l", "bo"]
    assert by["id"] == ColumnDef("id", "int", unsigned=True, nullable=False)
    assert by["a"] == ColumnDef("a", "varchar", length=20, charset="latin1")
    assert by["e"].values == ("x", "y'z") and by["e"].nullable is False
    assert by["s"].type == "set" and by["s"].values == ("a", "b")
    assert (by["d"].precision, by["d"].scale) == (10, 2) and (by["n"].precision, by["n"].scale) == (5, 0)
    assert [by[k].type for k in ("f", "g", "r")] == ["float", "double", "double"]   # FLOAT(p>24) and REAL are DOUBLE
    assert (by["dt"].type, by["dt"].precision) == ("datetime", 3) and by["ts"].type == "timestamp"
    assert (by["b"].type, by["b"].length) == ("bit", 9)
    assert [by[k].type for k in ("y", "j", "p", "i6", "tx", "bl")] == ["year", "json", "geometry", "inet6", "text",
                                                                       "longblob"]
    assert by["bl"].charset == "binary" and by["c"].type == "char" and by["c"].charset is None  # BINARY: _bin collation
    assert (by["bn"].type, by["bn"].length, by["bn"].charset) == ("binary", 4, "binary")
    assert [by[k].type for k in ("m", "l", "bo")] == ["mediumint", "mediumtext", "tinyint"]


def test_create_table_like_if_not_exists_or_replace_and_qualified():
    like = one("CREATE TABLE IF NOT EXISTS o.t2 LIKE t")
    assert like == CreateTable(("o", "t2"), like=("d", "t"), if_not_exists=True)
    assert one("CREATE OR REPLACE TABLE x.y (a INT)").name == ("x", "y")
    assert one("CREATE TABLE `we``ird` (`a b` INT)").columns[0].name == "a b"
    assert one("CREATE TABLE `we``ird` (`a b` INT)").name == ("d", "we`ird")


def test_create_table_as_select_in_statement_format_is_unparsed_naming_the_table():
    c = one("CREATE TABLE t3 AS SELECT * FROM t")
    assert isinstance(c, Unparsed) and c.names[0] == ("d", "t3")
    # row format logs it as a full CREATE TABLE; MySQL 8 ends it with START TRANSACTION
    c = one("CREATE TABLE `d`.`t3` (`a` int DEFAULT NULL) START TRANSACTION", version="8.0.40")
    assert isinstance(c, CreateTable) and cols(c) == [("a", "int")]


def test_temporary_tables_and_non_table_objects_change_nothing():
    for sql in ("CREATE TEMPORARY TABLE t (a INT)", "DROP TEMPORARY TABLE IF EXISTS t", "CREATE INDEX i ON t (a)",
                "DROP INDEX i ON t", "CREATE VIEW v AS SELECT 1", "CREATE DEFINER=`root`@`%` TRIGGER tr BEFORE "
                "INSERT ON t FOR EACH ROW SET @x = 1", "TRUNCATE TABLE t", "INSERT INTO t VALUES (1)", "BEGIN",
                "COMMIT", "SAVEPOINT a", "XA END 'x'", "RENAME USER a TO b", "ALTER USER u IDENTIFIED BY 'x'",
                "CREATE USER u", "DROP VIEW v", "", "   /* only a comment */ "):
        assert ddl.parse(sql, "d") == [], sql


# ------------------------------------------------------------------ ALTER TABLE


def test_alter_table_several_clauses():
    a = one("ALTER TABLE t ADD COLUMN c INT AFTER a, DROP COLUMN d, CHANGE COLUMN f f2 DOUBLE FIRST, "
            "MODIFY dt DATETIME(6), RENAME COLUMN b TO bb, ADD (p INT, q TEXT), ADD z INT FIRST, DROP y")
    assert isinstance(a, AlterTable) and a.name == ("d", "t")
    assert a.actions == (
        AddColumn(ColumnDef("c", "int"), "a"), DropColumn("d"), ChangeColumn("f", ColumnDef("f2", "double"), ""),
        ChangeColumn("dt", ColumnDef("dt", "datetime", precision=6)), RenameColumn("b", "bb"),
        AddColumn(ColumnDef("p", "int")), AddColumn(ColumnDef("q", "text")), AddColumn(ColumnDef("z", "int"), ""),
        DropColumn("y"))


def test_alter_table_rename_charset_key_and_if_exists_forms():
    assert one("ALTER TABLE t RENAME TO u").actions == (RenameTo(("d", "u")),)
    assert one("ALTER TABLE t RENAME AS o.u").actions == (RenameTo(("o", "u")),)
    assert one("ALTER TABLE t RENAME u").actions == (RenameTo(("d", "u")),)
    assert one("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").actions == (
        Charset("utf8mb4", convert=True),)
    assert one("ALTER TABLE t DEFAULT CHARSET=latin1").actions == (Charset("latin1"),)
    assert one("ALTER TABLE t CHARACTER SET = utf8").actions == (Charset("utf8mb3"),)
    assert one("ALTER TABLE t COLLATE latin1_bin").actions == (Charset("latin1"),)
    assert one("ALTER TABLE t ADD PRIMARY KEY (a, b), DROP PRIMARY KEY").actions == (PrimaryKey(("a", "b")),
                                                                                     PrimaryKey(()))
    assert one("ALTER TABLE t ADD CONSTRAINT pk PRIMARY KEY (a)").actions == (PrimaryKey(("a",)),)
    assert one("ALTER TABLE t ADD COLUMN IF NOT EXISTS z INT, DROP COLUMN IF EXISTS y").actions == (
        AddColumn(ColumnDef("z", "int"), None, True), DropColumn("y", True))
    assert one("ALTER TABLE IF EXISTS o.t ADD z INT").name == ("o", "t")
    assert one("ALTER ONLINE TABLE t ADD z INT").actions == (AddColumn(ColumnDef("z", "int")),)
    assert one("ALTER IGNORE TABLE t ADD z INT").actions == (AddColumn(ColumnDef("z", "int")),)


def test_alter_table_clauses_that_change_no_columns():
    for clause in ("ADD INDEX i (a)", "ADD UNIQUE KEY (a)", "ADD FULLTEXT INDEX ft (b)", "DROP INDEX i",
                   "DROP KEY i", "ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES u(b)", "DROP FOREIGN KEY fk",
                   "RENAME INDEX a TO b", "RENAME KEY a TO b", "COMMENT 'x'", "COMMENT = 'x'", "ENGINE=Aria",
                   "PARTITION BY HASH(id) PARTITIONS 4", "REMOVE PARTITIONING", "ADD PARTITION (PARTITION p3)",
                   "DROP PARTITION p1", "COALESCE PARTITION 2", "ALGORITHM=INPLACE, LOCK=NONE", "FORCE",
                   "AUTO_INCREMENT = 10", "ROW_FORMAT=DYNAMIC", "ALTER COLUMN a SET DEFAULT 'q'",
                   "ALTER COLUMN a DROP DEFAULT", "ORDER BY a", "ADD CHECK (a > 0)", "DROP CONSTRAINT c",
                   "KEY_BLOCK_SIZE=8", "STATS_PERSISTENT=0"):
        assert one(f"ALTER TABLE t {clause}").actions == (), clause


def test_unknown_alter_clause_makes_the_statement_unparsed():
    u = one("ALTER TABLE o.t ADD z INT, FROBNICATE x")
    assert isinstance(u, Unparsed) and u.names == (("o", "t"),) and "FROBNICATE" in u.reason


# ------------------------------------------------------------------ RENAME, DROP, databases


def test_rename_tables_several_pairs_with_default_database():
    assert one("RENAME TABLE a TO b, o.c TO `o`.`d`, e TO p.e") == RenameTables(
        ((("d", "a"), ("d", "b")), (("o", "c"), ("o", "d")), (("d", "e"), ("p", "e"))))


def test_drop_tables_and_databases():
    assert one("DROP TABLE IF EXISTS a, `o`.`b` /* generated by server */") == DropTables((("d", "a"), ("o", "b")))
    assert one("DROP DATABASE x") == DropDatabase("x")
    assert one("DROP SCHEMA IF EXISTS x") == DropDatabase("x")
    assert one("CREATE DATABASE x CHARACTER SET latin1") == CreateDatabase("x", "latin1")
    assert one("CREATE SCHEMA IF NOT EXISTS x DEFAULT COLLATE utf8mb4_bin") == CreateDatabase("x", "utf8mb4", True)
    assert one("ALTER DATABASE x CHARACTER SET latin1") == AlterDatabase("x", "latin1")
    assert one("ALTER DATABASE DEFAULT CHARSET utf8mb4") == AlterDatabase("d", "utf8mb4")
    assert one("ALTER SCHEMA x COMMENT 'y'") == AlterDatabase("x", None)


# ------------------------------------------------------------------ comments, quotes, versions


def test_executable_comments_follow_the_server_version_and_flavour():
    assert ddl.parse("CREATE /*!32312 TEMPORARY */ TABLE x (a INT)", "d") == []      # runs: a temporary table
    assert one("CREATE /*!80000 TEMPORARY */ TABLE x (a INT)", version="5.7.40").name == ("d", "x")  # newer
    assert ddl.parse("CREATE /*!80000 TEMPORARY */ TABLE x (a INT)", "d", server_version="8.0.40") == []
    assert one("/*!40101 ALTER TABLE t ADD z INT FIRST */").actions == (AddColumn(ColumnDef("z", "int"), ""),)
    mariadb = one("ALTER TABLE t ADD w INT /*M!100000 AFTER z */")
    assert mariadb.actions == (AddColumn(ColumnDef("w", "int"), "z"),)
    mysql = one("ALTER TABLE t ADD w INT /*M!100000 AFTER z */", version="8.0.40")
    assert mysql.actions == (AddColumn(ColumnDef("w", "int")),)                       # MySQL skips /*M! */
    too_new = one("ALTER TABLE t ADD w INT /*M!110700 AFTER z */")
    assert too_new.actions == (AddColumn(ColumnDef("w", "int")),)
    assert one("ALTER TABLE t ADD w INT -- AFTER z\n, ADD v INT # x").actions == (
        AddColumn(ColumnDef("w", "int")), AddColumn(ColumnDef("v", "int")))


def test_comment_markers_inside_strings_are_text():
    c = one("CREATE TABLE t (e ENUM('/*', '*/', '--', '#'), s VARCHAR(3) COMMENT '/*! x */')")
    assert c.columns[0].values == ("/*", "*/", "--", "#") and [x.name for x in c.columns] == ["e", "s"]


def test_ansi_quotes_sql_mode_reads_double_quotes_as_identifiers():
    c = one('CREATE TABLE "t" ("a" INT, "b" VARCHAR(3) DEFAULT \'x\')', sql_mode=4)
    assert c.name == ("d", "t") and [x.name for x in c.columns] == ["a", "b"]


def test_unparseable_ddl_names_its_tables_and_never_raises():
    u = one("CREATE TABLE o.bad (x int) WITH SOMETHING WEIRD")
    assert isinstance(u, Unparsed) and u.names == (("o", "bad"),)
    assert one("RENAME TABLE a TO b, c").names == (("d", "a"), ("d", "b"), ("d", "c"))
    assert one("ALTER TABLE t ADD COLUMN x 'unterminated").names in ((), (("d", "t"),))
    assert isinstance(one("DROP TABLE"), Unparsed)


def test_split_statements_of_a_seed_script():
    script = "USE d; /*!40101 SET x = 1 */;\nCREATE TABLE `a;b` (v VARCHAR(3) DEFAULT ';') -- c;\n;\n# c;\n"
    assert split_statements(script) == ["USE d", "/*!40101 SET x = 1 */",
                                            "CREATE TABLE `a;b` (v VARCHAR(3) DEFAULT ';') -- c;", "# c;"]


# ------------------------------------------------------------------ the catalog


def apply_all(catalog: Catalog, *statements: str, db: str = "d", server_charset: str = "utf8mb4"):
    out = {}
    for sql in statements:
        for change in ddl.parse(sql, db, server_version=MARIADB):
            out.update(catalog.apply(change, server_charset))
    return out


def test_catalog_follows_alter_positions_renames_and_charsets():
    c = Catalog()
    apply_all(c, "CREATE DATABASE d CHARACTER SET latin1", "CREATE DATABASE e",
              "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(4), b TEXT, bn VARBINARY(3))")
    t = c.tables[("d", "t")]
    assert [(x.name, x.charset) for x in t.columns] == [("id", None), ("a", "latin1"), ("b", "latin1"),
                                                        ("bn", "binary")]
    assert c.databases == {"d": "latin1", "e": "utf8mb4"}
    apply_all(c, "ALTER TABLE t ADD x INT AFTER id, ADD y INT FIRST, CHANGE a a2 VARCHAR(8) CHARSET utf8mb4 AFTER b",
              "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4")
    t = c.tables[("d", "t")]
    assert [(x.name, x.type, x.charset) for x in t.columns] == [
        ("y", "int", None), ("id", "int", None), ("x", "int", None), ("b", "mediumtext", "utf8mb4"),
        ("a2", "varchar", "utf8mb4"), ("bn", "varbinary", "binary")]   # TEXT grows to keep its characters
    changed = apply_all(c, "RENAME TABLE t TO tmp, u TO t, tmp TO u")
    assert changed[("d", "tmp")] == DROPPED and changed[("d", "t")] == UNKNOWN
    assert changed[("d", "u")] == replace(t, table="u")
    assert ("d", "tmp") not in c.tables
    apply_all(c, "ALTER TABLE u RENAME COLUMN id TO pk, DROP PRIMARY KEY, ADD PRIMARY KEY (pk, x)")
    u = c.tables[("d", "u")]
    assert u.primary_key == ("pk", "x") and [x.nullable for x in u.columns][:3] == [True, False, False]
    assert apply_all(c, "DROP DATABASE d") == {("d", "t"): DROPPED, ("d", "u"): DROPPED}


def test_catalog_like_if_not_exists_and_unknown_states():
    c = Catalog()
    apply_all(c, "CREATE TABLE t (a INT)", "CREATE TABLE IF NOT EXISTS t (b INT)", "CREATE TABLE l LIKE t",
              "CREATE TABLE m LIKE nowhere")
    assert cols(c.tables[("d", "t")]) == [("a", "int")] and cols(c.tables[("d", "l")]) == [("a", "int")]
    assert c.tables[("d", "m")] == UNKNOWN
    assert apply_all(c, "ALTER TABLE t DROP COLUMN nope") == {("d", "t"): UNKNOWN}   # stale: unknown, not wrong
    assert apply_all(c, "ALTER TABLE m ADD b INT") == {("d", "m"): UNKNOWN}
    assert apply_all(c, "ALTER TABLE l ADD COLUMN IF NOT EXISTS a INT, DROP COLUMN IF EXISTS zz") == {
        ("d", "l"): c.tables[("d", "l")]}
    assert apply_all(c, "ALTER TABLE l RENAME TO l2") == {("d", "l"): DROPPED, ("d", "l2"): c.tables[("d", "l2")]}
    assert set(apply_all(c, "FROB TABLE x")) == set()   # not DDL at all: nothing
    assert set(apply_all(c, "ALTER TABLE zz FROB")) == {("d", "zz")}


@pytest.mark.parametrize("sql, expected", [
    ("CREATE TABLE t (a TEXT(100))", "text"), ("CREATE TABLE t (a TEXT(60)) CHARSET latin1", "tinytext"),
    ("CREATE TABLE t (a BLOB(70000))", "mediumblob"), ("CREATE TABLE t (a TEXT(20000000))", "longtext")])
def test_sized_text_types(sql, expected):
    c = Catalog()
    apply_all(c, sql)
    assert c.tables[("d", "t")].columns[0].type == expected
