"""``binlogd run`` fails clearly: the documented exit code, one error line on stderr, no traceback,
never the password.

Exit codes (daemon/service.py): 2 config, 3 auth, 4 unreachable, 5 binlog missing (ERR 1236),
6 primary misconfigured, 8 checkpoint unusable (locked by another daemon).
"""

from __future__ import annotations

import re

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import LOG_LINE, base_overrides, run_to_exit, running_daemon

pytestmark = pytest.mark.server

SECRET = "Sup3r-S3cret-Pw!"


def _check_clean(stderr: str, secrets: tuple[str, ...]) -> str:
    """No traceback, no secret, exactly one ERROR line (returned); every line a log line."""
    assert "Traceback" not in stderr, stderr
    for s in secrets:
        assert s not in stderr, f"the password {s!r} appears on stderr:\n{stderr}"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert all(LOG_LINE.match(ln) for ln in lines), f"stderr has lines that are not log lines:\n{stderr}"
    errors = [ln for ln in lines if " ERROR " in ln]
    assert len(errors) == 1, f"expected one ERROR line:\n{stderr}"
    return errors[0]


def test_wrong_password_exits_3(mariadb, tmp_path):
    o = base_overrides(mariadb, tmp_path, **{"source.password": SECRET})
    rc, err = run_to_exit(o)
    line = _check_clean(err, (SECRET,))
    assert rc == 3, f"exit {rc}:\n{err}"
    assert "authentication" in line.lower() and "repl" in line, line


def test_unknown_host_exits_4(mariadb, tmp_path):
    o = base_overrides(mariadb, tmp_path, **{"source.host": "nonexistent.invalid"})
    rc, err = run_to_exit(o)
    line = _check_clean(err, (mariadb.repl_password,))
    assert rc == 4, f"exit {rc}:\n{err}"
    assert "nonexistent.invalid" in line, line


def test_missing_binlog_exits_5_with_1236(mariadb, tmp_path):
    o = base_overrides(mariadb, tmp_path, **{"source.start": "file:binlog.999999:4"})
    rc, err = run_to_exit(o)
    line = _check_clean(err, (mariadb.repl_password,))
    assert rc == 5, f"exit {rc}:\n{err}"
    # checked against SHOW BINARY LOGS before the dump: a file the primary never had is not "purged"
    assert "no binlog file binlog.999999" in line and "binlog.000001" in line and "purged" not in line, line


def test_statement_format_exits_6(tmp_path):
    srv = LocalServer(extra_args=["--binlog-format=STATEMENT"])
    try:
        srv.start()
        rc, err = run_to_exit(base_overrides(srv, tmp_path))
    finally:
        srv.cleanup()
    line = _check_clean(err, (srv.repl_password,))
    assert rc == 6, f"exit {rc}:\n{err}"
    assert "binlog_format" in line and "STATEMENT" in line.upper() and "ROW" in line, line


@pytest.mark.parametrize("key,value", [
    ("source.port", "not-a-port"),
    ("source.heartbeat_seconds", "-1"),
    ("sink.kind", "kafkaa"),
    ("source.start", "binlog.000001"),
    ("source.no_such_key", "1"),
])
def test_bad_config_exits_2_naming_the_key(mariadb, tmp_path, key, value):
    o = base_overrides(mariadb, tmp_path, **{"source.password": SECRET})
    o[key] = value
    rc, err = run_to_exit(o)
    assert rc == 2, f"exit {rc}:\n{err}"
    assert "Traceback" not in err and SECRET not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line:\n{err}"
    assert key in lines[0], f"the message does not name {key!r}: {lines[0]}"


def test_second_daemon_on_same_checkpoint_exits_8(mariadb, tmp_path):
    o = base_overrides(mariadb, tmp_path)
    with running_daemon(o) as first:
        o2 = dict(o, **{"metrics.listen": "127.0.0.1:0"})
        rc, err = run_to_exit(o2, timeout=30)
        assert first.running, f"the first daemon died:\n{first.stderr}"
    line = _check_clean(err, (mariadb.repl_password,))
    assert rc == 8, f"exit {rc}:\n{err}"
    assert re.search(r"\blocked\b", line), line
    assert str(tmp_path / "checkpoint.json") in line, line
