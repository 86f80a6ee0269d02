"""deploy/overlays/ha: two pods of one primary with ``[ha] mode = "lease"``, rendered by ``kubectl kustomize``: two
replicas started in parallel, each with its own volume, spread over nodes, probes on the metrics port, and a TOML
that daemon.config accepts with a bus sink and the lease (a file sink with the lease is refused, exit 2)."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from binlogd.daemon.config import BUS_KINDS, ConfigError, load_config
from tests.support.deploy import DEPLOY, need_yaml, tool

HA = DEPLOY / "overlays" / "ha"


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the ha overlay (patches, generators) needs real kustomize")
    result = subprocess.run([kubectl, "kustomize", str(HA)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return [d for d in need_yaml().safe_load_all(result.stdout) if d]


def _one(docs, kind) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def _toml(docs) -> str:
    sts = _one(docs, "StatefulSet")
    (volume,) = [v for v in sts["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]]
    return cm["data"]["binlogd.toml"]


def _load(text: str, **overrides):
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as fh:
        fh.write(text)
        fh.flush()
        return load_config(fh.name, env={}, overrides=overrides)


def test_two_pods_started_together_on_two_nodes(docs):
    sts = _one(docs, "StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] == 2 and spec["podManagementPolicy"] == "Parallel"
    assert spec["volumeClaimTemplates"], "each pod keeps its own local checkpoint"
    (spread,) = spec["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = spec["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    pdb = _one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1


def test_the_toml_runs_the_lease_on_a_bus_sink(docs):
    cfg = _load(_toml(docs))
    assert cfg.ha.mode == "lease" and cfg.ha.lease_seconds == 5.0
    assert cfg.sink.kind in BUS_KINDS
    assert cfg.checkpoint.lock


def test_a_file_sink_with_the_lease_is_refused(docs):
    with pytest.raises(ConfigError, match=r"ha\.mode: 'lease' needs a sink whose broker holds the lease"):
        _load(_toml(docs), **{"sink.kind": "jsonl"})
