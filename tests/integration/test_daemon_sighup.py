"""SIGHUP (issue 19): before, it killed ``binlogd run`` without a log line. Now it is logged and ignored (README,
"Stopping"): the daemon goes on streaming, and SIGTERM still stops it with exit 0."""

from __future__ import annotations

import signal

from tests.support.daemon import base_overrides, read_changes, running_daemon, wait_until

IGNORED = r"INFO SIGHUP: ignored"


def test_sighup_is_logged_and_ignored(mariadb, fresh_db, tmp_path):
    with running_daemon(base_overrides(mariadb, tmp_path, **{"filters.include_schemas": fresh_db})) as d:
        for n in (1, 2):
            d.proc.send_signal(signal.SIGHUP)
            wait_until(lambda n=n: d.count(IGNORED) >= n or not d.running, 15, what=f"SIGHUP #{n} logged")
            assert d.running, f"binlogd exited {d.proc.returncode} on SIGHUP:\n{d.stderr}"
        mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES (7)")
        wait_until(lambda: read_changes(tmp_path / "sink", strict=False), 30, what="the row after the SIGHUPs")
    assert d.proc.returncode == 0 and "Traceback" not in d.stderr, d.stderr
    assert [c["after"] for c in read_changes(tmp_path / "sink")] == [{"id": 7}]
