"""The real servers the suite runs against: the machine's MariaDB (10.11 on Debian 12) and MariaDB 11.8.

MariaDB 11.8 is Debian trixie's ``mariadb-server-core``. :func:`fetch_mariadb` downloads it with
``apt-get download`` through a temporary deb822 sources list (the machine's Debian mirror, suite
``trixie``) and private package-index and cache directories, never touching the machine's apt
configuration, and unpacks it with ``dpkg -x`` into :data:`MARIADB_118_ROOT` (``~/.cache/binlogd``),
so a machine pays once (about 35 s, 120 MB). The binaries run through the unpacked glibc's loader
(:meth:`binlogd.cli.serverbins.ServerBinaries.from_root`). ``scripts/fetch-mariadb`` runs this module;
the fixtures call :func:`binaries` and fetch lazily when the setup script did not.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from binlogd.cli.serverbins import ServerBinaries, ServerSetupError, find_binaries

__all__ = ["MARIADB_118_ROOT", "Unavailable", "binaries", "fetch_mariadb", "machine_version", "versions"]

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlogd"
MARIADB_118_ROOT = CACHE / "mariadb-11.8"
SUITE = "trixie"
PACKAGES = ("mariadb-server-core mariadb-client-core mariadb-common mysql-common libmariadb3 libc6 libstdc++6 "
            "libgcc-s1 gcc-14-base libssl3t64 libpcre2-8-0 libzstd1 liblz4-1 zlib1g libaio1t64 liburing2 "
            "libnuma1 libsystemd0 libcap2 libcrypt1 libedit2 libbsd0 libmd0 libncurses6 libtinfo6").split()
_FALLBACK_MIRROR = "http://deb.debian.org/debian"
_TIMEOUT = 600


class Unavailable(Exception):
    """A server version cannot run here; the message is the skip reason."""


def machine_version() -> str | None:
    """The "major.minor" of the machine's server (the fixtures' id for it), or None without one."""
    try:
        bins = find_binaries()
    except ServerSetupError:
        return None
    return ".".join(map(str, bins.version_tuple[:2])) if bins else None


def versions() -> list[str]:
    """The fixtures' server ids: the machine's server (as "major.minor", "machine" when there is none)
    and "11.8" (the fetched one), without a duplicate when the machine's is 11.8."""
    mine = machine_version() or "machine"
    return [mine] if mine == "11.8" else [mine, "11.8"]


@cache
def binaries(version: str) -> ServerBinaries:
    """The installation for a fixture id from :func:`versions`, fetching 11.8 on first use.

    Raises:
        Unavailable: no machine server, or 11.8 could not be fetched or run (the reason says which).
    """
    bins = None
    try:
        if version == "11.8":
            bins = ServerBinaries.from_root(fetch_mariadb())
        elif version == machine_version():
            bins = find_binaries()
    except ServerSetupError as exc:
        raise Unavailable(str(exc)) from None
    if bins is None:
        raise Unavailable(f"no MariaDB/MySQL server for {version!r}: install mariadb-server "
                          "(scripts/test does so as root) or set BINLOGD_MYSQLD")
    return bins


def fetch_mariadb(root: Path = MARIADB_118_ROOT) -> Path:
    """``root``, holding MariaDB 11.8 unpacked from Debian trixie; downloaded and unpacked on first call.

    Concurrent callers wait on a lock; ``root/.complete`` (the server's version) is written last.

    Raises:
        ServerSetupError: apt-get or dpkg is missing, or the download or unpacking failed (message says
            which command and why: outside our control when the network or the mirror is down).
    """
    done = root / ".complete"
    if done.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return root
        for tool in ("apt-get", "dpkg"):
            if shutil.which(tool) is None:
                raise ServerSetupError(f"cannot fetch MariaDB 11.8: {tool} not found (a Debian-based machine is needed)")
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=root.parent))
        try:
            if root.exists():
                shutil.rmtree(root)
            _download_and_unpack(work).rename(root)
            try:
                version = ServerBinaries.from_root(root).version  # it runs here, or this raises
            except ServerSetupError:
                shutil.rmtree(root)
                raise
            done.write_text(version + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return root


def _download_and_unpack(work: Path) -> Path:
    mirror, signed_by = _debian_mirror()
    sources = work / f"{SUITE}.sources"  # apt reads deb822 only from a name ending in .sources
    sources.write_text(f"Types: deb\nURIs: {mirror}\nSuites: {SUITE}\nComponents: main\n"
                       + (f"Signed-By: {signed_by}\n" if signed_by else ""))
    for sub in ("lists/partial", "cache/archives/partial", "debs", "root"):
        (work / sub).mkdir(parents=True)
    opts = [f"-oDir::Etc::sourcelist={sources}", "-oDir::Etc::sourceparts=-", f"-oDir::State::Lists={work / 'lists'}",
            f"-oDir::Cache={work / 'cache'}", "-oAcquire::Retries=2", "-oAcquire::http::Timeout=60"]
    if os.geteuid() == 0:
        opts.append("-oAPT::Sandbox::User=root")  # the private dirs are not the _apt user's
    _run(f"apt-get update ({mirror} {SUITE})", ["apt-get", *opts, "update"], work)
    _run("apt-get download", ["apt-get", *opts, "download", *PACKAGES], work / "debs")
    for deb in sorted((work / "debs").glob("*.deb")):
        _run(f"dpkg -x {deb.name}", ["dpkg", "-x", str(deb), str(work / "root")], work)
    return work / "root"


def _run(what: str, cmd: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT,
                              env=dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C"))
    except subprocess.TimeoutExpired:
        raise ServerSetupError(f"cannot fetch MariaDB 11.8: `{what}` took over {_TIMEOUT}s")
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if line.startswith(("E:", "dpkg"))] or [proc.stderr]
        raise ServerSetupError(f"cannot fetch MariaDB 11.8: `{what}` failed ({proc.returncode}): "
                               + " | ".join(e.strip() for e in errors)[-600:])


def _debian_mirror() -> tuple[str, str | None]:
    """The machine's Debian mirror URI and its Signed-By keyring, from its apt sources (deb822 or one-line)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields = dict(re.findall(r"(?m)^([A-Za-z-]+):\s*(.*)$", stanza))
            for uri in fields.get("URIs", "").split():
                if uri.rstrip("/").endswith("/debian") and "deb" in fields.get("Types", "").split():
                    return uri, fields.get("Signed-By")
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        text = path.read_text(errors="replace") if path.exists() else ""
        for m in re.finditer(r"(?m)^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text):
            return m.group(1), None
    return _FALLBACK_MIRROR, None


def main() -> int:
    """``python -m tests.support.servers``: fetch MariaDB 11.8 into the cache and print its root."""
    try:
        root = fetch_mariadb()
    except ServerSetupError as exc:
        print(exc)
        return 1
    print(f"MariaDB {ServerBinaries.from_root(root).version} in {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
