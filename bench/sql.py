"""SQL-out benchmark (issue 18): ``binlogd sql`` against ``mariadb-binlog`` on the same files.

``python -m bench.sql [--rows N] [--repeat N] [--json] [--pure-python] [--installed] [--profile] [--keep DIR]``:

1. starts a throwaway MariaDB (ROW, FULL row image and metadata) and writes bench.decode's workload:
   ``--rows`` inserts in 500-row transactions into a 10-column table, rows/10 updates and rows/20
   deletes, then FLUSH BINARY LOGS;
2. measures, interleaved (one run of each tool per round, ``--repeat`` rounds), every tool a process of
   its own writing to /dev/null, binlogd with compiled bytecode as an installed package runs
   (:func:`bench.decode.bytecode_env`):

   - replay: ``binlogd sql FILES`` against ``mariadb-binlog FILES`` (its replay output: the row events
     as BINLOG base64 statements, which only a server decodes) and ``mariadb-binlog -v FILES`` (the same,
     plus each row as commented pseudo-SQL: the nearest thing it prints to our output);
   - flashback: ``binlogd sql --flashback --skip-unsafe FILES`` (the CREATEs are left out, as
     mariadb-binlog leaves them) against ``mariadb-binlog --flashback FILES``;

3. checks binlogd's output holds every row change (INSERT tuples, UPDATE and DELETE statements) and
   exits with status 1 if not;
4. times binlogd's C row writer alone (:func:`writer_seconds`: the floor of any replay with it), and both
   tools on the ranges of the first and the last transaction, next to a bare ``python -c pass``
   (:func:`one_transaction`);
5. prints row changes per second of each (from its best round, and the range over the rounds) and the
   ratios binlogd/peer: of the best rounds, and the range of the ratios within each round; and each
   tool's least CPU time (user + system: steadier than wall time on a shared machine) and the ratio of
   those (``--json``: one JSON object).

``--pure-python`` runs binlogd with ``BINLOGD_PURE_PYTHON=1`` (no C speedups); ``--installed`` runs it
as ``pip install .`` installs it (:func:`bench.info.installed_copy`: no editable finder at start-up);
``--profile`` adds one binlogd replay in this process under cProfile (top 25 by own time, to stderr);
``--keep DIR`` copies the binlog files there.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

from bench.decode import SERVER_ARGS, bytecode_env, machine, write_workload
from bench.info import installed_copy

DEFAULT_ROWS = 200_000
_INSERT_TUPLES = re.compile(rb"\),\(")
RATIOS = {"replay vs mariadb-binlog": ("binlogd sql", "mariadb-binlog"),
          "replay vs mariadb-binlog -v": ("binlogd sql", "mariadb-binlog -v"),
          "flashback vs mariadb-binlog --flashback": ("binlogd sql --flashback", "mariadb-binlog --flashback")}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _binlogd() -> list[str]:
    script = Path(sys.executable).parent / "binlogd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "binlogd.cli"]


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of ``cmd`` with stdout and stderr to /dev/null
    (it must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def count_changes(sql: bytes) -> int:
    """Row changes in binlogd sql's output: INSERT tuples plus UPDATE and DELETE statements."""
    changes = 0
    for line in sql.splitlines():
        if line.startswith(b"INSERT INTO "):
            changes += 1 + len(_INSERT_TUPLES.findall(line))
        elif line.startswith((b"UPDATE ", b"DELETE FROM ")):
            changes += 1
    return changes


def profile(files: list[str], top: int = 25) -> str:
    """cProfile of one ``binlogd sql`` replay of ``files`` in this process (output discarded)."""
    from binlogd.cli import main

    prof = cProfile.Profile()
    with open(os.devnull, "w") as sink, redirect_stdout(sink):  # the command writes to sys.stdout.buffer
        prof.runcall(main, ["sql", *files])
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def writer_seconds(files: list[str], rounds: int) -> float | None:
    """Seconds binlogd's C row writer alone takes for the files' rows, the best of ``rounds``: every call a
    ``binlogd sql`` replay in this process makes to it (``library._sqlrows.rows`` and ``rows_events``), made
    again with the same inputs in memory, nothing else read, decoded or printed. No replay of these files can
    take less with this writer. None when the C writer is not in use."""
    from unittest import mock

    from binlogd.cli import main
    from binlogd.library.sqlwriter import native

    if not native.speedups_enabled():
        return None
    calls = []

    def recorder(write):
        def recorded(*args):
            calls.append((write, args))
            return write(*args)
        return recorded

    with mock.patch.object(native.C, "rows", recorder(native.C.rows)), \
            mock.patch.object(native.C, "rows_events", recorder(native.C.rows_events)), \
            open(os.devnull, "w") as sink, redirect_stdout(sink):
        main(["sql", *files])
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for write, args in calls:
            write(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def one_transaction(files: list[str], rounds: int, env: dict, binlogd: list[str]) -> dict:
    """Best wall seconds over ``rounds`` of ``binlogd sql`` and ``mariadb-binlog`` on the range of the first file's
    first and last transactions with rows (a restore's short range: start-up is most of it, and before the last
    one, how fast a tool gets past the rest of the file), and of binlogd's Python starting and doing nothing
    (``python -c pass``, as binlogd's interpreter starts: the part no Python tool can go below).
    Returns ``{"rows": {"first": n, "last": n}, "seconds": {name: s}}``."""
    from binlogd.cli.sqlout.groups import file_groups
    from binlogd.protocol.events import RowsEvent

    with_rows = [g for g in file_groups(files[0], log) if any(isinstance(e, RowsEvent) for e in g.events)]
    peer = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    runs, rows = {}, {}
    for which, group in (("first", with_rows[0]), ("last", with_rows[-1])):
        rows[which] = sum(len(e.rows) for e in group.events if isinstance(e, RowsEvent))
        where = [f"--start-position={group.start}", f"--stop-position={group.end}", files[0]]
        runs[f"binlogd sql, {which}"] = ([*binlogd, "sql", *where], env)
        runs[f"mariadb-binlog, {which}"] = ([peer, "--no-defaults", *where], None)
    runs["python -c pass"] = ([binlogd[0] if len(binlogd) > 1 else sys.executable, "-c", "pass"], env)
    best = {name: min(timed(cmd, cmd_env)[0] for _ in range(rounds)) for name, (cmd, cmd_env) in runs.items()}
    return {"rows": rows, "seconds": best}


def measure(files: list[str], rounds: int, env: dict, binlogd: list[str]) -> tuple[dict[str, list[float]],
                                                                                  dict[str, list[float]]]:
    """Wall and CPU seconds of each tool in each round (one run of every tool per round, in turn);
    ``binlogd`` is the command that runs binlogd."""
    peer = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    runs = {
        "binlogd sql": ([*binlogd, "sql", *files], env),
        "mariadb-binlog": ([peer, "--no-defaults", *files], None),
        "mariadb-binlog -v": ([peer, "--no-defaults", "-v", *files], None),
        "binlogd sql --flashback": ([*binlogd, "sql", "--flashback", "--skip-unsafe", *files], env),
        "mariadb-binlog --flashback": ([peer, "--no-defaults", "--flashback", *files], None),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for rnd in range(rounds):
        for name, (cmd, cmd_env) in runs.items():
            wall, used = timed(cmd, cmd_env)
            seconds[name].append(wall)
            cpu[name].append(used)
        log(f"round {rnd + 1}: " + ", ".join(f"{name} {s[-1]:.2f}s" for name, s in seconds.items()))
    return seconds, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sql", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                    help=f"inserted rows (default {DEFAULT_ROWS}); rows/10 updates and rows/20 deletes follow")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ap.add_argument("--pure-python", action="store_true", help="binlogd without its C speedups")
    ap.add_argument("--profile", action="store_true", help="also cProfile one binlogd replay (to stderr)")
    ap.add_argument("--installed", action="store_true",
                    help="run binlogd as `pip install .` installs it (bench.info.installed_copy), not editable")
    ap.add_argument("--keep", metavar="DIR", help="copy the workload's binlog files into DIR")
    ns = ap.parse_args(argv)
    if shutil.which("mariadb-binlog") is None and shutil.which("mysqlbinlog") is None:
        raise SystemExit("mariadb-binlog (or mysqlbinlog) not found in PATH: install mariadb-client")
    from binlogd.cli.localserver import LocalServer

    env = bytecode_env(dict(os.environ, BINLOGD_PURE_PYTHON="1" if ns.pure_python else ""))
    started = dt.datetime.now().astimezone()
    with LocalServer(extra_args=SERVER_ARGS) as srv, tempfile.TemporaryDirectory(prefix="bench-sql-") as scratch:
        log(f"server: {srv.flavor} {srv.version} on port {srv.port}")
        conn = srv.connect()
        try:
            expected = write_workload(conn, ns.rows)
        finally:
            conn.close()
        files = [str(p) for p in srv.binlog_files()[:-1]]  # the file in use holds nothing of the workload
        if ns.keep:
            for f in files:
                shutil.copy(f, ns.keep)
        size = sum(Path(f).stat().st_size for f in files)
        total = sum(expected.values())
        binlogd = list(installed_copy(Path(scratch))) if ns.installed else _binlogd()
        ours = subprocess.run([*binlogd, "sql", *files], capture_output=True, check=True, env=env).stdout
        if count_changes(ours) != total:
            log(f"ROW COUNT MISMATCH: binlogd sql wrote {count_changes(ours)} row changes, the workload made {total}")
            return 1
        seconds, cpu = measure(files, ns.repeat, env, binlogd)
        writer = None if ns.pure_python else writer_seconds(files, ns.repeat)
        short = one_transaction(files, max(ns.repeat, 5), env, binlogd)
        if ns.profile:
            log(profile(files))
    best = {name: min(s) for name, s in seconds.items()}
    rate = {name: total / s for name, s in best.items()}
    ratios = {label: rate[ours_] / rate[peer] for label, (ours_, peer) in RATIOS.items()}
    ratio_ranges = {label: [min(p / o for o, p in zip(seconds[ours_], seconds[peer])),
                            max(p / o for o, p in zip(seconds[ours_], seconds[peer]))]
                    for label, (ours_, peer) in RATIOS.items()}
    result = {"date": started.isoformat(timespec="seconds"), "machine": machine(), "row_changes": total,
              "files_bytes": size, "rounds": ns.repeat, "pure_python": ns.pure_python,
              "installed": ns.installed, "seconds": seconds,
              "cpu_seconds": cpu, "rows_per_second": rate, "ratios": ratios, "ratio_ranges_per_round": ratio_ranges,
              "cpu_ratios": {label: min(cpu[peer]) / min(cpu[ours_]) for label, (ours_, peer) in RATIOS.items()},
              "c_writer_seconds": writer, "one_transaction": short}
    if ns.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"binlogd sql benchmark, {started:%Y-%m-%d %H:%M %Z}; {result['machine']}")
    print(f"{total} row changes ({expected}), {result['files_bytes'] / 1e6:.1f} MB of binlog; "
          f"{ns.repeat} interleaved rounds{', binlogd without C speedups' if ns.pure_python else ''}")
    for name, s in seconds.items():
        print(f"  {name:<28} {best[name]:6.2f} s ({min(s):.2f}-{max(s):.2f})  {rate[name]:>12,.0f} rows/s "
              f"({total / max(s):,.0f}-{total / min(s):,.0f}); CPU {min(cpu[name]):.2f} s")
    for label, r in ratios.items():
        lo, hi = ratio_ranges[label]
        print(f"  {label:<40} {r:.2f}x (per round {lo:.2f}-{hi:.2f}x; CPU time {result['cpu_ratios'][label]:.2f}x)")
    print(f"  one transaction ({short['rows']['first']} and {short['rows']['last']} row changes, the file's first "
          "and last): " + ", ".join(f"{name} {sec * 1000:.1f} ms" for name, sec in short["seconds"].items()))
    if writer is not None:
        print(f"  binlogd's C row writer alone (in memory): {writer:.3f} s, {writer / best['mariadb-binlog']:.2f} of "
              f"mariadb-binlog's whole run, {writer / best['binlogd sql']:.2f} of binlogd sql's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
