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

Inside daemon/, the sub-packages are rooms, lower first: operations < replication < sinks < delivery < snapshot.
A room imports only itself and the rooms below it; the top-level foundations (config, configbase, sinkconfig,
tasks, state) may be imported by any room and import no room; service.py may import everything, and nothing in
daemon/ imports it; daemon/ itself holds at most 16 modules. No module imports another module's private name
(``from x import _y`` where ``x._y`` is not a module: C extensions and the ``_aiomysql`` seam are modules).
protocol/ writes no JSON: none of its modules imports a JSON module, and none of its C sources holds a JSON
string writer (library/_jsonstr.h is the one). No function in the five folders is over 80 lines.

The checkers themselves are tested on synthetic sources, so a broken checker cannot pass silently.
"""

from __future__ import annotations

import ast
import functools
import json
import re
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


# ------------------------------------------------------------------------ the daemon's rooms
#
# daemon/'s sub-packages, lower first: a sub-package imports only itself and those below it. The top-level
# modules in FOUNDATIONS are shared by every sub-package and import none; service.py (the Daemon) may import
# everything, and nothing in daemon/ imports it.
ROOMS = ("operations", "replication", "sinks", "delivery", "snapshot")
FOUNDATIONS = frozenset({"config", "configbase", "sinkconfig", "tasks", "state", "__init__"})
TOP = "service"
MAX_DAEMON_MODULES = 16


def daemon_part(module: str) -> str | None:
    """The room, foundation or ``service`` that ``module`` (``binlogd.daemon.…``) belongs to; ``__init__`` for the
    package itself; None outside daemon/."""
    parts = module.split(".")
    if parts[:2] != ["binlogd", "daemon"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def room_allows(importer: str, target: str) -> bool:
    """Whether a module of part ``importer`` may import one of part ``target`` (both from :func:`daemon_part`)."""
    if importer == target or importer == TOP or (target == "__init__"):
        return True
    if target == TOP:
        return False
    if target in FOUNDATIONS:
        return importer in FOUNDATIONS or importer in ROOMS
    if importer in ROOMS and target in ROOMS:
        return ROOMS.index(target) <= ROOMS.index(importer)
    return False   # a foundation importing a room, or a part that is in no room yet


def room_violations(source: str, importer: str, is_package: bool = False) -> list[str]:
    """Imports of ``source`` (daemon module ``importer``) that its room may not make; a module in no room
    (neither a sub-package in ROOMS nor a top-level module in FOUNDATIONS or ``service``) is one itself."""
    own = daemon_part(importer)
    if own not in ROOMS and own not in FOUNDATIONS and own != TOP:
        return [f"{importer} is in no room (ROOMS, FOUNDATIONS or {TOP})"]
    found = []
    for line, name in imported_names(source, importer, is_package):
        target = daemon_part(name)
        if target is not None and not room_allows(own, target):
            found.append(f"line {line}: {name}")
    return found


@pytest.mark.parametrize("source, importer, expected", [
    ("from binlogd.daemon.operations.metrics import Metrics\nfrom binlogd.daemon.state import ResumeState",
     "binlogd.daemon.replication.session", []),
    ("from binlogd.daemon.delivery.committer import Committer", "binlogd.daemon.replication.session",
     ["line 1: binlogd.daemon.delivery.committer", "line 1: binlogd.daemon.delivery.committer.Committer"]),
    ("def f():\n    from ..snapshot import initial\n", "binlogd.daemon.sinks.base",
     ["line 2: binlogd.daemon.snapshot", "line 2: binlogd.daemon.snapshot.initial"]),
    ("from . import base\nfrom .. import tasks, config", "binlogd.daemon.sinks", []),
    ("from binlogd.daemon.sinks import Sink\nfrom binlogd.daemon.replication.session import Session",
     "binlogd.daemon.delivery.consumer", []),
    ("from binlogd.daemon.snapshot.context import SnapshotContext", "binlogd.daemon.delivery.consumer",
     ["line 1: binlogd.daemon.snapshot.context", "line 1: binlogd.daemon.snapshot.context.SnapshotContext"]),
    ("from binlogd.daemon.replication import session", "binlogd.daemon.operations.http",
     ["line 1: binlogd.daemon.replication", "line 1: binlogd.daemon.replication.session"]),
    ("from binlogd.daemon import service", "binlogd.daemon.snapshot.initial", ["line 1: binlogd.daemon.service"]),
    ("import binlogd.daemon.service", "binlogd.daemon.tasks", ["line 1: binlogd.daemon.service"]),
    ("from binlogd.daemon.configbase import Section", "binlogd.daemon.config", []),
    ("from binlogd.daemon.sinks.base import Sink", "binlogd.daemon.sinkconfig",
     ["line 1: binlogd.daemon.sinks.base", "line 1: binlogd.daemon.sinks.base.Sink"]),
    ("from binlogd.daemon.snapshot import initial\nfrom .delivery.consumer import Consumer",
     "binlogd.daemon.service", []),
    ("import asyncio\nfrom binlogd.library.atomicfile import fsync_dir", "binlogd.daemon.standby",
     ["binlogd.daemon.standby is in no room (ROOMS, FOUNDATIONS or service)"]),
])
def test_room_checker_finds_imports_against_the_direction(source, importer, expected):
    is_package = importer == "binlogd.daemon.sinks"  # daemon/sinks/__init__.py
    assert room_violations(textwrap.dedent(source), importer, is_package) == expected


def _daemon_files() -> list[Path]:
    return sorted((REPO / "daemon").rglob("*.py"))


def test_every_room_has_modules():
    parts = {daemon_part(_module_name(p)) for p in _daemon_files()}
    assert set(ROOMS) | {TOP} <= parts


@pytest.mark.parametrize("path", _daemon_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_daemon_rooms_import_only_themselves_and_below(path: Path):
    source = path.read_text(encoding="utf-8")
    found = room_violations(source, _module_name(path), path.name == "__init__.py")
    assert not found, f"{path.relative_to(REPO)} imports against the rooms' direction: {found}"


def top_level_modules(folder: Path) -> list[str]:
    """The ``*.py`` files directly in ``folder`` (not in its sub-packages)."""
    return sorted(p.name for p in folder.glob("*.py"))


def test_module_counter_counts_only_the_top_level(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py", "c.txt"):
        (tmp_path / name).write_text("")
    assert top_level_modules(tmp_path) == ["__init__.py", "a.py"]


def test_daemon_holds_few_modules_of_its_own():
    found = top_level_modules(REPO / "daemon")
    assert TOP + ".py" in found and len(found) <= MAX_DAEMON_MODULES, found


# ------------------------------------------------------------------------ no reaching into privates


def private_imports(source: str, importer: str, modules: frozenset[str], is_package: bool = False) -> list[str]:
    """``from x import _y`` in ``source`` where ``x._y`` is not one of ``modules`` (our modules and C extensions,
    absolute names) nor a module of another package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _resolve(node.module, node.level, importer, is_package)
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__") or f"{base}.{name}" in modules:
                continue
            if not base.startswith("binlogd") and _is_module(f"{base}.{name}"):
                continue
            found.append(f"line {node.lineno}: {base}.{name}")
    return found


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def _our_modules() -> frozenset[str]:
    """Every module of ours by its absolute name: the Python ones and the C extensions (``_frames``, …)."""
    names = set(_all_modules())
    for folder in _FOLDER_NAMES:
        names.update(_module_name(c.with_suffix(".py")) for c in (REPO / folder).rglob("*.c"))
    return frozenset(names)


@pytest.mark.parametrize("source, importer, expected", [
    ("from binlogd.daemon.snapshot.views import _query", "binlogd.daemon.snapshot.initial",
     ["line 1: binlogd.daemon.snapshot.views._query"]),
    ("def f():\n    from .views import Reader, _open\n", "binlogd.daemon.snapshot.initial",
     ["line 2: binlogd.daemon.snapshot.views._open"]),
    ("from binlogd.daemon.replication import _aiomysql\nfrom binlogd.daemon.sinks import _frames as C",
     "binlogd.daemon.snapshot.wire", []),
    ("from . import _rowimage as C\nfrom ._skim import frame as _frame_c\nfrom functools import partial as _b",
     "binlogd.protocol.rowcodec", []),
    ("from __future__ import annotations\nfrom x import __version__", "binlogd.cli.x", []),
    ("from aiomysql.connection import _auth", "binlogd.daemon.replication.connection",
     ["line 1: aiomysql.connection._auth"]),
    ("from collections import _chain", "binlogd.library.x", ["line 1: collections._chain"]),
    ("from concurrent import futures\nfrom os import _exit", "binlogd.library.x", ["line 2: os._exit"]),
])
def test_private_import_checker(source, importer, expected):
    modules = frozenset({"binlogd.daemon.replication._aiomysql", "binlogd.daemon.sinks._frames",
                         "binlogd.protocol._rowimage", "binlogd.protocol._skim"})
    assert private_imports(textwrap.dedent(source), importer, modules) == expected


def test_our_modules_include_the_c_extensions_and_the_seam():
    modules = _our_modules()
    assert {"binlogd.daemon.sinks._frames", "binlogd.protocol._rowimage", "binlogd.daemon.replication._aiomysql",
            "binlogd.library._jsonrows"} <= modules


@pytest.mark.parametrize("path", sorted(_all_modules().values()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_imports_another_modules_private_name(path: Path):
    found = private_imports(path.read_text(encoding="utf-8"), _module_name(path), _our_modules(),
                            path.name == "__init__.py")
    assert not found, f"{path.relative_to(REPO)} imports private names (make them public where shared): {found}"


# ------------------------------------------------------------------------ no JSON writer in protocol/

JSON_MODULES = frozenset({"json", "orjson", "ujson", "simplejson", "rapidjson"})
# A C JSON string writer: its \u00XX output escape, an escape table, or the shared writer's header.
C_JSON_WRITER = re.compile(r'"\\\\u00|"\\\\u%0|\bJSON_ESCAPE\b|\bESCAPE\s*\[|\bjson_escape\b|_jsonstr\.h|'
                           r'\bjson_(?:write|string)\w*\s*\(', re.IGNORECASE)


def json_imports(source: str, importer: str, is_package: bool = False) -> list[str]:
    """Imports of a JSON module (``json``, ``orjson``, …; the library's lazy orjson too) in ``source``."""
    return [f"line {line}: {name}" for line, name in imported_names(source, importer, is_package)
            if name.split(".")[0] in JSON_MODULES or name.startswith("binlogd.library.lazyjson")]


def c_json_writer(source: str) -> list[str]:
    """Lines of a C source that write JSON strings (see C_JSON_WRITER)."""
    return [f"line {n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if C_JSON_WRITER.search(line)]


@pytest.mark.parametrize("source, expected", [
    ("import json", ["line 1: json"]),
    ("def f():\n    import orjson\n", ["line 2: orjson"]),
    ("from json import dumps", ["line 1: json", "line 1: json.dumps"]),
    ("import importlib\nimportlib.import_module('orjson')", ["line 2: orjson"]),
    ("from binlogd.library.lazyjson import orjson", ["line 1: binlogd.library.lazyjson",
                                                     "line 1: binlogd.library.lazyjson.orjson"]),
    ("from .jsonb import decode_json\nimport struct", []),
])
def test_json_import_checker(source, expected):
    assert json_imports(textwrap.dedent(source), "binlogd.protocol.x") == expected


@pytest.mark.parametrize("source, found", [
    ('            memcpy(w, "\\\\u00", 4);', True),
    ('    w += sprintf(w, "\\\\u%04x", c);', True),
    ("static const char JSON_ESCAPE[128] = {", True),
    ("static unsigned char ESCAPE[256];", True),
    ('#include "_jsonstr.h"', True),
    ("    w = json_escape(w, &s, stop, end, 0);", True),
    ("static int json_write_str(Writer *o, PyObject *s)", True),
    ("/* text rows: a packet's fields, length-encoded strings; NULL is 0xFB */", False),
    ('#include "_textrow.h"\nstatic Py_ssize_t scan(const unsigned char *p)', False),
])
def test_c_json_writer_checker(source, found):
    assert bool(c_json_writer(source)) is found


@pytest.mark.parametrize("path", _protocol_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_protocol_modules_import_no_json_module(path: Path):
    found = json_imports(path.read_text(encoding="utf-8"), _module_name(path), path.name == "__init__.py")
    assert not found, f"{path.relative_to(REPO)} imports a JSON module (JSON writing is library/'s): {found}"


def _protocol_c_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")])


def test_protocol_has_c_files():
    assert {"_rowimage.c", "_skim.c"} <= {p.name for p in _protocol_c_files()}


@pytest.mark.parametrize("path", _protocol_c_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_protocol_c_sources_write_no_json(path: Path):
    found = c_json_writer(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(REPO)} holds a JSON string writer (library/_jsonstr.h's job): {found}"


# ------------------------------------------------------------------------ short functions

MAX_FUNCTION_LINES = 80


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (line): N lines`` of each def / async def in ``source`` longer than ``limit`` lines, from the
    ``def`` to its last line (docstring included, decorators not); a nested function counts on its own, and
    its lines count in the function around it too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} (line {node.lineno}): {length} lines")
    return found


def _function(name: str, lines: int, indent: str = "", prefix: str = "def") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f'{indent}{prefix} {name}():\n{indent}    """doc"""\n{body}'


@pytest.mark.parametrize("source, limit, expected", [
    (_function("short", 80), 80, []),
    (_function("long", 81), 80, ["long (line 1): 81 lines"]),
    ("@decorator\n" + _function("decorated", 80), 80, []),
    (_function("coro", 5, prefix="async def"), 4, ["coro (line 1): 5 lines"]),
    ("class C:\n" + _function("method", 6, "    "), 5, ["method (line 2): 6 lines"]),
    ("def outer():\n" + _function("inner", 4, "    ") + "    return inner\n", 4,
     ["outer (line 1): 6 lines"]),
    ("def outer():\n" + _function("inner", 5, "    ") + "    return inner\n", 4,
     ["outer (line 1): 7 lines", "inner (line 2): 5 lines"]),
    ('def f():\n    """a\n    docstring\n    of lines"""\n    return 1\n', 4, ["f (line 1): 5 lines"]),
])
def test_long_function_finder(source, limit, expected):
    assert long_functions(source, limit) == expected


@pytest.mark.parametrize("folder", sorted(_FOLDER_NAMES))
def test_no_function_is_over_80_lines(folder: str):
    paths = sorted((REPO / folder).rglob("*.py"))
    assert paths
    found = {str(p.relative_to(REPO)): f for p in paths if (f := long_functions(p.read_text(encoding="utf-8")))}
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them): {found}"
