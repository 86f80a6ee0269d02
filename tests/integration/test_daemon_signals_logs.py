"""Signals and logs of ``binlogd run`` (subprocess against ``mariadb``).

- SIGTERM and SIGINT: exit 0 within ``daemon.shutdown_seconds``, with the checkpoint at the server's
  position (the sink committed what it held).
- Two SIGTERMs in quick succession: the process exits within 5 s with 0 (the kernel may merge two
  pending SIGTERMs into one) or 143 (128 + SIGTERM: the second signal's immediate exit; both occur
  in practice); never a hang.
- ``log.format=json``: every stderr line is a JSON object with ts (number), level and msg; one
  "streaming from" line per connection, one "rotate to" line per FLUSH BINARY LOGS, and no line per
  event (200 transactions written, a handful of lines in all). The plain format: every line is
  ``<UTC ts> LEVEL message``.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.support.daemon import (
    LOG_LINE,
    DaemonProcess,
    base_overrides,
    read_changes,
    read_checkpoint,
    wait_caught_up,
)

pytestmark = pytest.mark.server

SHUTDOWN_SECONDS = 3.0


def _write(server, db: str, transactions: int, start: int = 0) -> None:
    conn = server.connect(database=db)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS s (id INT PRIMARY KEY, v VARCHAR(20))")
        for k in range(start, start + transactions):
            cur.execute("BEGIN")
            cur.execute("INSERT INTO s VALUES (%s, %s)", (k, f"row {k}"))
            cur.execute("COMMIT")
    finally:
        conn.close()


def _start(server, tmp_path, **extra) -> DaemonProcess:
    overrides = base_overrides(server, tmp_path, **{"daemon.shutdown_seconds": str(SHUTDOWN_SECONDS), **extra})
    return DaemonProcess(overrides)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_zero_within_shutdown_seconds(mariadb, fresh_db, tmp_path, signum):
    d = _start(mariadb, tmp_path)
    try:
        d.wait_streaming()
        _write(mariadb, fresh_db, 20)
        caught = wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=d)
        _write(mariadb, fresh_db, 20, start=100)  # still arriving when the signal comes
        t0 = time.monotonic()
        d.proc.send_signal(signum)
        rc = d.wait(timeout=SHUTDOWN_SECONDS + 10)
        elapsed = time.monotonic() - t0
    finally:
        d.kill()
    assert rc == 0, f"{signum.name}: exit code {rc}; stderr:\n{d.stderr}"
    assert elapsed <= SHUTDOWN_SECONDS + 1.0, \
        f"{signum.name}: took {elapsed:.1f}s to exit (shutdown_seconds {SHUTDOWN_SECONDS}); stderr:\n{d.stderr}"
    assert d.count(signum.name) >= 1, f"no log line about {signum.name}; stderr:\n{d.stderr}"
    assert "Traceback" not in d.stderr, d.stderr
    # The stop commits at a transaction boundary: the sink holds a prefix of the writes, whole
    # transactions, and the checkpoint is at or past the first (caught-up) batch.
    ids = [c["after"]["id"] for c in read_changes(tmp_path / "sink") if c["schema"] == fresh_db]
    written = [*range(20), *range(100, 120)]
    assert len(ids) >= 20 and ids == written[:len(ids)], f"sink ids {ids} are not a prefix of the writes"
    cp = read_checkpoint(tmp_path / "checkpoint.json")
    assert cp is not None and cp["position"]["file"] == caught["position"]["file"] \
        and cp["position"]["pos"] >= caught["position"]["pos"], (caught["position"], cp)
    assert all(LOG_LINE.match(line) for line in d.lines), f"a stderr line is not a plain log line:\n{d.stderr}"


def test_second_sigterm_exits_promptly(mariadb, fresh_db, tmp_path):
    d = _start(mariadb, tmp_path)
    try:
        d.wait_streaming()
        _write(mariadb, fresh_db, 5)
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=d)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        d.proc.send_signal(signal.SIGTERM)
        rc = d.wait(timeout=5)
        elapsed = time.monotonic() - t0
    finally:
        d.kill()
    # -SIGTERM: the second signal came after the event loop had closed (its handlers removed) and the
    # default action ended the process, also "at once", after the checkpoint was written.
    assert rc in (0, 128 + signal.SIGTERM, -signal.SIGTERM), f"exit code {rc} after two SIGTERMs; stderr:\n{d.stderr}"
    assert elapsed < 5, elapsed
    if rc == 128 + signal.SIGTERM:
        assert d.count("second SIGTERM") == 1, f"exit 143 without the 'second SIGTERM' line:\n{d.stderr}"


def test_json_logs_one_line_per_connection_not_per_event(mariadb, fresh_db, tmp_path):
    d = _start(mariadb, tmp_path, **{"log.format": "json"})
    try:
        d.wait_streaming()
        _write(mariadb, fresh_db, 100)
        mariadb.sql("FLUSH BINARY LOGS")
        _write(mariadb, fresh_db, 100, start=1000)
        wait_caught_up(mariadb, tmp_path / "checkpoint.json", daemon=d, fail_on='"level": "error"')
        rc = d.terminate(timeout=SHUTDOWN_SECONDS + 10)
    finally:
        d.kill()
    assert rc == 0, f"exit code {rc}; stderr:\n{d.stderr}"
    records = []
    for line in d.lines:
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError(f"stderr line is not JSON: {line!r}\nstderr:\n{d.stderr}") from None
        assert isinstance(obj, dict), line
        assert {"ts", "level", "msg"} <= set(obj), f"missing ts/level/msg: {line!r}"
        assert isinstance(obj["ts"], (int, float)) and obj["ts"] > 1_000_000_000, line
        assert obj["level"] in ("debug", "info", "warning", "error", "critical"), line
        assert isinstance(obj["msg"], str) and obj["msg"], line
        records.append(obj)
    msgs = [r["msg"] for r in records]
    assert sum(m.startswith("streaming from ") for m in msgs) == 1, msgs
    assert sum(m.startswith("rotate to ") for m in msgs) == 1, f"one FLUSH BINARY LOGS, rotate lines: {msgs}"
    assert not [r for r in records if r["level"] in ("error", "critical")], msgs
    # 200 transactions (and their 400+ events): a handful of lines (metrics, streaming, rotate, stop)
    assert len(records) <= 8, f"{len(records)} log lines for 200 transactions (per-event logging?):\n{d.stderr}"
