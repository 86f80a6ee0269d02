"""PostgreSQL mirror benchmark: ``binlogd run`` with ``[sink] kind = "mirror"`` on a backlog of inserts, then of
one big UPDATE, each timed from the process start until its checkpoint covers the backlog, and an initial
snapshot of the same table (in process: the daemon does not yet hand the sink the schema history itself); each
mirror is checked equal to the source, value by value (EXCEPT ALL both ways in PostgreSQL).

``python -m bench.bench_mirror [--rows 200000] [--update 50000] [--json]``: starts a throwaway MariaDB
(``binlog_row_metadata=MINIMAL``) and PostgreSQL (:mod:`tests.support.brokers`), writes a 5-column table of
``--rows`` rows in 1,000-row transactions, snapshots it (phase "snapshot"), mirrors the inserts from the binlog
(phase "insert"), then one ``--update``-row UPDATE (phase "update"), and prints rows/s per phase. The peer
measured in issue 40 (pg_chameleon 2.0.21, not run here): ``init_replica`` of 200,000 rows 2.4 s, replay of one
50,000-row UPDATE 12.9 s (about 3,900 rows/s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CREATE = ("CREATE TABLE bench_m.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64), c DECIMAL(12,4), "
          "d DATETIME(6))")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def file_key(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def binlog_file(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return cur.fetchone()[0]


def run_mirror(srv, pg, first: str, target: str, workdir: Path) -> float:
    """Seconds from ``binlogd run`` (mirror sink, from ``first``:4 or its checkpoint) until its checkpoint
    reaches the file ``target``."""
    checkpoint = workdir / "checkpoint.json"
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "source.start": f"file:{first}:4",
            "checkpoint.path": str(checkpoint), "sink.kind": "mirror", "sink.mirror.url": pg.url,
            "metrics.listen": "", "filters.include_schemas": "bench_m"}
    cmd = [sys.executable, "-m", "binlogd.cli", "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    with open(workdir / "binlogd.log", "a+") as errlog:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog)
        try:
            while True:
                try:
                    position = json.loads(checkpoint.read_bytes())["position"]
                except (FileNotFoundError, ValueError):
                    position = None
                if position is not None and file_key(position["file"]) >= file_key(target):
                    return time.perf_counter() - t0
                if proc.poll() is not None or time.perf_counter() - t0 > 600:
                    errlog.seek(0)
                    raise SystemExit(f"binlogd did not catch up (exit {proc.poll()}): {errlog.read()[-3000:]}")
                time.sleep(0.002)
        finally:
            proc.terminate()
            proc.wait(60)


def run_snapshot(srv, url: str, workdir: Path) -> float:
    """Seconds from the daemon's start (in process: it hands the sink the schema history, as ``binlogd run``
    does not yet) until its initial snapshot of bench_m is done."""
    import asyncio
    import logging

    from binlogd.daemon.config import load_config
    from binlogd.daemon.service import Daemon

    lines: list[str] = []
    log = logging.getLogger("binlogd.bench.mirror")
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    config = load_config(None, env={}, overrides={
        "source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
        "source.password": srv.repl_password, "checkpoint.path": str(workdir / "snapshot.json"),
        "sink.kind": "mirror", "sink.mirror.url": url,
        "metrics.listen": "", "filters.include_schemas": "bench_m", "snapshot.mode": "initial"})

    async def go() -> float:
        daemon = Daemon(config, log=log)
        t0 = time.perf_counter()
        task = asyncio.create_task(daemon.run())
        while not any("snapshot: done" in line for line in lines):
            if task.done():
                raise SystemExit(f"the daemon ended: {task.result()} {lines[-5:]}")
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        daemon.stop()
        await task
        return elapsed

    return asyncio.run(go())


def check_equal(srv, url: str) -> None:
    """The mirror holds the source's rows, value by value (compared as text in PostgreSQL)."""
    import psycopg

    conn = srv.connect(init_command="SET time_zone = '+00:00'")
    with conn.cursor() as cur:
        cur.execute("SELECT id, a, b, c, DATE_FORMAT(d, '%Y-%m-%d %H:%i:%s.%f') FROM bench_m.t")
        rows = cur.fetchall()
    conn.close()
    with psycopg.connect(url) as pconn:
        pconn.execute("CREATE TEMP TABLE src (id int, a int, b text, c numeric(12,4), d timestamp(6))")
        with pconn.cursor().copy("COPY src FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
        diff = pconn.execute("SELECT count(*) FROM ((SELECT * FROM src EXCEPT ALL SELECT * FROM bench_m.t) UNION ALL "
                             "(SELECT * FROM bench_m.t EXCEPT ALL SELECT * FROM src)) x").fetchone()[0]
    if diff:
        raise SystemExit(f"the mirror differs from the source in {diff} rows")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--update", type=int, default=50_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from binlogd.cli.localserver import LocalServer
    from tests.support.brokers import PostgresServer

    out = {}
    with LocalServer(extra_args=["--binlog-format=ROW", "--binlog-row-metadata=MINIMAL",
                                 "--innodb-buffer-pool-size=256M"]) as srv, PostgresServer() as pg, \
            tempfile.TemporaryDirectory() as tmp:
        conn = srv.connect(autocommit=False)
        first = binlog_file(conn)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench_m")
            cur.execute(CREATE)
            for start in range(0, args.rows, 1000):
                ids = range(start, min(start + 1000, args.rows))
                cur.execute("INSERT INTO bench_m.t VALUES " + ",".join(
                    f"({i}, {i * 7 % 1000003}, 'row {i} {'x' * (i % 40)}', {i % 99999}.{i % 10000:04d}, "
                    f"'2024-01-01 00:00:00' + INTERVAL {i} SECOND)" for i in ids))
                conn.commit()
            cur.execute("FLUSH BINARY LOGS")
        target = binlog_file(conn)
        log(f"{args.rows} rows: initial snapshot into database snap")
        pg.psql("CREATE DATABASE snap OWNER binlogd")
        snap_url = pg.url.rsplit("/", 1)[0] + "/snap"
        seconds = run_snapshot(srv, snap_url, Path(tmp))
        check_equal(srv, snap_url)
        out["snapshot"] = {"rows": args.rows, "seconds": round(seconds, 3), "rows_per_s": round(args.rows / seconds)}
        log(f"backlog: {args.rows} inserts; mirroring")
        seconds = run_mirror(srv, pg, first, target, Path(tmp))
        out["insert"] = {"rows": args.rows, "seconds": round(seconds, 3), "rows_per_s": round(args.rows / seconds)}
        with conn.cursor() as cur:
            cur.execute(f"UPDATE bench_m.t SET a = a + 1, b = CONCAT('u', b) WHERE id < {args.update}")
            conn.commit()
            cur.execute("FLUSH BINARY LOGS")
        target = binlog_file(conn)
        log(f"backlog: one {args.update}-row UPDATE; mirroring")
        seconds = run_mirror(srv, pg, first, target, Path(tmp))
        out["update"] = {"rows": args.update, "seconds": round(seconds, 3), "rows_per_s": round(args.update / seconds)}
        conn.close()
        check_equal(srv, pg.url)
        out["equal"] = True
    if args.json:
        print(json.dumps(out))
    else:
        for phase, r in out.items():
            if phase != "equal":
                print(f"{phase:8} {r['rows']:>8} rows {r['seconds']:>8.2f} s {r['rows_per_s']:>9} rows/s "
                      "(process start to caught up)")
        print("mirror equal to the source: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
