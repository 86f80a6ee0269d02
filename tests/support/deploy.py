"""Shared helpers of the deploy/ tests: paths, tools, the daemon's metric names, a PromQL name
extractor, a minimal kustomize renderer, and parsers for systemd units and Dockerfiles."""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def tool(name: str) -> str | None:
    """A command-line tool on PATH or next to this interpreter (the venv's bin/), or None."""
    found = shutil.which(name)
    if found:
        return found
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None


def need_yaml():
    """PyYAML, or a skip naming the missing test dependency."""
    return pytest.importorskip("yaml", reason="PyYAML is not installed (it belongs in the 'test' extra)")


def yaml_docs(path: Path) -> list[dict]:
    """Every non-empty YAML document in ``path``."""
    yaml = need_yaml()
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


# ---------------------------------------------------------------------------------------- metrics
def exported_metrics() -> dict[str, set[str]]:
    """Every series name ``daemon.metrics.Metrics`` exposes, with its label names.

    Each method is called once so the labelled families show samples too; the names also come
    from the ``# TYPE`` lines, so a family without samples still counts.
    """
    from binlogd.daemon.operations.metrics import Metrics

    m = Metrics(table_labels=True)
    m.event("WRITE_ROWS", 1_700_000_000, 100, False)
    m.heartbeat()
    m.rows("shop", "orders", "insert", 3)
    m.transaction()
    m.sink_commit()
    m.position("mysql-bin.000042", 4)
    m.checkpoint_saved()
    m.reconnect()
    m.error("network")
    m.queue_depth(1)
    m.set_up(True)
    m.unnamed_columns()
    text = m.exposition().decode()
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?", line)
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(3) or ""))
            names.setdefault(match.group(1), set()).update(labels)
    return names


# ------------------------------------------------------------------------------------------ PromQL
PROMQL_FUNCTIONS = {
    # aggregations
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
    # functions
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp", "floor",
    "histogram_quantile", "histogram_count", "histogram_sum", "histogram_fraction", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln", "log2", "log10",
    "minute", "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sqrt", "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time",
    "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time",
    "stdvar_over_time", "last_over_time", "present_over_time", "acos", "acosh", "asin", "asinh",
    "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad", "pi",
}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _GROUPING | {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-zA-Z]*|\S")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def promql_names(expr: str) -> tuple[set[str], set[str], set[str]]:
    """(metric names, function names, label names) used in a PromQL expression.

    A small tokenizer, enough for rules and dashboards: strings, label matchers and range or
    subquery brackets are cut out first (Grafana's $variables live there), then an identifier
    followed by "(" is a function, one after by/without/on/ignoring/group_* is a label, and any
    other identifier that is not a keyword is a metric name.
    """
    labels: set[str] = set()
    text = _STRING.sub('""', expr)
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels.update(_MATCHER_LABEL.findall(matchers))
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    tokens = _TOKEN.findall(text)
    metrics: set[str] = set()
    functions: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in _GROUPING and nxt == "(":
            end = tokens.index(")", i)
            labels.update(t for t in tokens[i + 2:end] if t != ",")
            i = end + 1
            continue
        if tok == "offset":
            i += 2
            continue
        if re.match(r"[A-Za-z_:]", tok) and tok not in _KEYWORDS:
            # a call, or an aggregation with its grouping first: sum by (type) (...)
            is_call = nxt == "(" or (nxt in ("by", "without") and tok in PROMQL_FUNCTIONS)
            (functions if is_call else metrics).add(tok)
        i += 1
    return metrics, functions, labels


# --------------------------------------------------------------------------------------- kustomize
def _image_transform(doc: dict, images: list[dict]) -> None:
    def visit(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    for c in value:
                        name = re.split(r"[:@]", c["image"], maxsplit=1)[0]
                        for rule in images:
                            if rule["name"] == name:
                                tag = c["image"][len(name):]
                                c["image"] = rule.get("newName", name) + (
                                    ":" + str(rule["newTag"]) if "newTag" in rule else tag)
                else:
                    visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(doc)


def render_kustomization(directory: Path) -> list[dict]:
    """Render a kustomization that uses only ``resources`` (files or directories), ``images`` and
    ``namespace``: what deploy/kubernetes uses. Anything else fails the test, so a new kustomize
    feature in the base is noticed here (kubectl kustomize renders overlays)."""
    yaml = need_yaml()
    k = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    unsupported = set(k) - {"apiVersion", "kind", "resources", "images", "namespace"}
    assert not unsupported, f"the test renderer does not implement {sorted(unsupported)}"
    docs: list[dict] = []
    for res in k.get("resources", []):
        path = directory / res
        docs.extend(render_kustomization(path) if path.is_dir() else yaml_docs(path))
    docs = copy.deepcopy(docs)
    for doc in docs:
        _image_transform(doc, k.get("images", []))
        if "namespace" in k:
            doc.setdefault("metadata", {})["namespace"] = k["namespace"]
    return docs


# ----------------------------------------------------------------------------------------- systemd
def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as {section: [(key, value), ...]}, keys in order, repeats kept."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path}: not a key=value line: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(unit: dict, section: str, key: str) -> str | None:
    """The effective (last) value of ``key`` in ``section``, or None."""
    values = [v for k, v in unit.get(section, []) if k == key]
    return values[-1] if values else None


def systemd_seconds(text: str) -> float:
    """A systemd time span ("30s", "5min", "1min 30s", "90") in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400}
    total = 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text)
    assert parts, f"not a time span: {text!r}"
    for number, unit in parts:
        total += float(number) * units[unit or "s"]
    return total


# -------------------------------------------------------------------------------------- Dockerfile
class Instruction:
    """One Dockerfile instruction: ``cmd`` (upper case), ``args`` (the rest, continuations joined),
    ``line`` (1-based), ``stage`` (index of its FROM)."""

    def __init__(self, cmd: str, args: str, line: int, stage: int):
        self.cmd, self.args, self.line, self.stage = cmd, args, line, stage

    def json_args(self):
        """The exec-form (JSON array) arguments, or None for the shell form."""
        try:
            value = json.loads(self.args)
        except ValueError:
            return None
        return value if isinstance(value, list) else None

    def __repr__(self) -> str:
        return f"{self.cmd} {self.args} (line {self.line})"


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with comments dropped and backslash continuations joined."""
    out: list[Instruction] = []
    stage = -1
    buf, start = "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        cmd, _, args = buf.partition(" ")
        cmd = cmd.upper()
        if cmd == "FROM":
            stage += 1
        out.append(Instruction(cmd, re.sub(r"\s+", " ", args).strip(), start, stage))
        buf = ""
    return out


def _glob_regex(pattern: str) -> str:
    """Docker's (Go filepath.Match plus "**") glob as a regular expression."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            out.append("[" + pattern[i + 1:end].replace("!", "^", 1) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def dockerignore_excludes(patterns: list[str], relpath: str) -> bool:
    """Whether Docker leaves ``relpath`` out of the build context (last matching pattern wins;
    a pattern matching a parent directory matches its contents)."""
    excluded = False
    parts = relpath.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _glob_regex((pattern[1:] if negate else pattern).strip("/"))
        if any(re.fullmatch(regex, c) for c in candidates):
            excluded = not negate
    return excluded
