"""SQL-out benchmark (issue 18): ``binlogd sql`` against ``mariadb-binlog`` on the same files.

``python -m bench.sql [--rows N] [--repeat N] [--json]``:

1. starts a throwaway MariaDB (ROW, FULL row image and metadata) and writes bench.decode's workload:
   ``--rows`` inserts in 500-row transactions into a 10-column table, rows/10 updates and rows/20
   deletes, then FLUSH BINARY LOGS;
2. measures, best of ``--repeat`` runs each, every tool a process of its own writing to /dev/null:

   - replay: ``binlogd sql FILES`` against ``mariadb-binlog FILES`` (its replay output: the row events
     as BINLOG base64 statements, which only a server decodes) and ``mariadb-binlog -v FILES`` (the same,
     plus each row as commented pseudo-SQL: the nearest thing it prints to our output);
   - flashback: ``binlogd sql --flashback --skip-unsafe FILES`` (the CREATEs are left out, as
     mariadb-binlog leaves them) against ``mariadb-binlog --flashback FILES``;

3. checks binlogd's output holds every row change (INSERT tuples, UPDATE and DELETE statements) and
   exits with status 1 if not;
4. prints row changes per second of each and the ratios binlogd/peer (``--json``: one JSON object).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.decode import SERVER_ARGS, machine, write_workload

DEFAULT_ROWS = 200_000
_INSERT_TUPLES = re.compile(rb"\),\(")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _binlogd() -> list[str]:
    script = Path(sys.executable).parent / "binlogd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "binlogd.cli"]


def best_of(n: int, cmd: list[str]) -> float:
    """Best wall time of ``n`` runs of ``cmd`` with stdout to /dev/null (each must exit 0)."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def count_changes(sql: bytes) -> int:
    """Row changes in binlogd sql's output: INSERT tuples plus UPDATE and DELETE statements."""
    changes = 0
    for line in sql.splitlines():
        if line.startswith(b"INSERT INTO "):
            changes += 1 + len(_INSERT_TUPLES.findall(line))
        elif line.startswith((b"UPDATE ", b"DELETE FROM ")):
            changes += 1
    return changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sql", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                    help=f"inserted rows (default {DEFAULT_ROWS}); rows/10 updates and rows/20 deletes follow")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, best reported (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ns = ap.parse_args(argv)
    peer = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if peer is None:
        raise SystemExit("mariadb-binlog (or mysqlbinlog) not found in PATH: install mariadb-client")
    from binlogd.localserver import LocalServer

    started = dt.datetime.now().astimezone()
    with LocalServer(extra_args=SERVER_ARGS) as srv:
        log(f"server: {srv.flavor} {srv.version} on port {srv.port}")
        conn = srv.connect()
        try:
            expected = write_workload(conn, ns.rows)
        finally:
            conn.close()
        files = [str(p) for p in srv.binlog_files()[:-1]]  # the file in use holds nothing of the workload
        size = sum(Path(f).stat().st_size for f in files)
        total = sum(expected.values())
        ours = subprocess.run([*_binlogd(), "sql", *files], capture_output=True, check=True).stdout
        if count_changes(ours) != total:
            log(f"ROW COUNT MISMATCH: binlogd sql wrote {count_changes(ours)} row changes, the workload made {total}")
            return 1
        runs = {
            "binlogd sql": [*_binlogd(), "sql", *files],
            "mariadb-binlog": [peer, "--no-defaults", *files],
            "mariadb-binlog -v": [peer, "--no-defaults", "-v", *files],
            "binlogd sql --flashback": [*_binlogd(), "sql", "--flashback", "--skip-unsafe", *files],
            "mariadb-binlog --flashback": [peer, "--no-defaults", "--flashback", *files],
        }
        seconds = {}
        for name, cmd in runs.items():
            log(f"measuring {name} ...")
            seconds[name] = best_of(ns.repeat, cmd)
            log(f"  {seconds[name]:.2f} s")
    rate = {name: total / s for name, s in seconds.items()}
    ratios = {
        "replay vs mariadb-binlog": rate["binlogd sql"] / rate["mariadb-binlog"],
        "replay vs mariadb-binlog -v": rate["binlogd sql"] / rate["mariadb-binlog -v"],
        "flashback vs mariadb-binlog --flashback": rate["binlogd sql --flashback"] / rate["mariadb-binlog --flashback"],
    }
    result = {"date": started.isoformat(timespec="seconds"), "machine": machine(), "row_changes": total,
              "files_bytes": size, "seconds": seconds,
              "rows_per_second": rate, "ratios": ratios}
    if ns.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"binlogd sql benchmark, {started:%Y-%m-%d %H:%M %Z}; {result['machine']}")
    print(f"{total} row changes ({expected}), {result['files_bytes'] / 1e6:.1f} MB of binlog")
    for name, s in seconds.items():
        print(f"  {name:<28} {s:8.2f} s  {rate[name]:>12,.0f} rows/s")
    for name, r in ratios.items():
        print(f"  {name:<40} {r:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
