"""Helpers for the daemon's end-to-end tests (``test_daemon_*.py``).

- :class:`DaemonProcess` / :func:`running_daemon`: ``binlogd run`` as a subprocess with ``--set``
  overrides, its stderr collected line by line by a thread; wait for a log line, stop it with
  SIGTERM (expecting exit 0) or SIGKILL.
- :func:`daemon_following`: the server-plus-daemon setup: a daemon following one server or a failover set
  of ports, with its checkpoint and sink in a work directory, stopped and reaped on the way out.
- :func:`read_changes`: every change event of a JSON-lines sink directory, in file order.
- :func:`replay`: apply insert/update/delete by primary key, checking each change against the
  state it applies to (an insert of a present key, or an update/delete whose ``before`` differs
  from the current row, is a duplicate or a lost change and raises :class:`ReplayError`).
- :func:`table_rows`: the server's ``SELECT`` of a table in README.md's JSON forms ("Values"),
  keyed like :func:`replay`'s output.
- :func:`wait_caught_up`: until the checkpoint covers the primary's ``SHOW MASTER STATUS``.

Every wait has a deadline; none sleeps without one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import logging
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

from binlogd.daemon.service import Daemon
from tests.support.flavour import binlog_status
from tests.support.jsondiff import apply_json_diffs

REPO = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).parent / "binlogd"
BINLOGD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "binlogd.cli"]

STREAMING = re.compile(r"streaming from ")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


# --------------------------------------------------------------------------- the daemon process


def base_overrides(server, workdir: Path, **extra) -> dict[str, str]:
    """``--set`` values for a daemon tailing ``server`` with its checkpoint and sink in ``workdir``.

    ``extra`` keys use ``__`` for the dot (``sink__kind="archive"``) or are passed as dotted keys.
    """
    out = {
        "source.host": server.host,
        "source.port": str(server.port),
        "source.user": server.repl_user,
        "source.password": server.repl_password,
        "source.heartbeat_seconds": "1",
        "source.connect_timeout": "5",
        "checkpoint.path": str(workdir / "checkpoint.json"),
        "sink.path": str(workdir / "sink"),
        "metrics.listen": "127.0.0.1:0",
        "reconnect.initial_seconds": "0.2",
        "reconnect.max_seconds": "1",
    }
    for key, value in extra.items():
        out[key.replace("__", ".")] = str(value)
    return out


class DaemonProcess:
    """One ``binlogd run`` subprocess; stderr lines are kept in :attr:`lines`. ``nofile`` sets its
    RLIMIT_NOFILE (soft and hard) before it starts."""

    def __init__(self, overrides: dict[str, str], env: dict | None = None, nofile: int | None = None):
        args = [*BINLOGD, "run"]
        for key, value in overrides.items():
            args += ["--set", f"{key}={value}"]
        self.args = args
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOGD_")}
        full_env.update(env or {})
        limit = None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     cwd=REPO, env=full_env, preexec_fn=limit)
        self._thread = threading.Thread(target=self._pump, daemon=True, name="binlogd-stderr")
        self._thread.start()

    def _pump(self) -> None:
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @property
    def stderr(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for_line(self, pattern: str | re.Pattern, timeout: float = 30.0, start: int = 0) -> str:
        """The first stderr line (from index ``start``) matching ``pattern``; AssertionError on timeout
        or when the process exits first."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    if rx.search(self.lines[i]):
                        return self.lines[i]
                    i += 1
                if self._eof:
                    raise AssertionError(f"binlogd exited (rc={self.proc.wait()}) before a line matching "
                                         f"{rx.pattern!r}; stderr:\n" + "\n".join(self.lines))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no stderr line matching {rx.pattern!r} within {timeout}s; stderr:\n"
                                         + "\n".join(self.lines))
                self._cond.wait(min(left, 0.5))

    def count(self, pattern: str) -> int:
        rx = re.compile(pattern)
        with self._cond:
            return sum(1 for line in self.lines if rx.search(line))

    def wait_streaming(self, timeout: float = 30.0, nth: int = 1) -> str:
        """Wait for the ``nth`` "streaming from" line."""
        deadline = time.monotonic() + timeout
        while True:
            if self.count(STREAMING.pattern) >= nth:
                return [ln for ln in self.lines if STREAMING.search(ln)][nth - 1]
            if self.proc.poll() is not None:
                self._thread.join(5)
                raise AssertionError(f"binlogd exited (rc={self.proc.returncode}) before streaming; stderr:\n"
                                     + self.stderr)
            if time.monotonic() > deadline:
                raise AssertionError(f"binlogd not streaming (#{nth}) within {timeout}s; stderr:\n" + self.stderr)
            time.sleep(0.05)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code; AssertionError (after SIGKILL) when it does not exit in time."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"binlogd did not exit within {timeout}s; stderr:\n" + self.stderr) from None
        self._thread.join(5)
        return rc

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._thread.join(5)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def metrics_port(self, timeout: float = 30.0) -> int:
        """The port of its "metrics on http://…:PORT/metrics" line."""
        return int(METRICS_PORT.search(self.wait_for_line(METRICS_PORT, timeout)).group(1))


@contextlib.contextmanager
def running_daemon(overrides: dict[str, str], *, wait_streaming: bool = True, stop: str = "term",
                   env: dict | None = None) -> Iterator[DaemonProcess]:
    """Run ``binlogd run`` with ``overrides``; on exit stop it (``stop``: "term" asserts exit 0,
    "kill" SIGKILLs, "none" leaves the caller in charge but still kills a survivor)."""
    d = DaemonProcess(overrides, env)
    try:
        if wait_streaming:
            d.wait_streaming()
        yield d
        if stop == "term" and d.running:
            rc = d.terminate()
            assert rc == 0, f"binlogd exited {rc} on SIGTERM; stderr:\n{d.stderr}"
        elif stop == "kill":
            d.kill()
        secret = overrides.get("source.password")
        if secret and d.proc.poll() is not None:
            assert secret not in d.stderr, f"the password appears on binlogd's stderr:\n{d.stderr}"
    finally:
        if d.running:
            d.kill()


METRICS_PORT = re.compile(r"metrics on http://[^ ]*:(\d+)/metrics")


def following_overrides(source, workdir: Path, **settings) -> dict[str, str]:
    """``--set`` values for a daemon following ``source`` with its checkpoint and sink in ``workdir``.

    ``source`` is one server (``host``, ``port``, ``repl_user``, ``repl_password``: :func:`base_overrides`), or a
    list of ports on 127.0.0.1 (``source.hosts`` in that order, the LocalServer replication account, TLS off:
    a failover set followed by GTID). ``settings`` as :func:`base_overrides`' ``extra``.
    """
    if not isinstance(source, (list, tuple)):
        return base_overrides(source, workdir, **settings)
    from binlogd.cli.localserver import LocalServer

    account = SimpleNamespace(host="", port=0, repl_user=LocalServer.repl_user,
                              repl_password=LocalServer.repl_password)
    out = base_overrides(account, workdir, **settings)
    del out["source.host"], out["source.port"]
    out["source.hosts"] = ",".join(f"127.0.0.1:{port}" for port in source)
    out.setdefault("source.tls.mode", "disabled")
    return out


@contextlib.contextmanager
def daemon_following(source, workdir: Path, *, wait_streaming: bool = True, stop: str = "term",
                     env: dict | None = None, **settings) -> Iterator[DaemonProcess]:
    """The server-plus-daemon setup of the daemon's end-to-end tests: ``binlogd run`` following ``source`` (one
    server, or a list of ports: :func:`following_overrides`) with its checkpoint and sink in ``workdir``.

    Yields the :class:`DaemonProcess`, with ``checkpoint`` and ``sink`` (the paths in ``workdir``) set and
    :meth:`DaemonProcess.metrics_port`. ``wait_streaming``: first wait for its "streaming from" line. On the
    way out, ``stop``: "term" SIGTERMs it and asserts exit 0 (when it still runs and the block raised
    nothing), "kill" SIGKILLs it, "none" leaves it to the block; a survivor is always SIGKILLed, and its
    stderr never shows the password.
    """
    overrides = following_overrides(source, workdir, **settings)
    with running_daemon(overrides, wait_streaming=wait_streaming, stop=stop, env=env) as d:
        d.checkpoint, d.sink = Path(overrides["checkpoint.path"]), Path(overrides["sink.path"])
        yield d


@contextlib.contextmanager
def halting(writer):
    """The block, then ``writer.halt()`` however it ends (a load writer of :mod:`tests.support.faults`)."""
    try:
        yield writer
    finally:
        writer.halt()


def run_to_exit(overrides: dict[str, str], timeout: float = 60.0, env: dict | None = None) -> tuple[int, str]:
    """Run ``binlogd run`` until it exits by itself: (exit code, stderr)."""
    d = DaemonProcess(overrides, env)
    try:
        rc = d.wait(timeout)
    finally:
        if d.running:
            d.kill()
    return rc, d.stderr


# --------------------------------------------------------------------------- checkpoint and position


def read_checkpoint(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def master_status(server) -> tuple[str, int]:
    """(file, position) of the end of ``server``'s binlog, in its flavour's SQL."""
    return binlog_status(server)


def _file_key(name: str) -> int:
    m = re.search(r"\.(\d+)$", name)
    return int(m.group(1)) if m else -1


def wait_caught_up(server, checkpoint: Path, timeout: float = 30.0, daemon: DaemonProcess | None = None,
                   fail_on: str | None = r" ERROR ") -> dict:
    """Wait until the checkpoint's file/pos is at or past the primary's current ``SHOW MASTER STATUS``.

    With ``daemon``, fail at once when it exits or logs a line matching ``fail_on`` (an ERROR line).
    """
    file, pos = master_status(server)
    target = (_file_key(file), pos)
    deadline = time.monotonic() + timeout
    cp = None
    while True:
        cp = read_checkpoint(checkpoint)
        if cp is not None:
            p = cp["position"]
            if (_file_key(p["file"]), int(p["pos"])) >= target:
                return cp
        if daemon is not None and not daemon.running:
            raise AssertionError(f"binlogd exited (rc={daemon.proc.returncode}) before catching up with "
                                 f"{file}:{pos}; stderr:\n{daemon.stderr}")
        if daemon is not None and fail_on and daemon.count(fail_on):
            raise AssertionError(f"binlogd logged an error before catching up with {file}:{pos} (checkpoint "
                                 f"{cp and cp['position']}); stderr:\n{daemon.stderr}")
        if time.monotonic() > deadline:
            raise AssertionError(f"checkpoint {cp and cp['position']} did not reach {file}:{pos} within "
                                 f"{timeout}s" + (f"; stderr:\n{daemon.stderr}" if daemon else ""))
        time.sleep(0.05)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value (returned); AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 (polled: keep the last one for the message)
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s" + (f" (last error: {last_exc!r})"
                                                                        if last_exc else ""))
        time.sleep(interval)


# --------------------------------------------------------------------------- the sink


_SINK_NAME = re.compile(r"changes-(\d{6})\.jsonl")


def read_changes(sink_dir: Path, strict: bool = True) -> list[dict]:
    """Every change event of the JSON-lines sink in ``sink_dir``, in order (file index, then line).

    ``strict``: every line must be complete JSON (true after a clean stop); otherwise an incomplete
    last line of the last file (an uncommitted tail after SIGKILL) is ignored.
    """
    sink_dir = Path(sink_dir)
    if not sink_dir.exists():
        return []
    files = sorted((int(m.group(1)), p) for p in sink_dir.iterdir() if (m := _SINK_NAME.fullmatch(p.name)))
    out: list[dict] = []
    for n, (_, path) in enumerate(files):
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        if tail:
            if strict or n != len(files) - 1:
                raise AssertionError(f"{path.name} ends with an incomplete line: {tail[:200]!r}")
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise AssertionError(f"{path.name} line {i + 1} is not JSON ({exc}): {line[:200]!r}") from None
    return out


CHANGE_KEYS = {"op", "schema", "table", "before", "after", "ts", "source"}
SOURCE_KEYS = {"server_id", "file", "pos", "gtid", "row", "id"}


def check_change_shape(change: dict) -> None:
    """ARCHITECTURE.md's change-event shape; AssertionError naming what is wrong."""
    diffs = change.get("json_diffs")  # a partial JSON update's diffs, apart from "after"
    assert set(change) - {"json_diffs"} == CHANGE_KEYS, f"change keys {sorted(change)} != {sorted(CHANGE_KEYS)}: {change}"
    assert diffs is None or change["op"] == "update" and isinstance(diffs, dict) and all(
        isinstance(d, list) and k not in change["after"] for k, d in diffs.items()), change
    assert change["op"] in ("insert", "update", "delete"), change
    assert isinstance(change["schema"], str) and isinstance(change["table"], str), change
    src = change["source"]
    assert isinstance(src, dict) and set(src) == SOURCE_KEYS, f"source keys {sorted(src)}: {change}"
    assert isinstance(src["server_id"], int) and isinstance(src["file"], str) and src["file"], change
    assert isinstance(src["pos"], int) and src["pos"] >= 4 and isinstance(src["row"], int) and src["row"] >= 0, change
    assert src["id"].startswith(f"{src['file']}:{src['pos']}:") and src["id"].endswith(f":{src['row']}"), change
    assert isinstance(change["ts"], int) and change["ts"] > 1_000_000_000, change
    op = change["op"]
    if op == "insert":
        assert change["before"] is None and isinstance(change["after"], dict), change
    elif op == "update":
        assert isinstance(change["before"], dict) and isinstance(change["after"], dict), change
    else:
        assert isinstance(change["before"], dict) and change["after"] is None, change


class ReplayError(AssertionError):
    """A change that does not apply to the replayed state (a duplicate or a lost change)."""


def _key(row: dict, pk: tuple[str, ...]):
    return row[pk[0]] if len(pk) == 1 else tuple(row[c] for c in pk)


def replay(changes: Iterable[dict], pk: str | tuple[str, ...] | dict = "id", schemas: Iterable[str] | None = None,
           strict: bool = True) -> dict[tuple[str, str], dict]:
    """Apply the changes by primary key: ``{(schema, table): {pk: row}}``.

    ``pk`` is a column name, a tuple of names, or ``{(schema, table): names}`` (default "id").
    ``schemas`` keeps only those schemas. With ``strict``, an insert of a key already present, or an
    update/delete whose ``before`` is not the current row, raises :class:`ReplayError`.
    """
    keep = set(schemas) if schemas is not None else None
    state: dict[tuple[str, str], dict] = {}
    for n, c in enumerate(changes):
        st = (c["schema"], c["table"])
        if keep is not None and st[0] not in keep:
            continue
        cols = pk.get(st, ("id",)) if isinstance(pk, dict) else pk
        cols = (cols,) if isinstance(cols, str) else tuple(cols)
        rows = state.setdefault(st, {})
        where = f"change #{n} ({c['op']} {st[0]}.{st[1]} at {c['source']})"
        if c["op"] == "insert":
            k = _key(c["after"], cols)
            if strict and k in rows:
                raise ReplayError(f"{where}: key {k!r} inserted twice (a duplicated transaction?)")
            rows[k] = c["after"]
        elif c["op"] == "update":
            k0, k1 = _key(c["before"], cols), _key(c["after"], cols)
            if strict and rows.get(k0) != c["before"]:
                raise ReplayError(f"{where}: before image {c['before']} is not the current row {rows.get(k0)}")
            old = rows.pop(k0, None)
            if strict and k1 in rows:
                raise ReplayError(f"{where}: update moves key {k0!r} onto existing key {k1!r}")
            rows[k1] = c["after"]
            if c.get("json_diffs"):  # partial JSON: the diffs apply to the value before the update
                rows[k1] = {**c["after"], **{col: apply_json_diffs((old or c["before"])[col], diffs)
                                            for col, diffs in c["json_diffs"].items()}}
        else:
            k = _key(c["before"], cols)
            if strict and rows.get(k) != c["before"]:
                raise ReplayError(f"{where}: deleted row {c['before']} is not the current row {rows.get(k)}")
            rows.pop(k, None)
    return state


# --------------------------------------------------------------------------- the server's side


def _fraction(micro: int, fsp: int) -> str:
    return f".{micro:06d}"[: fsp + 1] if fsp else ""


def _time_text(value: dt.timedelta, fsp: int) -> str:
    total = value.days * 86400 * 1_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if total < 0 else ""
    total = abs(total)
    secs, micro = divmod(total, 1_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}{_fraction(micro, fsp)}"


def json_form(data_type: str, column_type: str, precision: int | None, value):
    """A PyMySQL value (session time_zone '+00:00') in README.md's JSON form ("Values"), by information_schema type."""
    if value is None:
        return None
    t = data_type.lower()
    fsp = int(precision or 0)
    if t in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"):
        return int(value)
    if t == "decimal":
        assert isinstance(value, Decimal)
        return format(value, "f")
    if t == "double":
        return float(value)
    if t == "float":
        import struct

        f32 = struct.unpack("<f", struct.pack("<f", float(value)))[0]
        for digits in range(1, 18):
            cand = float(f"{f32:.{digits}g}")
            if struct.unpack("<f", struct.pack("<f", cand))[0] == f32:
                return cand
        return f32
    if t == "bit":
        return int.from_bytes(value, "big")
    if t == "date":
        return value if isinstance(value, str) else f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if t == "time":
        return _time_text(value, fsp)
    if t in ("datetime", "timestamp"):
        if isinstance(value, str):
            return value
        return (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond, fsp)}")
    if t == "json":  # MySQL's JSON type (MariaDB's JSON is a LONGTEXT): the document, as the sink gives it
        return json.loads(value)
    if t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext"):
        return value if isinstance(value, str) else value.decode("utf-8")
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point"):
        return base64.b64encode(value).decode("ascii")
    if t == "enum":
        return value
    if t == "set":
        if isinstance(value, set):  # PyMySQL may return a set; keep the column's member order
            members = re.findall(r"'((?:[^']|'')*)'", column_type)
            return [m for m in members if m in value]
        return value.split(",") if value else []
    raise AssertionError(f"no JSON form for {data_type} ({column_type})")


def table_rows(server, schema: str, table: str, pk: str | tuple[str, ...] = "id") -> dict:
    """``SELECT *`` of ``schema.table`` in the JSON forms, ``{pk: row}`` like :func:`replay`."""
    cols = (pk,) if isinstance(pk, str) else tuple(pk)
    conn = server.connect(init_command="SET time_zone = '+00:00'")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, DATETIME_PRECISION "
                        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                        "ORDER BY ORDINAL_POSITION", (schema, table))
            meta = list(cur.fetchall())
            assert meta, f"no table {schema}.{table}"
            cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
            rows = cur.fetchall()
    finally:
        conn.close()
    out = {}
    for row in rows:
        d = {name: json_form(t, ct, p, v) for (name, t, ct, p), v in zip(meta, row)}
        out[_key(d, cols)] = d
    return out


def assert_sink_matches(server, schema: str, tables: Iterable[str], state: dict, pk="id") -> None:
    """Each table's replayed rows equal its SELECT (with a short diff on failure)."""
    for table in tables:
        want = table_rows(server, schema, table, pk)
        got = state.get((schema, table), {})
        if got != want:
            missing = sorted(set(want) - set(got), key=repr)[:10]
            extra = sorted(set(got) - set(want), key=repr)[:10]
            differ = [k for k in want if k in got and got[k] != want[k]][:3]
            detail = "; ".join(f"{k!r}: sink {got[k]} != server {want[k]}" for k in differ)
            raise AssertionError(f"{schema}.{table}: sink replay ({len(got)} rows) != server ({len(want)} rows); "
                                 f"missing from sink {missing}, extra in sink {extra}; {detail}")


# --------------------------------------------------------------------------- metrics


def scrape(port: int, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, str]:
    """(HTTP status, body) of ``http://127.0.0.1:port/path``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text → ``{(name, frozenset(labels.items())): value}``."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = frozenset(_LABEL.findall(m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples: dict, name: str, **labels) -> float | None:
    """The value of ``name`` whose labels include ``labels`` (summed over the others), None if absent."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    return sum(found) if found else None


@contextlib.contextmanager
def captured_log(name: str) -> Iterator[tuple[logging.Logger, list[str]]]:
    """A logger (INFO and up) for an :class:`InProcessDaemon`, and the list its messages go to."""
    lines: list[str] = []
    log = logging.getLogger(name)
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield log, lines
    finally:
        log.removeHandler(handler)


class InProcessDaemon:
    """A Daemon on its own event loop in a thread; ``stop()`` returns its exit code."""

    def __init__(self, config, metrics=None, log=None):
        self.daemon = Daemon(config, log=log, metrics=metrics)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.rc: int | None = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True, name="binlogd-inprocess")

    def _main(self) -> None:
        async def go():
            self.loop = asyncio.get_running_loop()
            self._started.set()
            return await self.daemon.run()

        try:
            self.rc = asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc
        finally:
            self._started.set()

    def start(self) -> InProcessDaemon:
        self.thread.start()
        assert self._started.wait(10), "the in-process daemon's loop did not start"
        return self

    def wait_streaming(self, timeout: float = 60.0) -> None:
        def streaming():
            if not self.thread.is_alive():
                raise AssertionError(f"daemon ended (rc={self.rc}, error={self.error!r}) before streaming")
            return self.daemon.sessions >= 1

        deadline = time.monotonic() + timeout
        while not streaming():
            assert time.monotonic() < deadline, f"the daemon is not streaming after {timeout}s"
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.loop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.daemon.stop)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the in-process daemon did not stop within {timeout}s"
        if self.error is not None:
            raise self.error
        return self.rc
