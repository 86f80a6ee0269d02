"""The process of one measurement of :mod:`bench.compare`, in either tree.

bench.compare runs this file by path (``python -c`` + runpy, cwd and PYTHONPATH at the tree measured), so
it imports nothing at the top but the standard library, and each tree's own ``bench`` modules inside the
measurements: ``python -c BOOT compare_child.py --child SPEC``. The result is the JSON on the line that
starts with :data:`MARK`, with the files of the modules of ours the process imported.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import tempfile
import time
from pathlib import Path

MARK = "@@bench.compare "
OURS = ("binlogd", "protocol", "library", "daemon", "pipeline", "cli", "bench")  # top-level names of either tree


class _Server:
    """What the bench modules use of LocalServer, for the server the parent started."""

    def __init__(self, info: dict):
        self.__dict__.update(info)

    def connect(self, *, repl: bool = False, **kw):
        import pymysql

        kw.setdefault("autocommit", True)
        return pymysql.connect(host=self.host, port=self.port, user=self.repl_user if repl else self.user,
                               password=self.repl_password if repl else self.password, **kw)

    def sql(self, statement: str, *, database: str | None = None, timeout: float = 60.0) -> list[tuple]:
        with self.connect(database=database) as conn, conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())

    def binlog_files(self) -> list[Path]:
        return [Path(p) for p in self.files]


def _child_probe(spec: dict) -> dict:
    import importlib
    import importlib.util

    proto = spec["prefix"] + "protocol"
    rowcodec = importlib.import_module(proto + ".rowcodec")
    importlib.import_module(spec["prefix"] + "daemon.service")
    importlib.import_module("binlogd.cli")
    found = [n for n in ("_rowimage", "_skim") if importlib.util.find_spec(f"{proto}.{n}")]
    return {"c_extensions": found, "row_speedups": rowcodec.speedups_enabled()}


def _best(n: int, fn, *args):
    """(best wall seconds of ``n`` calls, best CPU seconds of this process, the last call's result)."""
    best, cpu, result = math.inf, math.inf, None
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn(*args)
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, cpu, result


def _child_decode(spec: dict) -> dict:
    from bench.decode import run_binlogd

    seconds, cpu, (changes, values) = _best(spec["inner"], run_binlogd, [Path(p) for p in spec["files"]])
    return {"seconds": seconds, "cpu": cpu, "changes": changes, "values": values}


def _child_raw(spec: dict) -> dict:
    from bench import raw

    raw._server_ids = itertools.count(spec["server_id"])  # a new replica id per run (the parent's id x 100)
    srv, target = _Server(spec["server"]), tuple(spec["target"])
    out = {"durable": [], "no_fsync": [], "durable_cpu": [], "no_fsync_cpu": [], "dirs": []}
    for _ in range(spec["inner"]):
        for key, fsync in (("durable", True), ("no_fsync", False)):
            c0 = time.process_time()
            seconds, path = raw.run_binlogd(srv, target, fsync=fsync)
            out[key + "_cpu"].append(time.process_time() - c0)
            out[key].append(seconds)
            out["dirs"].append(str(path))
    return out


def _child_info(spec: dict) -> dict:
    from binlogd.cli import filetools

    filetools.info(spec["file"])
    return {"seconds": _best(spec["calls"], filetools.info, spec["file"])[0]}


def _child_latency(spec: dict) -> dict:
    from bench import latency

    args = argparse.Namespace(rate=spec["rate"], seconds=spec["seconds"])
    with tempfile.TemporaryDirectory(prefix="binlogd-compare-latency-") as tmp:
        return latency._run(_Server(spec["server"]), args, Path(tmp))


_CHILDREN = {"probe": _child_probe, "decode": _child_decode, "raw": _child_raw, "info": _child_info,
             "latency": _child_latency}


def child_main(spec: dict) -> None:
    out = _CHILDREN[spec["kind"]](spec)
    out["modules"] = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())
                      if n.split(".")[0] in OURS}
    print(MARK + json.dumps(out), flush=True)


if __name__ == "__main__":
    child_main(json.loads(sys.argv[2]))
