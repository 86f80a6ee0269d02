"""Metrics during a run: scrape /metrics, /healthz, /readyz and check the counters against the writes.

The daemon runs in-process (``Daemon(config)``, ``await daemon.run()`` in a thread with its own event
loop). ``Daemon.run`` builds its :class:`MetricsServer` as a local variable, so the port bound for
``metrics.listen = 127.0.0.1:0`` cannot be discovered (neither logged nor exposed on the Daemon):
the test binds a port that was free a moment ago (``free_port()``) instead.
"""

from __future__ import annotations

import time

import pytest

from binlogd.cli.localserver import free_port
from binlogd.daemon.config import load_config
from binlogd.daemon.service import EXIT_OK
from tests.support.daemon import (
    InProcessDaemon,
    base_overrides,
    master_status,
    metric,
    parse_metrics,
    scrape,
    wait_caught_up,
    wait_until,
)

pytestmark = pytest.mark.server


def test_metrics_match_the_writes(mariadb, fresh_db, tmp_path):
    db = fresh_db
    # A private Metrics, and an explicit free port: Daemon does not expose its MetricsServer's port.
    port = free_port()
    overrides = base_overrides(mariadb, tmp_path, **{"metrics.listen": f"127.0.0.1:{port}"})
    config = load_config(None, env={}, overrides=overrides)
    runner = InProcessDaemon(config).start()
    try:
        def streaming():
            status, body = scrape(port)
            return status == 200 and metric(parse_metrics(body), "binlogd_up") == 1.0

        wait_until(streaming, timeout=30, what="binlogd_up == 1 on /metrics")
        assert runner.thread.is_alive(), runner.error
        base = parse_metrics(scrape(port)[1])
        base_rows = {op: metric(base, "binlogd_rows_total", op=op) or 0.0 for op in ("insert", "update", "delete")}
        base_tx = metric(base, "binlogd_transactions_total") or 0.0
        write_type = "WRITE_ROWS" if mariadb.flavor == "mysql" else "WRITE_ROWS_V1"  # MySQL logs v2 rows events
        base_write_events = metric(base, "binlogd_events_total", type=write_type) or 0.0

        conn = mariadb.connect(database=db)
        inserted = updated = deleted = transactions = insert_statements = 0
        try:
            cur = conn.cursor()
            cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
            transactions += 1  # DDL: a transaction of its own
            for k in range(30):
                cur.execute("BEGIN")
                n = 1 + k % 4
                cur.executemany("INSERT INTO m VALUES (%s, %s)", [(k * 10 + i, i) for i in range(n)])
                insert_statements += 1  # executemany of a plain INSERT … VALUES sends one multi-row INSERT
                inserted += n
                if k % 3 == 0:
                    updated += cur.execute("UPDATE m SET v = v + 1 WHERE id DIV 10 = %s", (k,))
                if k % 5 == 4:
                    deleted += cur.execute("DELETE FROM m WHERE id = %s", (k * 10,))
                cur.execute("COMMIT")
                transactions += 1
        finally:
            conn.close()
        last_write = time.time()
        wait_caught_up(mariadb, tmp_path / "checkpoint.json")

        # lag returns to 0 once a heartbeat arrives after the last event (heartbeat_seconds = 1)
        def idle():
            s = parse_metrics(scrape(port)[1])
            hb = metric(s, "binlogd_last_heartbeat_timestamp_seconds") or 0
            return s if hb > last_write and metric(s, "binlogd_lag_seconds") == 0.0 else None

        samples = wait_until(idle, timeout=15, what="a heartbeat after the last write with binlogd_lag_seconds 0")
        # idle for more than 2 × heartbeat_seconds: heartbeats keep the connection (no reconnect)
        idle_until = time.monotonic() + 2.5
        while time.monotonic() < idle_until:
            assert runner.thread.is_alive(), runner.error
            time.sleep(0.1)
        samples = parse_metrics(scrape(port)[1])
        assert metric(samples, "binlogd_lag_seconds") == 0.0
        assert metric(samples, "binlogd_reconnects_total") == 0.0, "reconnected while idle with heartbeats"
        rows = {op: (metric(samples, "binlogd_rows_total", op=op) or 0.0) - base_rows[op]
                for op in ("insert", "update", "delete")}
        assert rows == {"insert": inserted, "update": updated, "delete": deleted}, \
            f"binlogd_rows_total by op {rows} != written {inserted}/{updated}/{deleted}"
        tx = metric(samples, "binlogd_transactions_total") - base_tx
        assert tx >= transactions, f"binlogd_transactions_total grew by {tx}, {transactions} written"
        writes = metric(samples, "binlogd_events_total", type=write_type) - base_write_events
        assert writes == insert_statements, f"{write_type} events {writes} != INSERT statements {insert_statements}"
        assert metric(samples, "binlogd_up") == 1.0
        assert metric(samples, "binlogd_bytes_received_total") > 0
        file, pos = master_status(mariadb)
        assert metric(samples, "binlogd_position", file=file) == pos, (file, pos)
        assert metric(samples, "binlogd_binlog_file_index") == int(file.rsplit(".", 1)[1])
        assert metric(samples, "binlogd_errors_total") in (None, 0.0)
        assert metric(samples, "binlogd_checkpoint_age_seconds") < 60
        for name in ("binlogd_seconds_since_last_event", "binlogd_queue_depth", "binlogd_reconnects_total"):
            assert metric(samples, name) is not None, f"{name} missing"
        assert scrape(port, "/healthz")[0] == 200
        status, reason = scrape(port, "/readyz")
        assert status == 200, reason
        print(f"metrics: rows {rows}, transactions +{tx:g} (written {transactions}), {write_type} +{writes:g}")
    finally:
        rc = runner.stop()
    assert rc == EXIT_OK
    with pytest.raises(OSError):  # the metrics server is gone after the daemon stopped
        scrape(port, "/healthz", timeout=2)
