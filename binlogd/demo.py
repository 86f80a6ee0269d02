"""``binlogd demo``: a throwaway local MariaDB, some changes, and what binlogd decodes of them.

Until the daemon lands, the demo reads the server's binlog files with the same
decoder the daemon will use and prints one change event per row.
"""

from __future__ import annotations

import random
import sys

from protocol.events import GtidEvent, MariadbGtidEvent, RowsEvent
from protocol.serialize import change_events, dumps, flatten

from . import filetools
from .localserver import LocalServer


def _write_changes(server: LocalServer, transactions: int) -> None:
    server.sql("CREATE DATABASE IF NOT EXISTS demo")
    server.sql("CREATE TABLE demo.orders (id INT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(40), "
               "amount DECIMAL(10,2), placed DATETIME(3), note JSON, status ENUM('new','paid','shipped'))")
    rng = random.Random(42)
    names = ["ana", "björn", "chen", "dilnoza", "eve"]
    with server.connect() as conn, conn.cursor() as cur:
        for i in range(transactions):
            cur.execute("INSERT INTO demo.orders (customer, amount, placed, note, status) "
                        "VALUES (%s, %s, NOW(3), %s, 'new')",
                        (rng.choice(names), f"{rng.uniform(1, 500):.2f}", f'{{"n": {i}}}'))
            if i % 3 == 2:
                cur.execute("UPDATE demo.orders SET status = 'paid' WHERE id = %s", (i,))
            if i % 7 == 6:
                cur.execute("DELETE FROM demo.orders WHERE id = %s", (i - 5,))
            conn.commit()
    server.sql("FLUSH BINARY LOGS")


def run_demo(args) -> int:
    """Start the server, write ``args.transactions`` transactions, print their change events."""
    print("binlogd demo: starting a throwaway MariaDB with binary logging ...", file=sys.stderr)
    with LocalServer(extra_args=["--binlog-row-metadata=FULL"]) as server:
        print(f"binlogd demo: {server.flavor} {server.version} on 127.0.0.1:{server.port}", file=sys.stderr)
        _write_changes(server, args.transactions)
        count = 0
        for path in server.binlog_files():
            gtid = None
            for event in filetools.dump_events(path):
                for item in flatten(event):
                    if isinstance(item, (GtidEvent, MariadbGtidEvent)):
                        gtid = item.gtid
                    elif isinstance(item, RowsEvent):
                        for change in change_events(item, path.name, gtid):
                            sys.stdout.buffer.write(dumps(change) + b"\n")
                            count += 1
        sys.stdout.flush()
        print(f"binlogd demo: decoded {count} row changes from {len(server.binlog_files())} binlog files",
              file=sys.stderr)
    return 0
