"""A consumer's side of partial JSON updates: ``json_diffs`` applied to a JSON value, as the server applies them.

:func:`apply_json_diffs` follows MySQL's ``apply_json_diff`` (sql/json_diff.cc): REPLACE puts the value at an
existing path; INSERT adds an object member that is not there, or puts an array element at its index (the
later ones shift; past the end it is appended); REMOVE takes an existing member or element out. A diff the
document cannot take raises ValueError, as the server rejects it.
"""

from __future__ import annotations

import copy
import json
import re

_LEG = re.compile(r'\.(?:"((?:[^"\\]|\\.)*)"|([A-Za-z_$][\w$]*))|\[(?:(\d+)|last(?:\s*-\s*(\d+))?)\]')


def path_legs(path: str) -> list:
    """A MySQL JSON path (``$.a[2]."b c"[last-1]``) as legs: str for a member, int for an index (negative:
    from the end, -1 being ``last``).

    Raises:
        ValueError: not a path of members and single indexes.
    """
    if not path.startswith("$"):
        raise ValueError(f"not a JSON path: {path!r}")
    legs, pos = [], 1
    while pos < len(path):
        m = _LEG.match(path, pos)
        if m is None:
            raise ValueError(f"cannot read JSON path {path!r} at {pos}")
        quoted, bare, index, back = m.groups()
        if quoted is not None:
            legs.append(json.loads(f'"{quoted}"'))
        elif bare is not None:
            legs.append(bare)
        elif index is not None:
            legs.append(int(index))
        else:
            legs.append(-1 - int(back or 0))
        pos = m.end()
    return legs


def _index(leg: int, size: int) -> int:
    return leg if leg >= 0 else size + leg


def _seek(doc, legs: list):
    for leg in legs:
        if isinstance(leg, str) and isinstance(doc, dict) and leg in doc:
            doc = doc[leg]
        elif isinstance(leg, int) and isinstance(doc, list) and 0 <= _index(leg, len(doc)) < len(doc):
            doc = doc[_index(leg, len(doc))]
        else:
            raise ValueError(f"no value at leg {leg!r}")
    return doc


def apply_json_diffs(doc, diffs: list[dict]):
    """``doc`` (a JSON value as json.loads gives it) with ``diffs`` (one column's ``json_diffs`` list:
    ``{"op", "path", "value"?}``) applied in order; ``doc`` itself is not changed.

    Raises:
        ValueError: a diff the value cannot take (a path that is not there, an INSERT of a member that is).
    """
    doc = copy.deepcopy(doc)
    for d in diffs:
        legs = path_legs(d["path"])
        if not legs:
            raise ValueError("a diff of the whole document")
        parent, last = _seek(doc, legs[:-1]), legs[-1]
        op = d["op"]
        if op == "replace":
            _seek(parent, [last])
            parent[_index(last, len(parent)) if isinstance(last, int) else last] = copy.deepcopy(d["value"])
        elif op == "insert":
            if isinstance(parent, dict) and isinstance(last, str) and last not in parent:
                parent[last] = copy.deepcopy(d["value"])
            elif isinstance(parent, list) and isinstance(last, int):
                parent.insert(min(max(_index(last, len(parent)), 0), len(parent)), copy.deepcopy(d["value"]))
            else:
                raise ValueError(f"cannot insert at {d['path']!r}")
        elif op == "remove":
            _seek(parent, [last])
            if isinstance(parent, dict):
                del parent[last]
            else:
                del parent[_index(last, len(parent))]
        else:
            raise ValueError(f"unknown JSON diff operation {op!r}")
    return doc
