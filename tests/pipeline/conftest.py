"""The Spark tests: one local SparkSession for the whole run, and the references they compare with.

Every module here starts with ``pytest.importorskip("pyspark")`` (via :data:`SKIP`): without
PySpark ≥ 4.2, pyarrow or a Java runtime the directory is skipped with that reason (pip install
'binlogd[spark]'). The session is ``local[2]`` with the UI off, ``SPARK_LOCAL_IP=127.0.0.1``, two
shuffle partitions and UTC; its JVM is shut down at the end of the run.

The references are the file tools: :func:`dump_json` runs ``binlogd dump --json`` (the CLI's own
``main``) and :func:`reference_changes` applies :func:`protocol.serialize.change_events` to the
events ``binlogd dump`` decodes, with the GTID of the transaction's GTID event.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest


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


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The local SparkSession shared by every pipeline test (the "binlog" source registered)."""
    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from binlogd.pipeline.jobs import session
    from pyspark import SparkContext

    scratch = tmp_path_factory.mktemp("spark")
    session_ = session("binlogd-tests", "local[2]", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.sql.streaming.minBatchesToRetain": "100",
    })
    session_.sparkContext.setLogLevel("ERROR")
    yield session_
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    session_.stop()
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait(timeout=10)


# --------------------------------------------------------------------------- references


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
    from binlogd.protocol import events as E
    from binlogd.protocol.errors import BinlogError
    from binlogd.protocol.serialize import change_events, flatten

    from binlogd.filetools import dump_events

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
    from tests.conformance import manifest as M

    return [e.file() for e in M.entries_or_empty() if e.file().is_file()]


def spark_rows_by_file(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row["file"], []).append(row)
    return out
