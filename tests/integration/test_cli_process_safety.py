"""``binlogd run`` and ``binlogd demo`` as processes (issue 19, small items): Ctrl-C in their first
moments, the warning for a password given with ``--set``, core dumps turned off; the demo's temp dirs
(issue 29): none left after a Ctrl-C or a SIGTERM at any moment, each demo run with a TMPDIR of its own.

Each command starts in a session of its own and gets SIGINT as a terminal sends it (to the group);
the delays count from the moment Python itself has started (tests/support/processes.py), so they
cover binlogd's imports and start-up. Not covered, because no code of ours runs yet: the interpreter's
own start and the import of the small binlogd.cli module (a few milliseconds; its main() imports the
rest under the guard).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import processes

# A source nobody listens on: the daemon starts, then retries connecting until stopped.
UNREACHABLE = ["--set", "source.host=127.0.0.1", "--set", "source.port=1", "--set", "metrics.listen=",
               "--set", "reconnect.initial_seconds=0.2"]
WARNING = "source.password was given with --set"


def _run_args(tmp_path) -> list[str]:
    return ["run", *UNREACHABLE, "--set", f"checkpoint.path={tmp_path}/cp.json", "--set", f"sink.path={tmp_path}/sink"]


def _interrupt_after(argv: list[str], delay: float, timeout: float = 60,
                     env: dict | None = None) -> tuple[int, str, list[str]]:
    """Start ``binlogd ARGV``, Ctrl-C ``delay`` s after Python started; (exit code, stderr, group left)."""
    proc = processes.spawn(*argv, env=env)
    stderr = processes.Stderr(proc)
    try:
        stderr.wait_for(processes.STARTED)
        time.sleep(delay)
        processes.ctrl_c(proc)
        rc = proc.wait(timeout)
        return rc, stderr.close(), processes.wait_group_gone(proc.pid)
    finally:
        proc.kill()
        processes.kill_group(proc.pid)


@pytest.mark.parametrize("delay", [0.05, 0.1, 0.15, 0.2, 0.3, 0.5])
def test_early_ctrl_c_of_run_exits_without_a_traceback(delay, tmp_path):
    rc, err, left = _interrupt_after(_run_args(tmp_path), delay)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert rc in (0, 130), err  # 130 before the daemon's own handler is installed, 0 after
    assert left == []


@pytest.fixture
def private_tmp():
    """A TMPDIR of the demo's own (short: the server's socket lives in it), sharing the machine's
    server templates, so that whatever temp dir the demo leaves is found there whatever runs beside it."""
    shared = Path(tempfile.gettempdir()) / f"binlogd-localserver-{os.geteuid()}"
    shared.mkdir(mode=0o700, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    (tmp / shared.name).symlink_to(shared)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _left_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("binlogd-srv-", "binlogd-demo-", "bld-sock-")))


@pytest.mark.parametrize("delay", [0.1, 0.3, 0.5, 0.8, 1.5])
def test_early_ctrl_c_of_demo_exits_and_leaves_no_server(delay, private_tmp):
    rc, err, left = _interrupt_after(["demo"], delay, env={**os.environ, "TMPDIR": str(private_tmp)})
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert rc in (0, 130), err
    assert left == [], "left running after the demo exited"
    assert _left_dirs(private_tmp) == [], f"temp dirs left by the demo; stderr:\n{err}"


@pytest.mark.parametrize("delay", [0.3, 0.5, 0.8, 1.5, None])
def test_sigterm_of_demo_exits_and_leaves_nothing(delay, private_tmp):
    """SIGTERM to the demo alone (as a service manager sends it) while it starts its server (exit 143) or
    once it streams (None: the daemon stops cleanly, exit 0): the server is gone, and so are its temp dirs."""
    proc = processes.spawn("demo", env={**os.environ, "TMPDIR": str(private_tmp)})
    stderr = processes.Stderr(proc)
    try:
        if delay is None:
            stderr.wait_for("streaming from", timeout=120)
        else:
            stderr.wait_for(processes.STARTED)
            time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        err = stderr.close()
        left = processes.wait_group_gone(proc.pid)
    finally:
        proc.kill()
        processes.kill_group(proc.pid)
    assert "Traceback" not in err, err
    # -15: SIGTERM came before main() turned it into an exit, when nothing had been made yet (a busy machine)
    assert rc in ((0,) if delay is None else (0, 143, -signal.SIGTERM)), err
    assert left == [], "left running after the demo exited"
    assert _left_dirs(private_tmp) == [], f"temp dirs left by the demo; stderr:\n{err}"


def _started_daemon(tmp_path, *extra: str, env: dict | None = None):
    proc = processes.spawn(*_run_args(tmp_path), *extra, env=env)
    stderr = processes.Stderr(proc)
    stderr.wait_for("cannot connect to 127.0.0.1:1")
    return proc, stderr


def test_password_given_with_set_is_warned_about(tmp_path):
    proc, stderr = _started_daemon(tmp_path, "--set", "source.password=s3cret-pass")
    try:
        limits = open(f"/proc/{proc.pid}/limits").read()
    finally:
        processes.ctrl_c(proc)
        assert proc.wait(30) == 0
    text = stderr.close()
    assert sum(WARNING in line for line in text.splitlines()) == 1, text
    assert "s3cret-pass" not in text
    core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"], core  # soft and hard


def test_password_from_the_environment_is_not_warned_about(tmp_path):
    env = {**os.environ, "BINLOGD_SOURCE__PASSWORD": "s3cret-pass"}
    proc, stderr = _started_daemon(tmp_path, env=env)
    processes.ctrl_c(proc)
    assert proc.wait(30) == 0
    text = stderr.close()
    assert WARNING not in text and "s3cret-pass" not in text, text


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_DUMPABLE is Linux's")
def test_core_dumps_are_turned_off():
    """What ``binlogd run`` calls before it connects: the process is not dumpable and RLIMIT_CORE is 0."""
    code = ("import ctypes, logging, resource; from binlogd.cli import _no_core_dumps;"
            "libc = ctypes.CDLL(None); print(libc.prctl(3, 0, 0, 0, 0), resource.getrlimit(resource.RLIMIT_CORE));"
            "_no_core_dumps(logging.getLogger()); print(libc.prctl(3, 0, 0, 0, 0), resource.getrlimit(resource.RLIMIT_CORE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, out.stderr
    before, after = out.stdout.splitlines()
    assert before.startswith("1 ") and after == "0 (0, 0)"  # PR_GET_DUMPABLE = 3


_ORJSON = """import os, signal, sys, threading, time
try:
    threading.Timer(float(sys.argv[1]), os.kill, (os.getpid(), signal.SIGINT)).start()
    from binlogd.library.lazyjson import orjson
    {import_}
    time.sleep(2)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _ctrl_c_during_orjson_import(import_: str) -> dict[int, int]:
    """Exit codes (and how many) of 40 runs whose Ctrl-C lands 0-30 ms into importing orjson."""
    codes: dict[int, int] = {}
    for i in range(40):
        run = subprocess.run([sys.executable, "-c", _ORJSON.format(import_=import_), str(i * 0.00075)],
                             capture_output=True, timeout=60)
        codes[run.returncode] = codes.get(run.returncode, 0) + 1
    return codes


def test_ctrl_c_inside_the_orjson_import_does_not_crash():
    """orjson's module init segfaults when a KeyboardInterrupt comes up inside it (one of its own
    imports fails); main() imports it with SIGINT held back, so the Ctrl-C is a KeyboardInterrupt after."""
    assert _ctrl_c_during_orjson_import("orjson()") == {130: 40}
