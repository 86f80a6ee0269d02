"""CDC benchmark (issue 16): change events from a backlog, binlogd against its Python peer and the C tool.

``python -m bench.cdc [--rows N] [--repeat 3] [--json] [--profile] [--pure-python]`` is the whole
benchmark in one command:

1. starts a throwaway MariaDB (:class:`binlogd.cli.localserver.LocalServer`, ROW format, FULL row image
   and metadata) and writes the decode benchmark's backlog (:func:`bench.decode.write_workload`:
   ``--rows`` inserts in 500-row transactions into a 10-column table, then rows/10 updates and
   rows/20 deletes, then ``FLUSH BINARY LOGS``);
2. measures, interleaved (one run of each side per round, ``--repeat`` rounds):

   (a) **binlogd**: ``binlogd run`` in its own process, JSON-lines sink, durable (the sink's fsync,
       then the checkpoint), from the first binlog file; timed from the process start until its
       checkpoint reaches the last file (the backlog is durably in the sink);
   (b) **python-mysql-replication**: ``BinLogStreamReader`` streaming the same log over TCP from the
       first file, one ``json.dumps`` object per row change written to a file (no fsync);
   (c) **mariadb-binlog** ``--base64-output=decode-rows -vv``, text to /dev/null, twice: reading the
       server's files from disk, and reading the log from the server (``--read-from-remote-server``)
       as binlogd does;
   (d) **binlogd dump --json** of the server's files to /dev/null (a process of its own), against (c)
       from the files;

3. checks that every side saw the same number of row changes (binlogd: lines in its sink files; an
   update's before/after pair is one change) and exits with status 1 if not;
4. prints rows/s (best and range over the rounds), binlogd / python-mysql-replication, binlogd /
   mariadb-binlog (both of its modes) and binlogd dump --json / mariadb-binlog (files), the machine
   and the date. ``--json``: one JSON object.
   ``--profile`` adds one more binlogd run under cProfile (top 25 by tottime);
   ``--pure-python`` runs binlogd with ``BINLOGD_PURE_PYTHON=1`` (no C speedups);
   ``--compare PYTHON`` also times the ``binlogd run`` of another installation (another commit's
   venv) in the same rounds, as "binlogd (compare)", for before/after figures from one run.
5. ``--changes 230000,575000,2000000`` runs the whole benchmark once per backlog size (row changes; each
   size its own server and rounds) and ends with one table of the ratios by size: whether they hold as the
   backlog grows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import itertools
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import (
    SERVER_ARGS,
    bytecode_env,
    count_mariadb_binlog,
    installed_peer_version,
    log,
    machine,
    mariadb_binlog_cmd,
    write_workload,
)

_server_ids = itertools.count(2001)   # a new replica id per binlogd run (see bench.raw)
PEER_SERVER_ID = 4244


def file_key(name: str) -> int:
    """A binlog file name's numeric suffix (``b.000042`` -> 42)."""
    return int(name.rsplit(".", 1)[1])


def run_binlogd(srv, first_file: str, target: str, workdir: Path, env: dict, schema_source: str = "auto",
                profile: Path | None = None, python: str = sys.executable) -> tuple[float, float, int]:
    """``binlogd run`` (of the installation ``python`` runs) from ``first_file``:4 until its checkpoint
    reaches ``target``.

    Returns (seconds from process start, seconds until the first change line was in the sink,
    change lines written).
    """
    sink, checkpoint = workdir / "changes", workdir / "checkpoint.json"
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "source.start": f"file:{first_file}:4",
            "source.server_id": str(next(_server_ids)), "checkpoint.path": str(checkpoint),
            "sink.kind": "jsonl", "sink.path": str(sink), "metrics.listen": "", "schema.source": schema_source}
    prefix = [python] + (["-m", "cProfile", "-o", str(profile)] if profile else [])
    cmd = prefix + ["-m", "binlogd.cli", "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    errlog = open(workdir / "binlogd.log", "w+")
    first_line, done = None, file_key(target)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog, env=env)
    try:
        while True:
            if first_line is None and any(p.stat().st_size for p in sink.glob("changes-*.jsonl")):
                first_line = time.perf_counter() - t0
            try:
                position = json.loads(checkpoint.read_bytes())["position"]
            except (FileNotFoundError, ValueError):
                position = None
            if position is not None and file_key(position["file"]) >= done:
                elapsed = time.perf_counter() - t0
                break
            if proc.poll() is not None or time.perf_counter() - t0 > 600:
                errlog.seek(0)
                raise SystemExit(f"binlogd did not catch up (exit {proc.poll()}): {errlog.read()[-3000:]}")
            time.sleep(0.001)
    finally:
        proc.terminate()
        proc.wait(60)
        errlog.close()
    lines = 0
    for path in sink.glob("changes-*.jsonl"):
        with open(path, "rb") as fh:
            lines += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    return elapsed, first_line or elapsed, lines


def run_peer(srv, first_file: str, out: Path) -> int:
    """python-mysql-replication streaming the whole log, one JSON object per row change into ``out``."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    settings = {"host": srv.host, "port": srv.port, "user": srv.repl_user, "passwd": srv.repl_password}
    stream = BinLogStreamReader(connection_settings=settings, server_id=PEER_SERVER_ID,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                resume_stream=False, blocking=False, log_file=first_file, log_pos=4)
    ops = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
    changes = 0
    try:
        with open(out, "w") as fh:
            for ev in stream:
                op = ops[type(ev)]
                source = {"server_id": ev.packet.server_id, "file": stream.log_file, "pos": ev.packet.log_pos}
                for index, row in enumerate(ev.rows):
                    if op == "update":
                        before, after = row["before_values"], row["after_values"]
                    else:
                        before, after = (None, row["values"]) if op == "insert" else (row["values"], None)
                    fh.write(json.dumps({"op": op, "schema": ev.schema, "table": ev.table, "before": before,
                                         "after": after, "ts": ev.timestamp, "source": {**source, "row": index}},
                                        default=str) + "\n")
                    changes += 1
    finally:
        stream.close()
    return changes


def run_mariadb_binlog(cmd: list[str]) -> None:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


def dump_cmd(files: list[Path]) -> list[str]:
    return [sys.executable, "-m", "binlogd.cli", "dump", "--json", *map(str, files)]


def count_dump(cmd: list[str], env: dict) -> int:
    """Row changes in ``binlogd dump --json`` output (one untimed run): rows of WRITE/DELETE, pairs of UPDATE."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, env=env).stdout
    return sum(len(json.loads(line).get("rows", ())) for line in out.splitlines() if b'"rows":' in line)


def remote_cmd(srv, first_file: str) -> list[str]:
    exe = mariadb_binlog_cmd([])[0]
    return [exe, "--no-defaults", "--read-from-remote-server", "--host=127.0.0.1", f"--port={srv.port}",
            f"--user={srv.user}", "--to-last-log", "--base64-output=decode-rows", "-vv", first_file]


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - t0, result


def _profile_text(path: Path, top: int = 25) -> str:
    buf = io.StringIO()
    pstats.Stats(str(path), stream=buf).sort_stats("tottime").print_stats(top)
    pstats.Stats(str(path), stream=buf).sort_stats("cumtime").print_stats(top)
    return buf.getvalue()


def _our_folders(python: str) -> list[str]:
    """The folders the ``binlogd`` that ``python`` imports is installed from (whatever its layout)."""
    code = ("import binlogd, binlogd.protocol, binlogd.daemon, os; "
            "print('\\n'.join({os.path.dirname(os.path.dirname(m.__file__)) for m in "
            "(binlogd, binlogd.protocol, binlogd.daemon)}))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cdc", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000,
                    help="inserted rows (default 200000); rows/10 updates and rows/20 deletes follow")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ap.add_argument("--profile", action="store_true", help="one more binlogd run under cProfile (top 25)")
    ap.add_argument("--pure-python", action="store_true", help="binlogd with BINLOGD_PURE_PYTHON=1")
    ap.add_argument("--binlogd-only", action="store_true", help="time binlogd alone (no ratios: for profiling)")
    ap.add_argument("--compare", metavar="PYTHON",
                    help="also time binlogd run of the installation this interpreter runs (another commit's venv)")
    ap.add_argument("--schema-source", default="auto", choices=("auto", "none"),
                    help="binlogd's [schema] source (default auto, binlogd's default; none: no schema history, "
                         "the same output with FULL row metadata, without its seed's scan of the backlog)")
    ap.add_argument("--changes", metavar="N,N,...",
                    help="row changes per backlog, comma-separated (e.g. 230000,575000,2000000): the whole "
                         "benchmark once per size, then the ratios by size (overrides --rows)")
    ns = ap.parse_args(argv)
    if ns.changes:
        return by_size(ns, argv if argv is not None else sys.argv[1:])
    if ns.rows < 20:
        ap.error("--rows must be at least 20")
    peer_version = installed_peer_version()
    if peer_version is None:
        return 2
    from binlogd.cli.localserver import LocalServer

    env = bytecode_env(dict(os.environ, BINLOGD_PURE_PYTHON="1" if ns.pure_python else ""))
    started = dt.datetime.now().astimezone()
    work = Path(tempfile.mkdtemp(prefix="binlogd-cdc-"))
    times: dict[str, list[float]] = {"binlogd": [], "python-mysql-replication": [],
                                     "mariadb-binlog (files)": [], "mariadb-binlog (remote)": [],
                                     "binlogd dump --json": []}
    if ns.compare:
        times["binlogd (compare)"] = []
    counts: dict[str, int] = {}
    first_lines: list[float] = []
    compare_first_lines: list[float] = []
    profile = None
    try:
        with LocalServer(extra_args=SERVER_ARGS) as srv:
            log(f"server: {srv.flavor} {srv.version} on port {srv.port}")
            with srv.connect() as conn:
                expected = write_workload(conn, ns.rows)
            files = srv.binlog_files()
            nbytes = sum(p.stat().st_size for p in files[:-1])
            total = sum(expected.values())
            log(f"backlog: {expected} ({total} row changes), {nbytes / 1e6:.1f} MB in {len(files) - 1} file(s)")
            first, target = files[0].name, files[-1].name
            local, remote, dump = mariadb_binlog_cmd(files[:-1]), remote_cmd(srv, first), dump_cmd(files[:-1])
            for python in filter(None, (sys.executable, ns.compare)):  # bytecode (another commit's tree too)
                subprocess.run([python, "-m", "compileall", "-q", "-x", "/tests?/", *_our_folders(python)],
                               check=True, env=env, stdout=subprocess.DEVNULL)
            for rnd in range(ns.repeat):
                run_dir = work / f"binlogd-{rnd}"
                run_dir.mkdir()
                seconds, first_line, counts["binlogd"] = run_binlogd(srv, first, target, run_dir, env,
                                                                     ns.schema_source)
                shutil.rmtree(run_dir)
                times["binlogd"].append(seconds)
                first_lines.append(first_line)
                if ns.compare:
                    run_dir.mkdir()
                    other, other_first, counts["binlogd (compare)"] = run_binlogd(
                        srv, first, target, run_dir, env, ns.schema_source, python=ns.compare)
                    shutil.rmtree(run_dir)
                    times["binlogd (compare)"].append(other)
                    compare_first_lines.append(other_first)
                if ns.binlogd_only:
                    log(f"round {rnd + 1}: binlogd {seconds:.3f}s, first line after {first_line:.3f}s"
                        + (f"; compare {other:.3f}s, first line after {other_first:.3f}s" if ns.compare else ""))
                    continue
                seconds, counts["python-mysql-replication"] = _timed(run_peer, srv, first, work / "peer.jsonl")
                times["python-mysql-replication"].append(seconds)
                times["mariadb-binlog (files)"].append(_timed(run_mariadb_binlog, local)[0])
                times["mariadb-binlog (remote)"].append(_timed(run_mariadb_binlog, remote)[0])
                times["binlogd dump --json"].append(_timed(subprocess.run, dump, stdout=subprocess.DEVNULL,
                                                           check=True, env=env)[0])
                log(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()))
            if not ns.binlogd_only:
                counts["mariadb-binlog (files)"] = count_mariadb_binlog(local)
                counts["mariadb-binlog (remote)"] = count_mariadb_binlog(remote)
                counts["binlogd dump --json"] = count_dump(dump, env)
            if ns.profile:
                run_dir = work / "profile"
                run_dir.mkdir()
                run_binlogd(srv, first, target, run_dir, env, ns.schema_source, profile=work / "binlogd.prof")
                profile = _profile_text(work / "binlogd.prof")
            server_version = srv.version
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if ns.binlogd_only:
        print(f"binlogd: {counts['binlogd']} change lines, {total / min(times['binlogd']):,.0f} rows/s best, "
              f"first line after {min(first_lines) * 1000:.0f} ms")
        if ns.compare:
            print(f"binlogd (compare: {ns.compare}): {total / min(times['binlogd (compare)']):,.0f} rows/s best, "
                  f"first line after {min(compare_first_lines) * 1000:.0f} ms")
        print(profile or "", file=sys.stderr)
        return 0 if counts["binlogd"] == total else 1
    rates = {k: sorted(total / s for s in v) for k, v in times.items()}
    best = {k: v[-1] for k, v in rates.items()}
    result = {
        "benchmark": "cdc", "date": started.isoformat(timespec="seconds"), "machine": machine(),
        "server": server_version, "peer": f"python-mysql-replication {peer_version}",
        "binlogd_speedups": not ns.pure_python, "binlogd_schema_source": ns.schema_source,
        "workload": {**expected, "row_changes": total, "binlog_bytes": nbytes}, "rounds": ns.repeat,
        "seconds": times, "rows_per_s": {k: {"best": best[k], "min": v[0]} for k, v in rates.items()},
        "binlogd_first_line_seconds": min(first_lines),
        "ratio_binlogd_vs_python_mysql_replication": best["binlogd"] / best["python-mysql-replication"],
        "ratio_binlogd_vs_mariadb_binlog_files": best["binlogd"] / best["mariadb-binlog (files)"],
        "ratio_binlogd_vs_mariadb_binlog_remote": best["binlogd"] / best["mariadb-binlog (remote)"],
        "ratio_dump_json_vs_mariadb_binlog_files": best["binlogd dump --json"] / best["mariadb-binlog (files)"],
        "row_counts": {"expected": total, **counts},
    }
    if ns.compare:
        other = best["binlogd (compare)"]
        result.update(compare=ns.compare, compare_first_line_seconds=min(compare_first_lines),
                      ratio_compare_vs_python_mysql_replication=other / best["python-mysql-replication"],
                      ratio_compare_vs_mariadb_binlog_remote=other / best["mariadb-binlog (remote)"])
    mismatch = len(set(result["row_counts"].values())) != 1
    if ns.json:
        print(json.dumps(result, indent=2))
    else:
        m = result["machine"]
        print(f"cdc benchmark, {result['date']}, {m['cpu']} ({m['cores']} cores), Python {m['python']}, "
              f"{server_version}, load average {os.getloadavg()[0]:.1f}")
        print(f"backlog: {total} row changes ({expected}), {nbytes / 1e6:.1f} MB of binlog; "
              f"{ns.repeat} interleaved rounds; binlogd {'with' if not ns.pure_python else 'without'} C speedups, "
              f"schema.source = {ns.schema_source}")
        modes = {"binlogd": "binlogd run, jsonl sink, durable, from process start",
                 "python-mysql-replication": f"{peer_version}, one json.dumps per row to a file",
                 "mariadb-binlog (files)": "-vv from the files, to /dev/null",
                 "mariadb-binlog (remote)": "-vv --read-from-remote-server, to /dev/null",
                 "binlogd dump --json": "from the files, to /dev/null",
                 "binlogd (compare)": f"binlogd run of {ns.compare}"}
        for name, r in rates.items():
            print(f"  {name:<25} {r[-1]:>10,.0f} rows/s  (range {r[0]:,.0f}-{r[-1]:,.0f}; {modes[name]})")
        print(f"  binlogd's first change line after {result['binlogd_first_line_seconds'] * 1000:.0f} ms"
              + (f" (compare: {result['compare_first_line_seconds'] * 1000:.0f} ms)" if ns.compare else ""))
        print(f"  binlogd / python-mysql-replication:      {result['ratio_binlogd_vs_python_mysql_replication']:.2f}x")
        print(f"  binlogd / mariadb-binlog -vv (files):    {result['ratio_binlogd_vs_mariadb_binlog_files']:.2f}x")
        print(f"  binlogd / mariadb-binlog -vv (remote):   {result['ratio_binlogd_vs_mariadb_binlog_remote']:.2f}x")
        print(f"  binlogd dump --json / mariadb-binlog (files): "
              f"{result['ratio_dump_json_vs_mariadb_binlog_files']:.2f}x")
        if ns.compare:
            print(f"  binlogd (compare) / python-mysql-replication: "
                  f"{result['ratio_compare_vs_python_mysql_replication']:.2f}x, / mariadb-binlog -vv (remote): "
                  f"{result['ratio_compare_vs_mariadb_binlog_remote']:.2f}x")
        print(f"  row changes: {result['row_counts']}")
    if profile:
        print("\ncProfile of one binlogd run (top 25 by tottime):", file=sys.stderr)
        print(profile, file=sys.stderr)
    if mismatch:
        print(f"ROW COUNT MISMATCH: {result['row_counts']}", file=sys.stderr)
        return 1
    return 0


CHANGES_PER_ROW = 1.15   # write_workload: the inserts, then rows/10 updates and rows/20 deletes


def by_size(ns, argv: list[str]) -> int:
    """The benchmark once per size of ``--changes`` (each a child run with ``--rows`` and ``--json``, its
    output on stderr as it goes), then a table of rows/s and ratios by size. Returns 1 when a run failed."""
    sizes = [int(n) for n in ns.changes.split(",")]
    rest = [a for a in argv if not a.startswith("--changes") and a != ns.changes and a != "--json"]
    results = []
    for changes in sizes:
        rows = max(20, round(changes / CHANGES_PER_ROW))
        log(f"--- backlog of about {changes} row changes ({rows} inserted rows)")
        child = subprocess.run([sys.executable, "-m", "bench.cdc", *rest, "--rows", str(rows), "--json"],
                               stdout=subprocess.PIPE, text=True)
        if child.returncode != 0:
            print(f"the run with {rows} rows failed (exit {child.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(child.stdout))
    if ns.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"cdc benchmark by backlog size, {results[0]['date']}, {results[0]['server']}, {ns.repeat} interleaved "
          "rounds per size, best of each")
    print(f"  {'row changes':>12} {'binlogd rows/s':>15} {'/ mariadb-binlog remote':>24} {'/ files':>8} "
          f"{'/ python-mysql-replication':>27}")
    for r in results:
        print(f"  {r['workload']['row_changes']:>12,} {r['rows_per_s']['binlogd']['best']:>15,.0f} "
              f"{r['ratio_binlogd_vs_mariadb_binlog_remote']:>23.2f}x "
              f"{r['ratio_binlogd_vs_mariadb_binlog_files']:>7.2f}x "
              f"{r['ratio_binlogd_vs_python_mysql_replication']:>26.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
