"""Batch jobs on the "binlog" data source: ``index`` and ``changes`` (``python -m binlogd.pipeline …``).

- :func:`index_job`: one row per binlog file (:func:`binlogd.protocol.fileinfo.describe`: server version,
  begin/end time, next file, first/last GTID, size, closed cleanly) to Parquet.
- :func:`changes_job`: row changes from binlog files or from the daemon's JSON-lines output to
  Parquet partitioned by ``schema``, ``table`` and ``date`` (UTC day of ``ts``), each partition
  sorted in transaction order by ``(file, pos, event_seq, row)``.

Both print progress to stderr while Spark works (tasks done per stage; one task per file in the
decode stage), and a summary at the end.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from binlogd.library import storage

PROGRESS_SECONDS = 1.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def session(app: str = "binlogd", master: str | None = None, conf: dict | None = None):
    """A SparkSession with the "binlog" source registered.

    For a local master (or none: plain ``python``), Python workers run this interpreter
    (PYSPARK_PYTHON) unless it is set. Under spark-submit the cluster's settings win.
    """
    from pyspark.sql import SparkSession

    from .source import BinlogDataSource

    if (master is None or master.startswith("local")) and "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    for key, value in {"spark.ui.showConsoleProgress": "false", **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(BinlogDataSource)
    return spark


class Progress:
    """Prints Spark's task counts per stage to stderr while a job runs (a daemon thread)."""

    def __init__(self, spark, label: str, interval: float = PROGRESS_SECONDS):
        self.tracker = spark.sparkContext.statusTracker()
        self.label, self.interval = label, interval
        self._stop = threading.Event()
        self._seen: dict[int, tuple] = {}
        self._thread = threading.Thread(target=self._run, name=f"progress-{label}", daemon=True)

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        self._jobs_before = self._job_ids()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:  # the final counts, also of a job quicker than one interval
            self._poll(self._stages_of(self._job_ids() - self._jobs_before))
        except Exception:  # best effort, as while it runs
            pass

    def _job_ids(self) -> set[int]:
        try:
            return set(self.tracker.getJobIdsForGroup(None))
        except Exception:
            return set()

    def _stages_of(self, jobs: set[int]) -> list[int]:
        stages = []
        for job in sorted(jobs):
            info = self.tracker.getJobInfo(job)
            stages.extend(info.stageIds if info is not None else ())
        return stages

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._poll(self.tracker.getActiveStageIds())
            except Exception:  # the JVM may be going away at the end; progress is best effort
                return

    def _poll(self, stages) -> None:
        """Print each of ``stages`` (stage ids) whose task counts changed since it was last printed."""
        for sid in stages:
            info = self.tracker.getStageInfo(sid)
            if info is None:
                continue
            state = (info.numCompletedTasks, info.numActiveTasks, info.numFailedTasks)
            if self._seen.get(sid) != state:
                self._seen[sid] = state
                failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
                log(f"[{self.label}] stage {sid}: "
                    f"{info.numCompletedTasks}/{info.numTasks} tasks done, {info.numActiveTasks} running{failed} "
                    f"({time.monotonic() - self.started:.0f}s)")


def _reader(spark, shape: str, skip_corrupt: bool, **options):
    reader = spark.read.format("binlog").option("shape", shape)
    # files are packed into partitions for this many tasks at least, as Spark's file sources do
    reader = reader.option("minPartitions", spark.sparkContext.defaultParallelism)
    reader = reader.option("corruptFiles", "skip" if skip_corrupt else "fail")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    return reader


def index_job(spark, paths: list[str], out: str, mode: str = "errorifexists", skip_corrupt: bool = False,
              glob_filter: str | None = None) -> dict:
    """Write one row per binlog file to Parquet at ``out``; returns a summary dict.

    Object-store paths are listed once, by the source's planner (a prefix of 10,000 objects: one listing).
    """
    from .paths import expand

    files = None if any(map(storage.is_remote, paths)) else expand([os.path.abspath(p) for p in paths], glob_filter)
    what = f"{len(files)} file(s)" if files is not None else ", ".join(paths)
    log(f"[index] {what}: one task each, binlogd info by seeking")
    df = _reader(spark, "index", skip_corrupt, pathGlobFilter=glob_filter).load(paths)
    spark.sparkContext.setJobDescription(f"binlog index of {what}")
    with Progress(spark, "index"):
        df.write.mode(mode).parquet(out)
    written = spark.read.parquet(out)
    rows = written.count()
    summary = {"files": len(files) if files is not None else rows, "rows": rows, "out": out}
    if skip_corrupt:
        corrupt = written.where("_corrupt IS NOT NULL").select("file", "_corrupt").collect()
        summary["corrupt"] = [r["_corrupt"] for r in corrupt]
    log(f"[index] wrote {summary['rows']} row(s) to {out}" +
        (f"; {len(summary['corrupt'])} corrupt file(s)" if summary.get("corrupt") else ""))
    return summary


ORDER = ("file", "pos", "event_seq", "row")
PARTITIONS = ("schema", "table", "date")


def changes_frame(spark, paths: list[str], skip_corrupt: bool = False, input_kind: str = "auto",
                  daemon_checkpoint: str | None = None, glob_filter: str | None = None):
    """The changes DataFrame with its ``date`` column (UTC day of ``ts``)."""
    from pyspark.sql import functions as F

    df = _reader(spark, "changes", skip_corrupt, input=input_kind, daemonCheckpoint=daemon_checkpoint,
                 pathGlobFilter=glob_filter).load(paths)
    # the UTC day, whatever the session time zone
    return df.withColumn("date", F.date_from_unix_date(F.floor(F.col("ts") / 86400).cast("int")))


def changes_job(spark, paths: list[str], out: str, mode: str = "errorifexists", skip_corrupt: bool = False,
                input_kind: str = "auto", daemon_checkpoint: str | None = None,
                glob_filter: str | None = None) -> dict:
    """Write row changes to Parquet at ``out``, partitioned by schema/table/date, in transaction order."""
    from .paths import expand

    files = expand([p if storage.is_remote(p) else os.path.abspath(p) for p in paths], glob_filter)
    log(f"[changes] {len(files)} file(s): one decode task each")
    df = changes_frame(spark, paths, skip_corrupt, input_kind, daemon_checkpoint, glob_filter)
    spark.sparkContext.setJobDescription(f"binlog changes of {len(files)} files")
    with Progress(spark, "changes"):
        (df.repartition(*PARTITIONS).sortWithinPartitions(*ORDER)
           .write.partitionBy(*PARTITIONS).mode(mode).parquet(out))
    written = spark.read.parquet(out)
    summary = {"files": len(files), "rows": written.count(), "out": out}
    if skip_corrupt:
        corrupt = written.where("schema IS NULL AND _corrupt IS NOT NULL").select("_corrupt").collect()
        summary["corrupt"] = [r["_corrupt"] for r in corrupt]
        summary["rows"] -= len(summary["corrupt"])
    log(f"[changes] wrote {summary['rows']} change(s) from {len(files)} file(s) to {out}" +
        (f"; {len(summary['corrupt'])} corrupt file(s) reported (schema=__HIVE_DEFAULT_PARTITION__)"
         if summary.get("corrupt") else ""))
    return summary
