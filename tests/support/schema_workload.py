"""The schema-history tests' workload and readers (tests/integration/test_schema_history*.py).

- :data:`WORKLOAD` (:func:`workload` with other table names): the issue's scenario (a table created, altered five ways, renamed, copied with
  ``CREATE TABLE ... LIKE``, more ALTERs and a swap by RENAME TABLE) with rows written between the DDL.
- :func:`run`: run statements on a server in one database, between two ``FLUSH BINARY LOGS``; returns
  the binlog files that hold exactly them.
- :func:`dump_changes`: ``binlogd dump --json`` (the CLI's own ``main``) over files, as change tuples
  ``(op, schema, table, before, after)``; :func:`positional` tells whether a change has ``@N`` names.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from tests.support.flavour import status_statement

_WORKLOAD = [
    "CREATE TABLE {t} (id INT PRIMARY KEY, a VARCHAR(10), n INT UNSIGNED, e ENUM('x','y','z'), s SET('p','q','r'),"
    " l VARCHAR(8) CHARACTER SET latin1, d DECIMAL(8,2))",
    "INSERT INTO {t} VALUES (1, 'one', 4000000000, 'y', 'p,r', 'café', 12.50)",
    "ALTER TABLE {t} ADD COLUMN b INT AFTER id",                       # add
    "INSERT INTO {t} VALUES (2, 22, 'two', 7, 'z', 'q', 'naïve', -1.25)",
    "ALTER TABLE {t} DROP COLUMN a",                                   # drop
    "INSERT INTO {t} VALUES (3, 33, 8, 'x', '', 'x', 0)",
    "UPDATE {t} SET n = n + 1 WHERE id = 1",
    "ALTER TABLE {t} RENAME COLUMN n TO qty",                          # rename a column
    "INSERT INTO {t} VALUES (4, 44, 9, 'y', 'p', 'y', 4.4)",
    "ALTER TABLE {t} MODIFY b VARCHAR(20)",                            # change a type
    "INSERT INTO {t} VALUES (5, 'five', 10, 'z', 'q,r', 'z', 5.5)",
    "ALTER TABLE {t} RENAME TO {t}2",                                    # rename the table
    "INSERT INTO {t}2 VALUES (6, 'six', 11, 'x', 'r', 'ß', 6.6)",
    "DELETE FROM {t}2 WHERE id = 3",
    "CREATE TABLE {t}3 LIKE {t}2",                                       # copy
    "INSERT INTO {t}3 SELECT * FROM {t}2 WHERE id < 3",
    "ALTER TABLE {t}3 CHANGE e e2 ENUM('x','y','z','w') FIRST, ADD COLUMN c CHAR(3) CHARACTER SET utf8mb4, "
    "ADD INDEX (qty), ENGINE=InnoDB",
    "INSERT INTO {t}3 (e2, id, b, qty, s, l, d, c) VALUES ('w', 7, 'seven', 12, 'p', 'ü', 7.7, 'ñ')",
    "RENAME TABLE {t}2 TO {t}tmp, {t}3 TO {t}2, {t}tmp TO {t}3",                   # swap two tables
    "INSERT INTO {t}2 (e2, id, b, qty, s, l, d, c) VALUES ('x', 8, 'eight', 13, '', 'e', 8.8, 'e')",
    "INSERT INTO {t}3 VALUES (9, 'nine', 14, 'y', 'q', 'n', 9.9)",
    "ALTER TABLE {t}3 CONVERT TO CHARACTER SET latin1",
    "UPDATE {t}3 SET l = 'é', b = 'neuf' WHERE id = 9",
    "DELETE FROM {t}2",
]


def workload(t: str = "t") -> list[str]:
    """The scenario on tables named ``t``, ``t2``, ``t3`` (and ``tmp`` for the swap), with prefix ``t``."""
    return [sql.replace("{t}", t) for sql in _WORKLOAD]


WORKLOAD = workload()


def current_file(conn) -> str:
    with conn.cursor() as cur:
        cur.execute(status_statement(conn.get_server_info()))
        return cur.fetchone()[0]


def run(server, db: str, statements: list[str], create_db: str = "CHARACTER SET utf8mb4") -> list[Path]:
    """Run ``statements`` in database ``db`` (created first) between two FLUSH BINARY LOGS; the files that
    hold exactly them (and the CREATE DATABASE)."""
    conn = server.connect(database=None)
    try:
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
            first = current_file(conn)
            cur.execute(f"CREATE DATABASE `{db}` {create_db}")
            cur.execute(f"USE `{db}`")
            for sql in statements:
                cur.execute(sql)
            cur.execute("FLUSH BINARY LOGS")
            last = current_file(conn)
    finally:
        conn.close()
    return [p for p in server.binlog_files() if first <= p.name < last]


def dump_changes(files, *extra: str, schema: str | None = None) -> tuple[list[tuple], str]:
    """``binlogd dump --json FILES EXTRA…``: the change tuples (op, schema, table, before, after) of the rows
    events (of ``schema`` only when given), and what it printed on stderr."""
    from binlogd.cli import main

    out, err = io.BytesIO(), io.StringIO()
    wrapper = io.TextIOWrapper(out, encoding="utf-8")
    with contextlib.redirect_stdout(wrapper), contextlib.redirect_stderr(err):
        status = main(["dump", "--json", *map(str, files), *extra])
    wrapper.flush()
    assert status == 0, err.getvalue()
    changes = []
    for line in out.getvalue().splitlines():
        ev = json.loads(line)
        if "rows" not in ev or (schema is not None and ev["schema"] != schema):
            continue
        kind = ev["type"].split("_")[0]
        for row in ev["rows"]:
            if kind == "UPDATE":
                changes.append(("update", ev["schema"], ev["table"], row["before"], row["after"]))
            elif kind == "WRITE":
                changes.append(("insert", ev["schema"], ev["table"], None, row))
            else:
                changes.append(("delete", ev["schema"], ev["table"], row, None))
    return changes, err.getvalue()


def positional(change: tuple) -> bool:
    """True when a change's row images use positional names (``@1``...)."""
    return any(k.startswith("@") for image in change[3:] if image for k in image)
