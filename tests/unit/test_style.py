"""The style rules every change keeps: ruff's lint (pyproject.toml) and modules of a readable size.

The structure rules (layers, the daemon's rooms, private names, function length) are tests/unit/test_sans_io.py's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "library", "daemon", "pipeline", "cli", "binlogd", "bench")
MAX_LINES = 650  # "about 600 lines at most"


def test_ruff_is_clean():
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                      capture_output=True).returncode != 0:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_modules_are_small():
    big = {str(p.relative_to(ROOT)): n for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them): {big}"


def test_every_package_folder_is_installed():
    """pyproject.toml lists its packages by name (package-dir maps the folders): a new subpackage must be
    listed, or the wheel (and the Docker image) would lack it."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in setup["package-dir"].items()}
    found = {".".join((name, *init.parent.relative_to(folder).parts))  # the folders are disjoint
             for name, folder in folders.items() for init in folder.rglob("__init__.py")}
    assert found == set(setup["packages"]), f"pyproject.toml packages vs folders: {sorted(found ^ set(setup['packages']))}"
