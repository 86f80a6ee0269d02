"""Child processes of the throwaway servers: spawned with their output in a log, killed if we die.

Every process :func:`spawn` starts is tracked until :func:`forget`; whatever is still running when
the interpreter exits is killed, and on Linux the kernel kills it if we are killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["forget", "spawn"]

_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def _pdeathsig_hook():
    """A preexec_fn asking the kernel to SIGKILL the server when we die (Linux), or None.

    Resolved in the parent: the child between fork and exec must not import anything.
    """
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except Exception:
        return None

    def hook() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphaned servers if the test run crashes

    return hook


def spawn(cmd: list[str], log: Path) -> subprocess.Popen:
    """Start ``cmd`` with stdout and stderr appended to ``log``; tracked until :func:`forget`."""
    # PR_SET_PDEATHSIG fires when the spawning *thread* exits, so only use it from the main thread.
    main = threading.current_thread() is threading.main_thread()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_pdeathsig_hook() if main else None,
        )
    with _live_lock:
        _live.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    """Stop tracking ``proc`` (it has exited or been waited for)."""
    with _live_lock:
        _live.discard(proc)
