"""Which files a ``load(...)`` names: a path, a glob or a list; directories list their files.

Paths are local (or mounted: NFS, a FUSE bucket, the same path on every executor);
``file:`` URIs are accepted. A directory lists its regular files except hidden ones
(``.``/``_`` prefix) and the server's and daemon's bookkeeping (``*.index``,
``*.json``, ``*.lock``, ``*.tmp``, ``*.crc``); ``pathGlobFilter`` narrows by file name.
Files are ordered as a primary numbers them: by directory, base name, then the
numeric extension as a number (``mysql-bin.999999`` before ``mysql-bin.1000000``).
Object-store URIs (``s3://bucket/prefix/``, globs in them; :mod:`binlogd.library.storage`) are
listed once each, by the store, with their sizes: no request per object.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os

from binlogd.library import storage

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
    if storage.is_remote(path):
        return path
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
    """Every file the paths name, in order, without duplicates (:func:`sized` without the sizes)."""
    return list(sized(paths, glob_filter, must_exist))


def sized(paths: list[str], glob_filter: str | None = None, must_exist: bool = True) -> dict[str, int | None]:
    """Every file the paths name, in order, without duplicates -> its size (None: a named file that
    does not exist, with ``must_exist`` False). Remote sizes come from one listing per path.

    Raises:
        FileNotFoundError: a plain path that does not exist (with ``must_exist``).
        binlogd.library.storage.StorageError: a URI whose bucket or prefix is missing or refused.
    """
    found: dict[str, int | None] = {}
    for path in paths:
        if storage.is_remote(path):
            for entry in storage.list_files(path):
                if entry.uri == path or _listable(os.path.basename(entry.uri)):  # a named object is kept
                    found[entry.uri] = entry.size
        elif _GLOB_CHARS.intersection(path):
            matches = sorted(glob.glob(path))
            for m in matches:
                found.update(_sizes(list_dir(m)) if os.path.isdir(m) else _sizes([m]) if os.path.isfile(m) else {})
        elif os.path.isdir(path):
            found.update(_sizes(list_dir(path)))
        elif os.path.exists(path):
            found.update(_sizes([path]))
        elif not must_exist:
            found[path] = None
        else:
            raise FileNotFoundError(f"binlog: path does not exist: {path}")
    if glob_filter:
        found = {p: n for p, n in found.items() if fnmatch.fnmatchcase(os.path.basename(p), glob_filter)}
    return {p: found[p] for p in sorted(found, key=order_key)}


def _sizes(files: list[str]) -> dict[str, int]:
    return {p: os.path.getsize(p) for p in files}
