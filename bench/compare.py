"""Before and after (issue 13): the same workloads against a reference commit and this tree, in one run.

``python -m bench.compare [--ref 8439772] [--repeat 3] [--benches decode,raw,cdc,info,latency,memory] [--json]``

The reference commit is checked out into a temporary git worktree and its C extensions are built there
in place by its own setup.py. Every workload then runs against both trees, each run in a process of
its own (bench/compare_child.py, or ``binlogd`` itself): *before* with cwd and PYTHONPATH at the
worktree (its top-level ``protocol``, ``daemon``, ``binlogd`` and ``bench`` import from there, and its
own bench functions run), *current* at this tree (``binlogd.*`` as installed). Each process reports the
files of the modules of ours it imported; one from the other tree stops the run, as does a tree whose
row images would decode without C. The rounds interleave (every workload once per side per round, the
side that goes first alternating); each figure is the best over the rounds, shown with its range and
the ratio current/before, and every figure worse than before by more than 5% is marked (exit status 1).
bench/README.md ("compare") lists the workloads: decode rows/s, raw archive MB/s, ``binlogd run``
rows/s, ``binlogd info``, latency, peak RSS.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cdc import file_key
from bench.compare_child import MARK, OURS
from bench.memory import change_lines, vmhwm_kib

DEFAULT_REF = "8439772"
BENCHES = ("decode", "raw", "cdc", "info", "latency", "memory")
TOLERANCE = 0.05
_BOOT = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"

# key: (label, unit, higher is better)
METRICS = {
    "decode": ("decode: dump_events, every row", "rows/s", True),
    "decode_cpu": ("decode, CPU time", "s", False),
    "raw_durable": ("raw archive, durable", "MB/s", True),
    "raw_durable_cpu": ("raw durable, CPU time", "s", False),
    "raw_nofsync": ("raw archive, no fsync", "MB/s", True),
    "raw_nofsync_cpu": ("raw no fsync, CPU time", "s", False),
    "cdc": ("binlogd run, JSON lines, durable", "rows/s", True),
    "cdc_cpu": ("binlogd run, CPU time of the process", "s", False),
    "info_start": ("binlogd info FILE, a process", "ms", False),
    "info_start_cpu": ("binlogd info, CPU time", "ms", False),
    "info_call": ("filetools.info, in process", "ms", False),
    "lat_p50": ("latency readable p50", "ms", False),
    "lat_p99": ("latency readable p99", "ms", False),
    "lat_durable_p50": ("latency durable p50", "ms", False),
    "lat_durable_p99": ("latency durable p99", "ms", False),
    "peer_p50": ("(control) peer latency p50", "ms", False),
    "peer_p99": ("(control) peer latency p99", "ms", False),
    "rss": ("peak RSS, one big transaction", "MiB", False),
}
CONTROLS = ("peer_p50", "peer_p99")  # the same code on both sides: its ratio is the noise, never a regression


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- pure helpers


@dataclass
class Side:
    """One tree under test: where it is, what it is, and how a process of it starts."""

    name: str        # "before" or "current"
    root: Path
    commit: str
    prefix: str      # "" before issue 13 (top-level protocol, daemon), "binlogd." since
    env: dict


def side_env(base: dict, root: Path, extra: dict | None = None) -> dict:
    """``base`` without ``BINLOGD_*`` variables, PYTHONPATH at ``root`` only, then ``extra``."""
    env = {k: v for k, v in base.items() if not k.startswith("BINLOGD_")}
    env["PYTHONPATH"] = str(root)
    env.update(extra or {})
    return env


def foreign_modules(root: Path, modules: dict) -> list[str]:
    """Names in ``modules`` (name -> file or None) of our top-level packages whose file is not under ``root``."""
    root = Path(root).resolve()
    return [f"{name} ({file})" for name, file in sorted(modules.items())
            if name.split(".")[0] in OURS and file and not Path(file).resolve().is_relative_to(root)]


def round_order(sides: list, index: int) -> list:
    """The sides in the order round ``index`` runs them: the first side goes first in even rounds."""
    return list(sides) if index % 2 == 0 else list(reversed(sides))


def parse_benches(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown bench {unknown} (choose from {','.join(BENCHES)})")
    return [b for b in BENCHES if b in names]


def summarise(values: list[float], higher: bool) -> dict:
    """Best (max when higher is better, else min) and range."""
    return {"best": max(values) if higher else min(values), "min": min(values), "max": max(values),
            "n": len(values)}


def compare_figure(before: list[float], current: list[float], higher: bool, tolerance: float = TOLERANCE) -> dict:
    """Both sides' summaries, ratio current/before of the bests, and whether current is worse than ``tolerance``."""
    b, c = summarise(before, higher), summarise(current, higher)
    ratio = c["best"] / b["best"] if b["best"] else math.inf
    worse = ratio < 1 - tolerance if higher else ratio > 1 + tolerance
    return {"before": b, "current": c, "ratio": ratio, "worse": worse}


def fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def format_table(figures: dict) -> list[str]:
    """One line per figure: label, unit, before best (range), current best (range), ratio, mark."""
    rows = [("figure", "unit", "before: best (range)", "current: best (range)", "current/before", "")]
    for key, f in figures.items():
        label, unit, higher = METRICS[key]
        cells = [f"{fmt(s['best'])} ({fmt(s['min'])}-{fmt(s['max'])})" for s in (f["before"], f["current"])]
        better = "higher is better" if higher else "lower is better"
        mark = ("5% apart: noise" if key in CONTROLS else "WORSE by more than 5%") if f["worse"] else ""
        rows.append((label, unit, *cells, f"{f['ratio']:.3f}x", f"{better}; {mark}" if mark else better))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]


# --------------------------------------------------------------------------- the parent: processes of each side


def child_command(spec: dict) -> list[str]:
    """compare_child.py run by path (never imported from either tree's ``bench``) with one JSON spec."""
    return [sys.executable, "-c", _BOOT, str(Path(__file__).with_name("compare_child.py").resolve()), "--child",
            json.dumps(spec)]


def run_child(side: Side, spec: dict, timeout: float = 1800) -> dict:
    spec = {**spec, "prefix": side.prefix}
    proc = subprocess.run(child_command(spec), cwd=side.root, env=side.env, capture_output=True, text=True,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"{side.name}: {spec['kind']} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(lines[-1][len(MARK):])
    bad = foreign_modules(side.root, out.pop("modules"))
    if bad:
        raise SystemExit(f"{side.name}: {spec['kind']} imported modules from outside {side.root}: {bad[:10]}")
    return out


def _cli(*args: str, sets: dict | None = None) -> list[str]:
    return [sys.executable, "-m", "binlogd.cli", *args, *[a for kv in (sets or {}).items()
                                                          for a in ("--set", "=".join(kv))]]


def _checkpoint_position(path: Path) -> tuple[int, int] | None:
    try:
        pos = json.loads(path.read_bytes())["position"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    return file_key(pos["file"]), int(pos["pos"])


def _source_sets(srv, server_id: int, workdir: Path) -> dict:
    return {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "source.server_id": str(server_id),
            "checkpoint.path": str(workdir / "checkpoint.json"), "sink.kind": "jsonl",
            "sink.path": str(workdir / "changes"), "metrics.listen": ""}


def _children_cpu() -> float:
    """CPU seconds of this process's children that have been waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_cdc(side: Side, srv, first: str, target: str, server_id: int) -> tuple[float, float, int]:
    """``binlogd run`` from ``first``:4 until its checkpoint reaches ``target``; (seconds, CPU seconds of the
    process from its start to its exit, change lines)."""
    with tempfile.TemporaryDirectory(prefix="binlogd-compare-cdc-") as tmp:
        work = Path(tmp)
        sets = {**_source_sets(srv, server_id, work), "source.start": f"file:{first}:4"}
        done = (file_key(target), 0)
        with open(work / "binlogd.log", "w+") as errlog:
            t0, c0 = time.perf_counter(), _children_cpu()
            proc = subprocess.Popen(_cli("run", sets=sets), cwd=side.root, env=side.env, stdout=subprocess.DEVNULL,
                                    stderr=errlog)
            try:
                while (pos := _checkpoint_position(work / "checkpoint.json")) is None or pos < done:
                    if proc.poll() is not None or time.perf_counter() - t0 > 600:
                        errlog.seek(0)
                        raise SystemExit(f"{side.name}: binlogd run did not catch up (exit {proc.poll()}): "
                                         f"{errlog.read()[-3000:]}")
                    time.sleep(0.001)
                elapsed = time.perf_counter() - t0
            finally:
                proc.terminate()
                proc.wait(60)
        return elapsed, _children_cpu() - c0, change_lines(work / "changes")


def run_process(side: Side, cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``cmd`` as a process of ``side``."""
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run(cmd, cwd=side.root, env=side.env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, _children_cpu() - c0


def run_memory(sides: list[Side], gib: float, server_ids) -> dict:
    """Both trees' ``binlogd run`` follow one server while one INSERT … SELECT writes about ``gib`` GiB of
    rows in a single transaction; {side: peak RSS in MiB} once each checkpoint is past it."""
    from binlogd.cli.localserver import LocalServer

    rows, row_bytes = int(gib * (1 << 30) / 1000), 1000
    with LocalServer(extra_args=["--binlog-row-metadata=FULL", "--max-binlog-size=1073741824"]) as srv, \
            tempfile.TemporaryDirectory(prefix="binlogd-compare-memory-") as tmp:
        srv.sql("CREATE DATABASE m")
        srv.sql(f"CREATE TABLE m.t (id INT PRIMARY KEY, v VARCHAR({row_bytes}))")
        procs = {}
        try:
            for side in sides:
                work = Path(tmp) / side.name
                work.mkdir()
                procs[side.name] = (work, subprocess.Popen(
                    _cli("run", sets=_source_sets(srv, next(server_ids), work)), cwd=side.root, env=side.env,
                    stdout=subprocess.DEVNULL, stderr=open(work / "binlogd.log", "w")))
            _wait_streaming(procs, lambda work: (work / "checkpoint.json").exists())  # its first checkpoint
            srv.sql("INSERT INTO m.t VALUES (0, 'both daemons are streaming')")
            _wait_streaming(procs, lambda work: change_lines(work / "changes") >= 1)
            log(f"    one transaction of {rows} rows x {row_bytes} bytes ...")
            srv.sql(f"INSERT INTO m.t SELECT seq, REPEAT('r', {row_bytes}) FROM seq_1_to_{rows}", database="m",
                    timeout=3600)
            file, pos = srv.sql("SHOW MASTER STATUS")[0][:2]
            end = (file_key(file), int(pos))
            _wait_streaming(procs, lambda work: (_checkpoint_position(work / "checkpoint.json") or (0, 0)) >= end,
                            timeout=3600)
            peaks = {name: vmhwm_kib(proc.pid) / 1024 for name, (_, proc) in procs.items()}
            for name, (work, _) in procs.items():
                if (n := change_lines(work / "changes")) != rows + 1:
                    raise SystemExit(f"{name}: {n} change lines, expected {rows + 1}")
        finally:
            for _, proc in procs.values():
                proc.terminate()
                proc.wait(60)
        return {"peaks": peaks, "rows": rows, "binlog_bytes": sum(p.stat().st_size for p in srv.binlog_files())}


def _wait_streaming(procs: dict, ready, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for name, (work, proc) in procs.items():
        while not ready(work):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name}: binlogd run stopped or timed out: "
                                 f"{(work / 'binlogd.log').read_text()[-3000:]}")
            time.sleep(0.05)


# --------------------------------------------------------------------------- the rounds


class Run:
    """The samples of one comparison: ``samples[metric][side name]`` is one value per round."""

    def __init__(self, sides: list[Side], args):
        self.sides, self.args = sides, args
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.loads: list[float] = []
        self.ids = itertools.count(1001)  # replica server ids: a new one for every daemon of the run
        self.notes: dict = {}
        self.failures: list[str] = []

    def add(self, metric: str, side: Side, value: float) -> None:
        self.samples.setdefault(metric, {s.name: [] for s in self.sides})[side.name].append(value)

    def attempt(self, what: str, fn, *args) -> None:
        """``fn(*args)``, once more if it fails; a second failure is recorded and reported, not raised."""
        for n in (1, 2):
            try:
                return fn(*args)
            except (SystemExit, RuntimeError, OSError, subprocess.SubprocessError) as exc:
                why = str(exc).strip()[-1500:]
                log(f"  {what} failed{' again' if n == 2 else ', once more'}: {why}")
        self.failures.append(f"{what}: {why.splitlines()[-1] if why else '?'}")

    def load(self) -> None:
        self.loads.append(os.getloadavg()[0])

    def figures(self) -> dict:
        return {k: compare_figure(self.samples[k]["before"], self.samples[k]["current"], METRICS[k][2])
                for k in METRICS if k in self.samples}


def _server_info(srv, files: list[Path]) -> dict:
    return {"host": srv.host, "port": srv.port, "user": srv.user, "password": srv.password,
            "repl_user": srv.repl_user, "repl_password": srv.repl_password, "files": [str(p) for p in files]}


def workload_group(run: Run, benches: list[str]) -> None:
    """decode, raw, cdc and info, on one server holding the decode workload."""
    from bench.decode import SERVER_ARGS, write_workload
    from bench.raw import _check_identical
    from binlogd.cli.localserver import LocalServer

    args = run.args
    with LocalServer(extra_args=SERVER_ARGS) as srv:
        log(f"server {srv.flavor} {srv.version}; writing the decode workload ({args.rows} inserts) ...")
        with srv.connect() as conn:
            expected = write_workload(conn, args.rows)
        files = srv.binlog_files()
        closed, total = files[:-1], sum(expected.values())
        size = sum(p.stat().st_size for p in closed)
        run.notes.update(server=f"{srv.flavor} {srv.version}", workload={**expected, "row_changes": total,
                                                                         "binlog_bytes": size})
        server = _server_info(srv, files)
        if "info" in benches:
            for side in run.sides:  # the bytecode of what `binlogd info` imports, compiled once
                run_process(side, _cli("info", str(files[0])))
        def measure(bench: str, side: Side) -> None:
            if bench == "decode":
                out = run_child(side, {"kind": "decode", "files": [str(p) for p in files], "inner": args.inner})
                if out["changes"] != total:
                    raise SystemExit(f"decode saw {out['changes']} row changes, not {total}")
                run.add("decode", side, total / out["seconds"])
                run.add("decode_cpu", side, out["cpu"])
            elif bench == "raw":
                out = run_child(side, {"kind": "raw", "server": server, "target": [files[-1].name, 4],
                                       "inner": args.inner, "server_id": 100 * next(run.ids)})
                for d in out["dirs"]:
                    _check_identical(srv, Path(d), closed, side.name)
                    shutil.rmtree(d, ignore_errors=True)
                for key, name in (("durable", "raw_durable"), ("no_fsync", "raw_nofsync")):
                    run.add(name, side, size / min(out[key]) / 1e6)
                    run.add(name + "_cpu", side, min(out[key + "_cpu"]))
            elif bench == "cdc":
                seconds, cpu, lines = run_cdc(side, srv, files[0].name, files[-1].name, next(run.ids))
                if lines != total:
                    raise SystemExit(f"binlogd run wrote {lines} change lines, not {total}")
                run.add("cdc", side, total / seconds)
                run.add("cdc_cpu", side, cpu)
            elif bench == "info":
                out = run_child(side, {"kind": "info", "file": str(files[0]), "calls": 200})
                run.add("info_call", side, out["seconds"] * 1e3)

        for r in range(args.repeat):
            run.load()
            for bench in benches:
                for side in round_order(run.sides, r):
                    run.attempt(f"{bench}, {side.name}, round {r + 1}", measure, bench, side)
                if bench == "info":
                    starts: dict[str, list[tuple]] = {s.name: [] for s in run.sides}
                    for i in range(args.starts):
                        for side in round_order(run.sides, r + i):
                            starts[side.name].append(run_process(side, _cli("info", str(files[0]))))
                    for side in run.sides:
                        run.add("info_start", side, min(w for w, _ in starts[side.name]) * 1e3)
                        run.add("info_start_cpu", side, min(c for _, c in starts[side.name]) * 1e3)
            run.load()
            log(f"  round {r + 1}/{args.repeat} done ({', '.join(benches)}); load average {run.loads[-1]:.1f}")


def latency_group(run: Run) -> None:
    from binlogd.cli.localserver import LocalServer

    args = run.args
    with LocalServer(extra_args=["--binlog-row-metadata=FULL"]) as srv:
        server = _server_info(srv, [])

        def measure(side: Side) -> None:
            srv.sql("DROP DATABASE IF EXISTS l")
            srv.sql("CREATE DATABASE l")
            srv.sql("CREATE TABLE l.t (id BIGINT PRIMARY KEY, v VARCHAR(16))")
            out = run_child(side, {"kind": "latency", "server": server, "rate": args.rate, "seconds": args.seconds})
            for key, who in (("lat", "binlogd"), ("lat_durable", "binlogd durable"),
                             ("peer", "python-mysql-replication")):
                run.add(f"{key}_p50", side, out[who]["p50_ms"])
                run.add(f"{key}_p99", side, out[who]["p99_ms"])
            run.notes.setdefault("latency_rate", []).append(round(out["achieved_rate"]))

        for r in range(args.repeat):
            run.load()
            for side in round_order(run.sides, r):
                run.attempt(f"latency, {side.name}, round {r + 1}", measure, side)
            run.load()
            log(f"  round {r + 1}/{args.repeat} done (latency); load average {run.loads[-1]:.1f}")


# --------------------------------------------------------------------------- setting up the two trees


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def build_extensions(root: Path, env: dict) -> None:
    """The tree's own setup.py builds its C extensions in place (they are optional there: a failed build
    shows in the probe, which then stops the run)."""
    if not (root / "setup.py").exists():
        log(f"{root}: no setup.py, nothing to build")
        return
    with open(root / "build_ext.log", "w") as out:
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root, env=env, stdout=out,
                       stderr=subprocess.STDOUT, check=True)


def make_sides(repo: Path, ref_root: Path, ref: str, schema_source: str) -> list[Side]:
    from bench.decode import bytecode_env

    base = bytecode_env()
    stray = sorted(k for k in os.environ if k.startswith("BINLOGD_"))
    if stray:
        log(f"note: {stray} left out of both sides' environment")
    before = Side("before", ref_root, _git(repo, "rev-parse", "--short", f"{ref}^{{commit}}"), "",
                  side_env(base, ref_root))
    head = _git(repo, "rev-parse", "--short", "HEAD")
    dirty = " with uncommitted changes" if _git(repo, "status", "--porcelain", "--untracked-files=no") else ""
    current = Side("current", repo, head + dirty, "binlogd.",
                   side_env(base, repo, {"BINLOGD_SCHEMA__SOURCE": schema_source}))
    return [before, current]


def report(run: Run, started: dt.datetime) -> dict:
    from bench.decode import machine

    figures = run.figures()
    return {"benchmark": "compare", "date": started.isoformat(timespec="seconds"), "machine": machine(),
            "sides": {s.name: {"commit": s.commit, "root": str(s.root), **run.notes.get(s.name, {})}
                      for s in run.sides},
            "rounds": run.args.repeat, "load_average": [min(run.loads), max(run.loads)] if run.loads else None,
            "schema_source_current": run.args.schema_source,
            "notes": {k: v for k, v in run.notes.items() if k not in ("before", "current")},
            "samples": run.samples, "figures": figures,
            "worse": [k for k, f in figures.items() if f["worse"] and k not in CONTROLS], "failures": run.failures}


def print_report(result: dict) -> None:
    m, sides = result["machine"], result["sides"]
    print(f"bench.compare, {result['date']}, {m['cpu']} ({m['cores']} cores), Python {m['python']}, "
          f"{result['notes'].get('server', 'MariaDB')}")
    for name, side in sides.items():
        print(f"  {name + ':':<9}{side['commit']}  ({side['root']}; C: {', '.join(side['c_extensions']) or 'none'})")
    print(f"  the current daemon's schema.source: {result['schema_source_current']}")
    load = result["load_average"]
    memory = " (memory: one, both daemons at once)" if "rss" in result["figures"] else ""
    print(f"  {result['rounds']} interleaved rounds{memory}, best and range over them; "
          f"load average (1 min) {load[0]:.1f}-{load[1]:.1f}" if load else "")
    for line in format_table(result["figures"]):
        print("  " + line)
    worse = [METRICS[k][0] for k in result["worse"]]
    print(f"  worse than before by more than {TOLERANCE:.0%}: {', '.join(worse) if worse else 'none'}")
    for failure in result["failures"]:
        print(f"  FAILED twice, left out: {failure}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default=DEFAULT_REF, help=f"the commit to compare with (default {DEFAULT_REF})")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--benches", type=parse_benches, default=list(BENCHES),
                    help=f"comma-separated, from {','.join(BENCHES)} (default: all)")
    ap.add_argument("--rows", type=int, default=200_000, help="inserts of the decode workload (default 200000)")
    ap.add_argument("--inner", type=int, default=2, help="decode and raw passes per process, best kept (default 2)")
    ap.add_argument("--starts", type=int, default=10, help="binlogd info processes per side and round (default 10)")
    ap.add_argument("--rate", type=float, default=1000.0, help="latency: transactions/s (default 1000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="latency: seconds per run (default 5)")
    ap.add_argument("--memory-gib", type=float, default=1.0, help="memory: size of the transaction (default 1)")
    ap.add_argument("--schema-source", default="none", choices=("none", "auto", "server"),
                    help="schema.source of the current tree's daemon (default none: the reference has no history)")
    ap.add_argument("--keep-ref", action="store_true", help="keep the reference worktree (its path is printed)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.inner < 1 or args.starts < 1:
        ap.error("--repeat, --inner and --starts must be at least 1")
    repo = Path(__file__).resolve().parents[1]
    started = dt.datetime.now().astimezone()
    tmp = Path(tempfile.mkdtemp(prefix="binlogd-compare-"))
    ref_root = tmp / "ref"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(ref_root), args.ref)
    try:
        sides = make_sides(repo, ref_root, args.ref, args.schema_source)
        log(f"before: {sides[0].commit} in {ref_root}; building its C extensions ...")
        build_extensions(ref_root, sides[0].env)
        run = Run(sides, args)
        for side in sides:
            probe = run_child(side, {"kind": "probe"})
            if not probe["row_speedups"]:
                raise SystemExit(f"{side.name}: row images decode without C ({side.root}); build the extensions")
            run.notes[side.name] = {"c_extensions": probe["c_extensions"]}
        group = [b for b in args.benches if b in ("decode", "raw", "cdc", "info")]
        if group:
            workload_group(run, group)
        if "latency" in args.benches:
            log(f"latency: {args.rate:g} transactions/s for {args.seconds:g} s per run ...")
            latency_group(run)
        if "memory" in args.benches:
            log(f"memory: both daemons follow one {args.memory_gib:g} GiB transaction ...")
            run.load()
            mem = run_memory(sides, args.memory_gib, run.ids)
            run.load()
            for side in sides:
                run.add("rss", side, mem["peaks"][side.name])
            run.notes["memory"] = {"rows": mem["rows"], "binlog_bytes": mem["binlog_bytes"]}
        result = report(run, started)
    finally:
        if args.keep_ref:
            log(f"kept the reference worktree: {ref_root}")
        else:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(ref_root)], check=False)
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 1 if result["worse"] or result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
