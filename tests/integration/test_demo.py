"""README's demo command: a throwaway server, a trickle of writes, the daemon's change events on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_prints_change_events_and_exits_cleanly():
    proc = subprocess.run([sys.executable, "-m", "binlogd.cli", "demo", "--seconds", "4", "--rate", "10"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    changes = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(changes) >= 10, proc.stderr
    assert {c["op"] for c in changes} >= {"insert", "update"}
    inserts = [c for c in changes if c["op"] == "insert"]
    ids = [c["after"]["id"] for c in inserts]
    assert ids == sorted(ids) and len(ids) == len(set(ids)), "each insert once, in commit order"
    assert all(c["schema"] == "demo" and c["table"] == "orders" for c in changes)
    assert "Traceback" not in proc.stderr and "streaming from" in proc.stderr
