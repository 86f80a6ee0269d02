"""Peak memory benchmark (issue 7): one transaction of at least 1 GB of row events.

``python -m bench.memory [--gib 1.0] [--json]``: a throwaway MariaDB; ``binlogd run`` (a
subprocess, JSON-lines sink with fsync) and, in the same run, a python-mysql-replication reader
(a subprocess) both follow the server while one INSERT … SELECT writes about ``--gib`` GiB of
rows in a single transaction. Each process's peak RSS (VmHWM) is read when it has seen the whole
transaction. binlogd never holds a transaction in memory: rows stream into the sink's staging tail
(the uncommitted end of the current file) and the commit is an fsync plus a checkpoint, so its
peak should stay flat however large the transaction is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decode import log, machine
from binlogd.cli.localserver import LocalServer

_ROW = 1000  # bytes of payload per row

_PEER = r"""
import sys
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent
port, want = int(sys.argv[1]), int(sys.argv[2])
stream = BinLogStreamReader(connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "passwd": ""},
                            server_id=4244, only_events=[WriteRowsEvent], resume_stream=True, blocking=True)
seen = 0
for event in stream:
    seen += sum(1 for row in event.rows if row["values"])
    if seen >= want:
        break
print(open("/proc/self/status").read().split("VmHWM:")[1].split()[0], flush=True)
"""


def vmhwm_kib(pid: int) -> int:
    """The peak RSS of process ``pid`` in KiB (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def change_lines(directory: Path) -> int:
    """The change events in the JSON-lines sink's files in ``directory``, read 1 MiB at a time."""
    lines = 0
    for path in directory.glob("changes-*.jsonl"):
        with open(path, "rb") as fh:
            lines += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = int(args.gib * (1 << 30) / _ROW)
    with LocalServer(extra_args=["--binlog-row-metadata=FULL", "--max-binlog-size=1073741824"]) as srv, \
            tempfile.TemporaryDirectory(prefix="binlogd-memory-") as tmp:
        work = Path(tmp)
        srv.sql("CREATE DATABASE m")
        srv.sql(f"CREATE TABLE m.t (id INT PRIMARY KEY, v VARCHAR({_ROW}))")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "binlogd.cli", "run", "--set", f"source.port={srv.port}",
             "--set", "source.user=repl", "--set", "source.password=replpass",
             "--set", f"checkpoint.path={work}/cp.json", "--set", f"sink.path={work}/out",
             "--set", "metrics.listen="], stderr=subprocess.PIPE, text=True)
        peer = subprocess.Popen([sys.executable, "-c", _PEER, str(srv.port), str(rows)], stdout=subprocess.PIPE,
                                text=True)
        try:
            time.sleep(2)  # both are streaming from the current end
            log(f"one transaction of {rows} rows x {_ROW} bytes ...")
            t0 = time.monotonic()
            srv.sql(f"INSERT INTO m.t SELECT seq, REPEAT('r', {_ROW}) FROM seq_1_to_{rows}", database="m")
            log(f"committed after {time.monotonic() - t0:.1f}s; waiting for both readers ...")
            binlog_bytes = sum(p.stat().st_size for p in srv.binlog_files())
            deadline = time.monotonic() + 1800
            while change_lines(work / "out") < rows:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"binlogd stopped or timed out: {daemon.stderr.read()[-2000:]}")
                time.sleep(0.5)
            ours = vmhwm_kib(daemon.pid)
            theirs = int(peer.communicate(timeout=1800)[0].strip())
        finally:
            daemon.terminate()
            daemon.wait(30)
            peer.kill()
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "rows": rows,
              "binlog_bytes": binlog_bytes, "peak_rss_mib": {"binlogd": ours / 1024,
                                                            "python-mysql-replication": theirs / 1024}}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"memory benchmark, {result['date']}, {result['machine']['cpu']} ({result['machine']['cores']} cores)")
    print(f"  one transaction: {rows} rows, {binlog_bytes / 1e9:.2f} GB of binlog")
    for name, mib in result["peak_rss_mib"].items():
        print(f"  {name:<26} peak RSS {mib:8.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
