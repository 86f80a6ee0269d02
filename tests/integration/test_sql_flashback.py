"""``binlogd sql --flashback``, and the values binlog2sql is known to get wrong.

A bad run (DELETE, UPDATE and INSERT over several tables, in several transactions and autocommit
statements) is undone by piping the flashback of exactly its range into the same server: the dump
must equal the dump taken before the run. binlog2sql's failure cases (binary and latin1 strings,
negative DECIMAL, TIME beyond 24 hours, BIT(64), JSON, NULLs in a unique key, tables without a primary
key, FLOAT in a row found without a key) go through both a replay into a second server and a
flashback. A flashback that meets DDL or MINIMAL images fails naming the event and writes nothing,
unless --skip-unsafe.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from binlogd.cli.filetools import dump_events
from tests.support.flavour import binlog_status
from tests.support.sqlout import binlogd_sql, client, dump, flush, new_files, target

pytestmark = pytest.mark.server


def _run(server, statements: list[str]) -> None:
    conn = server.connect(charset="utf8mb4")
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def _position(server) -> tuple[Path, int]:
    """The server's current binlog file and offset (SHOW MASTER STATUS, or MySQL's SHOW BINARY LOG STATUS)."""
    name, pos = binlog_status(server)
    return next(p for p in server.binlog_files() if p.name == name), pos


def _shop(db: str) -> list[str]:
    return [
        f"CREATE DATABASE `{db}`",
        f"USE `{db}`",
        "CREATE TABLE orders (id INT PRIMARY KEY, customer VARCHAR(40), total DECIMAL(10,2), status ENUM('new','paid'))",
        "CREATE TABLE items (order_id INT, line INT, sku VARCHAR(20), qty INT, PRIMARY KEY (order_id, line))",
        "CREATE TABLE log (at DATETIME(3), msg TEXT, n FLOAT)",  # no primary key
        "INSERT INTO orders VALUES " + ",".join(f"({i}, 'c{i}', {i}.50, 'new')" for i in range(1, 11)),
        "INSERT INTO items VALUES " + ",".join(f"({i}, {j}, 's{i}{j}', {j})" for i in range(1, 11) for j in (1, 2)),
        "INSERT INTO log VALUES ('2024-01-01 10:00:00.125', 'same', 1.1), ('2024-01-01 10:00:00.125', 'same', 1.1),"
        " ('2024-01-02 00:00:00', NULL, -0.3)",
    ]


def _bad_run(db: str) -> list[str]:
    return [
        f"USE `{db}`",
        "BEGIN",
        "DELETE FROM items WHERE order_id IN (SELECT id FROM orders WHERE id <= 3)",
        "DELETE FROM orders WHERE id <= 3",
        "UPDATE orders SET status = 'paid', total = total * 2 WHERE id BETWEEN 4 AND 7",
        "COMMIT",
        "UPDATE items SET qty = qty + 100, sku = CONCAT(sku, '!')",  # autocommit
        "BEGIN",
        "INSERT INTO orders VALUES (100, 'new one', 0.01, 'new')",
        "INSERT INTO items VALUES (100, 1, 'x', 1), (100, 2, 'y', 2)",
        "UPDATE orders SET id = 101 WHERE id = 10",  # a primary key changes
        "DELETE FROM log WHERE msg = 'same' LIMIT 1",  # one of two identical rows
        "UPDATE log SET msg = 'was null', n = 2.5 WHERE msg IS NULL",
        "COMMIT",
        "INSERT INTO log VALUES (NOW(3), 'bad', 0)",
    ]


def test_flashback_undoes_a_bad_run(mariadb):
    db = f"sqlfb_{uuid.uuid4().hex[:8]}"
    _run(mariadb, _shop(db))
    before = dump(mariadb, db)
    first, start = _position(mariadb)
    _run(mariadb, _bad_run(db))
    assert dump(mariadb, db) != before
    run = binlogd_sql("--flashback", "--start-position", start, *new_files(mariadb, first))
    assert run.code == 0, run.stderr
    assert run.sql.count(b"\nBEGIN;") == 4  # four transactions undone, each whole
    client(mariadb, run.sql)
    assert dump(mariadb, db) == before


def test_flashback_refuses_ddl_unless_skip_unsafe(mariadb):
    db = f"sqlfbddl_{uuid.uuid4().hex[:8]}"
    _run(mariadb, _shop(db))
    before = dump(mariadb, db)
    first, start = _position(mariadb)
    _run(mariadb, [f"USE `{db}`", "DELETE FROM orders WHERE id > 8", "ALTER TABLE log ADD INDEX (at)",
                   "UPDATE items SET qty = 0 WHERE order_id = 1"])
    files = new_files(mariadb, first)
    refused = binlogd_sql("--flashback", "--start-position", start, *files)
    assert refused.code == 1 and refused.sql == b""
    alter = [line for line in refused.stderr.splitlines() if "ALTER TABLE log" in line]
    assert len(alter) == 1 and f"{files[0]}:" in alter[0] and ": QUERY" in alter[0] and "nothing was written" in alter[0]

    skipped = binlogd_sql("--flashback", "--skip-unsafe", "--start-position", start, *files)
    assert skipped.code == 0, skipped.stderr
    assert "skipped (--skip-unsafe)" in skipped.stderr
    client(mariadb, skipped.sql)
    _run(mariadb, [f"ALTER TABLE `{db}`.log DROP INDEX at"])
    assert dump(mariadb, db) == before


def _tricky(db: str, top: str = "838:59:59.999") -> list[str]:
    """binlog2sql's known failure cases, as rows; ``top`` is the greatest TIME(3) the server takes."""
    return [
        f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4",
        f"USE `{db}`",
        "CREATE TABLE bin (id INT PRIMARY KEY, vb VARBINARY(32), bl BLOB, bn BINARY(6))",
        "CREATE TABLE lat (id INT PRIMARY KEY, t VARCHAR(30) CHARACTER SET latin1, c CHAR(5) CHARACTER SET latin1)",
        "CREATE TABLE num (id INT PRIMARY KEY, d DECIMAL(20,6), t TIME(3), b BIT(64), b7 BIT(7))",
        "CREATE TABLE doc (id INT PRIMARY KEY, j JSON)",
        "CREATE TABLE uk (a INT NULL, b VARCHAR(10) NULL, c INT, UNIQUE KEY (a, b))",  # NULLs in a key, no PK
        "CREATE TABLE dup (x INT, y VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, f FLOAT)",
        "INSERT INTO bin VALUES (1, 0x00275c22ff0a0d1a, 0xdeadbeef00, 0x6162), (2, '', NULL, 0x000000000001)",
        "INSERT INTO lat VALUES (1, 'café € Ü ÿ', 'é'), (2, 'it''s \\\\ a\\ttab', 'x')",
        f"INSERT INTO num VALUES (1, -12345678901234.567891, '{top}', b'1111111111111111111111111111111111111111"
        "111111111111111111111111', b'1010101'), (2, -0.000001, '-100:00:00.5', 0x8000000000000001, 0),"
        " (3, 0, '-838:59:59', 0, NULL)",
        """INSERT INTO doc VALUES (1, '{"a": [1, 2.5, "ü😀", null, true], "b": {"c": "d\\\\"e"}}'), (2, '[]'),"""
        " (3, '\"text\"'), (4, NULL)",
        "INSERT INTO uk VALUES (NULL, NULL, 1), (NULL, NULL, 2), (1, NULL, 3), (NULL, 'a', 4), (1, 'a', 5)",
        "INSERT INTO dup VALUES (1, 'A', 1.1), (1, 'a', 1.1), (1, 'a', 1.1), (2, NULL, NULL)",
    ]


def _tricky_changes() -> list[str]:
    return [
        "UPDATE bin SET vb = 0x5c27, bl = REPEAT(0xff00, 10), bn = 0x01 WHERE id = 1",
        "DELETE FROM bin WHERE id = 2",
        "UPDATE lat SET t = CONCAT(t, ' ñ'), c = 'Ø' WHERE id = 1",
        "UPDATE num SET d = d - 1, t = '-838:59:58.5', b = b'0' WHERE id = 1",
        "UPDATE num SET b = 0xffffffffffffffff, b7 = b'1111111' WHERE id = 2",
        "DELETE FROM num WHERE id = 3",
        """UPDATE doc SET j = JSON_SET(j, '$.a[0]', 'x', '$.z', 1.25) WHERE id = 1""",
        "DELETE FROM doc WHERE id = 2",
        "UPDATE uk SET c = 20 WHERE c = 2",
        "DELETE FROM uk WHERE c = 1",
        "UPDATE uk SET b = 'b' WHERE c = 3",
        "UPDATE dup SET f = 2.2 WHERE y = 'a' COLLATE utf8mb4_bin LIMIT 1",
        "DELETE FROM dup WHERE y = 'A' COLLATE utf8mb4_bin",
        "UPDATE dup SET y = 'n' WHERE y IS NULL",
    ]


def test_binlog2sql_failure_cases_replay_and_flashback(mariadb):
    db = f"sqltricky_{uuid.uuid4().hex[:8]}"
    first = flush(mariadb)
    _run(mariadb, _tricky(db, "838:59:59.000" if mariadb.flavor == "mysql" else "838:59:59.999"))
    seeded = dump(mariadb, db)
    _, start = _position(mariadb)
    _run(mariadb, [f"USE `{db}`", *_tricky_changes()])
    files = new_files(mariadb, first)

    replay = binlogd_sql(*files)
    assert replay.code == 0, replay.stderr
    with target(mariadb) as dest:
        client(dest, replay.sql)
        assert dump(dest, db) == dump(mariadb, db)

    undo = binlogd_sql("--flashback", "--start-position", start, files[-1])
    assert undo.code == 0, undo.stderr
    client(mariadb, undo.sql)
    assert dump(mariadb, db) == seeded


def test_minimal_images_replay_and_refuse_flashback(mariadb_minimal):
    """MINIMAL row metadata and images, compressed events: names come from the DDL in the files; the
    replay is right, the flashback is refused (a MINIMAL image does not say what to restore)."""
    server = mariadb_minimal
    db = f"sqlmin_{uuid.uuid4().hex[:8]}"
    server.sql("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        first = flush(server)
        _run(server, _shop(db))
        _, start = _position(server)
        _run(server, _bad_run(db))
    finally:
        server.sql("SET GLOBAL binlog_row_image = 'FULL'")
    files = new_files(server, first)
    types = {e.header.type_name for path in files for e in dump_events(path)}
    if server.flavor == "mysql":  # whole transactions compressed
        assert "TRANSACTION_PAYLOAD" in types, types
    else:
        assert {"QUERY_COMPRESSED", "WRITE_ROWS_COMPRESSED_V1", "UPDATE_ROWS_COMPRESSED_V1"} <= types, types
    replay = binlogd_sql(*files)
    assert replay.code == 0, replay.stderr
    # MINIMAL metadata marks no primary key: the schema history's definition (from the CREATE TABLE) does
    assert f"UPDATE `{db}`.`orders` SET ".encode() in replay.sql and b" WHERE `id`=4;" in replay.sql
    with target(server) as dest:
        client(dest, replay.sql)
        assert dump(dest, db) == dump(server, db)

    refused = binlogd_sql("--flashback", "--start-position", start, files[-1])
    assert refused.code == 1 and refused.sql == b""
    assert re.fullmatch(rf"binlogd sql: {re.escape(str(files[-1]))}:\d+: (DELETE|UPDATE)_ROWS\w*: `{db}`\.`\w+`: "
                        r"partial row images .*nothing was written.*\n", refused.stderr), refused.stderr
