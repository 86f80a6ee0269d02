"""Raw-path benchmark (issue 7): the daemon's archive sink against ``mariadb-binlog --raw``.

``python -m bench.raw [--rows N] [--repeat 3] [--json]``: starts a throwaway MariaDB, writes the
decode benchmark's workload (:func:`bench.decode.write_workload`), then measures in the same run,
best of ``--repeat``:

(a) **binlogd**: the real daemon (:class:`daemon.service.Daemon`, in-process) with
    ``sink.kind = "archive"`` from the first binlog file: receive over TCP, CRC32 verification,
    position tracking, byte-exact archive files and a checkpoint at transaction boundaries;
    timed until its checkpoint reaches the end of the last closed file. Twice: durable (the
    default, ``sink.fsync = true``) and with ``sink.fsync = false``, like the peer;
(b) **mariadb-binlog** ``--read-from-remote-server --raw --to-last-log`` into a temp dir (no
    checksum verification, no fsync, no checkpoint), and the same followed by an fsync of the
    files it wrote, for the durable comparison.

The four runs take turns, ``--repeat`` rounds of them (a shared machine's changes of load then
fall on every side alike). Besides the wall time of the best run it prints the least CPU time
(user + system) of each side: the daemon's process, every thread; mariadb-binlog's process.
It checks that every archive is byte-identical to the server's closed files and prints MB/s for
each and two ratios: without fsync on either side (issue 16's target: at least 1.0) and durable
on both sides. Durable writes cannot beat the disk's own fsync bandwidth, which it also prints.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import SERVER_ARGS, log, machine, write_workload
from binlogd.cli.localserver import LocalServer
from binlogd.daemon.config import load_config
from binlogd.daemon.service import Daemon

_server_ids = itertools.count(1001)


async def _run_daemon(srv: LocalServer, out: Path, target: tuple[str, int], fsync: bool) -> float:
    # A new server_id per run: the server ends the previous run's dump thread (same id) only when the
    # next replica registers, which would cost that run ~80 ms (mariadb-binlog's non-blocking dump
    # ends its thread at EOF).
    config = load_config(None, env={}, overrides={
        "source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
        "source.password": srv.repl_password, "source.start": f"file:{srv.binlog_files()[0].name}:4",
        "source.server_id": str(next(_server_ids)), "checkpoint.path": str(out / "checkpoint.json"),
        "sink.kind": "archive", "sink.path": str(out), "sink.fsync": str(fsync).lower(), "metrics.listen": ""})
    daemon = Daemon(config)
    t0, c0 = time.perf_counter(), time.process_time()
    task = asyncio.create_task(daemon.run())
    while True:
        durable = daemon.committer.durable
        if durable is not None and (durable.position.file, durable.position.pos) >= target:
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            break
        if task.done():
            raise RuntimeError(f"the daemon exited with {task.result()} before catching up")
        await asyncio.sleep(0.002)
    daemon.stop()
    await task
    return elapsed, cpu


def run_binlogd(srv: LocalServer, target: tuple[str, int], fsync: bool = True) -> tuple[float, float, Path]:
    """(wall seconds, CPU seconds of this process: user + system, every thread, the archive's
    directory)."""
    out = Path(tempfile.mkdtemp(prefix="binlogd-raw-"))
    return *asyncio.run(_run_daemon(srv, out, target, fsync)), out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_mariadb_binlog(srv: LocalServer, fsync: bool = False) -> tuple[float, float, Path]:
    """(wall seconds, CPU seconds of mariadb-binlog: user + system, the directory it wrote)."""
    out = Path(tempfile.mkdtemp(prefix="mariadb-binlog-raw-"))
    cmd = [shutil.which("mariadb-binlog") or "mysqlbinlog", "--read-from-remote-server", "--raw",
           "--host=127.0.0.1", f"--port={srv.port}", f"--user={srv.user}", "--to-last-log",
           f"--result-file={out}/", srv.binlog_files()[0].name]
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    cpu = _children_cpu() - c0
    if fsync:
        for path in out.iterdir():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - t0, cpu, out


def disk_sync_mb_per_s(directory: Path, size: int) -> float:
    """The disk's durable write speed: ``size`` bytes written and fsynced once, as MB/s."""
    block = os.urandom(1 << 20)
    path = directory / "disk-probe"
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as fh:
        for _ in range(max(1, size >> 20)):
            fh.write(block)
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - t0
    path.unlink()
    return max(1, size >> 20) * (1 << 20) / seconds / 1e6


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
        runs = {"binlogd": lambda: run_binlogd(srv, target),
                "binlogd, no fsync": lambda: run_binlogd(srv, target, fsync=False),
                "mariadb-binlog": lambda: run_mariadb_binlog(srv),
                "mariadb-binlog + fsync": lambda: run_mariadb_binlog(srv, fsync=True)}
        # Round-robin (each of the four once per round): on a shared machine a change of load then
        # weighs on every side alike, not on whichever side was being measured at that time.
        results, cpus = dict.fromkeys(runs, float("inf")), dict.fromkeys(runs, float("inf"))
        for round_ in range(args.repeat):
            for name, fn in runs.items():
                seconds, cpu, out = fn()
                _check_identical(srv, out, closed, name)
                shutil.rmtree(out, ignore_errors=True)
                results[name], cpus[name] = min(results[name], seconds), min(cpus[name], cpu)
                log(f"round {round_ + 1}, {name}: {seconds:.3f}s, {cpu:.3f}s CPU")
        disk = disk_sync_mb_per_s(Path(tempfile.gettempdir()), size)
    mbps = {k: size / v / 1e6 for k, v in results.items()}
    ratio = mbps["binlogd, no fsync"] / mbps["mariadb-binlog"]
    durable = mbps["binlogd"] / mbps["mariadb-binlog + fsync"]
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "bytes": size,
              "seconds": results, "cpu_seconds": cpus, "mb_per_s": mbps, "disk_fsync_mb_per_s": disk,
              "ratio_binlogd_to_mariadb_binlog": ratio, "ratio_durable": durable}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"raw benchmark, {report['date']}, {report['machine']['cpu']} ({report['machine']['cores']} cores)")
        print(f"  {size / 1e6:.1f} MB of binlog in {len(closed)} closed file(s), best of {args.repeat}")
        for name in results:
            print(f"  {name:<24} {mbps[name]:8.1f} MB/s  {results[name]:.3f}s  CPU {cpus[name]:.3f}s")
        print(f"  (the disk writes and fsyncs {disk:.0f} MB/s)")
        print(f"  binlogd / mariadb-binlog, no fsync on either side: {ratio:.2f}x (target >= 1.0)")
        print(f"  binlogd / mariadb-binlog, both durable (fsync):     {durable:.2f}x")
    return 0

if __name__ == "__main__":
    sys.exit(main())
