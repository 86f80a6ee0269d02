"""daemon.metrics: counters, lag with a fake clock, position series, and a real HTTP scrape."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from binlogd.daemon.operations.http import MetricsServer, parse_listen
from binlogd.daemon.operations.metrics import Metrics, file_index

DESIGN = Path(__file__).resolve().parents[2].parent / "shared" / "DESIGN.md"

NAMES = [
    "binlogd_events_total", "binlogd_rows_total", "binlogd_bytes_received_total", "binlogd_transactions_total",
    "binlogd_lag_seconds", "binlogd_seconds_since_last_event", "binlogd_last_heartbeat_timestamp_seconds",
    "binlogd_position", "binlogd_binlog_file_index", "binlogd_checkpoint_age_seconds", "binlogd_reconnects_total",
    "binlogd_errors_total", "binlogd_queue_depth", "binlogd_up", "binlogd_columns_unnamed_total",
    "binlogd_sink_commits_total",
]


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def value(m: Metrics, name: str, labels: dict | None = None) -> float | None:
    return m.registry.get_sample_value(name, labels or {})


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_move_as_called():
    m = Metrics()
    m.event("WRITE_ROWS_EVENT_V2", 1_700_000_000, 100, False)
    m.event("WRITE_ROWS_EVENT_V2", 1_700_000_000, 50, False)
    m.event("ROTATE_EVENT", 0, 40, True)
    assert value(m, "binlogd_events_total", {"type": "WRITE_ROWS_EVENT_V2"}) == 2
    assert value(m, "binlogd_events_total", {"type": "ROTATE_EVENT"}) == 1
    assert value(m, "binlogd_bytes_received_total") == 190
    m.rows("db", "t", "insert", 3)
    m.rows("db", "u", "insert", 2)
    m.rows("db", "t", "delete", 1)
    assert value(m, "binlogd_rows_total", {"schema": "", "table": "", "op": "insert"}) == 5
    assert value(m, "binlogd_rows_total", {"schema": "", "table": "", "op": "delete"}) == 1
    for _ in range(3):
        m.transaction()
    m.sink_commit()
    m.reconnect()
    m.error("network")
    m.error("network")
    m.error("decode")
    m.queue_depth(7)
    m.unnamed_columns()
    m.set_up(True)
    assert value(m, "binlogd_transactions_total") == 3
    assert value(m, "binlogd_sink_commits_total") == 1
    assert value(m, "binlogd_reconnects_total") == 1
    assert value(m, "binlogd_errors_total", {"kind": "network"}) == 2
    assert value(m, "binlogd_errors_total", {"kind": "decode"}) == 1
    assert value(m, "binlogd_queue_depth") == 7
    assert value(m, "binlogd_columns_unnamed_total") == 1
    assert value(m, "binlogd_up") == 1
    m.set_up(False)
    assert value(m, "binlogd_up") == 0


def test_table_labels_opt_in():
    m = Metrics(table_labels=True)
    m.rows("db", "t", "update", 4)
    assert value(m, "binlogd_rows_total", {"schema": "db", "table": "t", "op": "update"}) == 4
    assert value(m, "binlogd_rows_total", {"schema": "", "table": "", "op": "update"}) is None


def test_registries_are_independent():
    a, b = Metrics(), Metrics()
    a.reconnect()
    assert value(a, "binlogd_reconnects_total") == 1
    assert value(b, "binlogd_reconnects_total") == 0


def test_lag_with_fake_clock():
    clock = Clock()
    m = Metrics(clock=clock)
    assert value(m, "binlogd_lag_seconds") == 0  # no event yet
    m.event("ROTATE_EVENT", 0, 40, True)  # artificial: no effect on lag
    m.event("FORMAT_DESCRIPTION_EVENT", int(clock.t) - 500, 120, True)
    assert m.lag() == 0
    m.event("QUERY_EVENT", int(clock.t) - 30, 80, False)
    clock.t += 5
    assert value(m, "binlogd_lag_seconds") == 35
    assert value(m, "binlogd_seconds_since_last_event") == 5
    clock.t += 10
    m.heartbeat()
    assert value(m, "binlogd_lag_seconds") == 0
    assert value(m, "binlogd_last_heartbeat_timestamp_seconds") == clock.t
    # the heartbeat does not count as an event received
    assert value(m, "binlogd_seconds_since_last_event") == 15
    clock.t += 100
    assert m.lag() == 0  # idle and caught up
    m.event("XID_EVENT", int(clock.t) - 2, 31, False)
    assert m.lag() == 2
    m.event("XID_EVENT", int(clock.t) + 3, 31, False)  # primary clock ahead: never negative
    assert m.lag() == 0
    m.event("XID_EVENT", 0, 31, False)  # timestamp 0 is not a real event
    clock.t += 10
    assert m.lag() == 7


def test_checkpoint_age_and_readiness():
    clock = Clock()
    m = Metrics(clock=clock)
    clock.t += 4
    assert value(m, "binlogd_checkpoint_age_seconds") == 4  # since start before any save
    assert m.readiness(60) == (False, "not streaming")
    m.set_up(True)
    assert m.readiness(60) == (True, "ready")
    clock.t += 100
    assert m.readiness(60)[0]  # stale, but nothing pending
    m.transaction()
    ok, reason = m.readiness(60)
    assert not ok and "checkpoint stale" in reason and "1 transaction" in reason
    m.checkpoint_saved()
    assert m.checkpoint_age() == 0 and m.pending == 0
    assert m.readiness(60) == (True, "ready")
    m.transaction()
    clock.t += 30
    assert m.readiness(60)[0]


def test_position_series_removed_on_file_change():
    m = Metrics()
    m.position("mysql-bin.000041", 4)
    m.position("mysql-bin.000041", 1234)
    assert value(m, "binlogd_position", {"file": "mysql-bin.000041"}) == 1234
    assert value(m, "binlogd_binlog_file_index") == 41
    m.position("mysql-bin.000042", 4)
    assert value(m, "binlogd_position", {"file": "mysql-bin.000041"}) is None
    assert value(m, "binlogd_position", {"file": "mysql-bin.000042"}) == 4
    assert value(m, "binlogd_binlog_file_index") == 42
    text = m.exposition().decode()
    assert text.count("binlogd_position{") == 1
    m.position("weird", 9)
    assert value(m, "binlogd_binlog_file_index") == -1


@pytest.mark.parametrize("name, idx", [
    ("mysql-bin.000042", 42), ("mariadb-bin.000001", 1), ("binlog.1000000", 1000000),
    ("a.b.000007", 7), ("mysql-bin.index", None), ("noext", None), ("", None),
])
def test_file_index(name, idx):
    assert file_index(name) == idx


def test_parse_listen():
    assert parse_listen("127.0.0.1:9108") == ("127.0.0.1", 9108, socket.AF_INET)
    assert parse_listen(":0") == ("", 0, socket.AF_INET)
    assert parse_listen("[::1]:9108") == ("::1", 9108, socket.AF_INET6)
    for bad in ("localhost", "host:port", "h:70000"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            parse_listen(bad)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_http_scrape_health_and_readiness():
    clock = Clock()
    m = Metrics(clock=clock)
    with MetricsServer(m, listen="127.0.0.1:0", ready_max_checkpoint_age=60) as srv:
        assert srv.port and srv.port > 0
        assert get(srv.port, "/healthz") == (200, "ok\n")
        assert get(srv.port, "/readyz") == (503, "not streaming\n")
        m.set_up(True)
        assert get(srv.port, "/readyz") == (200, "ready\n")
        m.transaction()
        clock.t += 61
        code, body = get(srv.port, "/readyz")
        assert code == 503 and body.startswith("checkpoint stale")
        m.checkpoint_saved()
        assert get(srv.port, "/readyz") == (200, "ready\n")
        assert get(srv.port, "/nope")[0] == 404

        m.event("WRITE_ROWS_EVENT_V2", int(clock.t) - 12, 300, False)
        m.rows("db", "t", "insert", 5)
        m.position("mysql-bin.000003", 777)
        code, text = get(srv.port, "/metrics")
        assert code == 200
        s = samples(text)
        assert s[("binlogd_events_total", (("type", "WRITE_ROWS_EVENT_V2"),))] == 1
        assert s[("binlogd_rows_total", (("op", "insert"), ("schema", ""), ("table", "")))] == 5
        assert s[("binlogd_bytes_received_total", ())] == 300
        assert s[("binlogd_transactions_total", ())] == 1
        assert s[("binlogd_lag_seconds", ())] == 12
        assert s[("binlogd_position", (("file", "mysql-bin.000003"),))] == 777
        assert s[("binlogd_binlog_file_index", ())] == 3
        assert s[("binlogd_up", ())] == 1
    assert srv.port is None
    srv.stop()  # twice is fine


def test_disabled_server_is_a_no_op():
    with MetricsServer(Metrics(), listen="") as srv:
        assert srv.port is None


def test_busy_port_raises_oserror_naming_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(OSError, match=re.escape(addr)):
            MetricsServer(Metrics(), listen=addr).start()


def _design_names() -> set[str]:
    if not DESIGN.exists():
        return set()
    text = DESIGN.read_text()
    m = re.search(r"^### Metrics.*?(?=^#)", text, re.S | re.M)
    return set(re.findall(r"binlogd_[a-z_]+", m.group(0))) if m else set()


def test_every_design_metric_is_scraped():
    names = set(NAMES) | _design_names()
    m = Metrics()
    # families exist (HELP/TYPE) before anything is observed
    fresh = {f.name for f in text_string_to_metric_families(m.exposition().decode())}
    for name in names:
        assert name.removesuffix("_total") in fresh, name
    # and every metric has a sample once each method has been called
    m.event("QUERY_EVENT", 1, 10, False)
    m.heartbeat()
    m.rows("s", "t", "insert", 1)
    m.transaction(); m.sink_commit(); m.position("b.000001", 4); m.checkpoint_saved(); m.reconnect()
    m.error("network"); m.queue_depth(0); m.set_up(True); m.unnamed_columns()
    with MetricsServer(m, listen="127.0.0.1:0") as srv:
        code, text = get(srv.port, "/metrics")
    assert code == 200
    scraped = {name for name, _ in samples(text)}
    missing = sorted(names - scraped)
    assert not missing, missing
    assert not (names - set(NAMES)), "DESIGN.md lists a metric this test does not know"


def test_ha_role_metrics_and_standby_readiness():
    """[ha]: the active reports 1 and its epoch; a standby 0 and epoch 0, and is ready while it reaches the broker
    holding the lease (503 with the reason when it cannot); taking the lease again counts a takeover."""
    m = Metrics(clock=Clock())
    with MetricsServer(m, listen="127.0.0.1:0", ready_max_checkpoint_age=60) as srv:
        m.ha_standby()
        assert (value(m, "binlogd_ha_active"), value(m, "binlogd_ha_epoch")) == (0, 0)
        assert get(srv.port, "/readyz") == (200, "standby: ready to take over\n")
        m.ha_standby("Connection refused")
        code, body = get(srv.port, "/readyz")
        assert code == 503 and "unreachable: Connection refused" in body
        m.ha_active(42)
        m.ha_takeover()
        assert (value(m, "binlogd_ha_active"), value(m, "binlogd_ha_epoch")) == (1, 42)
        assert value(m, "binlogd_ha_takeovers_total") == 1
        assert get(srv.port, "/readyz") == (503, "not streaming\n")  # active: readiness as without [ha]
        m.set_up(True)
        assert get(srv.port, "/readyz") == (200, "ready\n")
        m.ha_standby()
        m.ha_active(43)
        m.ha_takeover()
        assert value(m, "binlogd_ha_takeovers_total") == 2 and value(m, "binlogd_ha_epoch") == 43
