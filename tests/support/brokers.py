"""Private message brokers for the bus-sink tests: Redis, NATS JetStream and PostgreSQL, each its own process on
a free port of 127.0.0.1 with its data in a temp dir of its own (never the machine's copies on 6379/4222/5432).

    with RedisServer(password="pw") as r:    # or the ``redis_server`` fixture
        r.url                                 # redis://:pw@127.0.0.1:PORT/0
        r.kill(); r.start()                   # a crash and a restart: same port, same data dir

A broker is started by ``start()`` (or ``with``), which returns once it answers a real request (Redis PING,
NATS CONNECT + a JetStream API call, PostgreSQL ``SELECT 1``) or raises :class:`BrokerError` with the tail of
its log. ``stop()`` (graceful) and ``kill()`` (SIGKILL to its whole process group) keep the port and the
data dir for a later ``start()``; ``close()`` (also ``with``'s exit) stops it and deletes the dir. Whatever a
test forgot is closed at interpreter exit.

A missing binary raises :class:`BrokerUnavailable` from the constructor. Tests call :func:`require` first
(the fixtures do): it skips on a developer machine and fails under CI=true. ``scripts/install-brokers``
installs the three with apt-get.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Self

import pytest

HOST = "127.0.0.1"
SYSTEM_PORTS = {6379, 4222, 5432}  # the machine's own brokers: never ours
_EXTRA_DIRS = ["/usr/sbin", "/usr/local/sbin"]
_LIVE: set[Broker] = set()  # constructed and not yet closed, for the atexit sweep


class BrokerUnavailable(Exception):
    """A broker cannot run on this machine (binary, OS user or Python client missing); the reason is the text."""


class BrokerError(RuntimeError):
    """A broker failed to start or to answer in time; the text ends with the tail of its log."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now (an ephemeral one, so never a system broker's)."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in SYSTEM_PORTS:
            return port


def find_binary(name: str) -> Path:
    """``name`` on PATH, else in the newest /usr/lib/postgresql/*/bin, /usr/sbin or /usr/local/sbin.

    Raises BrokerUnavailable when it is nowhere."""
    found = shutil.which(name)
    if found:
        return Path(found)
    pg_dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name), reverse=True)
    for d in pg_dirs + _EXTRA_DIRS:
        if os.access(Path(d, name), os.X_OK):
            return Path(d, name)
    raise BrokerUnavailable(f"{name} not found (PATH, /usr/lib/postgresql/*/bin, /usr/sbin); "
                            f"run scripts/install-brokers")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _talk(port: int, data: bytes, done: Callable[[bytes], bool], timeout: float = 2.0) -> bytes:
    """Send ``data`` to HOST:port and read until ``done(received)`` is true; returns what was received.

    Raises OSError (refused, reset, closed early, timed out)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while not done(buf):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"connection closed after {buf[-200:]!r}")
            buf += chunk
        return buf


def _alive(pids: list[int]) -> bool:
    """Whether one of ``pids`` still runs (zombies excluded)."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except (OSError, IndexError):
            continue
    return False


class Broker:
    """One broker process. Fields: ``host``, ``port``, ``dir`` (the temp dir), ``log`` (its stdout+stderr).

    Subclasses set ``KIND``/``CLIENT`` and implement ``_command``, ``_probe`` and ``url``."""

    KIND = ""
    CLIENT = ""  # the Python client module the tests use
    STOP_SIGNAL = signal.SIGTERM

    def __init__(self, args: Sequence[str] = ()):
        self.binaries()
        self.host, self.port, self.args = HOST, free_port(), list(args)
        self.dir = Path(tempfile.mkdtemp(prefix=f"binlogd-{self.KIND}-"))
        self.log = self.dir / "server.log"
        self._proc: subprocess.Popen | None = None
        _LIVE.add(self)

    @classmethod
    def binaries(cls) -> list[Path]:
        """The binaries this broker runs; raises BrokerUnavailable when one is missing."""
        raise NotImplementedError

    @classmethod
    def check(cls, client: bool = True) -> None:
        """Raise BrokerUnavailable when this broker (and, with ``client``, its Python client) cannot run here."""
        cls.binaries()
        if client:
            try:
                importlib.import_module(cls.CLIENT)
            except ImportError as exc:
                raise BrokerUnavailable(f"Python client {cls.CLIENT} missing: {exc}") from None

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> Self:
        """Start (or restart, same port and dir) and wait until it answers; returns self.

        Raises BrokerError (with the log tail) when it exits or does not answer within ``timeout`` s."""
        if self.running:
            return self
        try:
            self._prepare()
            with open(self.log, "ab") as log:
                self._proc = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True,
                                              **self._popen_user())
            self._wait_ready(timeout)
            self._after_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful shutdown (SIGKILL after ``timeout`` s); keeps port and dir for ``start()``."""
        if self._proc is None:
            return
        try:
            self._proc.send_signal(self.STOP_SIGNAL)
            self._proc.wait(timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self._reap()

    def pause(self) -> None:
        """SIGSTOP the broker and every process under it (PostgreSQL's backends each lead a session of their
        own): a broker whose connections stay open and answer nothing."""
        for pid in self._tree():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        for pid in reversed(self._tree()):
            os.kill(pid, signal.SIGCONT)

    def _tree(self) -> list[int]:
        """The broker's pid, then its descendants' (from /proc)."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        tree, i = [self._proc.pid], 0
        while i < len(tree):
            tree += children.get(tree[i], [])
            i += 1
        return tree

    def kill(self) -> None:
        """SIGKILL the broker and its whole process group, as a crash; keeps port and dir for ``start()``."""
        if self._proc is not None:
            self._reap()

    def close(self) -> None:
        """Stop the broker and delete its temp dir (idempotent)."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            _LIVE.discard(self)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the broker's log ('' when there is none)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def error(self, message: str) -> BrokerError:
        """A BrokerError: ``message`` and the log tail."""
        return BrokerError(f"{self.KIND} on port {self.port}: {message}\n--- tail of {self.log} ---\n"
                           f"{self.log_tail()}")

    # Hooks for subclasses.
    def _prepare(self) -> None:
        """Before each launch (first-start setup: config files, initdb)."""

    def _after_ready(self) -> None:
        """After each successful start (first-start setup that needs the server)."""

    def _popen_user(self) -> dict:
        return {}

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _probe(self) -> bool:
        """One readiness check: True when ready, False or OSError when not yet; BrokerError when it never will be."""
        raise NotImplementedError

    def _wait_ready(self, timeout: float) -> None:
        deadline, last = time.monotonic() + timeout, None
        while True:
            if self._proc.poll() is not None:
                raise self.error(f"exited with status {self._proc.returncode} while starting")
            try:
                if self._probe():
                    return
            except (OSError, subprocess.SubprocessError) as exc:
                last = exc
            if time.monotonic() > deadline:
                detail = getattr(last, "stderr", None) or ""  # psql's message
                raise self.error(f"not ready after {timeout} s (last probe: {last!r} {detail})")
            time.sleep(0.05)

    def _reap(self) -> None:
        """SIGKILL the broker's whole tree (its group, and PostgreSQL's backends, each in a session of its own),
        then wait until none of it runs: a restart must not find the old shared memory still attached."""
        tree = self._tree()
        for pid in [-self._proc.pid, *tree]:  # start_new_session: the leader's pid is the group id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait()
        self._proc = None
        deadline = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.02)


class RedisServer(Broker):
    """``redis-server`` with an AOF fsynced on every write and no RDB snapshots.

    Args: ``password`` (requirepass; None for none), ``args`` (more redis-server arguments).
    ``url``: redis://[:password@]127.0.0.1:PORT/0."""

    KIND, CLIENT = "redis", "redis.asyncio"

    def __init__(self, password: str | None = None, args: Sequence[str] = ()):
        self.password = password
        super().__init__(args)

    @classmethod
    def binaries(cls) -> list[Path]:
        return [find_binary("redis-server")]

    @property
    def url(self) -> str:
        auth = f":{_quote(self.password)}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def _command(self) -> list[str]:
        cmd = [str(self.binaries()[0]), "--port", str(self.port), "--bind", self.host, "--dir", str(self.dir),
               "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd + self.args

    def _probe(self) -> bool:
        words = ([["AUTH", self.password]] if self.password else []) + [["PING"]]
        data = b"".join(_resp(w) for w in words)
        reply = _talk(self.port, data, lambda b: b"+PONG\r\n" in b or (b"-" in b and b.endswith(b"\r\n")))
        if b"+PONG\r\n" in reply:
            return True
        if b"-LOADING" in reply:  # still reading its AOF
            return False
        raise self.error(f"PING answered {reply!r}")


class NatsServer(Broker):
    """``nats-server -js`` with JetStream's file store in DIR/js.

    Args: ``user`` and ``password`` (both or neither: client auth, written to DIR/nats.conf), ``args``.
    ``url``: nats://[user:password@]127.0.0.1:PORT."""

    KIND, CLIENT = "nats", "nats"

    def __init__(self, user: str | None = None, password: str | None = None, args: Sequence[str] = ()):
        if (user is None) != (password is None):
            raise ValueError("NatsServer: give both user and password, or neither")
        self.user, self.password = user, password
        super().__init__(args)

    @classmethod
    def binaries(cls) -> list[Path]:
        return [find_binary("nats-server")]

    @property
    def url(self) -> str:
        auth = f"{_quote(self.user)}:{_quote(self.password)}@" if self.user else ""
        return f"nats://{auth}{self.host}:{self.port}"

    def _prepare(self) -> None:
        if self.user:
            conf = f"authorization {{\n  user: {json.dumps(self.user)}\n  password: {json.dumps(self.password)}\n}}\n"
            (self.dir / "nats.conf").write_text(conf)

    def _command(self) -> list[str]:
        cmd = [str(self.binaries()[0]), "-js", "-a", self.host, "-p", str(self.port), "-sd", str(self.dir / "js")]
        if self.user:
            cmd += ["-c", str(self.dir / "nats.conf")]
        return cmd + self.args

    def _probe(self) -> bool:
        # CONNECT, then a JetStream API request ($JS.API.INFO): its reply means JetStream is up too.
        connect = {"verbose": False, "pedantic": False, "lang": "python", "version": "probe", "protocol": 1}
        if self.user:
            connect.update(user=self.user, **{"pass": self.password})
        data = (f"CONNECT {json.dumps(connect)}\r\nSUB _INBOX.probe 1\r\nPUB $JS.API.INFO _INBOX.probe 0\r\n\r\n"
                f"PING\r\n").encode()
        reply = _talk(self.port, data, lambda b: b"-ERR" in b or _nats_msg(b) is not None)
        if b"-ERR" in reply:
            raise self.error(f"CONNECT answered {reply!r}")
        return b'"error"' not in _nats_msg(reply)


class PostgresServer(Broker):
    """``postgres`` on a fresh ``initdb`` cluster (superuser ``postgres``), run as the OS user postgres when
    we are root. The first start creates login role ``user`` (with ``password``, else none) and database
    ``database`` owned by it. TCP logins from 127.0.0.1 use trust, or scram-sha-256 when ``password`` is set;
    the Unix socket in DIR always trusts (``psql`` below).

    Args: ``user``, ``password``, ``database``, ``args`` (more postgres arguments, e.g. ["-c", "x=y"]).
    ``url``: postgresql://user[:password]@127.0.0.1:PORT/database."""

    KIND, CLIENT = "postgres", "psycopg"
    STOP_SIGNAL = signal.SIGINT  # "fast" shutdown: SIGTERM would wait for clients to leave

    def __init__(self, user: str = "binlogd", password: str | None = None, database: str = "binlogd",
                 args: Sequence[str] = ()):
        self.user, self.password, self.database = user, password, database
        super().__init__(args)
        self.data = self.dir / "data"
        self._created = False
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    @classmethod
    def binaries(cls) -> list[Path]:
        """postgres, initdb and psql, from one installation when possible."""
        postgres = find_binary("postgres")
        home = postgres.resolve().parent
        found = [postgres]
        for name in ("initdb", "psql"):
            found.append(home / name if os.access(home / name, os.X_OK) else find_binary(name))
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise BrokerUnavailable("running as root needs the OS user 'postgres' to run the server") from None
        return found

    @property
    def url(self) -> str:
        auth = f"{_quote(self.user)}:{_quote(self.password)}" if self.password else _quote(self.user)
        return f"postgresql://{auth}@{self.host}:{self.port}/{_quote(self.database)}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` as the superuser over the Unix socket; returns psql's unaligned output.

        Raises subprocess.CalledProcessError (stderr in ``.stderr``) when it fails."""
        cmd = [str(self.binaries()[2]), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h", str(self.dir),
               "-p", str(self.port), "-U", "postgres", "-d", database, "-c", sql]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=15, env=_clean_env(),
                              stdin=subprocess.DEVNULL).stdout

    def _popen_user(self) -> dict:
        return {"user": "postgres", "group": "postgres", "extra_groups": []} if os.geteuid() == 0 else {}

    def _prepare(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        initdb = [str(self.binaries()[1]), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-locale",
                  "-E", "UTF8", "--no-sync"]
        with open(self.log, "ab") as log:
            rc = subprocess.run(initdb, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                env=_clean_env(), timeout=120, **self._popen_user()).returncode
        if rc:
            raise self.error(f"initdb exited with status {rc}")
        method = "scram-sha-256" if self.password else "trust"
        (self.data / "pg_hba.conf").write_text(f"local all all trust\nhost all all {self.host}/32 {method}\n")

    def _command(self) -> list[str]:
        return [str(self.binaries()[0]), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir),
                "-h", self.host, *self.args]

    def _probe(self) -> bool:
        socket.create_connection((self.host, self.port), timeout=2).close()
        return self.psql("SELECT 1").strip() == "1"

    def _after_ready(self) -> None:
        if self._created:
            return
        if self.user != "postgres":
            self.psql(f"CREATE ROLE {_ident(self.user)} LOGIN")
        if self.password:
            self.psql(f"ALTER ROLE {_ident(self.user)} PASSWORD {_literal(self.password)}")
        if self.database != "postgres":
            self.psql(f"CREATE DATABASE {_ident(self.database)} OWNER {_ident(self.user)}")
        self._created = True


def _resp(words: list[str]) -> bytes:
    """A Redis command in RESP."""
    out = [f"*{len(words)}\r\n".encode()]
    for w in words:
        b = w.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _nats_msg(buf: bytes) -> bytes | None:
    """The payload of the first complete NATS ``MSG`` in ``buf``, None when there is none yet."""
    at = buf.find(b"\nMSG ") + 1  # every line before it (INFO...) ends in CRLF
    end = buf.find(b"\r\n", at)
    if at == 0 or end < 0:
        return None
    size = int(buf[at:end].split()[-1])
    payload = buf[end + 2:end + 2 + size]
    return payload if len(payload) == size else None


def _quote(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _clean_env() -> dict[str, str]:
    """This environment without PG* variables (PGPASSWORD, PGHOST... would change what psql does)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


@atexit.register
def _close_all() -> None:
    for broker in list(_LIVE):
        try:
            broker.close()
        except Exception:
            pass


KINDS: dict[str, type[Broker]] = {"redis": RedisServer, "nats": NatsServer, "postgres": PostgresServer}


def require(kind: str, client: bool = True) -> None:
    """Skip the calling test when broker ``kind`` ("redis", "nats", "postgres") or, with ``client``, its Python
    client is missing; under CI=true fail instead (CI must run them)."""
    try:
        KINDS[kind].check(client)
    except BrokerUnavailable as exc:
        if _ci():
            pytest.fail(f"{kind} unavailable: {exc} (CI=true: required here)", pytrace=False)
        pytest.skip(f"{kind} unavailable: {exc}")


@contextlib.contextmanager
def broker_for(kind: str) -> Iterator[Broker | None]:
    """The started broker of sink ``kind`` (skipped or failed as :func:`require` says), closed after; None for a
    sink without one (jsonl)."""
    if kind not in KINDS:
        yield None
        return
    require(kind)
    with KINDS[kind]() as broker:
        yield broker


def _serve(request: pytest.FixtureRequest, kind: str) -> Iterator[Broker]:
    require(kind)
    with KINDS[kind](**getattr(request, "param", {})) as server:
        yield server


@pytest.fixture
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A started :class:`RedisServer` for one test, closed after. Constructor kwargs via indirect
    parametrization: ``@pytest.mark.parametrize("redis_server", [{"password": "pw"}], indirect=True)``."""
    yield from _serve(request, "redis")


@pytest.fixture
def nats_server(request: pytest.FixtureRequest) -> Iterator[NatsServer]:
    """A started :class:`NatsServer` (JetStream) for one test, closed after; kwargs as for ``redis_server``."""
    yield from _serve(request, "nats")


@pytest.fixture
def postgres_server(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """A started :class:`PostgresServer` for one test, closed after; kwargs as for ``redis_server``."""
    yield from _serve(request, "postgres")
