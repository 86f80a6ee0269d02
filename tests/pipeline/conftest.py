"""The Spark tests: one local SparkSession for the whole run, and the references they compare with.

Every module here starts with ``pytest.importorskip("pyspark")`` (via :data:`SKIP`): without
PySpark ≥ 4.2, pyarrow or a Java runtime the directory is skipped with that reason (pip install
'binlogd[spark]'). The session is ``local[2]`` with the UI off, ``SPARK_LOCAL_IP=127.0.0.1``, two
shuffle partitions and UTC; its JVM is shut down at the end of the run.

The references are the file tools: :func:`dump_json` runs ``binlogd dump --json`` (the CLI's own
``main``) and :func:`reference_changes` applies :func:`binlogd.protocol.serialize.change_events` to the
events ``binlogd dump`` decodes, with the GTID of the transaction's GTID event.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.support.spark import spark_missing


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
