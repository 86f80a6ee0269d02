"""The events-beyond-rows tests' load and their independent walk of the server's binlog files.

- :data:`SHAPES`: the transactions of known shape, (inserts into ``a``, updates of ``b``) each;
- :func:`load`: ``a`` and ``b`` created, ``b`` seeded, the SHAPES, then a DDL that adds a column mid-table and one
  insert after it;
- :func:`kill_three_times`: 120 three-row transactions into ``a``, the daemon SIGKILLed after each 40;
- :func:`walk`: from the server's own binlog files, each transaction with rows of the schema (its begin and commit
  ids, its GTID) and each DDL of it.
"""

from __future__ import annotations

from binlogd.cli.filetools import dump_events
from binlogd.protocol import events as E
from tests.support.daemon import running_daemon

SHAPES = [(3, 2), (1, 0), (0, 4), (5, 1)]   # (inserts into a, updates of b) per transaction


def load(server, db: str) -> None:
    conn = server.connect(database=db)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, n INT)")
        cur.execute("INSERT INTO b VALUES " + ", ".join(f"({i}, 0)" for i in range(10)))
        next_id = 0
        for k, m in SHAPES:
            cur.execute("BEGIN")
            for _ in range(k):
                cur.execute("INSERT INTO a VALUES (%s, 'x')", (next_id,))
                next_id += 1
            for i in range(m):
                cur.execute("UPDATE b SET n = n + 1 WHERE id = %s", (i,))
            cur.execute("COMMIT")
        cur.execute("ALTER TABLE a ADD COLUMN c2 INT NULL AFTER id")
        cur.execute("INSERT INTO a VALUES (100, 7, 'after')")
    finally:
        conn.close()


def kill_three_times(cur, overrides: dict) -> None:
    """Three daemon runs with ``overrides``, each SIGKILLed after 40 transactions of three inserts into ``a``
    (``id``, ``v``), written through the cursor ``cur``. Returns the rows inserted (ids 0 .. n - 1)."""
    next_id = 0
    for _ in range(3):
        with running_daemon(overrides, stop="kill"):
            for _ in range(40):
                cur.execute("BEGIN")
                for _ in range(3):
                    cur.execute("INSERT INTO a VALUES (%s, 1)", (next_id,))
                    next_id += 1
                cur.execute("COMMIT")
    return next_id


def walk(server, db: str) -> tuple[list, list]:
    """From the server's binlog files, read independently of the daemon: ([(begin id, commit id, gtid)] of each
    transaction with rows of ``db``, [(file, pos, statement)] of each QUERY event of ``db`` that is not BEGIN)."""
    transactions, ddls = [], []
    for path in server.binlog_files():
        opener, gtid, has_rows = None, None, False
        for ev in dump_events(path):
            pos = ev.header.pos
            if isinstance(ev, (E.GtidEvent, E.MariadbGtidEvent)):
                opener, gtid, has_rows = pos, ev.gtid, False
                continue
            inner = [(ev, 0)] if not isinstance(ev, E.TransactionPayloadEvent) else list(zip(ev.events, ev.offsets))
            for item, offset in inner:
                if isinstance(item, E.RowsEvent) and item.schema == db:
                    has_rows = True
                elif isinstance(item, E.QueryEvent) and item.schema == db and item.query.upper() != "BEGIN":
                    ddls.append((path.name, pos, item.query))
                elif isinstance(item, E.XidEvent):
                    if has_rows:
                        transactions.append((f"{path.name}:{opener}:0:begin", f"{path.name}:{pos}:{offset}:commit",
                                             gtid))
                    has_rows = False
    return transactions, ddls


__all__ = ["SHAPES", "kill_three_times", "load", "walk"]
