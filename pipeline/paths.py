"""Which files a ``load(...)`` names: a path, a glob or a list; directories list their files.

Paths are local (or mounted: NFS, a FUSE bucket, the same path on every executor);
``file:`` URIs are accepted. A directory lists its regular files except hidden ones
(``.``/``_`` prefix) and the server's and daemon's bookkeeping (``*.index``,
``*.json``, ``*.lock``, ``*.tmp``, ``*.crc``); ``pathGlobFilter`` narrows by file name.
Files are ordered as a primary numbers them: by directory, base name, then the
numeric extension as a number (``mysql-bin.999999`` before ``mysql-bin.1000000``).
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os

_SKIP_SUFFIXES = (".index", ".json", ".lock", ".tmp", ".crc")
_GLOB_CHARS = frozenset("*?[")


def option_paths(options: dict) -> list[str]:
    """The paths of ``load(path)`` / ``load([paths])`` / ``option("path", …)``."""
    if options.get("paths"):
        raw = options["paths"]
        paths = json.loads(raw) if raw.lstrip().startswith("[") else [p for p in raw.split(",") if p]
    elif options.get("path"):
        paths = [options["path"]]
    else:
        raise ValueError("binlog: no input: use load(path), load([paths]) or option('path', …)")
    return [_local(p) for p in paths]


def _local(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif path.startswith("file:"):
        path = path[len("file:"):]
    return os.path.abspath(os.path.expanduser(path))


def stem(path: str) -> tuple[str, str]:
    """(directory, base name without a numeric extension): files of one server's sequence."""
    directory, name = os.path.split(path)
    base, dot, ext = name.rpartition(".")
    return (directory, base) if dot and ext.isdigit() else (directory, name)


def order_key(path: str) -> tuple:
    directory, name = os.path.split(path)
    base, dot, ext = name.rpartition(".")
    if dot and ext.isdigit():
        return (directory, base, int(ext), name)
    return (directory, name, -1, name)


def _listable(name: str) -> bool:
    return not name.startswith((".", "_")) and not name.endswith(_SKIP_SUFFIXES)


def list_dir(directory: str) -> list[str]:
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            if _listable(entry.name) and entry.is_file():
                out.append(entry.path)
    return out


def expand(paths: list[str], glob_filter: str | None = None, must_exist: bool = True) -> list[str]:
    """Every file the paths name, in order, without duplicates.

    Raises:
        FileNotFoundError: a plain path that does not exist (with ``must_exist``).
    """
    found: list[str] = []
    for path in paths:
        if _GLOB_CHARS.intersection(path):
            matches = sorted(glob.glob(path))
            for m in matches:
                found.extend(list_dir(m) if os.path.isdir(m) else [m] if os.path.isfile(m) else [])
        elif os.path.isdir(path):
            found.extend(list_dir(path))
        elif os.path.exists(path) or not must_exist:
            found.append(path)
        else:
            raise FileNotFoundError(f"binlog: path does not exist: {path}")
    if glob_filter:
        found = [p for p in found if fnmatch.fnmatchcase(os.path.basename(p), glob_filter)]
    return sorted(set(found), key=order_key)
