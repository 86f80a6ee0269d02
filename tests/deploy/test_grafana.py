"""deploy/grafana/binlogd-dashboard.json: valid JSON a Grafana can import, the panels an operator
needs, and every PromQL query (panels and template variables) naming only metrics daemon.metrics
exports, with labels those metrics carry."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.deploy import DEPLOY, PROMQL_FUNCTIONS, exported_metrics, promql_names

DASHBOARD = DEPLOY / "grafana" / "binlogd-dashboard.json"
TARGET_LABELS = {"instance", "job"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep theirs inside


def _queries(dashboard):
    """(where, PromQL) for every panel target and every query variable."""
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query)
            assert match, f"variable {var['name']}: {query}"
            yield f"variable {var['name']}", match.group(1) or "binlogd_up"


def test_importable_dashboard(dashboard):
    assert dashboard["uid"] == "binlogd" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[0] == "datasource" and dashboard["templating"]["list"][0]["query"] == "prometheus"
    assert {"job", "instance"} <= set(names)
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat", "gauge", "table", "bargauge", "text"), panel["type"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert re.search(r'\{job=~"\$job", instance=~"\$instance"(, \w+="[^"]*")*\}', target["expr"]), \
                f"{panel['title']}: filtered by the variables"


def test_layout_has_no_overlaps(dashboard):
    cells = set()
    for panel in _panels(dashboard):
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_every_query_names_exported_metrics(dashboard):
    exported = exported_metrics()
    known_labels = set().union(*exported.values()) | TARGET_LABELS
    count = 0
    for where, expr in _queries(dashboard):
        metrics, functions, labels = promql_names(expr)
        assert metrics, f"{where}: no metric in {expr!r}"
        assert functions <= PROMQL_FUNCTIONS, f"{where}: unknown functions {functions - PROMQL_FUNCTIONS}"
        assert metrics <= set(exported), f"{where}: {sorted(metrics - set(exported))} not exported by daemon.metrics"
        assert labels <= known_labels, f"{where}: labels {sorted(labels - known_labels)}"
        assert "__name__" not in expr
        count += 1
    assert count >= 15


def test_the_panels_an_operator_needs(dashboard):
    """Lag, events/s by type, rows/s by table, bytes/s, reconnects, checkpoint age, queue depth."""
    def panels_with(pattern):
        return [p["title"] for p in _panels(dashboard)
                if any(re.search(pattern, t["expr"]) for t in p.get("targets", []))]

    assert panels_with(r"binlogd_lag_seconds")
    assert panels_with(r"sum by \(type\) \(rate\(binlogd_events_total")
    assert panels_with(r"sum by \([^)]*\btable\b[^)]*\) \(rate\(binlogd_rows_total")
    assert panels_with(r"rate\(binlogd_bytes_received_total")
    assert panels_with(r"binlogd_reconnects_total")
    assert panels_with(r"binlogd_checkpoint_age_seconds")
    assert panels_with(r"binlogd_queue_depth")
    # and a time series of each, not only a number
    timeseries = {p["title"] for p in _panels(dashboard) if p["type"] == "timeseries"}
    for needed in ("Lag", "Events/s by type", "Rows/s by table", "Bytes received/s", "Reconnects",
                   "Checkpoint age", "Queue depth"):
        assert needed in timeseries, needed
