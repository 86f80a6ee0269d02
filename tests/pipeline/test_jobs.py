"""The jobs (``python -m binlogd.pipeline index|changes``) and the executor zip.

- index: the Parquet rows equal ``binlogd info --json`` per file; a corrupt file fails the job with
  one line naming it and the offset, or is a row with ``_corrupt`` under --skip-corrupt;
- changes from binlog files: Parquet partitioned schema=/table=/date=, every partition file in
  transaction order (file, pos, event_seq, row), all rows equal change_events;
- changes from the daemon's JSON-lines sink (written here by ``daemon.sinks.jsonl.JsonLinesSink``
  itself, with an uncommitted tail): equal to the binlog path's output, tail left out;
- ``python -m binlogd.pipeline zip``: the executors' import path works from the zip alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.spark import reference_changes, spark_missing

if spark_missing():
    pytest.skip(spark_missing(), allow_module_level=True)

import pyarrow.parquet as pq  # noqa: E402

from binlogd.pipeline.__main__ import build_zip, main  # noqa: E402
from tests.support.sinks import commit_sink

ORDER = ("file", "pos", "event_seq", "row")
FILES = ["mysql-binlog-connector-java/mysql-bin.checksum-crc32", "mysql-binlog-connector-rust/mysql-bin.000057",
         "rust_mysql_common/mariadb-bin.000001", "rust_mysql_common/json.binlog.000001"]


def _partitions(out: Path) -> dict[tuple, list[dict]]:
    """Rows of each schema=/table=/date= directory, in the order its Parquet files hold them."""
    parts = {}
    for directory in sorted({p.parent for p in out.rglob("*.parquet")}):
        keys = dict(part.split("=", 1) for part in directory.relative_to(out).parts)
        rows = []
        for f in sorted(directory.glob("*.parquet")):
            rows += pq.read_table(f).to_pylist()
        parts[(keys["schema"], keys["table"], keys["date"])] = rows
    return parts


def test_index_job(spark, corpus, tmp_path, capfd):
    """One row per file equal to ``binlogd info``; a corrupt file fails the job in one line, or is reported."""
    from binlogd.cli.filetools import info

    paths = [str(corpus / f) for f in FILES]
    bad = str(corpus / "rust_mysql_common/binlog_truncated_event.000001")
    assert main(["index", bad, *paths, "--out", str(tmp_path / "failed")]) == 1
    line = capfd.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"pipeline index: {bad}: ") and "(at offset 4)" in line

    out = tmp_path / "index"
    assert main(["index", bad, *paths, "--out", str(out), "--skip-corrupt"]) == 0
    err = capfd.readouterr().err
    assert "[index] 5 file(s)" in err and "tasks done" in err and "[index] wrote 5 row(s)" in err
    rows = {r["file"]: r for r in pq.read_table(out).to_pylist()}
    assert rows.pop(bad)["_corrupt"] == line.removeprefix("pipeline index: ")
    assert rows == {p: {**dataclasses.asdict(info(p)), "file": p, "_corrupt": None} for p in paths}


def test_changes_job_from_binlogs(spark, corpus, tmp_path, capfd):
    paths = [str(corpus / f) for f in FILES]
    out = tmp_path / "changes"
    assert main(["changes", *paths, "--out", str(out)]) == 0
    assert "[changes] wrote" in capfd.readouterr().err
    parts = _partitions(out)
    expected = [c for p in paths for c in reference_changes(p)[0]]
    assert sum(len(rows) for rows in parts.values()) == len(expected)
    for (schema, table, date), rows in parts.items():
        keys = [tuple(r[k] for k in ORDER) for r in rows]
        assert keys == sorted(keys), (schema, table, date)      # transaction order inside the partition
    got = sorted((s, t, r["file"], r["pos"], r["event_seq"], r["row"], r["op"], r["after"])
                 for (s, t, _), rows in parts.items() for r in rows)
    from binlogd.library.serialize import dumps

    want = []
    for c in expected:
        want.append((c["schema"], c["table"], c["source"]["file"], c["source"]["pos"], None, c["source"]["row"],
                     c["op"], None if c["after"] is None else dumps(c["after"]).decode()))
    assert sorted(g[:4] + g[5:] for g in got) == sorted(w[:4] + w[5:] for w in want)
    import datetime as dt

    dates = {d for (_, _, d) in parts}
    assert dates == {dt.datetime.fromtimestamp(c["ts"], dt.timezone.utc).strftime("%Y-%m-%d") for c in expected}


def test_changes_job_from_daemon_jsonl(spark, corpus, tmp_path):
    """The daemon's JSON lines give the same Parquet as the binlogs they came from; the uncommitted tail is out."""
    from binlogd.daemon.sinks.jsonl import JsonLinesSink

    paths = [str(corpus / f) for f in FILES[:3]]
    sink_dir = tmp_path / "jsonl"
    sink = JsonLinesSink(sink_dir, max_file_bytes=3000, max_file_seconds=0, fsync=False)
    sink.open(None)
    state = {}
    for path in paths:
        changes, _ = reference_changes(path)
        for change in changes:
            sink.change(change)
            if change["source"]["row"] == 0:
                state = commit_sink(sink)
        state = commit_sink(sink)
    sink.change({**changes[0], "op": "delete", "table": "uncommitted"})   # a transaction still being written
    sink._fh.flush()
    with open(sink_dir / state["file"], "ab") as fh:
        fh.write(b'{"op": "ins')                                           # and a half-written line
    sink.close()
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text(json.dumps({"version": 1, "position": {"file": "mysql-bin.000001", "pos": 4}, "sink": state}))
    assert len(list(sink_dir.glob("changes-*.jsonl"))) > 2

    from_jsonl, from_binlog = tmp_path / "from-jsonl", tmp_path / "from-binlog"
    assert main(["changes", str(sink_dir), "--out", str(from_jsonl), "--daemon-checkpoint", str(checkpoint)]) == 0
    assert main(["changes", *paths, "--out", str(from_binlog)]) == 0
    a, b = _partitions(from_jsonl), _partitions(from_binlog)
    assert a == b and "uncommitted" not in {t for (_, t, _) in a}


def test_zip_for_executors(tmp_path):
    """The zip alone (no editable install, no project on sys.path) provides pipeline.source.BinlogDataSource."""
    archive = build_zip(tmp_path / "binlogd-pipeline.zip")
    site = sysconfig.get_paths()["purelib"]
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
            "import binlogd.pipeline.source, binlogd.protocol.rowcodec, binlogd.library.schema, binlogd.protocol.position;"
            "print(binlogd.pipeline.source.__file__); print(binlogd.pipeline.source.BinlogDataSource.name())")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(archive), site],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    origin, name = result.stdout.split()
    assert origin.startswith(str(archive) + os.sep) and name == "binlog"
