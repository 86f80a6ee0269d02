"""deploy/systemd: the unit's hardening and its watchdog/heartbeat rule, `systemd-analyze verify` and
`security` where systemd-analyze exists, the environment file, and daemon/operations/systemd.py (sd_notify)
against real unix datagram sockets."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.operations import systemd
from tests.support.deploy import DEPLOY, parse_unit, systemd_seconds, tool, unit_value

UNIT = DEPLOY / "systemd" / "binlogd.service"
ENV_EXAMPLE = DEPLOY / "systemd" / "binlogd.env.example"


@pytest.fixture(scope="module")
def unit():
    return parse_unit(UNIT)


def _execstart(unit) -> list[str]:
    return shlex.split(unit_value(unit, "Service", "ExecStart"))


def _overrides(argv: list[str]) -> dict[str, str]:
    out = {}
    for i, arg in enumerate(argv):
        if arg == "--set":
            key, _, value = argv[i + 1].partition("=")
            out[key] = value
    return out


def _env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path}: {line!r} is not KEY=value"
            env[key] = value
    return env


# ------------------------------------------------------------------------------------ the unit
def test_hardening(unit):
    s = dict(unit["Service"])
    assert s.get("DynamicUser") == "yes" or s.get("User") not in (None, "", "root", "0")
    assert s["ProtectSystem"] == "strict"
    assert s["NoNewPrivileges"] == "yes"
    assert s["LimitCORE"] == "0", "a core dump would hold the password"
    assert s["Restart"] == "on-failure"
    assert s["StateDirectory"] == "binlogd"
    assert s["ProtectHome"] in ("yes", "read-only", "tmpfs")
    assert s["PrivateTmp"] == "yes"
    assert s["CapabilityBoundingSet"] == ""
    assert "AF_PACKET" not in s["RestrictAddressFamilies"]
    assert "ReadWritePaths" not in s, "StateDirectory is the one writable place"


def test_state_directory_holds_the_checkpoint_and_sink(unit):
    """ProtectSystem=strict leaves only StateDirectory writable: the defaults must be inside it."""
    cfg = load_config(None, env={}, overrides=_overrides(_execstart(unit)))
    state = "/var/lib/" + unit_value(unit, "Service", "StateDirectory")
    assert str(cfg.checkpoint.path).startswith(state + "/")
    assert str(cfg.sink.path).startswith(state + "/")
    assert cfg.checkpoint.lock, "the flock keeps a second daemon (another unit instance) off the checkpoint"


def test_restart_policy_follows_the_exit_codes(unit):
    """Exit codes that a restart cannot fix (README: 2 config, 3 auth, 5 ERR 1236, 6 primary not
    usable, 7 undecodable, 8 checkpoint locked/unusable, 9 diverged failover candidates) are not
    restarted; 4 (name does not resolve yet) and 1 are."""
    prevent = set(unit_value(unit, "Service", "RestartPreventExitStatus").split())
    assert prevent == {"2", "3", "5", "6", "7", "8", "9"}


def test_notify_and_watchdog_follow_the_heartbeat(unit):
    """The rule: Type=notify, and WatchdogSec >= 4 x source.heartbeat_seconds. binlogd gives up on
    a silent primary after 2 x heartbeat and reconnects; the watchdog must never beat it to that.
    The heartbeat is pinned on the command line next to WatchdogSec (--set wins over the TOML
    and the environment file)."""
    assert unit_value(unit, "Service", "Type") == "notify"
    assert unit_value(unit, "Service", "NotifyAccess") in (None, "main")
    argv = _execstart(unit)
    assert argv[1:4] == ["run", "--config", "/etc/binlogd/binlogd.toml"]
    overrides = _overrides(argv)
    assert "source.heartbeat_seconds" in overrides, "the unit pins the heartbeat it sizes WatchdogSec for"
    cfg = load_config(None, env=_env_file(ENV_EXAMPLE), overrides=overrides)
    watchdog = systemd_seconds(unit_value(unit, "Service", "WatchdogSec"))
    assert watchdog >= 4 * cfg.source.heartbeat_seconds
    # stopping: the daemon commits within daemon.shutdown_seconds, before systemd's SIGKILL
    assert systemd_seconds(unit_value(unit, "Service", "TimeoutStopSec")) > cfg.daemon.shutdown_seconds
    assert unit_value(unit, "Service", "KillSignal") in (None, "SIGTERM")


def test_secrets_come_from_the_environment_file(unit):
    env_file = unit_value(unit, "Service", "EnvironmentFile")
    assert env_file == "/etc/binlogd/binlogd.env"  # required (no "-"): a missing secret fails the start
    assert not any(k == "Environment" and "PASSWORD" in v.upper() for k, v in unit["Service"])
    assert "PASSWORD" not in unit_value(unit, "Service", "ExecStart").upper()
    env = _env_file(ENV_EXAMPLE)
    assert "BINLOGD_SOURCE__PASSWORD" in env
    assert not any("HEARTBEAT" in k for k in env), "the unit pins the heartbeat, not the env file"
    cfg = load_config(None, env=env)  # every key is one binlogd knows
    assert cfg.source.password.reveal() == env["BINLOGD_SOURCE__PASSWORD"]


def _verifiable_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this venv's binlogd (verify checks the binary exists)."""
    binlogd = tool("binlogd")
    if binlogd is None:
        pytest.skip("the binlogd console script is not installed in this environment")
    text = UNIT.read_text().replace("/opt/binlogd/bin/binlogd", binlogd)
    copy = tmp_path / "binlogd.service"
    copy.write_text(text)
    return copy


def test_systemd_analyze_verify(tmp_path):
    analyze = tool("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    unit = _verifiable_copy(tmp_path)
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # unknown keys and bad values are only warnings to verify: any output is a finding
    assert (result.stdout + result.stderr).strip() == ""


def test_systemd_analyze_security_exposure(tmp_path):
    analyze = tool("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    unit = _verifiable_copy(tmp_path)
    result = subprocess.run([analyze, "security", "--offline=yes", str(unit)],
                            capture_output=True, text=True, timeout=120)
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout + result.stderr)
    if result.returncode != 0 and match is None:
        pytest.skip(f"systemd-analyze security --offline is not supported here: {result.stderr.strip()[:200]}")
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.0, result.stdout


# ------------------------------------------------------------------------- daemon/operations/systemd.py
@pytest.fixture
def dgram_path():
    """A bound unix datagram socket at a short filesystem path (sun_path is 108 bytes)."""
    directory = tempfile.mkdtemp(prefix="sdn-", dir="/tmp")
    path = os.path.join(directory, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield sock, path
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(directory)


@pytest.fixture
def clean_env(monkeypatch):
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_notify_without_systemd_is_a_no_op(clean_env):
    assert systemd.notify("READY=1") is False
    clean_env.setenv("NOTIFY_SOCKET", "")
    assert systemd.notify("READY=1") is False
    clean_env.setenv("NOTIFY_SOCKET", "vsock:2:1234")  # not spoken by this client
    assert systemd.notify("READY=1") is False


def test_notify_to_a_path_socket(clean_env, dgram_path):
    sock, path = dgram_path
    clean_env.setenv("NOTIFY_SOCKET", path)
    assert systemd.notify("READY=1\nSTATUS=streaming from db1 at mysql-bin.000042:4") is True
    assert sock.recv(4096) == b"READY=1\nSTATUS=streaming from db1 at mysql-bin.000042:4"
    assert systemd.notify("WATCHDOG=1") is True
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert systemd.notify("STATUS=état: reconnecting") is True
    assert sock.recv(4096) == "STATUS=état: reconnecting".encode()
    assert systemd.notify("") is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the abstract socket namespace is Linux-only")
def test_notify_to_an_abstract_socket(clean_env):
    name = f"binlogd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        clean_env.setenv("NOTIFY_SOCKET", "@" + name)
        assert systemd.notify("STOPPING=1") is True
        assert sock.recv(4096) == b"STOPPING=1"


def test_notify_never_raises(clean_env, tmp_path):
    clean_env.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert systemd.notify("READY=1") is False
    clean_env.setenv("NOTIFY_SOCKET", "@binlogd-test-nobody-" + uuid.uuid4().hex)
    assert systemd.notify("READY=1") is False


def test_notify_from_a_child_process(dgram_path):
    """The way systemd sees it: a separate process with NOTIFY_SOCKET in its environment."""
    sock, path = dgram_path
    env = {**os.environ, "NOTIFY_SOCKET": path}
    code = "from binlogd.daemon.operations.systemd import notify; raise SystemExit(0 if notify('READY=1') else 1)"
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).resolve().parents[2],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sock.recv(4096) == b"READY=1"


def test_watchdog_interval(clean_env):
    assert systemd.watchdog_interval() is None
    clean_env.setenv("WATCHDOG_USEC", "30000000")
    assert systemd.watchdog_interval() == 30.0
    clean_env.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd.watchdog_interval() == 30.0
    clean_env.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert systemd.watchdog_interval() is None, "meant for another process"
    clean_env.setenv("WATCHDOG_PID", "not-a-pid")
    assert systemd.watchdog_interval() is None
    clean_env.delenv("WATCHDOG_PID")
    for bad in ("0", "-5", "abc", "", "1.5"):
        clean_env.setenv("WATCHDOG_USEC", bad)
        assert systemd.watchdog_interval() is None, bad
    clean_env.setenv("WATCHDOG_USEC", "500")
    assert systemd.watchdog_interval() == 0.0005


def test_the_module_has_no_dependency():
    source = (Path(systemd.__file__)).read_text()
    imports = set(re.findall(r"^(?:from|import) (\w+)", source, re.M))
    assert imports <= {"__future__", "os", "socket"}, imports
