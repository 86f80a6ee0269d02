"""Takeover time of ``[ha] mode = "lease"``: from the active's SIGKILL to the standby's first commit.

``python -m bench.ha [--lease 5] [--rounds 3] [--kinds redis,nats,postgres] [--json]``:

1. starts a throwaway MariaDB (:func:`tests.support.faults.local_server`) and, per kind, a private broker
   (:mod:`tests.support.brokers`);
2. per round: two ``binlogd run`` with the lease (``ha.lease_seconds`` = ``--lease``), each with its own checkpoint;
   once the first streams and the second stands by, one row is committed and seen in the broker, then the active is
   SIGKILLed and at once another row is committed on the primary;
3. measures, from the SIGKILL: the standby's "is the active instance now" line (*took*), and the second row in the
   broker (*first commit*: the new active resumed from the broker's position and committed);
4. prints each round and the worst per kind against the goal, ``lease + 1 s``; exits 1 if a round misses it.

A lease is renewed three times per ``lease_seconds``, so the active's death is noticed between 2/3 and 1 lease after
its last renewal; the standby polls every 0.5 s at most (a fifth of the lease when shorter).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("redis", "nats", "postgres")
ACTIVE = r"ha: \S+ is the active instance now"
SCHEMA = "ha_bench"


def _ids(kind: str, url: str) -> set[int]:
    from tests.support.busread import read_bus
    from tests.support.hasupport import read_nats_changes

    changes = read_nats_changes(url) if kind == "nats" else read_bus(kind, url)
    return {c["after"]["id"] for c in changes if c.get("schema") == SCHEMA and c.get("op") == "insert"}


def _wait_row(kind: str, url: str, row: int, timeout: float = 60.0) -> float:
    """Poll the broker until it holds the insert of ``row``; returns the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if row in _ids(kind, url):
                return time.monotonic()
        except Exception:  # noqa: BLE001 (the stream or table may not exist yet)
            pass
        time.sleep(0.02)
    raise SystemExit(f"{kind}: row {row} never reached the broker")


def one_round(srv, kind: str, broker, lease: float, work: Path, row: int) -> dict:
    """Two instances, a SIGKILL of the active: the seconds to the standby's "active" line and to its first commit."""
    from tests.support.daemon import DaemonProcess, base_overrides

    def instance(name: str) -> DaemonProcess:
        (work / name).mkdir(parents=True, exist_ok=True)
        return DaemonProcess(base_overrides(srv, work / name, **{
            "source.start": "current", "filters.include_schemas": SCHEMA, "sink.kind": kind,
            f"sink.{kind}.url": broker.url, "ha.mode": "lease", "ha.lease_seconds": str(lease), "ha.name": name}))

    a = instance("a")
    a.wait_streaming(timeout=60)
    b = instance("b")
    b.wait_for_line(r"ha: b stands by", timeout=60)
    try:
        srv.sql(f"INSERT INTO {SCHEMA}.t VALUES ({row})")
        _wait_row(kind, broker.url, row)
        time.sleep(lease / 2)  # a renewal in between, like any moment of a running active
        os.kill(a.pid, signal.SIGKILL)
        killed = time.monotonic()
        srv.sql(f"INSERT INTO {SCHEMA}.t VALUES ({row + 1})")
        b.wait_for_line(ACTIVE, timeout=60)
        took = time.monotonic() - killed
        first = _wait_row(kind, broker.url, row + 1) - killed
        return {"kind": kind, "lease": lease, "took": round(took, 3), "first_commit": round(first, 3)}
    finally:
        a.kill()
        b.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ha", description=__doc__.splitlines()[0])
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from tests.support.brokers import KINDS as BROKERS
    from tests.support.faults import local_server

    results, missed = [], 0
    with local_server() as srv, tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        srv.sql(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
        srv.sql(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.t (id INT PRIMARY KEY)")
        row = 0
        for kind in args.kinds.split(","):
            with BROKERS[kind]() as broker:
                for n in range(args.rounds):
                    row += 10
                    result = one_round(srv, kind, broker, args.lease, Path(tmp) / f"{kind}-{n}", row)
                    missed += result["first_commit"] > args.lease + 1
                    results.append(result)
                    if not args.json:
                        print(f"{kind:9} round {n + 1}: active after {result['took']:.2f}s, first commit after "
                              f"{result['first_commit']:.2f}s (goal {args.lease + 1:g}s)", flush=True)
    if args.json:
        print(json.dumps(results))
    else:
        for kind in args.kinds.split(","):
            worst = max(r["first_commit"] for r in results if r["kind"] == kind)
            print(f"{kind:9} worst first commit {worst:.2f}s after the SIGKILL, lease {args.lease:g}s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
