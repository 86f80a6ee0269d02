"""deploy/kubernetes (the base) and deploy/overlays/example: every manifest parses, the rendered
sets are validated against the Kubernetes JSON schemas (kubernetes-validate, offline), and the
things binlogd relies on are checked across resources: one replica with its own volume, the lock,
probes on the metrics port, the Secret, a ConfigMap TOML that daemon.config accepts, and selectors
that actually select."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from binlogd.daemon.config import load_config
from tests.support.deploy import DEPLOY, need_yaml, render_kustomization, tool, yaml_docs

BASE = DEPLOY / "kubernetes"
OVERLAY = DEPLOY / "overlays" / "example"
KUBERNETES_VERSION = "1.30"  # the oldest minor still widely run that has everything used here
BUILTIN = {"ConfigMap", "Secret", "Service", "StatefulSet", "PodDisruptionBudget"}
CRDS = {"ServiceMonitor", "PrometheusRule"}


def _kubectl_kustomize(directory: Path) -> list[dict] | None:
    kubectl = tool("kubectl")
    if kubectl is None:
        return None
    yaml = need_yaml()
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module", params=["base", "overlay"])
def rendered(request) -> list[dict]:
    if request.param == "base":
        return render_kustomization(BASE)
    docs = _kubectl_kustomize(OVERLAY)
    if docs is None:
        pytest.skip("kubectl is not installed: the example overlay (patches, generators) needs real kustomize")
    return docs


def _one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _container(docs):
    sts = _one(docs, "StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return sts, container


def _config(docs):
    """The Config the pod would run with: the ConfigMap's TOML plus the container's environment,
    with the Secret's value (from secret.example.yaml) where the container takes one."""
    import tempfile

    sts, c = _container(docs)
    argv = c["args"]
    assert argv[:2] == ["run", "--config"]
    path = Path(argv[2])
    mount = next(m for m in c["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    cm_name = volume["configMap"]["name"]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name)
    toml = cm["data"][path.name]
    example = yaml_docs(BASE / "secret.example.yaml")[0]
    env = {}
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = example["stringData"][ref["key"]]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as fh:
        fh.write(toml)
        fh.flush()
        return load_config(fh.name, env=env), env


# ---------------------------------------------------------------------------------- parsing
def test_every_manifest_parses():
    files = sorted(BASE.glob("*.yaml")) + sorted(OVERLAY.glob("*.yaml"))
    assert len(files) >= 9
    for path in files:
        docs = yaml_docs(path)
        assert docs, f"{path} is empty"
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("kind"), f"{path}: apiVersion and kind"


def test_base_kustomization_lists_everything_but_the_secret():
    k = yaml_docs(BASE / "kustomization.yaml")[0]
    listed = set(k["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk - {"secret.example.yaml"}, "every manifest is used, and no password is applied from git"
    kinds = {d["kind"] for d in render_kustomization(BASE)}
    assert kinds == (BUILTIN - {"Secret"}) | CRDS


def test_our_renderer_agrees_with_kustomize():
    docs = _kubectl_kustomize(BASE)
    if docs is None:
        pytest.skip("kubectl is not installed: only the test's own renderer ran")
    ours = render_kustomization(BASE)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, docs)) == sorted(map(key, ours))
    assert _container(docs)[1]["image"] == _container(ours)[1]["image"] == "binlogd:0.1.0"


# ------------------------------------------------------------------------------ schemas
def test_schemas(rendered):
    kv = pytest.importorskip("kubernetes_validate",
                             reason="kubernetes-validate is not installed (PyPI; it ships the schemas, offline)")
    checked = 0
    for doc in rendered:
        if doc["kind"] in CRDS:
            continue  # the Prometheus Operator's CRDs are not in kubernetes-validate: see below
        try:
            kv.validate(doc, KUBERNETES_VERSION, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked += 1
    assert checked >= 4
    secret = yaml_docs(BASE / "secret.example.yaml")[0]
    kv.validate(secret, KUBERNETES_VERSION, strict=True)


def test_prometheus_operator_resources(rendered):
    """ServiceMonitor and PrometheusRule by hand (the CRD schemas are not available offline)."""
    sm = _one(rendered, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    for ep in sm["spec"]["endpoints"]:
        assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "metricRelabelings"}
    rule = _one(rendered, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["spec"]["groups"]


# ------------------------------------------------------------------- one binlogd, one volume
def test_one_replica_with_its_own_volume_and_the_lock(rendered):
    sts, c = _container(rendered)
    spec = sts["spec"]
    assert spec["replicas"] == 1
    assert spec["updateStrategy"]["type"] == "RollingUpdate"  # a StatefulSet stops the old pod first
    assert spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    assert not [d for d in rendered if d["kind"] in ("Deployment", "HorizontalPodAutoscaler", "ReplicaSet")]
    (claim,) = spec["volumeClaimTemplates"]
    assert set(claim["spec"]["accessModes"]) <= {"ReadWriteOnce", "ReadWriteOncePod"}
    assert claim["spec"]["resources"]["requests"]["storage"]
    data = next(m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    cfg, _ = _config(rendered)
    for path in (cfg.checkpoint.path, cfg.sink.path):
        assert str(path).startswith(data["mountPath"].rstrip("/") + "/"), f"{path} is not on the claim"
    assert cfg.checkpoint.lock, "the flock on checkpoint.json.lock: a second binlogd exits with code 8"
    text = (BASE / "statefulset.yaml").read_text()
    assert "flock" in text and "code 8" in text


def test_pod_security(rendered):
    sts, c = _container(rendered)
    pod = sts["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001 and psc["fsGroup"] == 10001
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    csc = c["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False
    # with a read-only root, everything binlogd writes is on a volume
    writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/binlogd", "/tmp"}


def test_probes_and_ports(rendered):
    _, c = _container(rendered)
    cfg, env = _config(rendered)
    port = int(cfg.metrics.listen.rpartition(":")[2])
    (metrics_port,) = [p for p in c["ports"] if p["name"] == "metrics"]
    assert metrics_port["containerPort"] == port
    assert cfg.metrics.listen.startswith("0.0.0.0:"), "probes and Prometheus reach the pod's address"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_resources(rendered):
    _, c = _container(rendered)
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), kind


def test_graceful_stop_fits_the_grace_period(rendered):
    sts, _ = _container(rendered)
    cfg, _ = _config(rendered)
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > cfg.daemon.shutdown_seconds + 5


def test_password_comes_from_the_secret(rendered):
    _, c = _container(rendered)
    (item,) = [e for e in c["env"] if e["name"] == "BINLOGD_SOURCE__PASSWORD"]
    ref = item["valueFrom"]["secretKeyRef"]
    example = yaml_docs(BASE / "secret.example.yaml")[0]
    assert ref["key"] in example["stringData"]
    assert ref["name"].startswith(example["metadata"]["name"])
    cfg, env = _config(rendered)
    assert cfg.source.password.reveal() == example["stringData"][ref["key"]]
    for doc in rendered:  # and nowhere in plain text
        assert "change-me" not in repr(doc)


def test_configmap_toml_is_accepted(rendered):
    cfg, _ = _config(rendered)
    assert cfg.source.host.endswith(".svc.cluster.local")
    assert cfg.source.heartbeat_seconds == 5.0  # deploy/prometheus alerts at 2 x this
    assert cfg.log.format == "json"


def test_image_is_set_by_kustomize(rendered):
    _, c = _container(rendered)
    name, _, tag = c["image"].rpartition(":")
    assert name.endswith("binlogd") and tag == "0.1.0"


# ------------------------------------------------------------------------------- selectors
def test_service_servicemonitor_pdb_select_the_pod(rendered):
    sts, c = _container(rendered)
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert _selects(sts["spec"]["selector"]["matchLabels"], pod_labels)
    svc = _one(rendered, "Service")
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert _selects(svc["spec"]["selector"], pod_labels)
    assert svc["spec"].get("publishNotReadyAddresses") is True, "a pod that is not streaming is still scraped"
    (sport,) = svc["spec"]["ports"]
    assert sport["name"] == "metrics" and sport["targetPort"] in ("metrics", c["ports"][0]["containerPort"])
    sm = _one(rendered, "ServiceMonitor")
    assert _selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert sm["spec"]["endpoints"][0]["port"] == sport["name"] and sm["spec"]["endpoints"][0]["path"] == "/metrics"
    pdb = _one(rendered, "PodDisruptionBudget")
    assert _selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert ("maxUnavailable" in pdb["spec"]) != ("minAvailable" in pdb["spec"])
    namespaces = {d["metadata"].get("namespace") for d in rendered}
    assert len(namespaces) == 1, "everything in one namespace"


def test_overlay_sets_values():
    docs = _kubectl_kustomize(OVERLAY)
    if docs is None:
        pytest.skip("kubectl is not installed: the example overlay needs real kustomize")
    sts, c = _container(docs)
    assert sts["metadata"]["namespace"] == "cdc" and sts["metadata"]["name"] == "binlogd-shop"
    assert c["image"] == "registry.example.com/data/binlogd:0.1.0"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOncePod"]
    cfg, _ = _config(docs)
    assert cfg.source.server_id == 4202 and cfg.sink.kind == "archive"
    cm_name = next(v["configMap"]["name"] for v in sts["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    assert cm_name == "binlogd-config-shop", "the overlay's binlogd.toml replaced the base's"
