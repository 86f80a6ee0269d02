"""``binlogd run`` at its start, told something it cannot use: one clear line, the documented exit code, nothing
saved, no traceback.

- no ``--config``, no ``BINLOGD_SOURCE__*`` variable, no ``--set source.…``: exit 2 at once, naming the three
  ways to give a source (it never tries 127.0.0.1:3306 on its own);
- a source port nobody listens on: every retry logs why ("Connection refused"); with no connect succeeded since
  the start for ``source.failover_timeout_seconds``, exit 4; the same for a port that never answers (each connect
  ends after ``source.connect_timeout``, the handshake included);
- ``source.start = "file:NAME:POS"`` with POS inside an event: exit 5 before anything is saved, naming the nearest
  event boundaries (from the server's SHOW BINLOG EVENTS and SHOW BINARY LOGS); past the file's end, its size.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from binlogd.cli.localserver import free_port
from tests.support.daemon import BINLOGD, LOG_LINE, base_overrides, run_to_exit


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("BINLOGD_")}


def _one_error(stderr: str) -> str:
    """The one ERROR line of a run's log, which has only log lines and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert all(LOG_LINE.match(ln) for ln in lines), stderr
    errors = [ln for ln in lines if " ERROR " in ln]
    assert len(errors) == 1, stderr
    return errors[0]


def test_run_without_a_source_exits_2_naming_how_to_give_one(tmp_path):
    began = time.monotonic()
    run = subprocess.run([*BINLOGD, "run", "--set", f"checkpoint.path={tmp_path}/cp.json"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, env=_clean_env())
    assert run.returncode == 2, run.stderr
    assert run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert "--config" in run.stderr and "BINLOGD_SOURCE__HOST" in run.stderr and "source.host" in run.stderr
    assert time.monotonic() - began < 30 and not (tmp_path / "cp.json").exists()


def test_a_source_variable_is_enough_to_start(tmp_path):
    env = _clean_env() | {"BINLOGD_SOURCE__PORT": str(free_port()), "BINLOGD_SOURCE__FAILOVER_TIMEOUT_SECONDS": "1"}
    run = subprocess.run([*BINLOGD, "run", "--set", f"checkpoint.path={tmp_path}/cp.json", "--set",
                          f"sink.path={tmp_path}/sink", "--set", "metrics.listen=", "--set",
                          "reconnect.initial_seconds=0.2"], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 4, run.stderr   # it started and tried the source (nobody listens there)
    assert "Connection refused" in _one_error(run.stderr)


def test_a_refused_first_connect_says_why_and_exits_4_after_the_timeout(tmp_path):
    port = free_port()
    overrides = {"source.host": "127.0.0.1", "source.port": str(port), "source.failover_timeout_seconds": "2",
                 "reconnect.initial_seconds": "0.2", "reconnect.max_seconds": "0.5", "metrics.listen": "",
                 "checkpoint.path": str(tmp_path / "cp.json"), "sink.path": str(tmp_path / "sink")}
    began = time.monotonic()
    rc, err = run_to_exit(overrides, timeout=60, env=_clean_env())
    took = time.monotonic() - began
    assert rc == 4, err
    line = _one_error(err)
    assert f"127.0.0.1:{port}: Connection refused" in line and "source.failover_timeout_seconds" in line, line
    retries = [ln for ln in err.splitlines() if " WARNING " in ln and "reconnecting" in ln]
    assert len(retries) >= 2 and all("Connection refused" in ln for ln in retries), err
    assert 2 <= took < 30, took


def test_a_port_that_never_answers_times_out_and_exits_4(tmp_path):
    """A listening socket that never accepts: the TCP connect succeeds (the kernel's backlog) and no handshake
    ever comes; source.connect_timeout bounds the whole connect."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        overrides = {"source.host": "127.0.0.1", "source.port": str(silent.getsockname()[1]),
                     "source.connect_timeout": "0.5", "source.failover_timeout_seconds": "1.5",
                     "reconnect.initial_seconds": "0.2", "reconnect.max_seconds": "0.5", "metrics.listen": "",
                     "checkpoint.path": str(tmp_path / "cp.json"), "sink.path": str(tmp_path / "sink")}
        rc, err = run_to_exit(overrides, timeout=60, env=_clean_env())
    assert rc == 4, err
    assert "no answer within 0.5s (source.connect_timeout)" in _one_error(err), err


@pytest.fixture
def events(mariadb):
    """(file, [(start, end) of each event]) of a binlog file of the server with a few events in it, closed (the
    server writes on in the next one: the shared server's other writers cannot grow it)."""
    mariadb.sql("FLUSH BINARY LOGS")
    mariadb.sql("CREATE DATABASE IF NOT EXISTS start_errors")
    mariadb.sql("DROP DATABASE start_errors")
    name = str(mariadb.sql("SHOW BINARY LOGS")[-1][0])
    mariadb.sql("FLUSH BINARY LOGS")
    return name, [(int(r[1]), int(r[4])) for r in mariadb.sql(f"SHOW BINLOG EVENTS IN '{name}'")]


def test_a_start_inside_an_event_exits_5_naming_the_nearest_boundaries(mariadb, events, tmp_path):
    name, spans = events
    (start, _), (after, _) = spans[1], spans[2]
    overrides = base_overrides(mariadb, tmp_path, **{"source.start": f"file:{name}:{start + 3}"})
    rc, err = run_to_exit(overrides)
    assert rc == 5, err
    line = _one_error(err)
    assert f"no event of {name} starts at {start + 3}" in line, line
    assert f"the nearest event boundaries are {start} (before) and {after} (after)" in line, line
    assert "max_allowed_packet" not in line and mariadb.repl_password not in err
    assert not (tmp_path / "checkpoint.json").exists()


def test_a_start_past_the_end_exits_5_naming_the_size(mariadb, events, tmp_path):
    name, _spans = events
    size = dict((str(r[0]), int(r[1])) for r in mariadb.sql("SHOW BINARY LOGS"))[name]
    overrides = base_overrides(mariadb, tmp_path, **{"source.start": f"file:{name}:{size + 1000}"})
    rc, err = run_to_exit(overrides)
    assert rc == 5, err
    line = _one_error(err)
    assert f"no event of {name} starts at {size + 1000}: it is past the end of the file ({size} bytes)" in line, line
    assert not (tmp_path / "checkpoint.json").exists()


def test_a_start_in_the_last_event_names_the_files_end(mariadb, events, tmp_path):
    name, spans = events
    size = dict((str(r[0]), int(r[1])) for r in mariadb.sql("SHOW BINARY LOGS"))[name]
    overrides = base_overrides(mariadb, tmp_path, **{"source.start": f"file:{name}:{size - 1}"})
    rc, err = run_to_exit(overrides)
    assert rc == 5, err
    assert f"are {spans[-1][0]} (before) and {size} (after, the file's end)" in _one_error(err), err
