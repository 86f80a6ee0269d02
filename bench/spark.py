"""Spark benchmark (issue 4): the "binlog" data source on local[1] and local[2], Arrow batches vs tuples.

``python -m bench.spark [--rows N] [--small-txns N] [--file-mb M] [--repeat R] [--binlogs DIR] [--json]``

1. starts a throwaway MariaDB (:class:`binlogd.cli.localserver.LocalServer`, the settings of
   ``bench.decode`` plus ``--max-binlog-size`` = ``--file-mb``, so the log is split into several
   files) and writes ``bench.decode``'s workload: ``--rows``
   inserts in 500-row transactions into a 10-column table, rows/10 updates, rows/20 deletes; then
   ``--small-txns`` one-row autocommit INSERTs (five events each: many events, few rows);
   ``--binlogs DIR`` reads existing binlog files instead;
2. measures, best of ``--repeat`` after one warm-up run per session, the time to materialise every
   column (``write.format("noop")``) of
   - the ``events`` shape (events/s) and the ``changes`` shape (row changes/s: every row decoded
     and serialised to JSON text), on ``local[1]`` and then on ``local[2]``, in the same process;
   - the same with ``arrow=false`` (the reader yields Python tuples, which PySpark converts to
     Arrow itself) on ``local[2]``;
   - for reference, the same decoding in this process without Spark (``pipeline.decode`` into column
     buffers, one core), and the daemon's decoding of the same files (every event decoded, every rows
     event's ``library.jsonrows.change_lines``: the JSON-lines sink's work, one core), best of
     ``--repeat``;
3. prints events/s, rows/s, the local[2]/local[1] scaling ratios, the Arrow/tuples ratios, the changes
   shape's row changes/s per core against the daemon's (issue 16's goal: at least 0.5x), the machine,
   its load average (other processes share the cores) and the date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from bench.decode import SERVER_ARGS, TXN_ROWS, machine, write_workload

DEFAULT_ROWS = 100_000
DEFAULT_FILE_MB = 8
DEFAULT_SMALL_TXNS = 20_000
STATEMENTS_PER_PACKET = 500


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_small_transactions(srv, count: int) -> None:
    """``count`` one-row autocommit INSERTs (five events each): the events shape's workload."""
    from pymysql.constants import CLIENT

    conn = srv.connect(client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE bench.small (id INT PRIMARY KEY, v VARCHAR(32), n BIGINT) ENGINE=InnoDB")
        for start in range(0, count, STATEMENTS_PER_PACKET):
            stop = min(start + STATEMENTS_PER_PACKET, count)
            cur.execute(";".join(f"INSERT INTO bench.small VALUES ({i}, 'value {i}', {i * 7919})"
                                 for i in range(start, stop)))
            while cur.nextset():
                pass
        cur.execute("FLUSH BINARY LOGS")
    finally:
        conn.close()


def generate(rows: int, small: int, file_mb: int) -> tuple[list[Path], str, Path]:
    """Run the workload on a throwaway MariaDB; copy its binlog files to a temp dir (server stopped)."""
    import shutil
    import tempfile

    from binlogd.cli.localserver import LocalServer

    out = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    args = [*SERVER_ARGS, f"--max-binlog-size={file_mb << 20}", "--innodb-flush-log-at-trx-commit=0",
            "--sync-binlog=0"]
    with LocalServer(extra_args=args) as srv:
        log(f"server: {srv.flavor} {srv.version} on port {srv.port}")
        conn = srv.connect()
        try:
            expected = write_workload(conn, rows)
        finally:
            conn.close()
        write_small_transactions(srv, small)
        expected["small_transactions"] = small
        version = srv.version
        files = []
        for path in srv.binlog_files():
            shutil.copy(path, out / path.name)
            files.append(out / path.name)
    log(f"workload: {expected} in {len(files)} binlog files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")
    return files, version, out


def in_process(files: list[Path], repeat: int) -> dict:
    """The same decoding without Spark (pipeline.decode into column buffers), and the daemon's
    (:func:`daemon_decode`), one core, best of ``repeat`` each, taken in turns."""
    from binlogd.pipeline import decode as D

    def shape(cls) -> dict:
        t0, n = time.perf_counter(), 0
        for path in files:
            for cols in D.read_binlog(str(path), cls(str(path), corrupt_column=True)):
                n += len(cols[0])
        return {"rows": n, "seconds": time.perf_counter() - t0}

    out: dict = {}
    for _ in range(repeat):
        for name, run in (("events", lambda: shape(D.EventRows)), ("changes", lambda: shape(D.ChangeRows)),
                          ("daemon", lambda: daemon_decode(files))):
            got = run()
            if name not in out or got["seconds"] < out[name]["seconds"]:
                out[name] = got
    return out


def daemon_decode(files: list[Path]) -> dict:
    """The daemon's work on the same rows, one core: every rows event's change lines (library.jsonrows)."""
    from binlogd.cli.filetools import dump_events
    from binlogd.library.jsonrows import change_lines
    from binlogd.library.serialize import flatten
    from binlogd.protocol.events import RowsEvent

    t0 = time.perf_counter()
    n = 0
    for path in files:
        for event in dump_events(path):
            for item in flatten(event):
                if isinstance(item, RowsEvent):
                    n += change_lines(item, path.name, None)[1]
    return {"rows": n, "seconds": time.perf_counter() - t0}


def measure(spark, paths: list[str], shape: str, repeat: int, arrow: bool = True) -> float:
    """Best seconds to read every column of the shape (noop sink: nothing is written)."""
    df = (spark.read.format("binlog").option("shape", shape).option("arrow", str(arrow).lower())
          .option("minPartitions", spark.sparkContext.defaultParallelism).load(paths))  # as pipeline.jobs reads
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - t0)
    return best


def run_master(master: str, paths: list[str], repeat: int, tuples: bool, counts: dict) -> dict:
    from binlogd.pipeline.jobs import session

    spark = session(f"bench-spark {master}", master, {"spark.ui.enabled": "false",
                                                      "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.format("binlog").load(paths[:2]).write.format("noop").mode("overwrite").save()  # warm-up
        out = {}
        for shape in ("events", "changes"):
            rows = counts[shape]
            for suffix, arrow in (("", True), ("_tuples", False)) if tuples else (("", True),):
                seconds = measure(spark, paths, shape, repeat, arrow)
                out[shape + suffix] = {"seconds": seconds, "rows": rows, "per_s": rows / seconds}
                log(f"  {master} {shape}{suffix}: {rows} rows in {seconds:.2f}s ({rows / seconds:,.0f}/s)")
            if tuples:  # once, untimed: Spark's row count equals the in-process one
                got = spark.read.format("binlog").option("shape", shape).load(paths).count()
                if got != rows:
                    raise SystemExit(f"ROW COUNT MISMATCH: {shape}: Spark {got}, in process {rows}")
        return out
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                    help=f"rows inserted 500 per transaction, then rows/10 updates, rows/20 deletes "
                         f"(default {DEFAULT_ROWS})")
    ap.add_argument("--small-txns", type=int, default=DEFAULT_SMALL_TXNS,
                    help=f"one-row transactions after them (default {DEFAULT_SMALL_TXNS})")
    ap.add_argument("--file-mb", type=int, default=DEFAULT_FILE_MB,
                    help=f"max binlog file size in MB (default {DEFAULT_FILE_MB})")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement, best reported (default 3)")
    ap.add_argument("--binlogs", type=Path, help="read the binlog files of this directory (no server)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ns = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    started = dt.datetime.now().astimezone()
    server = None
    if ns.binlogs:
        from binlogd.pipeline.paths import expand

        files = [Path(p) for p in expand([str(ns.binlogs.resolve())])]
    else:
        files, server, scratch = generate(ns.rows, ns.small_txns, ns.file_mb)
    paths = [str(p) for p in files]
    nbytes = sum(p.stat().st_size for p in files)
    log(f"reading {len(files)} files, {nbytes / 1e6:.1f} MB")
    log("in process, no Spark ...")
    local = in_process(files, ns.repeat)
    counts = {shape: local[shape]["rows"] for shape in ("events", "changes")}
    load_before = os.getloadavg()
    try:
        log("local[1] ...")
        one = run_master("local[1]", paths, ns.repeat, False, counts)
        log("local[2] ...")
        two = run_master("local[2]", paths, ns.repeat, True, counts)
    finally:
        if not ns.binlogs:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    import pyspark

    result = {
        "benchmark": "spark",
        "date": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "pyspark": pyspark.__version__,
        "server": server,
        "binlog": {"files": len(files), "bytes": nbytes, "txn_rows": TXN_ROWS},
        "in_process": {k: {**v, "per_s": v["rows"] / v["seconds"]} for k, v in local.items()},
        "local[1]": one,
        "local[2]": two,
        "scaling_events": two["events"]["per_s"] / one["events"]["per_s"],
        "scaling_changes": two["changes"]["per_s"] / one["changes"]["per_s"],
        "arrow_vs_tuples_events": two["events"]["per_s"] / two["events_tuples"]["per_s"],
        "arrow_vs_tuples_changes": two["changes"]["per_s"] / two["changes_tuples"]["per_s"],
    }
    daemon = result["in_process"]["daemon"]["per_s"]
    result["changes_per_core_vs_daemon"] = {"local[1]": one["changes"]["per_s"] / daemon,
                                            "local[2]": two["changes"]["per_s"] / 2 / daemon}
    if ns.json:
        print(json.dumps(result, indent=2))
        return 0
    m = result["machine"]
    print(f"spark benchmark, {result['date']}, {m['cpu']} ({m['cores']} cores), Python {m['python']}, "
          f"PySpark {result['pyspark']}, {server or ns.binlogs}")
    print(f"binlog: {len(files)} files, {nbytes / 1e6:.1f} MB; load average before/after "
          f"{result['load_average'][:3]} / {result['load_average'][3:]}; best of {ns.repeat}")
    ip = result["in_process"]
    print(f"  {'':<26}{'events/s':>14}{'row changes/s':>16}")
    print(f"  {'in process (no Spark)':<26}{ip['events']['per_s']:>14,.0f}{ip['changes']['per_s']:>16,.0f}")
    for label, r in (("local[1] Arrow batches", one), ("local[2] Arrow batches", two)):
        print(f"  {label:<26}{r['events']['per_s']:>14,.0f}{r['changes']['per_s']:>16,.0f}")
    print(f"  {'local[2] Python tuples':<26}{two['events_tuples']['per_s']:>14,.0f}"
          f"{two['changes_tuples']['per_s']:>16,.0f}")
    print(f"  scaling local[2]/local[1]: events {result['scaling_events']:.2f}x, "
          f"changes {result['scaling_changes']:.2f}x")
    print(f"  Arrow batches / tuples (local[2]): events {result['arrow_vs_tuples_events']:.2f}x, "
          f"changes {result['arrow_vs_tuples_changes']:.2f}x")
    pc = result["changes_per_core_vs_daemon"]
    print(f"  changes per core / the daemon's decode per core ({daemon:,.0f} row changes/s, change_lines): "
          f"local[1] {pc['local[1]']:.2f}x, local[2] {pc['local[2]']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
