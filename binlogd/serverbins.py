"""The MariaDB (or MySQL) server installation the throwaway servers run: finding it, and installing it.

MariaDB is preferred; MySQL's ``mysqld`` is used only when no MariaDB server binary is found.
``BINLOGD_MYSQLD=/path/to/mariadbd`` forces a binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["ServerBinaries", "ensure_installed", "find_binaries"]

_SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/mysql/bin")


class ServerBinaries:
    """Paths and identity of the server installation that will be used."""

    def __init__(self, server: Path, client: Path | None, install_db: Path | None) -> None:
        self.server = server
        self.client = client
        self.install_db = install_db
        out = subprocess.run(
            [str(server), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
        m = re.search(r"Ver\s+(\S+)", out)
        self.version: str = m.group(1) if m else out.strip()
        self.flavor: str = "mariadb" if "mariadb" in out.lower() else "mysql"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", self.version)
        return tuple(int(x) for x in m.groups()) if m else ()

    def __repr__(self) -> str:
        return f"ServerBinaries({self.flavor} {self.version} at {self.server})"


def _which(*names: str) -> Path | None:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_SEARCH_DIRS)
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return Path(found)
    return None


def find_binaries() -> ServerBinaries | None:
    """The server to use (MariaDB first), or None if no server binary is installed."""
    forced = os.environ.get("BINLOGD_MYSQLD")
    if forced:
        server = Path(forced)
    else:
        server = _which("mariadbd")
        if server is None:
            server = _which("mysqld")  # may itself be MariaDB (older packages, symlinks)
    if server is None or not server.exists():
        return None
    client = _which("mariadb", "mysql")
    install_db = _which("mariadb-install-db", "mysql_install_db")
    bins = ServerBinaries(server, client, install_db)
    if bins.flavor == "mysql":
        install_db = None  # MySQL initialises with `mysqld --initialize-insecure`
        bins.install_db = None
        bins.client = _which("mysql", "mariadb")
    return bins


def ensure_installed() -> ServerBinaries:
    """Return the server binaries, installing MariaDB with apt-get first if none is found.

    Installing is done only when running as root on a system with apt-get; otherwise a
    RuntimeError says what to install.
    """
    bins = find_binaries()
    if bins is not None:
        return bins
    hint = (
        "no MariaDB/MySQL server binary found (looked for mariadbd and mysqld in PATH and "
        f"{', '.join(_SEARCH_DIRS)}). Install one, e.g. `apt-get install -y mariadb-server "
        "mariadb-client`, or point BINLOGD_MYSQLD at a mariadbd/mysqld binary."
    )
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(hint)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "mariadb-server", "mariadb-client"],
    ):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{hint}\n`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
            )
    bins = find_binaries()
    if bins is None:
        raise RuntimeError(f"{hint}\n(apt-get install succeeded but mariadbd is still missing)")
    return bins
