"""The MariaDB (or MySQL) server installation a throwaway server runs: finding it, never installing it.

:func:`find_binaries` looks for the machine's server: MariaDB first, MySQL's ``mysqld`` only when no
MariaDB server binary is found; ``BINLOGD_MYSQLD=/path/to/mariadbd`` forces a binary.
:meth:`ServerBinaries.from_root` runs a server unpacked from Debian packages into a directory
(``dpkg -x``), through that root's own glibc loader, so it works on a machine with an older glibc.
Nothing here installs software: when no server is found, :func:`require_binaries` says what to install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from binlogd.protocol.decoder import version_tuple
from binlogd.protocol.errors import BinlogError

__all__ = ["ServerBinaries", "ServerNotFound", "ServerSetupError", "find_binaries", "require_binaries"]

_SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/mysql/bin")
# The programs mariadb-install-db runs from its --basedir: <basedir>/<path>.
_INSTALL_DB_PROGRAMS = ("bin/my_print_defaults", "bin/resolveip", "bin/mariadb", "sbin/mariadbd")


class ServerSetupError(BinlogError, RuntimeError):
    """A throwaway server could not be found, initialised or started; the message says why."""


class ServerNotFound(ServerSetupError):
    """No usable server installation; the message says what to install or what is broken."""


class ServerBinaries:
    """Paths and identity of the server installation that will be used.

    Fields:
        server: the mariadbd/mysqld binary.
        client: the mariadb/mysql command-line client, or None.
        install_db: mariadb-install-db, or None (MySQL initialises with ``--initialize-insecure``).
        loader: the command prefix that runs a binary of this installation ([] for the machine's own;
            ``[ld.so, --library-path, dirs]`` for an unpacked root).
        server_args: options every start of this server needs (an unpacked root's ``--basedir``).
        install_args: options mariadb-install-db needs (an unpacked root's wrapper ``--basedir``).
        version: the version from ``--version``, e.g. "10.11.19-MariaDB-0+deb12u1".
        flavor: "mariadb" or "mysql".

    Raises:
        ServerNotFound: the server binary does not run.
    """

    def __init__(self, server: Path, client: Path | None, install_db: Path | None, *,
                 loader: Sequence[str] = (), server_args: Sequence[str] = (),
                 install_args: Sequence[str] = ()) -> None:
        self.server = server
        self.client = client
        self.install_db = install_db
        self.loader = list(loader)
        self.server_args = list(server_args)
        self.install_args = list(install_args)
        try:
            proc = subprocess.run(self.command(server) + ["--version"], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerNotFound(f"{server} --version failed: {exc}") from None
        m = re.search(r"Ver\s+(\S+)", proc.stdout)
        if proc.returncode != 0 or m is None:
            raise ServerNotFound(f"{server} --version failed ({proc.returncode}): "
                                 f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        self.version: str = m.group(1)
        self.flavor: str = "mariadb" if "mariadb" in proc.stdout.lower() else "mysql"

    @classmethod
    def from_root(cls, root: Path) -> ServerBinaries:
        """A MariaDB or MySQL server unpacked with ``dpkg -x`` into ``root``, run through the root's glibc loader.

        ``root`` holds ``usr/sbin/mariadbd`` (MariaDB: with ``usr/bin/mariadb-install-db``) or ``usr/sbin/mysqld``
        (MySQL: initialised by ``mysqld --initialize-insecure``), the client and the shared libraries they need,
        glibc included. mariadb-install-db runs the programs it finds under its ``--basedir``;
        ``root/binlogd-wrappers`` holds small scripts there that run each through the loader (written on first use).

        Raises:
            ServerNotFound: no server or glibc loader under ``root``, or the server does not run.
        """
        root = Path(root).resolve()
        loaders = sorted(root.glob("usr/lib/*-linux-gnu/ld-linux*.so.*"))
        mariadbd, mysqld = root / "usr/sbin/mariadbd", root / "usr/sbin/mysqld"
        if not loaders or not (mariadbd.exists() or mysqld.exists()):
            raise ServerNotFound(f"{root} holds no unpacked MariaDB or MySQL server (usr/sbin/mariadbd or "
                                 "usr/sbin/mysqld, and usr/lib/<triplet>/ld-linux*.so.* are needed)")
        triplet = loaders[0].parent.name
        libs = f"{root}/usr/lib/{triplet}:{root}/lib/{triplet}"
        loader = [str(loaders[0]), "--library-path", libs]
        if not mariadbd.exists():
            return cls(mysqld, root / "usr/bin/mysql", None, loader=loader, server_args=[
                f"--basedir={root / 'usr'}", f"--lc-messages-dir={root / 'usr/share/mysql'}",
                f"--plugin-dir={root / 'usr/lib/mysql/plugin'}"])
        wrappers = root / "binlogd-wrappers"
        _write_wrappers(root, wrappers, loader)
        return cls(mariadbd, root / "usr/bin/mariadb", root / "usr/bin/mariadb-install-db", loader=loader,
                   server_args=[f"--basedir={root / 'usr'}"], install_args=[f"--basedir={wrappers}"])

    def command(self, program: Path) -> list[str]:
        """The argv prefix that runs ``program`` of this installation."""
        return [*self.loader, str(program)]

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        """(major, minor, patch) of :attr:`version`; (0, 0, 0) when it has none."""
        return version_tuple(self.version)

    def __repr__(self) -> str:
        return f"ServerBinaries({self.flavor} {self.version} at {self.server})"


def _write_wrappers(root: Path, wrappers: Path, loader: list[str]) -> None:
    """Scripts under ``wrappers`` that run ``root/usr/<program>`` through ``loader``, plus the
    ``share`` and ``lib`` links mariadb-install-db reads; rewritten only when they differ."""
    for sub in ("bin", "sbin"):
        (wrappers / sub).mkdir(parents=True, exist_ok=True)
    for name in ("share", "lib"):
        link, target = wrappers / name, root / "usr" / name
        if not link.is_symlink() or link.readlink() != target:
            tmp = wrappers / f"{name}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            tmp.replace(link)
    for program in _INSTALL_DB_PROGRAMS:
        text = "#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in [*loader, str(root / "usr" / program)]) + ' "$@"\n'
        path = wrappers / program
        if not path.exists() or path.read_text() != text:
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(path)


def _which(*names: str) -> Path | None:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_SEARCH_DIRS)
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return Path(found)
    return None


def find_binaries() -> ServerBinaries | None:
    """The machine's server (MariaDB first, or ``BINLOGD_MYSQLD``), or None if no server binary is installed.

    Raises:
        ServerNotFound: a server binary exists but does not run.
    """
    forced = os.environ.get("BINLOGD_MYSQLD")
    if forced:
        server = Path(forced)
    else:
        server = _which("mariadbd")
        if server is None:
            server = _which("mysqld")  # may itself be MariaDB (older packages, symlinks)
    if server is None or not server.exists():
        return None
    bins = ServerBinaries(server, _which("mariadb", "mysql"), _which("mariadb-install-db", "mysql_install_db"))
    if bins.flavor == "mysql":
        bins.install_db = None  # MySQL initialises with `mysqld --initialize-insecure`
        bins.client = _which("mysql", "mariadb")
    return bins


def require_binaries() -> ServerBinaries:
    """The machine's server binaries.

    Raises:
        ServerNotFound: none is installed (the message says what to install), or it does not run.
    """
    bins = find_binaries()
    if bins is None:
        raise ServerNotFound(
            "no MariaDB/MySQL server binary found (looked for mariadbd and mysqld in PATH and "
            f"{', '.join(_SEARCH_DIRS)}). Install one, e.g. `apt-get install -y mariadb-server "
            "mariadb-client`, or point BINLOGD_MYSQLD at a mariadbd/mysqld binary."
        )
    return bins
