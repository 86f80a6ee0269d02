"""Process groups for tests that press Ctrl-C: a command started in a session of its own (its pid is
its process group id) gets SIGINT as a terminal would send it, to the whole group, throwaway servers
included; afterwards, whatever of the group still runs is listed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The console script's own first step, with a line on stderr once Python itself has started.
STARTED = "interpreter started"
CLI = [sys.executable, "-c",
       f"import sys; print({STARTED!r}, file=sys.stderr, flush=True); from binlogd.cli import main; sys.exit(main())"]


def spawn(*argv: str, env: dict | None = None) -> subprocess.Popen:
    """``binlogd ARGV`` in a session of its own, stderr piped as text, stdout discarded."""
    return subprocess.Popen([*CLI, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, start_new_session=True, env=env)


class Stderr:
    """The stderr lines of ``proc`` (spawned with stderr piped as text), read by a thread as they come."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 60.0) -> None:
        """Until a line contains ``needle``; AssertionError at the deadline or when stderr ends first."""
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.lines):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError(f"no stderr line with {needle!r}; stderr:\n{self.text}")
            time.sleep(0.02)

    def close(self, timeout: float = 10.0) -> str:
        """Wait for the end of stderr (the process exited); the whole text."""
        self._thread.join(timeout)
        return self.text


def ctrl_c(proc: subprocess.Popen) -> None:
    """SIGINT to the process group of ``proc``, as Ctrl-C in a terminal."""
    os.killpg(proc.pid, signal.SIGINT)


def group_members(pgid: int) -> list[str]:
    """``pid command`` of every live process (not a zombie) in process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(f"{entry.name} {cmdline.strip()}")
    return out


def wait_group_gone(pgid: int, timeout: float = 10.0) -> list[str]:
    """Wait until nothing of group ``pgid`` runs; returns what still runs at the deadline ([] when gone)."""
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_group(pgid: int) -> None:
    """SIGKILL whatever of group ``pgid`` still runs (test cleanup)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
