"""What the Spark tests compare with: the file tools' output for the same files, and why Spark cannot run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path


def spark_missing() -> str | None:
    """Why the Spark tests cannot run here, or None."""
    try:
        import pyarrow  # noqa: F401
        import pyspark
    except ImportError as exc:
        return f"PySpark tests skipped: {exc.name} is not installed (pip install 'binlogd[spark]')"
    major_minor = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    if major_minor < (4, 2):
        return f"PySpark tests skipped: pyspark {pyspark.__version__} < 4.2 (pip install 'binlogd[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "PySpark tests skipped: no Java runtime (java not in PATH, JAVA_HOME unset)"
    return None


def dump_json(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    """``binlogd dump --json PATH``: (objects printed, the error line without ``binlogd: `` or None)."""
    from binlogd.cli import main

    out, err = io.BytesIO(), io.StringIO()
    wrapper = io.TextIOWrapper(out, encoding="utf-8")
    with contextlib.redirect_stdout(wrapper), contextlib.redirect_stderr(err):
        status = main(["dump", "--json", str(path)])
    wrapper.flush()
    objects = [json.loads(line) for line in out.getvalue().splitlines()]
    error = err.getvalue().strip() or None
    assert (status == 0) == (error is None), (status, error)
    return objects, error.removeprefix("binlogd: ") if error else None


def reference_changes(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    """Change events of a file (change_events over dump_events), and the error that ended it, if any."""
    from binlogd.cli.filetools import dump_events
    from binlogd.library.serialize import change_events, flatten
    from binlogd.protocol import events as E
    from binlogd.protocol.errors import BinlogError

    out, gtid = [], None
    try:
        for event in dump_events(path):
            for item in flatten(event):
                if isinstance(item, (E.GtidEvent, E.MariadbGtidEvent)):
                    gtid = item.gtid
                elif isinstance(item, E.RowsEvent):
                    out.extend(change_events(item, str(path), gtid))
    except BinlogError as exc:
        return out, f"{path}: {exc}"
    return out, None


def corpus_files() -> list[Path]:
    """Every corpus file MANIFEST.md lists that exists (negative samples included)."""
    from tests.support import manifest as M

    return [e.file() for e in M.entries_or_empty() if e.file().is_file()]


def spark_rows_by_file(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row["file"], []).append(row)
    return out
