"""``spark.read.format("binlog")`` on object-store prefixes: moto's S3 emulator and ``file://``.

The archive is uploaded by the daemon's own uploader (daemon/sinks/upload.py); Spark over the uploaded
prefix must equal Spark over the local archive, row for row (the ``file`` column aside), in batch, in
streaming (a new object is a new file), and for the index shape. A prefix of 10,000 objects is listed
once: the requests are counted by a proxy in front of the store (:class:`tests.support.s3.Gate`).
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.s3 import Gate, s3_server  # noqa: F401 - the ``s3`` fixture

pytest.importorskip("pyspark")

FILES = ["mysql-binlog-connector-java/mysql-bin.checksum-crc32", "mysql-binlog-connector-rust/mysql-bin.000057",
         "rust_mysql_common/mariadb-bin.000001", "rust_mysql_common/json.binlog.000001"]


def _use_store(spark, env: dict) -> None:
    """Point the driver and Spark's Python workers at the store (the source is registered again: its
    workers take the environment it was registered with)."""
    from binlogd.pipeline.source import BinlogDataSource

    os.environ.update(env)
    spark.sparkContext.environment.update(env)
    spark.dataSource.register(BinlogDataSource)


def _archive(corpus: Path, directory: Path) -> Path:
    """A local archive of FILES named mysql-bin.000001... (as the daemon names a primary's files)."""
    directory.mkdir(parents=True)
    for i, name in enumerate(FILES, 1):
        shutil.copyfile(corpus / name, directory / f"mysql-bin.{i:06d}")
    return directory


def _upload(local: Path, url: str, upto: str) -> None:
    """The daemon's uploader: every file before ``upto`` (the active one) goes to ``url``."""
    from binlogd.daemon.sinks.upload import Uploader

    up = Uploader(local, url, retry_seconds=0.2)
    try:
        up.release(upto)
        deadline = time.monotonic() + 60
        while up.pending:
            assert time.monotonic() < deadline, "uploads did not finish"
            time.sleep(0.05)
    finally:
        up.stop()


def _rows(spark, path: str, shape: str) -> list[tuple]:
    df = spark.read.format("binlog").option("shape", shape).load(path)
    return sorted((os.path.basename(r["file"]),) + tuple(str(v) for k, v in r.asDict().items() if k != "file")
                  for r in df.collect())


@pytest.fixture
def stores(spark, s3, corpus, tmp_path):
    """(local archive dir, {kind: uploaded prefix URI}) with every archive file but the last uploaded."""
    _use_store(spark, s3.env)
    local = _archive(corpus, tmp_path / "archive")
    bucket = f"spark-{tmp_path.name[-12:].lower().replace('_', '-')}"
    s3.make_bucket(bucket)
    out = {"s3": f"s3://{bucket}/archive/", "file": f"file://{tmp_path}/store/archive"}
    for kind, url in out.items():  # each from its own copy: an archive's journal records its uploads
        _upload(_archive(corpus, tmp_path / f"archive-{kind}"), url, f"mysql-bin.{len(FILES) + 1:06d}")
    return local, out


@pytest.mark.parametrize("kind", ["s3", "file"])
@pytest.mark.parametrize("shape", ["events", "changes", "index"])
def test_batch_uploaded_prefix_equals_local_archive(spark, stores, kind, shape):
    local, urls = stores
    want = _rows(spark, str(local), shape)
    assert len(want) > 50 or shape == "index"
    got = _rows(spark, urls[kind], shape)
    if shape == "index":  # ``file`` aside, what info reports of a file and of its object is the same
        assert [r[:1] + r[2:] for r in got] == [r[:1] + r[2:] for r in want] and len(got) == len(FILES)
    else:
        assert got == want


def test_streaming_new_objects_are_new_files(spark, s3, corpus, tmp_path):
    _use_store(spark, s3.env)
    local = _archive(corpus, tmp_path / "archive")
    s3.make_bucket("spark-stream")
    prefix = "s3://spark-stream/archive/"
    seen: list = []

    def run() -> None:
        query = (spark.readStream.format("binlog").load(prefix).writeStream
                 .foreachBatch(lambda df, _: seen.extend(df.collect()))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(300)

    _upload(local, prefix, "mysql-bin.000003")  # two objects first
    run()
    first = {os.path.basename(r["file"]) for r in seen}
    assert first == {"mysql-bin.000001", "mysql-bin.000002"}
    _upload(local, prefix, "mysql-bin.000005")  # then two more: read by the next run, the first two not again
    run()
    want = spark.read.format("binlog").load(str(local)).collect()
    key = lambda r: (os.path.basename(r["file"]), r["pos"])  # noqa: E731
    assert sorted(map(key, seen)) == sorted(map(key, want))


def test_prefix_of_10000_objects_listed_once(spark, s3, corpus, tmp_path):
    """The planner lists the prefix once (10 pages of 1,000) and asks nothing per object; the index job
    over a prefix lists it once in all."""
    from binlogd.pipeline.source import BinlogBatchReader, Options, default_schema

    s3.make_bucket("ten-thousand")
    client, data = s3.client(), (corpus / FILES[0]).read_bytes()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(Bucket="ten-thousand", Key=f"p/mysql-bin.{i:06d}", Body=data),
                      range(1, 10_001)))
    gate = Gate(s3.port)
    try:
        _use_store(spark, dict(s3.env, AWS_ENDPOINT_URL=gate.endpoint))
        reader = BinlogBatchReader(Options({"path": "s3://ten-thousand/p/", "shape": "index"}),
                                   default_schema("index"))
        packs = reader.partitions()  # each file costs its size plus 4 MiB to open: packs of 128 MiB at most
        per_pack = (128 << 20) // (len(data) + (4 << 20))
        assert [len(p.parts) for p in packs] == [per_pack] * (10_000 // per_pack) + [10_000 % per_pack] * (10_000 % per_pack > 0)
        parts = [part for p in packs for part in p.parts]
        assert len(parts) == 10_000 and parts[0].path == "s3://ten-thousand/p/mysql-bin.000001"
        assert [p.path.rpartition(".")[2] for p in parts[:3]] == ["000001", "000002", "000003"]
        listings = [r for r in gate.requests if "list-type=2" in r]
        assert len(listings) == 10 and len(gate.requests) == 10, gate.requests[:20]  # 10 pages, no HEAD

        for i in range(1, 31):
            client.put_object(Bucket="ten-thousand", Key=f"small/mysql-bin.{i:06d}", Body=data)
        gate.requests.clear()
        from binlogd.pipeline.jobs import index_job

        summary = index_job(spark, ["s3://ten-thousand/small/"], str(tmp_path / "index"))
        assert summary["rows"] == 30
        listings = [r for r in gate.requests if "list-type=2" in r]
        assert len(listings) == 1, listings
    finally:
        _use_store(spark, s3.env)
        gate.close()
