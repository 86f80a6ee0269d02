"""Records where they pay (ARCHITECTURE.md, "add a value class"): protocol/'s value classes are records.

protocol/ (the decoder's events and values, made per event, and imported by every command) never imports
``dataclasses`` (whose import brings ``inspect`` and ``ast``) except inside records.py's own functions, where
it serves ``dataclasses``' functions called on a record; and no class there is a ``@dataclass``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROTOCOL = Path(__file__).resolve().parents[2] / "protocol"
MODULES = sorted(PROTOCOL.glob("*.py"))


def _imports_dataclasses(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == "dataclasses" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and node.module == "dataclasses"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_protocol_imports_no_dataclasses_at_module_level(path):
    tree = ast.parse(path.read_text(), str(path))
    top = [node for node in tree.body if _imports_dataclasses(node)]
    top += [node for stmt in tree.body if isinstance(stmt, (ast.If, ast.Try))
            for node in ast.walk(stmt) if _imports_dataclasses(node)]
    assert not top, f"{path.name}:{top[0].lineno} imports dataclasses at module level: use protocol.records"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_protocol_value_classes_are_records(path):
    tree = ast.parse(path.read_text(), str(path))
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = {d.id if isinstance(d, ast.Name) else getattr(getattr(d, "func", None), "id", None)
                 for d in cls.decorator_list}
        assert "dataclass" not in names, f"{path.name}: class {cls.name} is a dataclass: make it a @record"


def test_the_rule_sees_a_dataclass():
    """The checks above can fail: a module that does what they forbid is caught."""
    bad = ast.parse("import dataclasses\n\n@dataclass\nclass A:\n    x: int\n")
    assert _imports_dataclasses(bad.body[0])
    cls = bad.body[1]
    assert [d.id for d in cls.decorator_list] == ["dataclass"]
