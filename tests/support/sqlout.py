"""Helpers for the ``binlogd sql`` tests: run it, pipe its SQL into a server's client, dump a server.

- :func:`binlogd_sql`: ``binlogd sql ARGS…`` as a subprocess (stdout bytes, stderr text, exit code).
- :func:`client`: SQL bytes into the ``mariadb`` client of a server (``--binary-mode``, local infile on).
- :func:`dump`: ``mariadb-dump`` of some databases (data, routines, triggers; one INSERT per row, each
  table's rows sorted), AUTO_INCREMENT counters and the dump's own variable lines removed: what two
  servers must agree on.
- :func:`target`: a started throwaway server (the replay's second, empty server).
- :func:`new_files`: the binlog files a block of work wrote (FLUSH before and after it).
- :func:`speedups`, :func:`sql_main`, :func:`same_sql`: ``binlogd sql`` in this process with the C row
  decoder and SQL writer on or off, and the check that runs of rows events (``groups.RowsRun``) change nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from binlogd.cli import main
from binlogd.cli.localserver import LocalServer
from binlogd.cli.sqlout import groups
from binlogd.library.sqlwriter import native
from binlogd.protocol import rowcodec

_SCRIPT = Path(sys.executable).parent / "binlogd"
BINLOGD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "binlogd.cli"]
_AUTO_INCREMENT = re.compile(rb" AUTO_INCREMENT=\d+")


@dataclass
class SqlRun:
    """One ``binlogd sql`` run."""

    code: int
    sql: bytes
    stderr: str


def binlogd_sql(*args, timeout: float = 600) -> SqlRun:
    """Run ``binlogd sql`` with ``args`` (paths are turned into str)."""
    proc = subprocess.run([*BINLOGD, "sql", *map(str, args)], capture_output=True, timeout=timeout)
    return SqlRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))


def _client_binary(name: str, fallback: str) -> str:
    found = shutil.which(name) or shutil.which(fallback)
    if found is None:
        raise RuntimeError(f"neither {name} nor {fallback} is installed")
    return found


def client(server, sql: bytes, *, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Feed ``sql`` to the server's command-line client; with ``check`` a failure raises AssertionError
    naming the client's error."""
    proc = subprocess.run([_client_binary("mariadb", "mysql"), "-h", server.host, "-P", str(server.port),
                           "-u", server.user, "--binary-mode", "--local-infile=1"],
                          input=sql, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"client exit {proc.returncode}: {proc.stderr.decode('utf-8', 'replace')[-3000:]}")
    return proc


def dump(server, *databases: str) -> bytes:
    """The server's dump of ``databases`` in a form two servers holding the same data agree on."""
    proc = subprocess.run([_client_binary("mariadb-dump", "mysqldump"), "-h", server.host, "-P", str(server.port),
                           "-u", server.user, "--skip-dump-date", "--skip-comments", "--routines", "--triggers",
                           "--hex-blob", "--order-by-primary", "--skip-extended-insert", "--databases", *databases],
                          capture_output=True, timeout=600, check=True)
    out: list[bytes] = []
    rows: list[bytes] = []  # a table's rows, sorted: a table without a primary key has no row order
    for line in proc.stdout.splitlines():
        if line.startswith(b"INSERT INTO "):
            rows.append(line)
            continue
        out += sorted(rows)
        rows = []
        if not line.startswith(b"/*!40"):
            out.append(line)
    return _AUTO_INCREMENT.sub(b"", b"\n".join(out + sorted(rows)))


@contextmanager
def target(like, *extra_args: str):
    """A started throwaway server of the same installation as the server ``like``, with FULL row
    metadata, removed afterwards."""
    server = LocalServer(extra_args=["--binlog-row-metadata=FULL", *extra_args], binaries=like.binaries)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def flush(server) -> Path:
    """FLUSH BINARY LOGS; returns the new (empty) file the server writes next."""
    server.sql("FLUSH BINARY LOGS")
    return server.binlog_files()[-1]


def new_files(server, first: Path) -> list[Path]:
    """The server's binlog files from ``first`` on, the file in use included."""
    files = server.binlog_files()
    return files[files.index(first):]


@contextmanager
def speedups(c_writer: bool):
    """The C row decoder and SQL writer on (the native path), or every C speedup off (the reference)."""
    rows_mode, sql_mode = rowcodec.speedups_enabled(), native.speedups_enabled()
    assert native.use_speedups(True), "the C SQL writer is built but off (BINLOGD_PURE_PYTHON set?)"
    rowcodec.use_speedups(c_writer)
    native.use_speedups(c_writer)
    try:
        yield
    finally:
        rowcodec.use_speedups(rows_mode)
        native.use_speedups(sql_mode)


def sql_main(capsysbinary, args: list) -> tuple[int, bytes, bytes]:
    """``binlogd sql ARGS…`` in this process: (exit code, stdout, stderr)."""
    code = main(["sql", *map(str, args)])
    out, err = capsysbinary.readouterr()
    return code, out, err


def same_sql(capsysbinary, *args) -> tuple[int, bytes, bytes]:
    """``binlogd sql ARGS…`` with runs of rows events and the C writer, asserted equal to it without runs (every
    event decoded), and to the reference path but for the wording of a row's error (the C and Python row
    decoders word them differently; the offset it ends with must agree); returns it."""
    with speedups(False):
        reference = sql_main(capsysbinary, args)
    with speedups(True):
        written = sql_main(capsysbinary, args)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(groups, "_RUN_BYTES", 0)
            event_by_event = sql_main(capsysbinary, args)
    assert written == event_by_event, args
    assert written[:2] == reference[:2], args
    assert written[2].rsplit(b"(", 1)[-1] == reference[2].rsplit(b"(", 1)[-1], args
    return written


def events_between(view, start: int, stop: int) -> int:
    """How many events lie in view[start:stop] (a RowsRun's), counted by their length fields."""
    count = 0
    while start < stop:
        start += int.from_bytes(view[start + 9:start + 13], "little")
        count += 1
    return count


def counting_c_writer(monkeypatch) -> dict:
    """Counts the rows events the C writer writes (``C.rows`` one, ``C.rows_events`` a run of them) and what it
    raises, in the dict it returns: ``{"ok": n, "runs": n, "raised": [exceptions]}``."""
    calls = {"ok": 0, "runs": 0, "raised": []}

    def counted(real, run: bool, events):
        def call(*args):
            try:
                out = real(*args)
            except Exception as exc:
                calls["raised"].append(exc)
                raise
            calls["ok"] += events(*args)
            calls["runs"] += run
            return out
        return call

    C = native.C
    monkeypatch.setattr(C, "rows", counted(C.rows, False, lambda *args: 1))
    monkeypatch.setattr(C, "rows_events", counted(C.rows_events, True, lambda _a, _b, view, start, stop, *rest:
                                                  events_between(view, start, stop)))
    return calls
