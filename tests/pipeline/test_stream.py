"""spark.readStream.format("binlog") over a directory that keeps growing (as the daemon's archive does).

A corpus file is copied in pieces, cut inside events and inside transactions: every event
arrives exactly once, in order; the open transaction and the half-written event wait until
complete; a restart from Spark's checkpoint (a new query on the same checkpoint directory)
continues where the last one committed, and a batch whose commit was lost is replayed with
exactly the same rows. Closed files fold into the offsets' ``done``; a file followed by a
later one is read to its end and a cut-off tail there is reported as corrupt (or fails the query).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.spark import dump_json, reference_changes, spark_missing

if spark_missing():
    pytest.skip(spark_missing(), allow_module_level=True)

from binlogd.library.serialize import dumps  # noqa: E402

COMMON = ("file", "pos", "next_pos", "timestamp", "type", "server_id")
SOURCE = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"   # 303 events, 60 transactions, ROTATE
SECOND = "mysql-binlog-connector-rust/mysql-bin.000080"           # 5.7 GTIDs, write/delete rows


class Collector:
    """A foreachBatch function keeping every micro-batch's rows by batch id (replays overwrite)."""

    def __init__(self):
        self.batches: dict[int, list] = {}
        self.calls: list[int] = []

    def __call__(self, df, batch_id: int) -> None:
        self.calls.append(batch_id)
        self.batches[batch_id] = df.collect()

    def rows(self) -> list:
        return [r for b in sorted(self.batches) for r in self.batches[b]]


def available_now(spark, directory: Path, checkpoint: Path, sink: Collector, **options) -> None:
    reader = spark.readStream.format("binlog")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load(str(directory)).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception():
        raise query.exception()


def last_offset(checkpoint: Path) -> dict:
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(offsets[-1].read_text().splitlines()[-1])


def _key(row) -> tuple:
    return tuple(row[k] for k in COMMON)


def _open_txn_start(expected: list[dict], offset: int) -> int:
    """The offset a stream may deliver up to when the file ends at ``offset``: the last transaction end."""
    ends = [4] + [o["next_pos"] for o in expected if o["type"] in ("XID", "ROTATE", "STOP", "PREVIOUS_GTIDS",
                                                                     "FORMAT_DESCRIPTION")
                  or (o["type"] == "QUERY" and o["query"] not in ("BEGIN",))]
    return max(e for e in ends if e <= offset)


def test_growing_file_tailed_by_one_query(spark, corpus, tmp_path):
    """One running query: each appended piece is delivered once; a half transaction waits."""
    src = corpus / SOURCE
    data = src.read_bytes()
    directory, path = tmp_path / "archive", tmp_path / "archive" / "mysql-bin.000001"
    directory.mkdir()
    expected, _ = dump_json(src)
    for o in expected:
        o["file"] = str(path)
    xids = [o for o in expected if o["type"] == "XID"]
    cuts = [xids[10]["pos"] + 5, xids[30]["pos"] - 3, len(data)]   # inside an XID event; before one
    sink = Collector()
    query = (spark.readStream.format("binlog").load(str(directory)).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        written = 0
        for cut in cuts:
            with open(path, "ab") as fh:
                fh.write(data[written:cut])
            written = cut
            query.processAllAvailable()
            delivered = [_key(r) for r in sink.rows()]
            upto = _open_txn_start(expected, cut) if cut < len(data) else len(data)
            assert delivered == [_key(o) for o in expected if o["next_pos"] <= upto], cut
            assert all(o["next_pos"] <= cut for o in expected[:len(delivered)])
    finally:
        query.stop()
    assert [_key(r) for r in sink.rows()] == [_key(o) for o in expected]
    assert len(set(sink.calls)) == len(sink.calls)
    rows = sink.rows()
    xid_of = {o["pos"]: o.get("xid") for o in expected if o["type"] == "XID"}
    assert {r["xid"] for r in rows if r["type"] == "XID"} == set(xid_of.values())


def test_restart_from_checkpoint_and_replayed_batch(spark, corpus, tmp_path):
    """New queries on the same checkpoint continue; a batch whose commit was lost is replayed identically."""
    src = corpus / SOURCE
    data = src.read_bytes()
    directory, path = tmp_path / "archive", tmp_path / "archive" / "mysql-bin.000001"
    directory.mkdir()
    checkpoint = tmp_path / "ck"
    expected, _ = reference_changes(src)
    sink = Collector()
    cut = len(data) // 2 + 7
    path.write_bytes(data[:cut])
    available_now(spark, directory, checkpoint, sink, shape="changes")
    first = list(sink.rows())
    assert 0 < len(first) < len(expected)
    offset = last_offset(checkpoint)["files"][str(path)]
    assert offset["pos"] <= cut and "end" not in offset
    with open(path, "ab") as fh:
        fh.write(data[cut:])
    available_now(spark, directory, checkpoint, sink, shape="changes")
    last = max(sink.batches)
    replayed_before = sink.batches[last]
    for lost in (str(last), f".{last}.crc"):             # the crash: offsets logged, commit lost
        (checkpoint / "commits" / lost).unlink()
    available_now(spark, directory, checkpoint, sink, shape="changes")
    assert sink.calls[-1] == last and sink.batches[last] == replayed_before
    available_now(spark, directory, checkpoint, sink, shape="changes")   # nothing new: no batch
    assert sink.calls[-1] == last
    got = [(r["pos"], r["row"], r["op"], None if r["after"] is None else json.loads(r["after"]))
           for r in sink.rows()]
    want = [(c["source"]["pos"], c["source"]["row"], c["op"], c["after"]) for c in expected]
    assert [list(g) for g in got] == json.loads(dumps(want))
    assert last_offset(checkpoint)["files"][str(path)] == {"pos": len(data), "fde": 4, "end": True}


def test_rotation_folds_closed_files_and_limits(spark, corpus, tmp_path):
    """Files appear in order; a closed one folds into "done"; maxFilesPerTrigger gives one file per batch."""
    directory = tmp_path / "archive"
    directory.mkdir()
    names = ["mysql-bin.000001", "mysql-bin.000002"]
    shutil.copy(corpus / SOURCE, directory / names[0])
    second = (corpus / SECOND).read_bytes()
    (directory / names[1]).write_bytes(second[:len(second) - 40])
    checkpoint, sink = tmp_path / "ck", Collector()
    available_now(spark, directory, checkpoint, sink, maxFilesPerTrigger="1")
    assert len(sink.batches) == 2
    assert {r["file"] for r in sink.batches[0]} == {str(directory / names[0])}
    (directory / names[1]).write_bytes(second)
    shutil.copy(corpus / "rust_mysql_common/mariadb-bin.000001", directory / "mysql-bin.000010")
    available_now(spark, directory, checkpoint, sink, maxFilesPerTrigger="1")
    assert len(sink.batches) == 4
    offsets = last_offset(checkpoint)   # 000001 ended in batch 0, 000002 in batch 2: both folded since
    assert offsets["done"] == {str(directory / "mysql-bin"): str(directory / names[1])}
    assert list(offsets["files"]) == [str(directory / "mysql-bin.000010")]
    want = []
    for name, source in ((names[0], SOURCE), (names[1], SECOND), ("mysql-bin.000010",
                                                                   "rust_mysql_common/mariadb-bin.000001")):
        objs, _ = dump_json(corpus / source)
        want += [(str(directory / name),) + tuple(o[k] for k in COMMON[1:]) for o in objs]
    assert [_key(r) for r in sink.rows()] == want


def test_superseded_file_and_corrupt_tail(spark, corpus, tmp_path):
    """A file cut inside an event and followed by a later file: its complete events, then the tail is corrupt."""
    directory = tmp_path / "archive"
    directory.mkdir()
    data = (corpus / SOURCE).read_bytes()
    expected, _ = dump_json(corpus / SOURCE)
    xid = [o for o in expected if o["type"] == "XID"][5]
    cut = xid["pos"] + 10
    (directory / "mysql-bin.000001").write_bytes(data[:cut])
    shutil.copy(corpus / SECOND, directory / "mysql-bin.000002")
    with pytest.raises(Exception) as info:
        available_now(spark, directory, tmp_path / "ck-fail", Collector())
    assert f"{directory / 'mysql-bin.000001'}: binlog ends inside an event" in str(info.value)
    assert f"(at offset {xid['pos']})" in str(info.value)
    sink = Collector()
    available_now(spark, directory, tmp_path / "ck-skip", sink, corruptFiles="skip")
    rows = [r for r in sink.rows() if r["file"].endswith("000001")]
    good = [r for r in rows if r["_corrupt"] is None]
    assert [(r["pos"], r["type"]) for r in good] == [(o["pos"], o["type"]) for o in expected if o["pos"] < xid["pos"]]
    assert [(r["pos"], r["_corrupt"] is not None) for r in rows[len(good):]] == [(xid["pos"], True)]
    assert "at offset" in rows[-1]["_corrupt"]
    assert len([r for r in sink.rows() if r["file"].endswith("000002")]) == len(dump_json(corpus / SECOND)[0])
