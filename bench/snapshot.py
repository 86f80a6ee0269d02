"""Snapshot benchmark (issue 30): binlogd's initial snapshot against ``mariadb-dump --single-transaction``.

``python -m bench.snapshot [--rows N] [--chunk-rows N] [--rounds N] [--table wide|narrow]
[--server mariadb|mysql-9.7] [--compare PYTHON] [--json] [--log] [--profile FILE]``:

1. starts a throwaway MariaDB (:class:`binlogd.cli.localserver.LocalServer`; ``--server mysql-9.7``: MySQL 9.7
   as the tests fetch it) and loads ``--rows`` (1,000,000) rows of bench.decode's 10-column table
   (:func:`bench.decode.write_workload`'s inserts, no updates; ``--table narrow``: :data:`NARROW_TABLE`'s 5);
2. times **mariadb-dump** (on MySQL its own **mysqldump**) ``--single-transaction`` of the table to a file (its
   process, start to exit);
3. times **binlogd**: ``binlogd run`` with ``[snapshot] mode = "initial"`` into the durable JSON-lines sink
   (fsync per chunk), from process start until it logs ``snapshot: done`` (every chunk committed), into a
   new sink and checkpoint; its bytecode is cached in the run's temporary directory (PYTHONPYCACHEPREFIX, even
   under PYTHONDONTWRITEBYTECODE), so that from the second round on it starts as an installed package does;
4. repeats 2-3 ``--rounds`` times (1), interleaved, so that both see the same load; checks that binlogd wrote
   one ``read`` line per row each time (exit 1 if not) and prints the best time of each and the ratio
   mariadb-dump / binlogd (>= 1.0: binlogd is at least as fast). The goal is 1.0;
5. with ``--compare PYTHON``, also times the snapshot of another installation (another commit's venv: its
   ``python``) in the same rounds, right after this tree's, and prints the ratio of the two best times
   (this tree's speed / the other's: >= 1.0, this tree is at least as fast).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import CREATE_TABLE, SCHEMA, SERVER_ARGS, TABLE, TXN_ROWS, _row_sql, log, machine

#: The narrow table: five columns, where a change event's fixed part weighs most.
NARROW_TABLE = (f"CREATE TABLE {SCHEMA}.{TABLE} (id BIGINT NOT NULL PRIMARY KEY, n INT, v VARCHAR(40), "
                "d DECIMAL(10,2), t DATETIME(3))")


def _narrow_row(i: int, rnd: random.Random) -> str:
    return (f"({i}, {rnd.randint(-2**31, 2**31 - 1)}, 'row {i} {rnd.randint(0, 10**9)}', "
            f"{rnd.randint(-99_999_999, 99_999_999)}.{rnd.randint(0, 99):02d}, "
            f"'20{rnd.randint(0, 29):02d}-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d} "
            f"{rnd.randint(0, 23):02d}:{rnd.randint(0, 59):02d}:{rnd.randint(0, 59):02d}.{rnd.randint(0, 999):03d}')")


def load(srv, rows: int, narrow: bool = False) -> None:
    """The table (bench.decode's 10 columns, or with ``narrow`` :data:`NARROW_TABLE`), ``rows`` rows in
    500-row INSERTs."""
    rnd = random.Random(20240607)
    row = _narrow_row if narrow else _row_sql
    conn = srv.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(NARROW_TABLE if narrow else CREATE_TABLE)
            prefix = f"INSERT INTO {SCHEMA}.{TABLE} VALUES "
            for start in range(1, rows + 1, TXN_ROWS):
                cur.execute(prefix + ",".join(row(i, rnd) for i in range(start, min(start + TXN_ROWS, rows + 1))))
            conn.commit()
    finally:
        conn.close()


def run_binlogd(srv, workdir: Path, chunk_rows: int, profile: str | None = None,
                extra: dict | None = None, pycache: Path | None = None,
                python: str = sys.executable) -> tuple[float, int]:
    """(seconds from process start until ``snapshot: done``, lines in the sink); ``profile``: a file to write
    the daemon's cProfile statistics to (it then exits after the snapshot, by SIGTERM); ``extra``: more
    ``--set`` settings; ``pycache``: where the daemon keeps its bytecode (PYTHONPYCACHEPREFIX), so that a
    source tree run with PYTHONDONTWRITEBYTECODE starts as an installed package does after the first round;
    ``python``: the interpreter whose installation of binlogd runs."""
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    sink, checkpoint = workdir / "changes", workdir / "checkpoint.json"
    # on MySQL the account needs RELOAD for its views (FLUSH TABLES WITH READ LOCK): the server's root
    user, password = (srv.user, srv.password) if srv.flavor == "mysql" else (srv.repl_user, srv.repl_password)
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": user, "source.password": password,
            "checkpoint.path": str(checkpoint), "sink.kind": "jsonl", "sink.path": str(sink), "metrics.listen": "",
            "snapshot.mode": "initial", "snapshot.chunk_rows": str(chunk_rows), "filters.include_schemas": SCHEMA,
            **(extra or {})}
    run = ["-m", "cProfile", "-o", profile, "-m", "binlogd.cli"] if profile else ["-m", "binlogd.cli"]
    cmd = [python, *run, "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    errlog = workdir / "binlogd.log"
    t0 = time.perf_counter()
    with open(errlog, "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            while True:
                if b"snapshot: done" in errlog.read_bytes():
                    elapsed = time.perf_counter() - t0
                    break
                if proc.poll() is not None or time.perf_counter() - t0 > 1800:
                    raise SystemExit(f"binlogd's snapshot did not end (exit {proc.poll()}): "
                                     f"{errlog.read_text()[-3000:]}")
                time.sleep(0.002)
        finally:
            proc.terminate()
            proc.wait(60)
    lines = 0
    for path in sink.glob("changes-*.jsonl"):
        with open(path, "rb") as fh:
            lines += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    return elapsed, lines


def dump_command(bins) -> list[str]:
    """The dump tool of the server's installation: MySQL's own ``mysqldump`` for MySQL, else the machine's
    ``mariadb-dump``."""
    if bins is not None and bins.flavor == "mysql":
        return bins.command(bins.client.parent / "mysqldump")
    tool = shutil.which("mariadb-dump") or shutil.which("mysqldump")
    if tool is None:
        raise SystemExit("mariadb-dump is not installed (apt-get install mariadb-client)")
    return [tool]


def run_dump(srv, out: Path, tool: list[str]) -> float:
    """Seconds of ``tool --single-transaction`` (mariadb-dump or mysqldump) of the table into ``out``."""
    cmd = [*tool, "--single-transaction", "-h", "127.0.0.1", "-P", str(srv.port), "-u", srv.user,
           f"--password={srv.password}", SCHEMA, TABLE]
    t0 = time.perf_counter()
    with open(out, "wb") as fh:
        subprocess.run(cmd, stdout=fh, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the table (default 1000000)")
    ap.add_argument("--chunk-rows", type=int, default=10_000, help="[snapshot] chunk_rows (default 10000)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of both, interleaved; the best of each counts")
    ap.add_argument("--profile", metavar="FILE", help="run the daemon under cProfile (the last round), its "
                    "statistics to FILE")
    ap.add_argument("--log", action="store_true", help="print the daemon's log of the last round")
    ap.add_argument("--compare", metavar="PYTHON", help="also time the snapshot of the binlogd this interpreter "
                    "runs (another commit's venv) in the same rounds")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another setting for binlogd (experiments; the figure is with none)")
    ap.add_argument("--table", choices=("wide", "narrow"), default="wide",
                    help="bench.decode's 10 columns (default), or 5: BIGINT key, INT, VARCHAR(40), DECIMAL(10,2), "
                         "DATETIME(3)")
    ap.add_argument("--server", choices=("mariadb", "mysql-9.7"), default="mariadb",
                    help="the machine's MariaDB (default; against mariadb-dump), or MySQL 9.7 as the tests fetch "
                         "it (against its mysqldump)")
    ns = ap.parse_args(argv)
    from binlogd.cli.localserver import LocalServer

    bins = None
    if ns.server != "mariadb":
        from tests.support import servers

        bins = servers.binaries(servers.MYSQL)
    tool = dump_command(bins)
    with LocalServer(extra_args=SERVER_ARGS, binaries=bins) as srv, \
            tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        log(f"server: {srv.flavor} {srv.version} on port {srv.port}; table: {ns.table}")
        t0 = time.perf_counter()
        load(srv, ns.rows, ns.table == "narrow")
        log(f"loaded {ns.rows} rows in {time.perf_counter() - t0:.1f}s")
        work = Path(tmp)
        dumps, runs, others = [], [], []
        for n in range(1, ns.rounds + 1):
            dumps.append(run_dump(srv, work / "dump.sql", tool))
            dump_bytes = os.path.getsize(work / "dump.sql")
            (work / "dump.sql").unlink()
            log(f"round {n}: {Path(tool[-1]).name} --single-transaction: {dumps[-1]:.3f}s ({dump_bytes / 1e6:.1f} MB)")
            run_dir = work / f"binlogd-{n}"
            run_dir.mkdir()
            seconds, lines = run_binlogd(srv, run_dir, ns.chunk_rows, ns.profile if n == ns.rounds else None,
                                           dict(kv.split("=", 1) for kv in ns.set), work / "pycache")
            runs.append(seconds)
            log(f"round {n}: binlogd initial snapshot: {seconds:.3f}s ({lines} lines)")
            if ns.log and n == ns.rounds:
                sys.stderr.write((run_dir / "binlogd.log").read_text())
            shutil.rmtree(run_dir)
            if lines != ns.rows:
                log(f"binlogd wrote {lines} lines for {ns.rows} rows")
                return 1
            if ns.compare:
                other_dir = work / f"compare-{n}"
                other_dir.mkdir()
                seconds, lines = run_binlogd(srv, other_dir, ns.chunk_rows, None,
                                             dict(kv.split("=", 1) for kv in ns.set), work / "pycache-compare",
                                             ns.compare)
                shutil.rmtree(other_dir)
                others.append(seconds)
                log(f"round {n}: binlogd (compare) initial snapshot: {seconds:.3f}s ({lines} lines)")
                if lines != ns.rows:
                    log(f"binlogd (compare) wrote {lines} lines for {ns.rows} rows")
                    return 1
    t_dump, t_bd = min(dumps), min(runs)
    ratio = t_dump / t_bd
    figures = {"server": srv.version, "table": ns.table, "dump_tool": Path(tool[-1]).name, "rows": ns.rows,
               "chunk_rows": ns.chunk_rows, "rounds": ns.rounds, "binlogd_seconds": round(t_bd, 3),
               "mariadb_dump_seconds": round(t_dump, 3), "ratio": round(ratio, 3),
               "binlogd_rows_per_second": round(ns.rows / t_bd), "machine": machine()}
    if ns.compare:
        figures.update(compare=ns.compare, compare_seconds=round(min(others), 3),
                       ratio_to_compare=round(min(others) / t_bd, 3))
    if ns.json:
        print(json.dumps(figures))
    else:
        print(f"{ns.table} table on {srv.flavor} {srv.version}: binlogd snapshot {t_bd:.3f}s "
              f"({ns.rows / t_bd:,.0f} rows/s), {Path(tool[-1]).name} {t_dump:.3f}s: "
              f"ratio {ratio:.2f}x (goal >= 1.0; best of {ns.rounds} round{'s' if ns.rounds > 1 else ''} each)")
        if ns.compare:
            print(f"binlogd (compare: {ns.compare}) {min(others):.3f}s: this tree {min(others) / t_bd:.2f}x as fast")
    return 0


if __name__ == "__main__":
    sys.exit(main())
