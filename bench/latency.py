"""Commit-to-sink latency benchmark (issue 7).

``python -m bench.latency [--rate 1000] [--seconds 5] [--json]``: a throwaway MariaDB; a writer
commits single-row transactions at ``--rate`` per second and notes when each COMMIT was sent.
In the same run:

(a) **binlogd** (``binlogd run`` in its own process, JSON-lines sink, fsync on commit): two latencies,
    when the change event is readable in the sink file, and when it is durable (the checkpoint, saved
    after the sink's fsync, covers its line), each minus the COMMIT time;
(b) **python-mysql-replication** (blocking ``BinLogStreamReader`` in its own process): latency =
    when the peer hands the row to Python (nothing made durable) minus the COMMIT time.

Each side has a process (and so a GIL) of its own, as in production: sharing one with the writer
and the sink's tail reader would add up to the interpreter's 5 ms switch interval to every thread
hand-off. Times are CLOCK_MONOTONIC, which all processes share. Prints p50/p99/max for each and
the ratio of p99s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.decode import log, machine
from binlogd.cli.localserver import LocalServer


def _writer(srv: LocalServer, rate: float, seconds: float, commits: dict, start: threading.Event) -> None:
    start.wait()
    with srv.connect(database="l") as conn, conn.cursor() as cur:
        interval, t0, i = 1.0 / rate, time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            i += 1
            cur.execute("INSERT INTO t VALUES (%s, 'x')", (i,))
            sent = time.monotonic()  # a reader may see the row before COMMIT's reply arrives
            conn.commit()
            commits[i] = sent
            delay = t0 + i * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def _tail_sink(directory: Path, checkpoint: Path, seen: dict, durable: dict, stop: threading.Event) -> None:
    """Poll the sink's files (``seen``: id -> when its line was readable) and the checkpoint
    (``durable``: id -> when the checkpoint's sink offset first covered the line)."""
    offsets: dict[Path, int] = {}
    waiting: list[tuple[str, int, int]] = []  # (file name, end offset of the line, id), not durable yet
    covered = ("", 0)  # the sink position the checkpoint last read covers
    while not stop.is_set():
        for path in sorted(directory.glob("changes-*.jsonl")):
            with open(path, "rb") as fh:
                fh.seek(offsets.get(path, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1
            if end:
                now, at = time.monotonic(), offsets.get(path, 0)
                for line in data[:end].splitlines(keepends=True):
                    at += len(line)
                    key = json.loads(line)["after"]["id"]
                    seen.setdefault(key, now)
                    waiting.append((path.name, at, key))
                offsets[path] = offsets.get(path, 0) + end
        if waiting:  # read each time: a checkpoint replaced within one clock tick keeps its mtime
            try:
                sink = json.loads(checkpoint.read_bytes())["sink"]
                covered = (sink["file"], sink["offset"])
            except FileNotFoundError:
                pass
        # lines read after the checkpoint that covers them are durable as soon as they are seen
        if waiting and waiting[0][:2] <= covered:
            now = time.monotonic()
            for item in [w for w in waiting if w[:2] <= covered]:
                durable.setdefault(item[2], now)
            waiting = [w for w in waiting if w[:2] > covered]
        time.sleep(0.0005)


SENTINEL_ID = 0  # the row written after the last commit: the peer reads up to it, so it has read them all


def _peer(conn: dict, file: str, pos: int, out, ready) -> None:
    """The peer in its own process: ``out`` gets {id: when the row reached Python} once it has read the
    sentinel row (:data:`SENTINEL_ID`), which is written after every timed commit."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import WriteRowsEvent

    seen: dict = {}
    stream = BinLogStreamReader(connection_settings=conn, server_id=4243, only_events=[WriteRowsEvent],
                                resume_stream=True, blocking=True, log_file=file, log_pos=pos)
    ready.set()
    try:
        for event in stream:
            now = time.monotonic()
            for row in event.rows:
                seen.setdefault(row["values"]["id"], now)
            if SENTINEL_ID in seen:
                break
    finally:
        stream.close()
        out.put(seen)


def _stats(commits: dict, seen: dict, who: str) -> dict:
    lat = sorted((seen[i] - t) * 1000 for i, t in commits.items() if i in seen)
    if len(lat) != len(commits):
        missing = sorted(set(commits) - set(seen))
        raise SystemExit(f"{who} saw only {len(lat)} of {len(commits)} commits (missing ids {missing[:20]})")
    return {"n": len(lat), "p50_ms": statistics.median(lat), "p99_ms": lat[int(len(lat) * 0.99) - 1],
            "max_ms": lat[-1]}


def _run(srv: LocalServer, args, workdir: Path) -> dict:
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "checkpoint.path": str(workdir / "cp.json"),
            "sink.path": str(workdir / "out"), "metrics.listen": ""}
    cmd = [sys.executable, "-m", "binlogd.cli", "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    errlog = open(workdir / "binlogd.log", "w+")
    daemon = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        deadline = time.monotonic() + 30
        while not (workdir / "cp.json").exists():  # the first checkpoint: it is streaming
            if daemon.poll() is not None or time.monotonic() > deadline:
                errlog.seek(0)
                raise SystemExit(f"binlogd did not start (exit {daemon.poll()}): {errlog.read()[-2000:]}")
            time.sleep(0.01)
        ctx = multiprocessing.get_context("spawn")
        out, peer_ready = ctx.Queue(), ctx.Event()
        file, pos = srv.sql("SHOW MASTER STATUS")[0][:2]
        conn = {"host": "127.0.0.1", "port": srv.port, "user": srv.user, "passwd": srv.password}
        peer = ctx.Process(target=_peer, args=(conn, file, int(pos), out, peer_ready), daemon=True)
        peer.start()
        peer_ready.wait(30)
        commits, ours, durable = {}, {}, {}
        tail_stop, start = threading.Event(), threading.Event()
        tail = threading.Thread(target=_tail_sink, args=(workdir / "out", workdir / "cp.json", ours, durable,
                                                         tail_stop), daemon=True)
        tail.start()
        start.set()
        _writer(srv, args.rate, args.seconds, commits, start)
        deadline = time.monotonic() + 30
        while len(durable) < len(commits) and time.monotonic() < deadline:
            time.sleep(0.05)
        tail_stop.set()
        srv.sql(f"INSERT INTO l.t VALUES ({SENTINEL_ID}, 'the end')")
        theirs = out.get(timeout=60)
        peer.join(10)
    finally:
        daemon.terminate()
        daemon.wait(30)
        errlog.close()
    return {"binlogd": _stats(commits, ours, "binlogd"), "binlogd durable": _stats(commits, durable, "binlogd durable"),
            "python-mysql-replication": _stats(commits, theirs, "python-mysql-replication"),
            "achieved_rate": len(commits) / args.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with LocalServer(extra_args=["--binlog-row-metadata=FULL"]) as srv, \
            tempfile.TemporaryDirectory(prefix="binlogd-latency-") as tmp:
        srv.sql("CREATE DATABASE l")
        srv.sql("CREATE TABLE l.t (id BIGINT PRIMARY KEY, v VARCHAR(16))")
        log(f"writing {args.rate:g} transactions/s for {args.seconds:g}s ...")
        result = _run(srv, args, Path(tmp))
    result.update(date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine())
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"latency benchmark, {result['date']}, {result['machine']['cpu']} ({result['machine']['cores']} cores), "
          f"{result['achieved_rate']:.0f} transactions/s")
    for name in ("binlogd", "binlogd durable", "python-mysql-replication"):
        r = result[name]
        print(f"  {name:<26} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
              f"max {r['max_ms']:7.2f} ms  (n={r['n']})")
    ratio = result["python-mysql-replication"]["p99_ms"] / result["binlogd"]["p99_ms"]
    durable = result["python-mysql-replication"]["p99_ms"] / result["binlogd durable"]["p99_ms"]
    print(f"  p99 python-mysql-replication / binlogd: {ratio:.2f}x readable, {durable:.2f}x durable "
          "(the peer makes nothing durable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
