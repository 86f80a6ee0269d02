"""The real servers the suite runs against: the machine's MariaDB (10.11 on Debian 12), MariaDB 11.8 and
Oracle MySQL 9.7.

MariaDB 11.8 is Debian trixie's ``mariadb-server-core``; MySQL 9.7 is Debian sid's ``mysql-server-core``
and ``mysql-client-core`` (source package ``mysql-9.7``). :func:`fetch` downloads one with
``apt-get download`` through a temporary deb822 sources list (the machine's Debian mirror, the
:class:`Fetch`'s suite) and private package-index and cache directories, never touching the machine's apt
configuration, and unpacks it with ``dpkg -x`` into ``~/.cache/binlogd/<name>``, so a machine pays once
(11.8: about 120 MB; 9.7: about 340 MB). The binaries run through the unpacked glibc's loader
(:meth:`binlogd.cli.serverbins.ServerBinaries.from_root`). ``scripts/fetch-mariadb`` and ``scripts/fetch-mysql``
run this module; the fixtures call :func:`binaries` and fetch lazily when the setup script did not.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from binlogd.cli.serverbins import ServerBinaries, ServerSetupError, find_binaries

__all__ = ["COMPRESSION", "MARIADB_118", "MARIADB_118_ROOT", "MYSQL", "MYSQL_97", "MYSQL_COMPRESSED", "Unavailable",
           "binaries", "cross_compression", "fetch", "fetch_mariadb", "fetch_mysql", "flavour", "machine_version",
           "versions"]

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlogd"
MYSQL = "mysql-9.7"  # the fixtures' id of Oracle MySQL 9.7
MYSQL_COMPRESSED = "mysql-9.7-compressed"  # MySQL 9.7 with binlog_transaction_compression=ON (TRANSACTION_PAYLOAD)
COMPRESSION = "--binlog-transaction-compression=ON"
_FALLBACK_MIRROR = "http://deb.debian.org/debian"
_TIMEOUT = 600


@dataclass(frozen=True)
class Fetch:
    """A server fetched from Debian packages.

    Fields:
        label: its name in messages ("MariaDB 11.8").
        name: the cache directory's name under :data:`CACHE`.
        suite: the Debian suite whose packages are fetched.
        packages: the server, its client and every library they load (glibc included), by package name.
    """

    label: str
    name: str
    suite: str
    packages: tuple[str, ...]

    @property
    def root(self) -> Path:
        """Where the packages are unpacked."""
        return CACHE / self.name


MARIADB_118 = Fetch("MariaDB 11.8", "mariadb-11.8", "trixie", tuple(
    "mariadb-server-core mariadb-client-core mariadb-common mysql-common libmariadb3 libc6 libstdc++6 "
    "libgcc-s1 gcc-14-base libssl3t64 libpcre2-8-0 libzstd1 liblz4-1 zlib1g libaio1t64 liburing2 "
    "libnuma1 libsystemd0 libcap2 libcrypt1 libedit2 libbsd0 libmd0 libncurses6 libtinfo6".split()))
# The libraries of mysqld, the clients and the server's plugins (perl, for a few scripts, is left out).
MYSQL_97 = Fetch("MySQL 9.7", "mysql-9.7", "sid", tuple(
    "mysql-server-core mysql-client-core libc6 libstdc++6 libgcc-s1 gcc-16-base libssl3t64 libzstd1 liblz4-1 "
    "zlib1g libaio1t64 libnuma1 libedit2 libbsd0 libmd0 libtinfo6 libicu78 libprotobuf-lite32t64 libprotobuf32t64 "
    "libgoogle-perftools4t64 libtcmalloc-minimal4t64 libunwind8 liblzma5 libxxhash0 libmecab2 libtirpc3t64 "
    "libfido2-1 libcbor0.10 libudev1 libcurl4t64 libbrotli1 libidn2-0 libunistring5 libnghttp2-14 libnghttp3-9 "
    "libngtcp2-16 libngtcp2-crypto-ossl0 libpsl5t64 libssh2-1t64 libldap2 libsasl2-2 libgssapi-krb5-2 libkrb5-3 "
    "libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libcrypt1".split()))
MARIADB_118_ROOT = MARIADB_118.root
_FETCHED = {"11.8": MARIADB_118, MYSQL: MYSQL_97}


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
    """The fixtures' server ids: the machine's server (as "major.minor", "machine" when there is none),
    "11.8" (without a duplicate when the machine's is 11.8) and :data:`MYSQL` ("mysql-9.7")."""
    mine = machine_version() or "machine"
    return ([mine] if mine == "11.8" else [mine, "11.8"]) + [MYSQL]


def cross_compression():
    """A module's ``pytestmark``: its server tests run on every id of :func:`versions` and on
    :data:`MYSQL_COMPRESSED` too (the ``server_binaries`` fixture parametrized for that module)."""
    import pytest

    return pytest.mark.parametrize("server_binaries", [*versions(), MYSQL_COMPRESSED], indirect=True,
                                   scope="session")


def flavour(version: str) -> str:
    """"mysql" for a fixture id of Oracle MySQL (:data:`MYSQL`), "mariadb" for the others."""
    return "mysql" if version.startswith("mysql") else "mariadb"


@cache
def binaries(version: str) -> ServerBinaries:
    """The installation for a fixture id from :func:`versions` (or :data:`MYSQL_COMPRESSED`: MySQL 9.7's, whose
    servers all start with :data:`COMPRESSION`), fetching 11.8 or MySQL 9.7 on first use.

    Raises:
        Unavailable: no machine server, or a fetched server could not be fetched or run (the reason says which).
    """
    if version == MYSQL_COMPRESSED:  # every server started with these binaries compresses its transactions
        plain = binaries(MYSQL)
        bins = copy.copy(plain)
        bins.server_args = [*plain.server_args, COMPRESSION]
        return bins
    bins = None
    try:
        if version in _FETCHED:
            bins = ServerBinaries.from_root(fetch(_FETCHED[version]))
        elif version == machine_version():
            bins = find_binaries()
    except ServerSetupError as exc:
        raise Unavailable(str(exc)) from None
    if bins is None:
        raise Unavailable(f"no MariaDB/MySQL server for {version!r}: install mariadb-server "
                          "(scripts/test does so as root) or set BINLOGD_MYSQLD")
    return bins


def fetch_mariadb(root: Path = MARIADB_118_ROOT) -> Path:
    """:func:`fetch` of MariaDB 11.8 into ``root``."""
    return fetch(MARIADB_118, root)


def fetch_mysql(root: Path | None = None) -> Path:
    """:func:`fetch` of MySQL 9.7 into ``root`` (default ``~/.cache/binlogd/mysql-9.7``)."""
    return fetch(MYSQL_97, root)


def fetch(spec: Fetch, root: Path | None = None) -> Path:
    """``root`` (default ``spec.root``), holding ``spec``'s packages unpacked; downloaded and unpacked on first call.

    Concurrent callers wait on a lock; ``root/.complete`` (the server's version) is written last.

    Raises:
        ServerSetupError: apt-get or dpkg is missing, or the download or unpacking failed (message says
            which command and why: outside our control when the network or the mirror is down).
    """
    root = spec.root if root is None else root
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
                raise ServerSetupError(f"cannot fetch {spec.label}: {tool} not found (a Debian-based machine is needed)")
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=root.parent))
        try:
            if root.exists():
                shutil.rmtree(root)
            _download_and_unpack(spec, work).rename(root)
            try:
                version = ServerBinaries.from_root(root).version  # it runs here, or this raises
            except ServerSetupError:
                shutil.rmtree(root)
                raise
            done.write_text(version + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return root


def _download_and_unpack(spec: Fetch, work: Path) -> Path:
    mirror, signed_by = _debian_mirror()
    sources = work / f"{spec.suite}.sources"  # apt reads deb822 only from a name ending in .sources
    sources.write_text(f"Types: deb\nURIs: {mirror}\nSuites: {spec.suite}\nComponents: main\n"
                       + (f"Signed-By: {signed_by}\n" if signed_by else ""))
    for sub in ("lists/partial", "cache/archives/partial", "debs", "root"):
        (work / sub).mkdir(parents=True)
    opts = [f"-oDir::Etc::sourcelist={sources}", "-oDir::Etc::sourceparts=-", f"-oDir::State::Lists={work / 'lists'}",
            f"-oDir::Cache={work / 'cache'}", "-oAcquire::Retries=2", "-oAcquire::http::Timeout=60"]
    if os.geteuid() == 0:
        opts.append("-oAPT::Sandbox::User=root")  # the private dirs are not the _apt user's
    _run(spec, f"apt-get update ({mirror} {spec.suite})", ["apt-get", *opts, "update"], work)
    _run(spec, "apt-get download", ["apt-get", *opts, "download", *spec.packages], work / "debs")
    for deb in sorted((work / "debs").glob("*.deb")):
        _run(spec, f"dpkg -x {deb.name}", ["dpkg", "-x", str(deb), str(work / "root")], work)
    return work / "root"


def _run(spec: Fetch, what: str, cmd: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT,
                              env=dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C"))
    except subprocess.TimeoutExpired:
        raise ServerSetupError(f"cannot fetch {spec.label}: `{what}` took over {_TIMEOUT}s")
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if line.startswith(("E:", "dpkg"))] or [proc.stderr]
        raise ServerSetupError(f"cannot fetch {spec.label}: `{what}` failed ({proc.returncode}): "
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


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.servers [mariadb|mysql]``: fetch MariaDB 11.8 (default) or MySQL 9.7 into the
    cache and print its root; 1 with the reason when that is impossible."""
    which = (sys.argv[1:] if argv is None else argv) or ["mariadb"]
    spec = {"mariadb": MARIADB_118, "mysql": MYSQL_97}.get(which[0])
    if spec is None:
        print("usage: python -m tests.support.servers [mariadb|mysql]")
        return 2
    try:
        root = fetch(spec)
    except ServerSetupError as exc:
        print(exc)
        return 1
    print(f"{spec.label} ({ServerBinaries.from_root(root).version}) in {root}")
    return 0



@contextlib.contextmanager
def running_mysql(version: str = MYSQL):
    """A started MySQL 9.7 LocalServer of fixture id ``version`` (:data:`MYSQL` or :data:`MYSQL_COMPRESSED`),
    removed after; the calling test is skipped with the reason when it cannot be fetched."""
    import pytest

    from binlogd.cli.localserver import LocalServer

    try:
        bins = binaries(version)
    except Unavailable as exc:
        pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
    server = LocalServer(binaries=bins)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
