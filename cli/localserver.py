"""A throwaway local MariaDB (or MySQL) server for tests, benchmarks and ``binlogd demo``.

Stdlib only. The server runs as a child process in its own directory (a temp dir by default)
on its own free TCP port on 127.0.0.1, with binary logging in ROW format::

    with LocalServer(extra_args=["--binlog-row-metadata=FULL"]) as srv:
        srv.sql("CREATE DATABASE d")
        print(srv.port, srv.binlog_files())

Users: ``root`` with an empty password (socket and TCP from 127.0.0.1) and ``repl``/``replpass``
with REPLICATION SLAVE, REPLICATION CLIENT and SELECT. The initialised data directory (system
tables and users, no binary logs) is built once per server version and copied for every new
server, so a start costs about a second.

The template and each flavour's options are in :mod:`binlogd.cli.servertemplate` (MySQL: GTIDs on, no X
plugin, no file-privilege directory). The server binary is the machine's (chosen by
:mod:`binlogd.cli.serverbins`) unless ``binaries=`` names another installation, e.g.
``ServerBinaries.from_root(path)`` for a server unpacked from packages.
Failures raise :class:`binlogd.cli.serverbins.ServerSetupError` (a BinlogError and a RuntimeError).

A temp basedir never outlives the process that made it: it is registered the moment it is created (with
SIGINT and SIGTERM held back meanwhile), removed by ``cleanup()``, and otherwise at interpreter exit, after
its server is killed. Commands that run servers (``binlogd demo``, ``python -m binlogd.cli.localserver``)
turn SIGTERM into an exit (:func:`terminate_exits`) so that this happens on SIGTERM too.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from binlogd.cli._children import forget, spawn
from binlogd.cli.serverbins import ServerBinaries, ServerSetupError, require_binaries
from binlogd.cli.servertemplate import (
    INIT_OPTIONS,
    READY_TIMEOUT,
    REPL_PASSWORD,
    REPL_USER,
    STOP_TIMEOUT,
    base_args,
    ensure_template,
    flavour_args,
    run_sql,
    short_socket_path,
    tail_text,
)
from binlogd.cli.signals import signals_held

__all__ = ["LocalServer", "free_port", "signals_held", "terminate_exits"]

def terminate_exits() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in the main thread (instead of killing the process outright), so
    that ``finally`` blocks and exit handlers, which remove the servers' temp dirs, run. A no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        return

    def exit_143(signum, frame):
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, exit_143)


#: LocalServers whose temp basedir exists; each is removed by cleanup(), or at exit by _remove_leftovers.
_owned: set[LocalServer] = set()
_owned_lock = threading.Lock()


@atexit.register  # registered after _children's: runs before it (exit handlers run last first)
def _remove_leftovers() -> None:
    with _owned_lock:
        servers = list(_owned)
    for server in servers:
        with signals_held():
            try:
                server.kill()
                server.cleanup()
            except Exception:  # at exit: remove what can be removed
                shutil.rmtree(server.basedir, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the server


class LocalServer:
    """A private MariaDB/MySQL server with binary logging, in ``basedir`` (a temp dir by default).

    ``start()`` / ``stop()`` (clean shutdown) / ``kill()`` (SIGKILL) / ``restart()`` keep the data
    and the port; ``cleanup()`` removes a temp basedir; ``with LocalServer() as s`` does start on
    enter and stop + cleanup on exit. ``extra_args`` come after the defaults, so they override them.
    ``binaries`` is the installation to run (default: the machine's, :func:`binlogd.cli.serverbins.require_binaries`).
    """

    host = "127.0.0.1"
    user = "root"
    password = ""
    repl_user = REPL_USER
    repl_password = REPL_PASSWORD

    def __init__(
        self,
        basedir: Path | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        binlog_basename: str = "binlog",
        binaries: ServerBinaries | None = None,
    ) -> None:
        self._own_basedir = basedir is None
        self._proc: subprocess.Popen | None = None
        self._socket_dir: Path | None = None
        if basedir is None:
            with signals_held():  # no Ctrl-C between creating the dir and registering it
                self.basedir = Path(tempfile.mkdtemp(prefix="binlogd-srv-"))
                with _owned_lock:
                    _owned.add(self)
        else:
            self.basedir = Path(basedir).resolve()
        self._fixed_port = port is not None
        self.port: int = port if port is not None else free_port()
        self.extra_args = list(extra_args)
        self.binlog_basename = binlog_basename
        self.datadir = self.basedir / "data"
        self.binlog_dir = self.basedir / "binlog"
        self.error_log = self.basedir / "error.log"
        self.pid_file = self.basedir / "mysqld.pid"
        with signals_held():  # a temp dir when the path is too long: made and recorded together
            self.socket, self._socket_dir = short_socket_path(self.basedir / "mysqld.sock")
        self._bins = binaries
        self.startup_seconds: float | None = None

    # -- identity

    @property
    def binaries(self) -> ServerBinaries:
        if self._bins is None:
            self._bins = require_binaries()
        return self._bins

    @property
    def flavor(self) -> str:
        """"mariadb" or "mysql"."""
        return self.binaries.flavor

    @property
    def version(self) -> str:
        """The server's version string, e.g. "10.11.19-MariaDB-0+deb12u1"."""
        return self.binaries.version

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return self.binaries.version_tuple

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def binlog_index(self) -> Path:
        return self.binlog_dir / f"{self.binlog_basename}.index"

    def connect_kwargs(self, *, repl: bool = False, **overrides) -> dict:
        """Keyword arguments for pymysql.connect / aiomysql.connect (TCP)."""
        kw = dict(
            host=self.host,
            port=self.port,
            user=self.repl_user if repl else self.user,
            password=self.repl_password if repl else self.password,
        )
        kw.update(overrides)
        return kw

    def connect(self, *, repl: bool = False, **overrides):
        """A PyMySQL connection over TCP (autocommit on unless overridden)."""
        import pymysql

        overrides.setdefault("autocommit", True)
        return pymysql.connect(**self.connect_kwargs(repl=repl, **overrides))

    # -- arguments

    def server_args(self) -> list[str]:
        bins = self.binaries
        args = base_args(bins, self.datadir, self.basedir)
        args += [
            f"--port={self.port}",
            f"--socket={self.socket}",
            f"--bind-address={self.host}",
            "--skip-name-resolve",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            f"--log-bin={self.binlog_dir / self.binlog_basename}",
            f"--log-bin-index={self.binlog_index}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--server-id=1",
            "--innodb-flush-log-at-trx-commit=2",  # fsync per second: survives kill -9 of the server
            "--max-allowed-packet=64M",
            "--max-connections=200",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
        ]
        return args + flavour_args(bins) + self.extra_args

    def _init_args(self) -> list[str]:
        return [a for a in self.extra_args if a.split("=", 1)[0] in INIT_OPTIONS]

    # -- lifecycle

    def start(self, timeout: float = READY_TIMEOUT) -> "LocalServer":
        """Start the server (initialising the datadir on first start) and wait until it answers."""
        if self.running:
            return self
        t0 = time.monotonic()
        bins = self.binaries
        (self.basedir / "tmp").mkdir(parents=True, exist_ok=True)
        self.binlog_dir.mkdir(parents=True, exist_ok=True)
        if not self.datadir.exists():
            template = ensure_template(bins, self._init_args())
            shutil.copytree(template, self.datadir, symlinks=True,
                            ignore=shutil.ignore_patterns(".complete", "auto.cnf"))  # MySQL: a UUID of its own
        for attempt in range(3):
            try:
                self._start_once(timeout)
                break
            except _PortInUse:
                if self._fixed_port or attempt == 2:
                    raise ServerSetupError(
                        f"port {self.port} is in use; server log:\n{tail_text(self.error_log)}"
                    ) from None
                self.port = free_port()
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start_once(self, timeout: float) -> None:
        self.socket.unlink(missing_ok=True)
        self.pid_file.unlink(missing_ok=True)
        log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
        cmd = self.server_args()
        self._proc = spawn(cmd, self.basedir / "stdout.log")
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                forget(self._proc)
                self._proc = None
                tail = tail_text(self.error_log)
                new = (self.error_log.read_bytes()[log_offset:].decode(errors="replace")
                       if self.error_log.exists() else "")
                if not self._fixed_port and ("Address already in use" in new or "Bind on TCP/IP port" in new):
                    raise _PortInUse()
                raise ServerSetupError(
                    f"{self.flavor} server exited with code {rc} during startup\n"
                    f"command: {' '.join(cmd)}\n--- tail of {self.error_log} ---\n{tail}"
                )
            try:  # a TCP connect as root + SELECT 1: the port is open and auth works
                self.sql("SELECT 1", timeout=10)
                return
            except Exception as exc:  # not up yet
                last_error = exc
            if time.monotonic() > deadline:
                self.kill()
                raise ServerSetupError(
                    f"{self.flavor} server on port {self.port} not ready after {timeout:.0f}s "
                    f"(last error: {last_error})\ncommand: {' '.join(cmd)}\n"
                    f"--- tail of {self.error_log} ---\n{tail_text(self.error_log)}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Clean shutdown (SIGTERM, wait); SIGKILL if it does not stop within ``timeout``."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        forget(proc)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the server (a crash); the datadir is left as the crash left it."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        forget(proc)
        self._proc = None

    def restart(self, timeout: float = READY_TIMEOUT) -> "LocalServer":
        """Stop cleanly if running, then start again on the same port with the same data."""
        self.stop()
        fixed = self._fixed_port
        self._fixed_port = True  # clients keep the address across a restart
        try:
            return self.start(timeout)
        finally:
            self._fixed_port = fixed

    def cleanup(self) -> None:
        """Stop and remove the basedir if it is a temp dir we created."""
        self.stop()
        if self._own_basedir:
            shutil.rmtree(self.basedir, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._own_basedir and not self.basedir.exists():
            with signals_held(), _owned_lock:  # never interrupted holding the lock the exit handler takes
                _owned.discard(self)

    def __enter__(self) -> "LocalServer":
        try:
            return self.start()
        except BaseException:  # a failed or interrupted start: nothing worth a clean shutdown
            self.kill()
            self.cleanup()
            raise

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # -- conveniences

    def sql(self, statement: str, *, database: str | None = None, timeout: float = 60.0) -> list[tuple]:
        """Run one statement as root over TCP; rows as tuples ([] for statements without rows).

        Through PyMySQL when importable (typed values), else the mariadb CLI (strings, None for NULL).
        """
        return run_sql(self.binaries, statement, host=self.host, port=self.port,
                        user=self.user, password=self.password, database=database,
                        timeout=timeout)

    def binlog_files(self) -> list[Path]:
        """The server's binary log files, oldest first, as listed in its index file."""
        try:
            lines = self.binlog_index.read_text().splitlines()
        except FileNotFoundError:
            return []
        files = []
        for line in lines:
            line = line.strip()
            if line:
                p = Path(line)
                files.append(p if p.is_absolute() else (self.datadir / p).resolve())
        return files

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LocalServer {self.host}:{self.port} {state} {self.basedir}>"


class _PortInUse(Exception):
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m binlogd.cli.localserver``: start a server, print how to reach it, wait for Ctrl-C."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int)
    ap.add_argument("--basedir", type=Path)
    ap.add_argument("--root", type=Path, help="run the server unpacked (dpkg -x) into this directory")
    ap.add_argument("extra", nargs="*", help="extra server options (after --)")
    ns = ap.parse_args(argv)
    terminate_exits()  # SIGTERM: exit 143 through the with block, which removes the temp dir
    bins = ServerBinaries.from_root(ns.root) if ns.root else None
    try:
        with LocalServer(basedir=ns.basedir, port=ns.port, extra_args=ns.extra, binaries=bins) as srv:
            print(f"{srv.flavor} {srv.version} on {srv.host}:{srv.port} (socket {srv.socket}), "
                  f"binlogs in {srv.binlog_dir}; started in {srv.startup_seconds:.2f}s; Ctrl-C stops it",
                  flush=True)
            try:
                while srv.running:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    except KeyboardInterrupt:  # while it started: stopped and removed on the way out
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
