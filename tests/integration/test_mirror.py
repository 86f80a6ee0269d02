"""The PostgreSQL mirror against a real MariaDB and a real PostgreSQL.

- every type at its edges, then DDL (ADD/DROP/RENAME/MODIFY/AFTER/FIRST, primary-key change, RENAME TABLE,
  TRUNCATE, DROP TABLE) between writes, a hostile table name, a keyless table; a daemon SIGKILL and a
  PostgreSQL crash in the middle of a transfer load; every table equal to the source value by value, and a
  reader polling the accounts' sum never saw it broken;
- a PostgreSQL that refuses the login: exit 3; a table already there with another shape: exit 6.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from binlogd.daemon.sinks.mirrorddl import tablemap_def  # noqa: F401 (the module imports)
from binlogd.library.pgtypes import pg_text
from binlogd.library.schema.model import ColumnDef
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import DaemonProcess, base_overrides, run_to_exit, wait_caught_up

pytestmark = pytest.mark.server


def overrides(pg, srv, tmp_path, db, **extra) -> dict:
    o = base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": db,
                                         "sink.kind": "mirror", "sink.mirror.url": pg.url})
    o.update({k.replace("__", "."): str(v) for k, v in extra.items()})
    return o


def source_columns(srv, db, table) -> list[ColumnDef]:
    """The table's columns as information_schema says (enough for pg_type / pg_text)."""
    rows = srv.sql(f"SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
                   f"DATETIME_PRECISION, CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                   f"'{db}' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION")
    out = []
    for name, dtype, ctype, prec, scale, dprec, cs in rows:
        ctype = ctype.decode() if isinstance(ctype, bytes) else ctype
        length = int(ctype.split("(")[1].split(")")[0]) if dtype == "bit" else None
        out.append(ColumnDef(name, dtype, length, dprec if dtype in ("datetime", "timestamp", "time") else prec,
                             scale, "unsigned" in ctype, True, cs or ("binary" if "blob" in dtype or "binary" in dtype
                                                                      else None)))
    return out


def assert_equal(srv, pg, db, table, key=("id",), pg_schema=None):
    """Every row of the source's table is in the mirror, value by value (PostgreSQL compares), and no other."""
    import psycopg

    from tests.support.daemon import table_rows

    cols = source_columns(srv, db, table)
    src = table_rows(srv, db, table, key)
    q = f'"{pg_schema or db}"."{table}"'
    with psycopg.connect(pg.url) as conn:
        n = conn.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
        assert n == len(src), f"{table}: {n} rows in the mirror, {len(src)} in the source"
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid "
                                  "= %s::regclass AND attnum > 0 AND NOT attisdropped", (q,)).fetchall())
        assert list(types) == [c.name for c in cols]
        for row in src.values():
            conds = " AND ".join(f'"{c.name}" IS NOT DISTINCT FROM %s::{types[c.name]}' for c in cols)
            params = [pg_text(c, row[c.name]) for c in cols]
            got = conn.execute(f"SELECT count(*) FROM {q} WHERE {conds}", params).fetchone()[0]
            if got != 1:
                where = " AND ".join(f'"{k}" = %s::{types[k]}' for k in key)
                keyp = [pg_text(next(c for c in cols if c.name == k), row[k]) for k in key]
                diff = [(c.name, params[i], conn.execute(f'SELECT "{c.name}"::text, "{c.name}" IS NOT DISTINCT FROM '
                                                         f'%s::{types[c.name]} FROM {q} WHERE {where}',
                                                         [params[i], *keyp]).fetchone())
                        for i, c in enumerate(cols)]
                raise AssertionError(f"{table}: source row {row} is not in the mirror: "
                                     f"{[d for d in diff if not (d[2] and d[2][1])]}")


TYPES = """CREATE TABLE `{db}`.types (id INT PRIMARY KEY, u BIGINT UNSIGNED, s BIGINT, ti TINYINT UNSIGNED,
  d DECIMAL(65,30), f FLOAT, g DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL, da DATE, tm TIME(6), y YEAR,
  b BIT(10), e ENUM('a','b c'), st SET('x','y','z'), j JSON, vb VARBINARY(20), bl BLOB, tx TEXT, c CHAR(5))"""


@pytest.fixture
def minimal_db(mariadb_minimal):
    """A new schema on the MINIMAL-metadata server (no column names or keys in its TABLE_MAPs)."""
    name = f"mirror_{uuid.uuid4().hex[:8]}"
    mariadb_minimal.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb_minimal.sql(f"DROP DATABASE IF EXISTS `{name}`")


def test_types_ddl_kills_and_invariant(mariadb_minimal, minimal_db, tmp_path):
    require("postgres")
    db, srv = minimal_db, mariadb_minimal
    srv.sql("SET GLOBAL sql_mode = ''")
    with PostgresServer() as pg:
        o = overrides(pg, srv, tmp_path, db)
        cp = tmp_path / "checkpoint.json"
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            srv.sql(TYPES.format(db=db))
            deep = "[" * 30 + "1" + "]" * 30  # MariaDB refuses JSON nested over 32 deep
            srv.sql(f"""INSERT INTO `{db}`.types VALUES
              (1, 18446744073709551615, -9223372036854775808, 255, '-99999999999999999999999999999999999.{"9" * 30}',
               3.4e38, -1.7976931348623157e308, '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999',
               '0000-00-00', '838:59:59', 2155, b'1111111111', 'b c', 'x,z', '{deep}', x'00ff00', x'', '😀 ü',
               'ab'),
              (2, 0, 0, 0, 0, 0, 0, '0000-00-00 00:00:00', NULL, '2020-02-29', '-838:59:59.000000', 0, b'0', 'a',
               '', '{{"k": [1, 2.50, "s", null, true]}}', NULL, NULL, NULL, NULL)""")
            srv.sql(f"CREATE TABLE `{db}`.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
            srv.sql(f"INSERT INTO `{db}`.accounts VALUES " + ",".join(f"({i}, 1000)" for i in range(20)))
            srv.sql(f"CREATE TABLE `{db}`.`we\"ird; select` (v INT, `wü ``x`` \"y\"` VARCHAR(10))")  # keyless
            srv.sql(f"INSERT INTO `{db}`.`we\"ird; select` VALUES (1, 'a'), (1, 'a'), (2, NULL)")
            srv.sql(f"DELETE FROM `{db}`.`we\"ird; select` WHERE v = 1 LIMIT 1")
            srv.sql(f"UPDATE `{db}`.`we\"ird; select` SET `wü ``x`` \"y\"` = 'b' WHERE v = 2")
            wait_caught_up(srv, cp, timeout=60, daemon=d)
            assert_equal(srv, pg, db, "types")
            import psycopg

            with psycopg.connect(pg.url) as pconn:  # the keyless table: one of two equal rows deleted, one updated
                got = pconn.execute(f'SELECT v, "wü `x` ""y""" FROM "{db}"."we""ird; select"').fetchall()
            assert sorted(got, key=str) == sorted(srv.sql(f"SELECT * FROM `{db}`.`we\"ird; select`"), key=str)
            assert sorted(got, key=str) == [(1, "a"), (2, "b")]

            stop, broken = threading.Event(), []

            def reader():
                import psycopg

                while not stop.is_set():
                    try:
                        with psycopg.connect(pg.url, autocommit=True) as conn:
                            while not stop.is_set():
                                total = conn.execute(f'SELECT sum(balance), count(*) FROM "{db}".accounts').fetchone()
                                if total[1] and total != (20000, 20):
                                    broken.append(total)
                    except psycopg.OperationalError:
                        time.sleep(0.2)  # PostgreSQL is down (the crash below)

            t = threading.Thread(target=reader, daemon=True)
            t.start()
            conn = srv.connect(database=db, autocommit=False)
            for i in range(300):
                with conn.cursor() as cur:
                    a, b = i % 20, (i * 7 + 3) % 20
                    cur.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", (a,))
                    cur.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (b,))
                conn.commit()
                if i == 100:
                    d.kill()
                    d = DaemonProcess(o)
                    d.wait_streaming(timeout=60)  # (a PostgreSQL down at the start is exit 4)
                if i == 150:
                    srv.sql(f"ALTER TABLE `{db}`.types ADD COLUMN n1 INT NOT NULL DEFAULT 7 AFTER id, "
                            f"ADD COLUMN n2 VARCHAR(5) DEFAULT 'q', DROP COLUMN c, RENAME COLUMN tx TO tx2, "
                            f"MODIFY s DECIMAL(30,0)")
                    srv.sql(f"UPDATE `{db}`.types SET n2 = 'r' WHERE id = 2")
                if i == 200:
                    wait_caught_up(srv, cp, timeout=60, daemon=d)
                    pg.kill()
                    pg.start()
                    srv.sql(f"ALTER TABLE `{db}`.types ADD COLUMN z0 INT FIRST")
                    srv.sql(f"CREATE TABLE `{db}`.t2 (a INT, b INT, PRIMARY KEY (a))")
                    srv.sql(f"INSERT INTO `{db}`.t2 VALUES (1, 1), (2, 2), (3, 3)")
                    srv.sql(f"ALTER TABLE `{db}`.t2 DROP PRIMARY KEY, ADD PRIMARY KEY (b, a)")
                    srv.sql(f"UPDATE `{db}`.t2 SET b = 9 WHERE a = 2")
                    srv.sql(f"RENAME TABLE `{db}`.t2 TO `{db}`.t3")
                    srv.sql(f"CREATE TABLE `{db}`.gone (a INT PRIMARY KEY)")
                    srv.sql(f"INSERT INTO `{db}`.gone VALUES (1)")
                    srv.sql(f"DROP TABLE `{db}`.gone")
                    srv.sql(f"CREATE TABLE `{db}`.bulk (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
                    srv.sql(f"INSERT INTO `{db}`.bulk VALUES " + ",".join(f"({n}, {n}, 's{n}')" for n in range(1, 601)))
                    srv.sql(f"UPDATE `{db}`.bulk SET v = v * 2, s = NULL WHERE id <= 400")  # set-wise
                    srv.sql(f"UPDATE `{db}`.bulk SET id = id + 1000 WHERE id <= 100")  # keys change: row by row
                    srv.sql(f"DELETE FROM `{db}`.bulk WHERE id BETWEEN 450 AND 599")
                    srv.sql(f"TRUNCATE `{db}`.`we\"ird; select`")
                    srv.sql(f"INSERT INTO `{db}`.`we\"ird; select` VALUES (5, 'five')")
            conn.close()
            wait_caught_up(srv, cp, timeout=90, daemon=d, fail_on=None)
            stop.set()
            t.join(10)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        assert not broken, f"a reader saw part of a transfer: {broken[:3]}"
        assert "Traceback" not in d.stderr
        for table, key in (("types", ("id",)), ("accounts", ("id",)), ("t3", ("a",)), ("bulk", ("id",))):
            assert_equal(srv, pg, db, table, key)
        import psycopg

        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT to_regclass(%s)", (f'"{db}".gone',)).fetchone()[0] is None
            assert conn.execute(f'SELECT * FROM "{db}"."we""ird; select"').fetchall() == [(5, "five")]
            names = [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND "
                                                "attnum > 0 AND NOT attisdropped ORDER BY attnum",
                                                (f'"{db}".types',))]
            assert names[:3] == ["z0", "id", "n1"] and "tx2" in names and "c" not in names
            keys = conn.execute("SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
                                "WHERE contype = 'p' AND connamespace = %s::regnamespace ORDER BY 1", (db,)).fetchall()
            assert keys == [(f"{db}.accounts", "PRIMARY KEY (id)"), (f"{db}.bulk", "PRIMARY KEY (id)"),
                            (f"{db}.t3", "PRIMARY KEY (b, a)"),
                            (f"{db}.types", "PRIMARY KEY (id)")], keys


def test_login_refused_and_another_shape(mariadb, fresh_db, tmp_path):
    require("postgres")
    db, srv = fresh_db, mariadb
    with PostgresServer(password="right") as pg:
        o = overrides(pg, srv, tmp_path, db, **{"sink.mirror.url": pg.url.replace("right", "wrong")})
        rc, err = run_to_exit(o, timeout=60)
        assert rc == 3, err
        assert "authentication failed" in err and "wrong" not in err and "Traceback" not in err
    with PostgresServer() as pg:
        pg.psql(f'CREATE SCHEMA "{db}" AUTHORIZATION binlogd; CREATE TABLE "{db}".t (id text)', database="binlogd")
        o = overrides(pg, srv, tmp_path / "b", db)
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            srv.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
            srv.sql(f"INSERT INTO `{db}`.t VALUES (1)")
            rc = d.wait(60)
        finally:
            if d.running:
                d.kill()
        assert rc == 6, d.stderr
        errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and "another shape" in errors[0], d.stderr


def test_nul_in_text_and_unappliable_ddl(mariadb, fresh_db, tmp_path):
    require("postgres")
    db, srv = fresh_db, mariadb
    cases = (("CREATE TABLE `{db}`.n (id INT PRIMARY KEY, v TEXT)", "INSERT INTO `{db}`.n VALUES (2, 'a\\0b')",
              ("column 'v'", "NUL"), f'SELECT id, v FROM "{db}".n', [(1, None)]),
             ("CREATE TABLE `{db}`.m (id INT PRIMARY KEY, v INT)",
              "ALTER TABLE `{db}`.m ADD COLUMN w DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP",
              ("cannot apply the DDL at ", "ADD COLUMN w DATETIME"),
              f"SELECT attname FROM pg_attribute WHERE attrelid = '\"{db}\".m'::regclass AND attnum > 0",
              [("id",), ("v",)]))
    for i, (setup, bad, words, check, want) in enumerate(cases, start=1):
        with PostgresServer() as pg:
            o = overrides(pg, srv, tmp_path / str(i), db)
            d = DaemonProcess(o)
            try:
                d.wait_streaming(timeout=60)
                srv.sql(setup.format(db=db))
                srv.sql(setup.format(db=db).replace("CREATE TABLE", "INSERT INTO").split(" (")[0] + " VALUES (1, NULL)")
                wait_caught_up(srv, tmp_path / str(i) / "checkpoint.json", timeout=60, daemon=d)
                srv.sql(bad.format(db=db))
                rc = d.wait(60)
            finally:
                if d.running:
                    d.kill()
            assert rc == 7, d.stderr
            errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
            assert len(errors) == 1 and all(w in errors[0] for w in words), d.stderr
            assert "Traceback" not in d.stderr
            import psycopg

            with psycopg.connect(pg.url) as conn:  # what came before stays, nothing of the refused change
                assert conn.execute(check).fetchall() == want


def test_name_over_63_bytes(mariadb, fresh_db, tmp_path):
    require("postgres")
    db, srv, name = fresh_db, mariadb, "é" * 32  # 32 characters, 64 bytes
    with PostgresServer() as pg:
        d = DaemonProcess(overrides(pg, srv, tmp_path, db))
        try:
            d.wait_streaming(timeout=60)
            srv.sql(f"CREATE TABLE `{db}`.`{name}` (id INT PRIMARY KEY)")
            srv.sql(f"INSERT INTO `{db}`.`{name}` VALUES (1)")
            rc = d.wait(60)
        finally:
            if d.running:
                d.kill()
    assert rc == 6, d.stderr
    errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"cannot mirror {db}.{name}" in errors[0] and "over PostgreSQL's 63" in errors[0]
