"""The daemon's own queries on each real server: server warnings stay data, and a seed's definitions.

- A statement the server warns about (a truncated CAST) gives no Python warning through
  :mod:`binlogd.daemon.replication._aiomysql`, while aiomysql's own cursor turns it into one: a daemon run in this process
  raises none either. ``binlog_format`` is read as the server's version allows, without a warning.
- :meth:`ServerSchema.definitions` (a seed's tables at once; from information_schema on MySQL 8.0+) gives what
  ``SHOW CREATE TABLE`` of each table gives, for every column type, MySQL's VECTOR, generated and invisible
  columns, keys over several columns, tables without a key and other character sets.
"""

from __future__ import annotations

import asyncio
import warnings

import aiomysql
import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.replication import _aiomysql
from binlogd.daemon.replication.connection import binlog_format_read
from binlogd.daemon.replication.schemaqueries import ServerSchema
from tests.support import every_type
from tests.support.daemon import InProcessDaemon, base_overrides, captured_log

pytestmark = pytest.mark.server

WARNED = "SELECT CAST('12abc' AS SIGNED)"   # 1292 Truncated incorrect INTEGER value, on every flavour


def _recorded(run) -> list[str]:
    """The warnings ``run()`` raises; a ResourceWarning is the garbage collector's, about any object of the process
    (an earlier test's too), so it is not counted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)]


def test_server_warnings_never_become_python_warnings(mariadb):
    async def through(connect) -> tuple:
        conn = await connect()
        try:
            async with conn.cursor() as cur:
                await cur.execute(WARNED)
                row = (await cur.fetchall())[0]
                return row, cur._result.warning_count
        finally:
            conn.close()

    def seam():
        return _aiomysql.connect(host=mariadb.host, port=mariadb.port, user=mariadb.user, password=mariadb.password,
                                 ssl=None, connect_timeout=10)

    def plain():
        return aiomysql.connect(host=mariadb.host, port=mariadb.port, user=mariadb.user, password=mariadb.password)

    results = []
    assert any("Truncated" in w for w in _recorded(lambda: results.append(asyncio.run(through(plain)))))
    assert _recorded(lambda: results.append(asyncio.run(through(seam)))) == []
    assert results == [((12,), 1), ((12,), 1)]  # the same answer, the warning counted on the result


def test_binlog_format_is_read_as_the_version_allows(mariadb):
    """MySQL 8.0.34+ deprecates ``@@binlog_format`` and warns of each read; the daemon reads it as data there."""
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            read = binlog_format_read(conn.get_server_info())
            assert ("performance_schema" in read) == (mariadb.flavor == "mysql" and mariadb.version_tuple >= (8, 0, 34))
            cur.execute(f"SELECT {read}")
            assert cur.fetchall() == (("ROW",),)
            cur.execute("SHOW WARNINGS")
            assert cur.fetchall() == ()
    finally:
        conn.close()


def test_a_daemon_in_this_process_raises_no_python_warning(mariadb, tmp_path):
    config = load_config(None, env={}, overrides=base_overrides(mariadb, tmp_path))

    def run():
        with captured_log("binlogd.test.warnings") as (log, _lines):
            runner = InProcessDaemon(config, log=log).start()
            try:
                runner.wait_streaming()
            finally:
                assert runner.stop() == 0

    assert _recorded(run) == []


MYSQL_ONLY = (
    "CREATE TABLE v (id BIGINT UNSIGNED NOT NULL, emb VECTOR(3), g INT GENERATED ALWAYS AS (id * 2) VIRTUAL, "
    "hidden INT /*!80023 INVISIBLE */, PRIMARY KEY (id))",
)
TABLES = (
    "CREATE TABLE every ({}) DEFAULT CHARSET=utf8mb4",
    "CREATE TABLE latin (`we``ird` VARCHAR(10) NOT NULL, u VARCHAR(5) CHARACTER SET utf8mb4, "
    "e ENUM('it''s','b') CHARACTER SET latin1, z INT(6) UNSIGNED ZEROFILL, PRIMARY KEY (u, `we``ird`(4))) "
    "DEFAULT CHARSET=latin1",
    "CREATE TABLE nokey (a TEXT, b BLOB, c DECIMAL(5,0), s SET('x','y'))",
    "CREATE TABLE parts (id INT NOT NULL, d DATE NOT NULL, PRIMARY KEY (id, d)) PARTITION BY HASH (id) PARTITIONS 2",
)


def test_seed_definitions_are_show_create_tables(mariadb, fresh_db):
    columns = ", ".join(f"`{c.name}` {c.ddl}" for c in every_type.COLUMNS)
    statements = [t.format(columns) for t in TABLES] + (list(MYSQL_ONLY) if mariadb.flavor == "mysql" else [])
    conn = mariadb.connect(database=fresh_db)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()

    async def both():
        async def connect():
            return await _aiomysql.connect(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                                           password=mariadb.password, ssl=None, connect_timeout=10)

        server = ServerSchema(connect)
        try:
            _, names = await server.tables(lambda schema, table: schema == fresh_db)
            names.append((fresh_db, "gone"))
            at_once = await server.definitions(names)
            each = {name: await server.create_table(*name) for name in names}
            return names, at_once, each, await server._has_dictionary()
        finally:
            await server.close()

    names, at_once, each, dictionary = asyncio.run(both())
    assert dictionary == (mariadb.flavor == "mysql")
    assert len(names) == len(statements) + 1 and at_once[(fresh_db, "gone")] is None
    unread = set()
    for name in names[:-1]:
        if each[name] is None:  # SHOW CREATE TABLE not understood (MySQL's partition clause)
            unread.add(name[1])
            continue
        assert at_once[name] == each[name], name
    assert unread <= {"parts"}, unread
    parts = at_once[(fresh_db, "parts")]
    if dictionary:  # information_schema names the partitioned table's columns all the same
        assert [c.name for c in parts.columns] == ["id", "d"] and parts.primary_key == ("id", "d")
    else:
        assert parts == each[(fresh_db, "parts")]
