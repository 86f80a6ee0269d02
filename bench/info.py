"""``binlogd info`` benchmark (issue 7): seeking must not grow with the file's size.

``python -m bench.info [--gib 1.0] [--json]``: a throwaway MariaDB writes a small binlog (about
2 MB) and one of about ``--gib`` GiB, made of the same 1000-row transactions (generated
server-side), each closed by a ROTATE (FLUSH BINARY LOGS). For each file it times, best of 5:

(a) ``binlogd.cli.filetools.info`` (the seek path: FDE and first events, then the closing ROTATE
    and the last GTID found from the end);
(b) a full header walk: every event header read with pread, as a peer tool that scans would do
    (what ``info`` falls back to, ``method: "scan"``, for files that do not end with ROTATE/STOP).

It checks both give the same last GTID and end time, and prints the times, the ratio walk/info,
and how info's time changed from the small file to the large one (it should not grow).

It also times the command a user runs, ``binlogd info SMALL_FILE`` in a process of its own (start-up,
imports and all; issue 16's goal is at most 60 ms), against a bare ``python -c pass`` and
``mariadb-binlog --version`` for scale: best and median of 20. ``--start-only`` writes and times only
that (no large file). ``--installed`` also times this tree as ``pip install .`` installs it, in a venv of its
own: the test venv's editable install adds a finder that every process of that venv imports at start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import bytecode_env, log, machine
from binlogd.cli import filetools
from binlogd.cli.localserver import LocalServer

_ROW_BYTES = 260   # binlog bytes per row of b.t (an INT and 240 characters)
_TXN_ROWS = 1000


def _fill(srv: LocalServer, first: int, rows: int) -> None:
    """``rows`` rows in 1000-row transactions, generated server-side (sequence engine)."""
    for start in range(first, first + rows, _TXN_ROWS):
        stop = min(first + rows, start + _TXN_ROWS) - 1
        srv.sql(f"INSERT INTO b.t SELECT seq, REPEAT('x', 240) FROM seq_{start}_to_{stop}", database="b")


def header_walk(path) -> tuple[int, int | None]:
    """Read every event header; return (events, last timestamp)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, pos, n, last_ts = os.fstat(fd).st_size, 4, 0, None
        while pos + 19 <= size:
            head = os.pread(fd, 19, pos)
            length = int.from_bytes(head[9:13], "little")
            if length < 19:
                break
            last_ts, n, pos = int.from_bytes(head[:4], "little"), n + 1, pos + length
        return n, last_ts
    finally:
        os.close(fd)


def _best(fn, *args, repeat: int = 5):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, out


def process_ms(cmd: list[str], runs: int = 20) -> dict:
    """Wall time of ``cmd`` as a process of its own (output discarded, bytecode compiled once before):
    best and median of ``runs``, ms."""
    env = bytecode_env()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"best_ms": min(times), "median_ms": statistics.median(times)}


def installed_copy(scratch: Path) -> tuple[str, str]:
    """This tree installed as users install it (``pip install .``: no editable finder, whose start-up
    imports pathlib, urllib and more in every process) into a venv of its own under ``scratch``, which
    finds the other packages in this venv's site-packages. Returns (its python, its binlogd script)."""
    import sysconfig

    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(Path(__file__).resolve().parents[1])], check=True, stdout=subprocess.DEVNULL)
    # a path line, not a site directory: this venv's .pth files (the editable finder's) are not run
    (site / "_bench_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, str(site / "bin" / "binlogd")


def start_times(path: Path, installed: tuple[str, str] | None = None) -> dict:
    """``binlogd info path`` and two references, as :func:`process_ms` measures them; with ``installed``
    (:func:`installed_copy`), also that copy's ``binlogd info`` and its bare ``python -c pass``."""
    binlogd = str(Path(sys.executable).with_name("binlogd"))
    peer = shutil.which("mariadb-binlog") or "mysqlbinlog"
    times = {"binlogd info": process_ms([binlogd, "info", str(path)]),
             "binlogd info --json": process_ms([binlogd, "info", "--json", str(path)]),
             "python -c pass": process_ms([sys.executable, "-c", "pass"])}
    if installed is not None:
        python, script = installed
        times["binlogd info (pip install .)"] = process_ms([python, script, "info", str(path)])
        times["python -c pass (its venv)"] = process_ms([python, "-c", "pass"])
    times["mariadb-binlog --version"] = process_ms([peer, "--version"])
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the large binlog")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--start-only", action="store_true", help="only the start-up time of binlogd info")
    parser.add_argument("--installed", action="store_true",
                        help="also time a regular install of this tree (pip install ., in a venv of its own)")
    args = parser.parse_args(argv)
    rows = max(1000, int(args.gib * (1 << 30) / _ROW_BYTES))
    with LocalServer(extra_args=["--max-binlog-size=1073741824", "--binlog-row-metadata=FULL"]) as srv:
        srv.sql("CREATE DATABASE b")
        srv.sql("CREATE TABLE b.t (id INT PRIMARY KEY, v VARCHAR(255))")
        _fill(srv, 1, 8000)  # the small file: the same transactions, a few MB
        srv.sql("FLUSH BINARY LOGS")
        with tempfile.TemporaryDirectory(prefix="bench-info-") as scratch:
            installed = installed_copy(Path(scratch)) if args.installed else None
            start = start_times(srv.binlog_files()[0], installed)
        if args.start_only:
            return _print_start(start, srv.binlog_files()[0], args.json)
        log(f"writing {rows} rows ({args.gib} GiB of binlog) ...")
        _fill(srv, 10_000_001, rows)
        srv.sql("FLUSH BINARY LOGS")
        files = srv.binlog_files()
        small, large = files[0], max(files, key=lambda p: p.stat().st_size)
        report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "files": [],
                  "start": start}
        for path in (small, large):
            t_info, result = _best(filetools.info, path)
            t_walk, (events, last_ts) = _best(header_walk, path)
            if result.method != "seek" or result.end_time != last_ts:
                raise SystemExit(f"{path.name}: info says {result.method}, end {result.end_time}; walk says {last_ts}")
            report["files"].append({"file": path.name, "bytes": path.stat().st_size, "events": events,
                                    "info_seconds": t_info, "walk_seconds": t_walk})
    s, big = report["files"]
    report["info_growth_large_vs_small"] = big["info_seconds"] / s["info_seconds"]
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"info benchmark, {report['date']}, {report['machine']['cpu']} ({report['machine']['cores']} cores)")
    for f in report["files"]:
        ms_info, ms_walk = f["info_seconds"] * 1e3, f["walk_seconds"] * 1e3
        print(f"  {f['file']}: {f['bytes'] / 1e6:9.1f} MB, {f['events']:6d} events: info {ms_info:7.2f} ms"
              f"  header walk {ms_walk:8.2f} ms  (walk/info {ms_walk / ms_info:.0f}x)")
    print(f"  info time, large file / small file: {report['info_growth_large_vs_small']:.2f}x "
          f"for {big['bytes'] / s['bytes']:.0f}x the bytes")
    _print_start(start, None, False)
    return 0


def _print_start(start: dict, path: Path | None, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
                          "start": start}))
        return 0
    if path is not None:
        m = machine()
        print(f"info start-up, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {m['cpu']} ({m['cores']} cores), "
              f"{path.name} ({path.stat().st_size / 1e6:.1f} MB), load average {os.getloadavg()[0]:.1f}")
    for name, t in start.items():
        print(f"  {name:<30} best {t['best_ms']:6.1f} ms  median {t['median_ms']:6.1f} ms  (a process of its own)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
