"""The one switch of binlogd's optional C extensions.

``BINLOGD_PURE_PYTHON=1`` in the environment (any value but empty or ``0``) turns every one of them off: the row
image decoder (``_rowimage``), the JSON row writer (``_jsonrows``), the skim of rows events and the packet framing
loop (``_skim``), the scan of the snapshot's text-protocol rows (``_textrows``), their JSON writer (``_textjson``)
and COPY text writer (``_textcopy``), the bus sinks' request framing (``_frames``), and the SQL writer of ``binlogd
sql`` (``_sqlrows``, used by ``binlogd.library.sqlwriter.native``). binlogd then runs its Python code for the same
work, with the same results; so it does where an extension could not be built, and then :func:`missing_message` says
which fast paths are missing (``binlogd run``, ``dump`` and ``sql`` print it once at start).
"""

from __future__ import annotations

import os

#: False when ``BINLOGD_PURE_PYTHON`` turns the C extensions off (read once, at import).
ENABLED = os.environ.get("BINLOGD_PURE_PYTHON", "") in ("", "0")

#: binlogd's C extensions, by module, and the fast path each one is.
EXTENSIONS = {
    "binlogd.protocol._rowimage": "row image decoding",
    "binlogd.protocol._skim": "skimming rows events and packet framing",
    "binlogd.protocol._textrows": "finding snapshot rows read off the wire",
    "binlogd.library._jsonrows": "the JSON row writer",
    "binlogd.library._textjson": "snapshot rows read off the wire as JSON",
    "binlogd.library._textcopy": "snapshot rows read off the wire as COPY text for the mirror",
    "binlogd.library._sqlrows": "the SQL writer of binlogd sql",
    "binlogd.daemon.sinks._frames": "the bus sinks' request framing",
}


def missing() -> list[str]:
    """The C extensions of :data:`EXTENSIONS` that cannot be imported (not built, or broken), in that order;
    [] when ``BINLOGD_PURE_PYTHON`` turned them off (then none is looked at).

    Each is imported now (by name: protocol does not import the library layer at module level), except
    ``_jsonrows`` while orjson is not loaded yet (its import would load orjson, 10 ms of a command's
    start-up) and one whose package is not loaded yet (``binlogd.daemon.sinks`` loads orjson too): then only
    its file is looked for.
    """
    if not ENABLED:
        return []
    import importlib
    import sys

    out = []
    for name in EXTENSIONS:
        if name in sys.modules:
            continue
        package = name.rpartition(".")[0]
        try:
            if package not in sys.modules or (name.endswith("._jsonrows") and "orjson" not in sys.modules):
                if not _built(package, name):
                    out.append(name)
            else:
                importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def _built(package: str, name: str) -> bool:
    """Whether the import system finds extension ``name`` in ``package`` without importing that package (only
    its parent): each finder of ``sys.meta_path`` is asked, as an import would.

    Raises:
        ImportError: a finder refused it.
    """
    import importlib.util
    import sys

    spec = importlib.util.find_spec(package)
    folders = spec.submodule_search_locations if spec is not None else None
    return folders is not None and any(
        finder.find_spec(name, folders) is not None for finder in sys.meta_path if hasattr(finder, "find_spec"))


def missing_message() -> str | None:
    """One line naming the fast paths that :func:`missing` finds missing, or None when none is."""
    names = missing()
    if not names:
        return None
    paths = ", ".join(f"{EXTENSIONS[name]} ({name})" for name in names)
    return (f"C extensions missing, so these run as slower Python code: {paths}; reinstall binlogd where a C "
            "compiler is available (BINLOGD_REQUIRE_C=1 makes a failed build fail), or set BINLOGD_PURE_PYTHON=1 "
            "to run without them on purpose")
