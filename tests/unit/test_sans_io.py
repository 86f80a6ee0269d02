"""protocol/ is sans-I/O: it never imports transports, event loops, loggers or the layers above it;
and every layer above imports only the layers below it.

ARCHITECTURE.md: "protocol imports no asyncio, socket, ssl, pymysql, aiomysql or logging handler",
nor anything above it. Two checks:

* statically, every ``import``/``from … import`` in every module of protocol/ (including imports
  inside functions and relative imports such as ``from ..daemon import x``), plus
  ``importlib.import_module("…")`` / ``__import__("…")`` calls with a literal name;
* dynamically, importing every module of the package in a fresh interpreter must not drag any
  forbidden module into ``sys.modules`` (catches imports hidden behind third-party packages).

The layers above (ARCHITECTURE.md), one folder each: protocol <- library <- daemon, pipeline <- cli.
library imports only protocol (and no network module); daemon and pipeline import protocol and library,
never each other or the CLI layer; nothing imports the CLI layer. The same two checks, static and dynamic,
hold for each. Across the whole package the module import graph (imports inside functions included) has
no cycle, and no module name is used in two layers.

The checkers themselves are tested on synthetic sources, so a broken checker cannot pass silently.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "protocol"

# Top-level names protocol/ must never import (a submodule of one counts as the module itself).
FORBIDDEN = frozenset({"asyncio", "socket", "selectors", "ssl", "pymysql", "aiomysql", "logging",
                       "daemon", "binlogd"})
# Modules that must not appear in sys.modules after importing the whole package.
FORBIDDEN_LOADED = FORBIDDEN


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = ["binlogd", *rel.parts] if rel.parts[0] in _FOLDER_NAMES else list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """Absolute name of ``from <level dots><module> import …`` written in module ``importer``."""
    if level == 0:
        return module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    if level - 1 > len(package):
        return "<beyond top level>." + (module or "")
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_names(source: str, importer: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of everything ``source`` imports or may import."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, importer, is_package)
            out.append((node.lineno, base))
            # `from .. import daemon` / `from protocol import x`: the names may be modules too.
            out.extend((node.lineno, f"{base}.{alias.name}" if base else alias.name)
                       for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.append((node.lineno, arg.value))
    return out


def _layer_name(name: str) -> str:
    """``binlogd.protocol.x`` is protocol's own ``protocol.x``; every other ``binlogd.*`` is a layer above."""
    return name[len("binlogd."):] if name == "binlogd.protocol" or name.startswith("binlogd.protocol.") else name


def violations(source: str, importer: str, is_package: bool = False) -> list[str]:
    found = []
    for line, name in imported_names(source, importer, is_package):
        top = _layer_name(name).split(".")[0]
        if top in FORBIDDEN or name.startswith("<beyond"):
            found.append(f"line {line}: {name}")
    return found


def _protocol_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


# ------------------------------------------------------------------------ the checker checks itself


@pytest.mark.parametrize("source, importer, expected", [
    ("import asyncio", "protocol.x", ["line 1: asyncio"]),
    ("import asyncio.streams as s", "protocol.x", ["line 1: asyncio.streams"]),
    ("from socket import socket", "protocol.x", ["line 1: socket", "line 1: socket.socket"]),
    ("def f():\n    import logging.handlers\n", "protocol.x", ["line 2: logging.handlers"]),
    ("from ..daemon import stream", "protocol.x", ["line 1: daemon", "line 1: daemon.stream"]),
    ("from .. import binlogd", "protocol.x", ["line 1: binlogd"]),
    ("from ... import daemon", "protocol.sub.x", ["line 1: daemon"]),
    ("from ... import x", "protocol.x", ["line 1: <beyond top level>.", "line 1: <beyond top level>..x"]),
    ("import importlib\nimportlib.import_module('ssl')", "protocol.x", ["line 2: ssl"]),
    ("m = __import__('selectors')", "protocol.x", ["line 1: selectors"]),
    ("import pymysql, aiomysql", "protocol.x", ["line 1: pymysql", "line 1: aiomysql"]),
    ("from .errors import ProtocolError\nimport struct, zlib\nfrom . import events",
     "protocol.x", []),
    ("from . import daemon", "protocol", []),  # protocol.daemon would be protocol's own module
    ("from .. import daemon", "protocol.sub", []),  # in protocol/sub/__init__.py, `..` is protocol
    ("from ... import daemon", "protocol.sub", ["line 1: daemon"]),
])
def test_checker_finds_forbidden_imports(source, importer, expected):
    is_package = importer.count(".") == 0 or importer.endswith(".sub")
    assert violations(textwrap.dedent(source), importer, is_package) == expected


def test_package_has_modules():
    names = [p.name for p in _protocol_files()]
    assert "decoder.py" in names and "reader.py" in names and "__init__.py" in names


# ------------------------------------------------------------------------ the real package


@pytest.mark.parametrize("path", _protocol_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_module_imports_nothing_forbidden(path: Path):
    source = path.read_text(encoding="utf-8")
    found = violations(source, _module_name(path), path.name == "__init__.py")
    assert not found, f"{path.relative_to(REPO)} imports forbidden modules: {found}"


_PROBE = r"""
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import binlogd.protocol as protocol
names = ["binlogd.protocol"]
for info in pkgutil.walk_packages(protocol.__path__, "binlogd.protocol."):
    importlib.import_module(info.name)
    names.append(info.name)
print(json.dumps({"before": sorted(before), "after": sorted(sys.modules), "imported": names}))
"""


def test_importing_protocol_loads_no_io_modules():
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(REPO)], capture_output=True, text=True,
                          cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, f"importing protocol failed:\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["imported"]) >= {"binlogd.protocol.decoder", "binlogd.protocol.reader", "binlogd.protocol.packet"}
    before = {m.split(".")[0] for m in result["before"]}
    assert not FORBIDDEN_LOADED & before, (
        f"the bare interpreter already loads {sorted(FORBIDDEN_LOADED & before)}: this check would be void")
    # the bare namespace package "binlogd" (an empty __init__) is protocol's parent, not a layer above it
    loaded = sorted(m for m in result["after"]
                    if m != "binlogd" and _layer_name(m).split(".")[0] in FORBIDDEN_LOADED)
    assert not loaded, f"importing protocol loaded {loaded}"


# ------------------------------------------------------------------------ the layers above protocol
#
# protocol <- library <- {daemon, pipeline} <- cli. Each layer may import these binlogd packages (its own
# included); nothing imports the CLI layer.
LAYERS = {
    "binlogd.library": frozenset({"binlogd.protocol", "binlogd.library"}),
    "binlogd.daemon": frozenset({"binlogd.protocol", "binlogd.library", "binlogd.daemon"}),
    "binlogd.pipeline": frozenset({"binlogd.protocol", "binlogd.library", "binlogd.pipeline"}),
    "binlogd.cli": frozenset({"binlogd.protocol", "binlogd.library", "binlogd.daemon", "binlogd.pipeline",
                              "binlogd.cli"}),
}
LAYER_FOLDERS = {"binlogd.library": REPO / "library", "binlogd.daemon": REPO / "daemon",
                 "binlogd.pipeline": REPO / "pipeline", "binlogd.cli": REPO / "cli"}
# The library does no network I/O either (ARCHITECTURE.md: it parses, stores and writes).
NO_NETWORK = frozenset({"asyncio", "socket", "selectors", "ssl", "pymysql", "aiomysql"})
_FOLDER_NAMES = frozenset({"protocol", "library", "daemon", "pipeline", "cli"})  # bare folder names are never ours


def layer_violations(source: str, importer: str, layer: str, is_package: bool = False) -> list[str]:
    """Imports of ``source`` (module ``importer`` of ``layer``) that reach a layer it may not import."""
    allowed, found = LAYERS[layer], []
    for line, name in imported_names(source, importer, is_package):
        parts = name.split(".")
        if name.startswith("<beyond") or parts[0] in _FOLDER_NAMES:
            found.append(f"line {line}: {name}")
        elif parts[0] == "binlogd" and len(parts) > 1 and ".".join(parts[:2]) not in allowed:
            found.append(f"line {line}: {name}")
        elif layer == "binlogd.library" and parts[0] in NO_NETWORK:
            found.append(f"line {line}: {name}")
    return found


def _layer_files() -> list[tuple[str, Path]]:
    return [(layer, p) for layer, folder in LAYER_FOLDERS.items() for p in sorted(folder.rglob("*.py"))]


@pytest.mark.parametrize("source, importer, layer, expected", [
    ("from binlogd.protocol.decoder import Decoder\nfrom binlogd.library.schema import read_history",
     "binlogd.daemon.x", "binlogd.daemon", []),
    ("from .checkpoint import Checkpoint\nfrom . import sinks", "binlogd.daemon.x", "binlogd.daemon", []),
    ("from binlogd.pipeline import decode", "binlogd.daemon.x", "binlogd.daemon",
     ["line 1: binlogd.pipeline", "line 1: binlogd.pipeline.decode"]),
    ("def f():\n    from binlogd.cli.filetools import info\n", "binlogd.pipeline.x", "binlogd.pipeline",
     ["line 2: binlogd.cli.filetools", "line 2: binlogd.cli.filetools.info"]),
    ("from ..daemon import position", "binlogd.pipeline.x", "binlogd.pipeline",
     ["line 1: binlogd.daemon", "line 1: binlogd.daemon.position"]),
    ("from .. import cli", "binlogd.daemon.x", "binlogd.daemon", ["line 1: binlogd.cli"]),
    ("import daemon.position", "binlogd.pipeline.x", "binlogd.pipeline", ["line 1: daemon.position"]),
    ("from binlogd.daemon.config import load_config", "binlogd.library.schema.x", "binlogd.library",
     ["line 1: binlogd.daemon.config", "line 1: binlogd.daemon.config.load_config"]),
    ("import asyncio\nimport sqlglot", "binlogd.library.schema.x", "binlogd.library", ["line 1: asyncio"]),
    ("from binlogd.cli import main", "binlogd.library.x", "binlogd.library",
     ["line 1: binlogd.cli", "line 1: binlogd.cli.main"]),
    ("import asyncio", "binlogd.daemon.x", "binlogd.daemon", []),
])
def test_layer_checker_finds_imports_of_other_layers(source, importer, layer, expected):
    assert layer_violations(textwrap.dedent(source), importer, layer) == expected


def test_every_layer_has_modules():
    found = {layer for layer, _ in _layer_files()}
    assert found == set(LAYERS), f"no modules found for {set(LAYERS) - found}"


@pytest.mark.parametrize("layer, path", _layer_files(), ids=lambda v: v if isinstance(v, str) else
                         str(v.relative_to(REPO)))
def test_layer_imports_only_the_layers_below_it(layer: str, path: Path):
    source = path.read_text(encoding="utf-8")
    found = layer_violations(source, _module_name(path), layer, path.name == "__init__.py")
    assert not found, f"{path.relative_to(REPO)} ({layer}) imports what its layer may not: {found}"


_LAYER_PROBE = r"""
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[2])
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, sys.argv[1] + "."):
    if not info.name.endswith(".__main__"):
        importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("binlogd."))))
"""


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_importing_a_layer_loads_no_layer_above_it(layer: str):
    proc = subprocess.run([sys.executable, "-c", _LAYER_PROBE, layer, str(REPO)], capture_output=True, text=True,
                          cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, f"importing {layer} failed:\n{proc.stderr}"
    loaded = {".".join(m.split(".")[:2]) for m in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert layer in loaded and not loaded - LAYERS[layer], f"importing {layer} loaded {sorted(loaded - LAYERS[layer])}"


# ------------------------------------------------------------------------ the whole package


def _all_modules() -> dict[str, Path]:
    found = {}
    for folder in sorted(_FOLDER_NAMES):
        for path in sorted((REPO / folder).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def import_graph(modules: dict[str, str], packages: frozenset[str]) -> dict[str, set[str]]:
    """Edges module -> binlogd module it imports, from ``modules`` (name -> source); ``packages`` are __init__s.

    Imports inside functions count. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
    else to ``pkg``.
    """
    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module, node.level, name, name in packages)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a list of modules (first == last), or [] (an iterative depth-first search)."""
    state: dict[str, int] = {}
    for root in sorted(graph):
        if state.get(root):
            continue
        stack, path = [(root, iter(sorted(graph[root])))], [root]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(sorted(graph.get(child, ())))))
                path.append(child)
    return []


@pytest.mark.parametrize("sources, cycle", [
    ({"binlogd.a": "from binlogd import b", "binlogd.b": "def f():\n    import binlogd.a\n"},
     ["binlogd.a", "binlogd.b", "binlogd.a"]),
    ({"binlogd.a": "from binlogd.b import x", "binlogd.b": "x = 1", "binlogd.c": "import binlogd.a"}, []),
    ({"binlogd.p": "from binlogd.p.m import y", "binlogd.p.m": "from . import n", "binlogd.p.n": ""}, []),
    ({"binlogd.p": "from binlogd.p.m import y", "binlogd.p.m": "from binlogd.p import z"},
     ["binlogd.p", "binlogd.p.m", "binlogd.p"]),
])
def test_cycle_finder_finds_cycles(sources, cycle):
    assert find_cycle(import_graph(sources, frozenset({"binlogd.p"}))) == cycle


def test_no_import_cycles():
    modules = _all_modules()
    packages = frozenset(n for n, p in modules.items() if p.name == "__init__.py")
    sources = {n: p.read_text(encoding="utf-8") for n, p in modules.items()}
    # a C extension (``from binlogd.daemon.sinks import _frames``) is a module that imports nothing of ours
    sources.update({_module_name(c.with_suffix(".py")): "" for f in _FOLDER_NAMES for c in (REPO / f).rglob("*.c")})
    graph = import_graph(sources, packages)
    assert len(graph) > 80 and find_cycle(graph) == []


def test_no_module_name_in_two_layers():
    layers: dict[str, set[str]] = {}
    for name in _all_modules():
        parts = name.split(".")
        if parts[-1] not in ("__init__", "__main__") and len(parts) > 2:
            layers.setdefault(parts[-1], set()).add(parts[1])
    shared = {name: sorted(found) for name, found in layers.items() if len(found) > 1}
    assert not shared, f"module names used in more than one layer: {shared}"


def test_the_tree_shows_the_layers():
    """``ls`` of the repo shows one folder per layer, and binlogd/ holds only the namespace's root."""
    assert all((REPO / folder / "__init__.py").is_file() for folder in _FOLDER_NAMES)
    assert sorted(p.name for p in (REPO / "binlogd").glob("*.py")) == ["__init__.py"]
