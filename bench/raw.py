"""Raw-path benchmark (issue 7): the daemon's archive sink against ``mariadb-binlog --raw``.

``python -m bench.raw [--rows N] [--repeat 3] [--json]``: starts a throwaway MariaDB, writes the
decode benchmark's workload (:func:`bench.decode.write_workload`), then measures in the same run,
best of ``--repeat``:

(a) **binlogd**: the real daemon (:class:`daemon.service.Daemon`, in-process) with
    ``sink.kind = "archive"`` from the first binlog file: receive over TCP, CRC32 verification,
    position tracking, byte-exact archive files, fsync and checkpoint at transaction boundaries;
    timed until its durable checkpoint reaches the end of the last closed file;
(b) **mariadb-binlog** ``--read-from-remote-server --raw --to-last-log`` into a temp dir
    (no checksum verification, no fsync, no checkpoint).

It checks that both archives are byte-identical to the server's closed files and prints MB/s for
each and binlogd/mariadb-binlog (the issue's target is at least 0.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import SERVER_ARGS, log, machine, write_workload
from binlogd.localserver import LocalServer
from daemon.config import load_config
from daemon.service import Daemon


async def _run_daemon(srv: LocalServer, out: Path, target: tuple[str, int]) -> float:
    config = load_config(None, env={}, overrides={
        "source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
        "source.password": srv.repl_password, "source.start": f"file:{srv.binlog_files()[0].name}:4",
        "checkpoint.path": str(out / "checkpoint.json"), "sink.kind": "archive", "sink.path": str(out),
        "metrics.listen": ""})
    daemon = Daemon(config)
    t0 = time.perf_counter()
    task = asyncio.create_task(daemon.run())
    while True:
        durable = daemon._durable
        if durable is not None and (durable.file, durable.pos) >= target:
            elapsed = time.perf_counter() - t0
            break
        if task.done():
            raise RuntimeError(f"the daemon exited with {task.result()} before catching up")
        await asyncio.sleep(0.002)
    daemon.stop()
    await task
    return elapsed


def run_binlogd(srv: LocalServer, target: tuple[str, int]) -> tuple[float, Path]:
    out = Path(tempfile.mkdtemp(prefix="binlogd-raw-"))
    return asyncio.run(_run_daemon(srv, out, target)), out


def run_mariadb_binlog(srv: LocalServer) -> tuple[float, Path]:
    out = Path(tempfile.mkdtemp(prefix="mariadb-binlog-raw-"))
    cmd = [shutil.which("mariadb-binlog") or "mysqlbinlog", "--read-from-remote-server", "--raw",
           "--host=127.0.0.1", f"--port={srv.port}", f"--user={srv.user}", "--to-last-log",
           f"--result-file={out}/", srv.binlog_files()[0].name]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, out


def _check_identical(srv: LocalServer, out: Path, closed: list[Path], who: str) -> None:
    for path in closed:
        if (out / path.name).read_bytes() != path.read_bytes():
            raise SystemExit(f"{who}: archived {path.name} differs from the server's file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with LocalServer(extra_args=SERVER_ARGS) as srv:
        log(f"writing the workload ({args.rows} inserts) ...")
        with srv.connect() as conn:
            write_workload(conn, args.rows)
        files = srv.binlog_files()
        closed = files[:-1]
        target = (files[-1].name, 4)  # the workload ends with FLUSH BINARY LOGS
        size = sum(p.stat().st_size for p in closed)
        results = {}
        for name, fn in (("binlogd", lambda: run_binlogd(srv, target)),
                         ("mariadb-binlog", lambda: run_mariadb_binlog(srv))):
            best = float("inf")
            for _ in range(args.repeat):
                seconds, out = fn()
                _check_identical(srv, out, closed, name)
                shutil.rmtree(out, ignore_errors=True)
                best = min(best, seconds)
            results[name] = best
            log(f"{name}: {best:.3f}s")
    mbps = {k: size / v / 1e6 for k, v in results.items()}
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "bytes": size,
              "seconds": results, "mb_per_s": mbps,
              "ratio_binlogd_to_mariadb_binlog": mbps["binlogd"] / mbps["mariadb-binlog"]}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"raw benchmark, {report['date']}, {report['machine']['cpu']} ({report['machine']['cores']} cores)")
        print(f"  {size / 1e6:.1f} MB of binlog in {len(closed)} closed file(s), best of {args.repeat}")
        for name in results:
            print(f"  {name:<16} {mbps[name]:8.1f} MB/s  {results[name]:.3f}s")
        print(f"  binlogd / mariadb-binlog: {report['ratio_binlogd_to_mariadb_binlog']:.2f}x (target >= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
