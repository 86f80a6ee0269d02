"""``[sink.mirror] schema_map`` in its TOML table form, end to end: a MySQL schema mirrored into a PostgreSQL
schema of another name (one that needs quoting), rows, a DDL and a table created while streaming; nothing goes
to a PostgreSQL schema of the MySQL schema's own name. The daemon runs in process."""

from __future__ import annotations

import uuid

import pytest

from binlogd.daemon.config import load_config
from tests.integration.test_mirror import assert_equal
from tests.support.brokers import PostgresServer, require
from tests.support.daemon import InProcessDaemon, base_overrides, wait_caught_up

pytestmark = pytest.mark.server


def test_schema_map_table_form(mariadb, tmp_path):
    require("postgres")
    import psycopg

    srv, db = mariadb, f"mirror_map_{uuid.uuid4().hex[:8]}"
    mapped = f"Copy of {db}"
    srv.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    try:
        with PostgresServer() as pg:
            path = tmp_path / "binlogd.toml"
            path.write_text(f'[sink]\nkind = "mirror"\n[sink.mirror]\nurl = "{pg.url}"\n'
                            f"schema_map = {{ {db} = '{mapped}' }}\n")
            config = load_config(str(path), env={}, overrides=base_overrides(
                srv, tmp_path, **{"source.start": "current", "filters.include_schemas": db}))
            assert config.sink.mirror.schema_map == {db: mapped}
            runner = InProcessDaemon(config).start()
            try:
                runner.wait_streaming()
                srv.sql(f"CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(20))")
                srv.sql(f"INSERT INTO `{db}`.items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
                srv.sql(f"UPDATE `{db}`.items SET name = 'B' WHERE id = 2")
                srv.sql(f"DELETE FROM `{db}`.items WHERE id = 3")
                srv.sql(f"ALTER TABLE `{db}`.items ADD COLUMN qty INT NOT NULL DEFAULT 7 AFTER id")
                srv.sql(f"INSERT INTO `{db}`.items VALUES (4, 1, 'd')")
                srv.sql(f"CREATE TABLE `{db}`.later (id INT PRIMARY KEY)")
                srv.sql(f"INSERT INTO `{db}`.later VALUES (10), (11)")
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60)
            finally:
                assert runner.stop() == 0
            assert_equal(srv, pg, db, "items", pg_schema=mapped)
            assert_equal(srv, pg, db, "later", pg_schema=mapped)
            with psycopg.connect(pg.url) as conn:
                tables = conn.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE "
                                      "table_schema IN (%s, %s) ORDER BY 2", (db, mapped)).fetchall()
            assert tables == [(mapped, "items"), (mapped, "later")]
    finally:
        srv.sql(f"DROP DATABASE IF EXISTS `{db}`")
