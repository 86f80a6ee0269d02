"""scripts/_setup.sh, the setup scripts/test and scripts/demo share, and constraints.txt, the versions it installs.

- pip runs once, with ``-c constraints.txt``; then never again until the extras, pyproject.toml, constraints.txt,
  setup.py or a C source change (the stamp), and a run with nothing to do is quick and silent;
- every slow step says what it does on stderr first (a ``setup:`` line), so a first run never looks hung;
- constraints.txt names every package the test install pulls in, and the venv holds exactly those versions.

Each run uses a copy of what the script reads, with a fake pip that records its calls.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.paths import REPO

EXTRAS = {"daemon", "test", "spark", "bus"}  # what scripts/_setup.sh installs: '.[daemon,test,spark,bus]'
STAMP = Path(".venv") / ".binlogd-setup-stamp"

FAKE_PIP = """#!/bin/sh
echo "$* REQUIRE_C=$BINLOGD_REQUIRE_C" >> "$PIP_CALLS"
echo "WARNING: Location 'file:///opt/wheels/' is ignored: it is either a non-existing path or lacks a specific scheme."
echo "WARNING: a warning pip printed"
exit "${FAKE_PIP_RC:-0}"
"""
# python3 -m venv .venv, as far as the script relies on it: .venv/bin/python runs
FAKE_PYTHON3 = f"""#!/bin/sh
[ "$1 $2 $3" = "-m venv .venv" ] || exit 2
mkdir -p .venv/bin && ln -s {sys.executable} .venv/bin/python
"""
PIP_CALL = "install -q --disable-pip-version-check -c constraints.txt -e .[daemon,test,spark,bus] REQUIRE_C=1"


@pytest.fixture
def setup_copy(tmp_path):
    """A copy of what scripts/_setup.sh reads (the script, pyproject.toml, constraints.txt, setup.py, the C
    sources) with a .venv whose pip is a fake that records its calls; the machine's server counts as present."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "_setup.sh").write_bytes((REPO / "scripts" / "_setup.sh").read_bytes())
    for name in ("pyproject.toml", "constraints.txt", "setup.py"):
        (root / name).write_bytes((REPO / name).read_bytes())
    for folder in ("protocol", "library"):
        (root / folder).mkdir()
        for source in [*(REPO / folder).glob("*.c"), *(REPO / folder).glob("*.h")]:
            (root / folder / source.name).write_bytes(source.read_bytes())
    (root / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, root / ".venv" / "bin" / "python")
    pip = tmp_path / "pip"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    return root, {**os.environ, "BINLOGD_PIP": str(pip), "PIP_CALLS": str(tmp_path / "calls"),
                  "BINLOGD_MYSQLD": "/bin/true"}


def _setup(root, env, script="", **extra) -> tuple[subprocess.CompletedProcess, float, list[str]]:
    """Source scripts/_setup.sh as scripts/test does, then run ``script``; (the run, its seconds, pip's calls
    so far)."""
    t0 = time.monotonic()
    run = subprocess.run([shutil.which("bash"), "-c", f"set -euo pipefail; source scripts/_setup.sh; pwd; {script}"], cwd=root,
                         capture_output=True, text=True, timeout=120, env={**env, **extra})
    calls = Path(env["PIP_CALLS"])
    return run, time.monotonic() - t0, calls.read_text().splitlines() if calls.exists() else []


def _steps(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("setup: ")]


def test_setup_installs_once_then_skips_pip_until_something_changes(setup_copy):
    root, env = setup_copy
    first, _, calls = _setup(root, env)
    assert first.returncode == 0, first.stderr
    assert calls == [PIP_CALL]
    assert "WARNING: a warning pip printed" in first.stderr  # pip's warnings are shown ...
    assert "Location" not in first.stderr  # ... but not the noise about ignored locations
    assert first.stdout.strip() == str(root)

    second, seconds, calls = _setup(root, env)
    assert second.returncode == 0 and len(calls) == 1, second.stderr
    assert second.stderr == "" and seconds < 3, (seconds, second.stderr)

    with open(root / "library" / "_jsonrows.c", "a") as fh:  # a C source changed: install again
        fh.write("/* changed */\n")
    third, _, calls = _setup(root, env)
    assert third.returncode == 0 and len(calls) == 2
    fourth, _, calls = _setup(root, env)
    assert len(calls) == 2
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    _setup(root, env)
    assert len(_setup(root, env)[2]) == 3
    (root / "constraints.txt").write_text((root / "constraints.txt").read_text() + "# changed\n")
    again, _, calls = _setup(root, env)
    assert len(calls) == 4 and calls[-1] == PIP_CALL
    assert _steps(again.stderr)[0] == "setup: installing binlogd into .venv again (its sources or pinned " \
                                      "versions changed)"
    assert len(_setup(root, env)[2]) == 4


def test_setup_fails_when_pip_fails_and_tries_again(setup_copy):
    root, env = setup_copy
    failed, _, calls = _setup(root, env, FAKE_PIP_RC="1")
    assert failed.returncode == 1 and len(calls) == 1
    assert "WARNING: a warning pip printed" in failed.stderr and "failed" in failed.stderr.splitlines()[-1]
    assert not (root / STAMP).exists()
    again, _, calls = _setup(root, env)
    assert again.returncode == 0 and len(calls) == 2


def test_a_first_setup_says_what_it_does_before_each_slow_step(setup_copy, tmp_path):
    """No .venv yet: one line before creating it, one before pip (how long it takes), one when pip is done."""
    root, env = setup_copy
    shutil.rmtree(root / ".venv")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    first, _, calls = _setup(root, env, PATH=f"{bin_dir}:{env['PATH']}")
    assert first.returncode == 0 and calls == [PIP_CALL], first.stderr
    steps = _steps(first.stderr)
    assert steps[:2] == [
        "setup: creating the virtual environment .venv (python3 -m venv)",
        "setup: installing binlogd and the packages it needs into .venv (pip, quiet): about 2 minutes the first time"]
    assert re.fullmatch(r"setup: installed in \d+ s; the next runs skip this step until something changes", steps[2])
    assert len(steps) == 3
    lines = first.stderr.splitlines()  # pip's own output comes between the step and its end
    assert lines.index(steps[1]) < lines.index("WARNING: a warning pip printed") < lines.index(steps[2])
    assert (root / ".venv" / "bin" / "python").exists()

    second, _, calls = _setup(root, env, PATH=f"{bin_dir}:{env['PATH']}")
    assert second.returncode == 0 and len(calls) == 1 and second.stderr == ""


def test_the_test_servers_step_names_a_first_fetch_and_missing_brokers(setup_copy, tmp_path):
    """setup_test_servers: a line before a server that is not in the cache yet is fetched, and before the
    brokers are installed; none once all are there. The fetches and the install are fakes here."""
    root, env = setup_copy
    for name, body in (("fetch-mariadb", 'mkdir -p "$XDG_CACHE_HOME/binlogd/mariadb-11.8"; echo fetched'),
                       ("fetch-mysql", 'mkdir -p "$XDG_CACHE_HOME/binlogd/mysql-9.7"'),
                       ("install-brokers", "echo install-brokers ran")):
        (root / "scripts" / name).write_text(f"#!/bin/sh\n{body}\n")
        (root / "scripts" / name).chmod(0o755)
    bin_dir = tmp_path / "bin"  # the tools the script runs, and a promtool: no broker, no apt-get
    bin_dir.mkdir()
    for tool in ("cat", "sha256sum", "cut", "ls", "grep", "mktemp", "rm", "id", "dirname", "mkdir", "sh"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    os.symlink("/bin/true", bin_dir / "promtool")
    env = {**env, "PATH": str(bin_dir), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    _setup(root, env)  # the install
    first, _, _ = _setup(root, env, "setup_test_servers")
    assert first.returncode == 0, first.stderr
    cache = tmp_path / "cache" / "binlogd"
    steps = _steps(first.stderr)
    assert f"setup: fetching MariaDB 11.8 for the tests into {cache} (once per machine)" in steps, first.stderr
    assert steps[-1] == \
        "setup: installing the brokers the bus tests start (redis-server, nats-server, PostgreSQL) if possible"
    if "scripts/fetch-mysql" in (root / "scripts" / "_setup.sh").read_text():
        assert f"setup: fetching MySQL 9.7 for the tests into {cache} (once per machine)" in steps
    assert "fetched" in first.stderr and "install-brokers ran" in first.stdout

    for name in ("redis-server", "nats-server", "initdb"):
        os.symlink("/bin/true", bin_dir / name)
    second, _, _ = _setup(root, env, "setup_test_servers")
    assert second.returncode == 0 and _steps(second.stderr) == [], second.stderr
    assert "fetched" in second.stderr  # the scripts still run: each checks for itself


def test_demo_script_fetches_no_mariadb_and_test_script_does():
    demo = (REPO / "scripts" / "demo").read_text()
    test = (REPO / "scripts" / "test").read_text()
    setup = (REPO / "scripts" / "_setup.sh").read_text()
    top = setup.split("setup_test_servers()", 1)[0]
    assert "fetch-mariadb" not in top and "install-brokers" not in top  # not for the demo
    assert "setup_test_servers" not in demo and "setup_test_servers\n" in test


# ------------------------------------------------------------------ constraints.txt

def _pins() -> dict[str, str]:
    """constraints.txt as {normalized name: version}."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip() == version, f"constraints.txt: not name==version: {line!r}"
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pulled_in() -> dict[str, str]:
    """Every distribution `pip install -e '.[daemon,test,spark,bus]'` installed here, by following the installed
    metadata's requirements (extras and markers included) from binlogd: {normalized name: installed version}."""
    found: dict[str, set[str]] = {}
    versions: dict[str, str] = {}
    todo = [("binlogd", EXTRAS)]
    while todo:
        name, extras = todo.pop()
        dist = metadata.distribution(name)
        key = _norm(dist.metadata["Name"])
        if key in found and extras <= found[key]:
            continue
        found[key] = found.get(key, set()) | extras
        versions[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                todo.append((req.name, set(req.extras)))
    del versions["binlogd"]
    return versions


def test_the_constraints_pin_every_package_the_setup_installs_at_the_version_installed():
    """What the tests run with is what constraints.txt says: a package that the extras pull in and that is not
    pinned, or a venv that drifted from the pins, fails here (./scripts/test installs the pins again)."""
    pins, installed = _pins(), _pulled_in()
    assert {"sqlglot", "pytest", "aiomysql", "pyspark", "redis", "cryptography"} <= set(installed)
    assert sorted(set(installed) - set(pins)) == [], "pulled in but not pinned: refresh constraints.txt (README)"
    drifted = {name: (version, pins[name]) for name, version in installed.items() if pins[name] != version}
    assert drifted == {}, "installed version, pinned version: run ./scripts/test"
