"""deploy/prometheus: `promtool check rules` and `promtool test rules` (Debian package prometheus),
every metric the rules name is one daemon.metrics exports, the thresholds follow the configured
heartbeat, and the Prometheus Operator copy (deploy/kubernetes/prometheusrule.yaml) is identical."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from tests.support.deploy import (
    DEPLOY,
    PROMQL_FUNCTIONS,
    exported_metrics,
    parse_unit,
    promql_names,
    tool,
    unit_value,
    yaml_docs,
)

RULES = DEPLOY / "prometheus" / "binlogd-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "binlogd-rules.test.yaml"
# Series Prometheus itself adds for every target: not the daemon's to export.
PROMETHEUS_OWN = {"up"}
TARGET_LABELS = {"instance", "job"}


@pytest.fixture(scope="module")
def rules() -> list[dict]:
    (doc,) = yaml_docs(RULES)
    return [r for g in doc["groups"] for r in g["rules"]]


def _alert(rules, name) -> dict:
    (rule,) = [r for r in rules if r.get("alert") == name]
    return rule


def _promtool():
    promtool = tool("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return promtool


def test_promtool_check_rules():
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_test_rules():
    result = subprocess.run([_promtool(), "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_metric_in_the_rules_is_exported(rules):
    exported = exported_metrics()
    known_labels = set().union(*exported.values()) | TARGET_LABELS
    for rule in rules:
        metrics, functions, labels = promql_names(rule["expr"])
        assert metrics, rule["alert"]
        assert functions <= PROMQL_FUNCTIONS, f"{rule['alert']}: unknown functions {functions - PROMQL_FUNCTIONS}"
        missing = metrics - set(exported) - PROMETHEUS_OWN
        assert not missing, f"{rule['alert']}: {sorted(missing)} not exported by daemon.metrics"
        assert labels <= known_labels, f"{rule['alert']}: labels {labels - known_labels}"


def test_the_alerts_the_operator_needs(rules):
    def uses(name, metric):
        return metric in promql_names(_alert(rules, name)["expr"])[0]

    assert re.fullmatch(r"binlogd_up == 0 unless on\(instance, job\) binlogd_ha_active == 0",
                        _alert(rules, "BinlogdDown")["expr"].strip())
    assert uses("BinlogdNoActiveInstance", "binlogd_ha_active")
    assert uses("BinlogdTwoActiveInstances", "binlogd_ha_epoch")
    assert uses("BinlogdLagHigh", "binlogd_lag_seconds") and ">" in _alert(rules, "BinlogdLagHigh")["expr"]
    assert uses("BinlogdLagCritical", "binlogd_lag_seconds")
    assert uses("BinlogdStreamSilent", "binlogd_seconds_since_last_event")
    assert uses("BinlogdStreamSilent", "binlogd_last_heartbeat_timestamp_seconds")
    reconnect = _alert(rules, "BinlogdReconnectStorm")["expr"]
    assert re.search(r"\b(rate|increase)\(binlogd_reconnects_total\[", reconnect)
    assert uses("BinlogdCheckpointStuck", "binlogd_checkpoint_age_seconds")
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_silence_threshold_is_twice_the_configured_heartbeat(rules):
    """BinlogdStreamSilent alerts after 2 x source.heartbeat_seconds, the heartbeat the Kubernetes
    ConfigMap and the systemd unit configure."""
    (cm,) = [d for d in yaml_docs(DEPLOY / "kubernetes" / "configmap.yaml") if d["kind"] == "ConfigMap"]
    k8s_heartbeat = tomllib.loads(cm["data"]["binlogd.toml"])["source"]["heartbeat_seconds"]
    unit = parse_unit(DEPLOY / "systemd" / "binlogd.service")
    systemd_heartbeat = float(re.search(r"source\.heartbeat_seconds=(\S+)",
                                        unit_value(unit, "Service", "ExecStart")).group(1))
    assert k8s_heartbeat == systemd_heartbeat
    thresholds = [float(x) for x in re.findall(r">\s*(\d+(?:\.\d+)?)", _alert(rules, "BinlogdStreamSilent")["expr"])]
    assert thresholds == [2 * k8s_heartbeat, 2 * k8s_heartbeat]


def test_every_alert_is_unit_tested_firing(rules):
    (tests,) = yaml_docs(RULE_TESTS)
    assert tests["rule_files"] == [RULES.name]
    cases = [t for group in tests["tests"] for t in group.get("alert_rule_test", [])]
    firing = {t["alertname"] for t in cases if t["exp_alerts"]}
    quiet = {t["alertname"] for t in cases if not t["exp_alerts"]}
    names = {r["alert"] for r in rules}
    assert firing == names, f"never tested firing: {names - firing}"
    assert quiet == names, f"never tested quiet: {names - quiet}"


def test_prometheusrule_matches_the_rules_file():
    (plain,) = yaml_docs(RULES)
    (operator,) = yaml_docs(DEPLOY / "kubernetes" / "prometheusrule.yaml")
    assert operator["kind"] == "PrometheusRule"
    assert operator["spec"] == plain, "deploy/kubernetes/prometheusrule.yaml: copy the groups of binlogd-rules.yaml"


def test_promql_name_extractor():
    m, f, labels = promql_names('sum by (type) (rate(binlogd_events_total{job=~"$job"}[$__rate_interval])) '
                                '/ on(instance) group_left() max(binlogd_up offset 5m) > bool 0')
    assert m == {"binlogd_events_total", "binlogd_up"}
    assert f == {"sum", "rate", "max"}
    assert labels == {"type", "job", "instance"}
    assert promql_names('time() - binlogd_last_heartbeat_timestamp_seconds{kind="a}b"} > 1e3')[0] == \
        {"binlogd_last_heartbeat_timestamp_seconds"}
