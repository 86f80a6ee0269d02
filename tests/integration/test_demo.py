"""README's demo command: a throwaway server, a trickle of writes, the daemon's change events on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support import processes

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


def _press_ctrl_c_twice() -> str:
    """Run the demo, press Ctrl-C twice 10 ms apart once it streams; its stderr. Asserts a prompt exit
    (130: the second one exits at once), no traceback, and nothing of its process group left."""
    proc = processes.spawn("demo", "--rate", "20")
    stderr = processes.Stderr(proc)
    try:
        stderr.wait_for("streaming from", timeout=120)
        assert any("mariadbd" in p or "mysqld" in p for p in processes.group_members(proc.pid)), "no server?"
        processes.ctrl_c(proc)
        time.sleep(0.01)
        processes.ctrl_c(proc)
        rc = proc.wait(60)
        text = stderr.close()
        assert rc == 130 and "Traceback" not in text, text
        assert processes.wait_group_gone(proc.pid) == [], "left running after the demo exited"
        return text
    finally:
        proc.kill()
        processes.kill_group(proc.pid)


def test_demo_two_ctrl_c_exit_and_stop_the_server():
    """Ctrl-C twice (issue 13: it printed "second SIGINT: exiting now", then hung with the server up).
    The second press usually lands while the daemon stops (the case that hung); when the first one
    has already finished the demo, it lands in the exit instead, so up to three tries show the first."""
    for _ in range(3):
        if "second SIGINT: exiting now" in _press_ctrl_c_twice():
            return
    raise AssertionError("the second Ctrl-C never landed while the daemon was stopping")
