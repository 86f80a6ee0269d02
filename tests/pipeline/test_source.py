"""spark.read.format("binlog"): the DataFrames equal ``binlogd dump --json`` and change_events.

On the whole shared corpus in one read (corruptFiles=skip, so the damaged samples are in the same
read: their rows before the damage equal what ``dump`` printed before failing, and the ``_corrupt``
row carries dump's own error line and offset); failing tasks name the file and offset; the shapes'
transaction columns (gtid, xid, event_seq); path forms; Arrow batches and tuples agree; caller-given
before/after schemas.
"""

from __future__ import annotations

import json
import os
import shutil
from decimal import Decimal

import pytest

from tests.support.spark import corpus_files, dump_json, reference_changes, spark_missing, spark_rows_by_file

if spark_missing():
    pytest.skip(spark_missing(), allow_module_level=True)

from binlogd.library.serialize import dumps  # noqa: E402

COMMON = ("file", "pos", "next_pos", "timestamp", "type", "server_id")
GTID_TYPES = {"GTID", "GTID_TAGGED", "MARIADB_GTID"}


@pytest.fixture(scope="module")
def files(corpus) -> list[str]:
    paths = [str(p) for p in corpus_files()]
    assert len(paths) > 40
    return paths


@pytest.fixture(scope="module")
def events(spark, files):
    rows = spark.read.format("binlog").option("corruptFiles", "skip").load(files).collect()
    return spark_rows_by_file(rows)


SAKILA = "mysql-bin.sakila"  # 46k rows of one bulk load: left out of the row-by-row changes comparison (time)


@pytest.fixture(scope="module")
def changes(spark, files):
    files = [f for f in files if not f.endswith(SAKILA)]
    rows = spark.read.format("binlog").option("shape", "changes").option("corruptFiles", "skip").load(files)
    return spark_rows_by_file(rows.collect())


@pytest.mark.parametrize("sizes,options,expected", [
    ([1, 2, 3], {}, [3]),                                                       # small files: one task
    ([1, 2, 3], {"minPartitions": "3"}, [1, 1, 1]),                             # (size + 4 MiB) > total / 3
    ([100, 100, 1, 1], {"maxPartitionBytes": str(200 << 20)}, [1, 3]),            # 104 + 104 > 200 MiB
    ([200, 1, 1], {}, [1, 2]),                                                  # a file over the limit: alone
    ([10] * 8, {"minPartitions": "2"}, [4, 4]),                                 # 112 MiB / 2: 56 MiB a task
])
def test_pack_follows_sparks_file_packing(sizes, options, expected):
    from binlogd.pipeline.source import FilePartition, Options, pack

    parts = [FilePartition(f"f{i}", "binlog", 4, n << 20) for i, n in enumerate(sizes)]
    packs = pack(parts, {p.path: p.stop for p in parts}, Options({"path": "x", **options}))
    assert [len(p.parts) for p in packs] == expected
    assert [q for p in packs for q in p.parts] == parts  # every file once, in order


def test_files_are_packed_into_partitions_as_spark_packs_them(spark, files):
    # the corpus files are small: a task reads many of them (each whole), more tasks with minPartitions,
    # one per file when each is over maxPartitionBytes; the same rows every way
    def read(**options):
        return spark.read.format("binlog").option("corruptFiles", "skip").options(**options).load(files)

    packed, more, single = read(), read(minPartitions=8), read(maxPartitionBytes=1)
    counts = [df.rdd.getNumPartitions() for df in (packed, more, single)]
    assert counts[0] < counts[1] < counts[2] == len(files), counts
    rows = [sorted(df.select("file", "pos", "type", "_corrupt").collect()) for df in (packed, more, single)]
    assert rows[0] == rows[1] == rows[2] and len(rows[0]) > len(files)


def test_events_equal_dump_json(events, files):
    """Every corpus file: the common fields of every event, in order, as dump prints them."""
    compared = 0
    for path in files:
        expected, error = dump_json(path)
        rows = events.get(path, [])
        good = [r for r in rows if r["_corrupt"] is None]
        bad = [r for r in rows if r["_corrupt"] is not None]
        assert [tuple(r[k] for k in COMMON) for r in good] == [tuple(o[k] for k in COMMON) for o in expected], path
        for row, obj in zip(good, expected):
            if obj["type"] in GTID_TYPES:
                assert row["gtid"] == obj["gtid"], (path, obj["pos"])
            if obj["type"] == "XID":
                assert row["xid"] == obj["xid"], (path, obj["pos"])
        if error is None:
            assert not bad, (path, bad)
        else:  # dump's error line is the _corrupt message; pos is its offset
            assert [r["_corrupt"] for r in bad] == [error], path
            assert f"(at offset {bad[0]['pos']})" in error
        compared += len(good)
    assert compared > 4000


def test_events_transaction_columns(events, corpus):
    """gtid and xid are the transaction's, on each of its events; payload events number their inner events."""
    rows = events[str(corpus / "rust_mysql_common/mariadb-bin.000001")]
    txn = [(r["type"], r["gtid"], r["xid"]) for r in rows if r["pos"] >= 330 and r["pos"] < 702]
    assert txn == [("MARIADB_GTID", "0-1-1", 800), ("ANNOTATE_ROWS", "0-1-1", 800), ("TABLE_MAP", "0-1-1", 800),
                   ("WRITE_ROWS_V1", "0-1-1", 800), ("XID", "0-1-1", 800)]
    assert all(r["gtid"] is None and r["xid"] is None for r in rows if r["pos"] < 330)
    payload = events[str(corpus / "rust_mysql_common/transaction_compression.000001")]
    inner = [(r["type"], r["inner"], r["xid"]) for r in payload if r["pos"] == 274]
    assert inner == [("TRANSACTION_PAYLOAD", None, 462), ("QUERY", 0, 462), ("TABLE_MAP", 1, 462),
                     ("WRITE_ROWS", 2, 462), ("XID", 3, 462)]
    gtids = events[str(corpus / "mysql-binlog-connector-rust/mysql-bin.000057")]
    for row in gtids:
        if row["type"] in ("TRANSACTION_PAYLOAD",):
            assert row["gtid"] is not None and row["xid"] is not None


def test_changes_equal_change_events(changes, files):
    """Every row change of the corpus, as library.serialize.change_events gives it (the JSON-lines contract)."""
    total = 0
    for path in (f for f in files if not f.endswith(SAKILA)):
        expected, error = reference_changes(path)
        rows = changes.get(path, [])
        good = [r for r in rows if r["_corrupt"] is None]
        got = [{"op": r["op"], "schema": r["schema"], "table": r["table"],
                "before": None if r["before"] is None else json.loads(r["before"], parse_float=Decimal),
                "after": None if r["after"] is None else json.loads(r["after"], parse_float=Decimal),
                "ts": r["ts"], "source": {"server_id": r["server_id"], "file": r["file"], "pos": r["pos"],
                                          "gtid": r["gtid"], "row": r["row"]}} for r in good]
        for g, r in zip(got, good):  # a partial JSON update's diffs, apart from "after"
            if r["json_diffs"] is not None:
                g["json_diffs"] = json.loads(r["json_diffs"], parse_float=Decimal)
        want = json.loads(b"[" + b",".join(dumps(c) for c in expected) + b"]", parse_float=Decimal)
        for c in want:  # Spark's rows name a change by (file, pos, event_seq, row), not by source.id
            del c["source"]["id"]
        assert got == want, path
        assert any(r["json_diffs"] for r in good) == any("json_diffs" in c for c in expected)
        for r, c in zip(good, expected):  # the text itself is dumps' bytes
            assert r["after"] == (None if c["after"] is None else dumps(c["after"]).decode())
        if error is None:
            assert all(r["_corrupt"] is None for r in rows), path
        total += len(good)
    assert total > 300


def test_changes_event_seq_in_payloads(changes, corpus):
    """Rows of the second, third… rows event of one TRANSACTION_PAYLOAD share its pos: event_seq orders them."""
    rows = changes[str(corpus / "mysql-binlog-connector-rust/mysql-bin.000057")]
    keys = [(r["pos"], r["event_seq"], r["row"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys)
    assert all(r["gtid"] for r in rows)


def test_corrupt_file_fails_its_task_naming_file_and_offset(spark, corpus):
    path = str(corpus / "rust_mysql_common/binlog_truncated_prev_gtid_event.000001")
    _, error = dump_json(path)
    with pytest.raises(Exception) as info:
        spark.read.format("binlog").load(path).collect()
    assert error in str(info.value)
    assert "at offset 120" in error and path in error


def test_crc_mismatch_fails_both_shapes(spark, corpus, tmp_path):
    """A damaged byte (CRC32 mismatch): events and changes tasks fail with dump's message; skip reports it."""
    src = corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    data = bytearray(src.read_bytes())
    data[800] ^= 0xFF
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(bytes(data))
    _, error = dump_json(path)
    assert error and "at offset" in error
    for shape in ("changes", "events"):
        with pytest.raises(Exception) as info:
            spark.read.format("binlog").option("shape", shape).load(str(path)).collect()
        assert error in str(info.value)
    skipped = spark.read.format("binlog").option("shape", "changes").option("corruptFiles", "skip").load(str(path))
    bad = skipped.where("_corrupt IS NOT NULL").collect()
    assert [(r["file"], r["_corrupt"]) for r in bad] == [(str(path), error)]


def test_path_forms(spark, corpus, tmp_path):
    """A directory, a glob and a list name the same files; bookkeeping files are not binlogs."""
    names = ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000010"]
    sources = ["canal/mysql-bin.000002", "mysql-binlog-connector-rust/mysql-bin.000080",
               "rust_mysql_common/mariadb-bin.000001"]
    for name, source in zip(names, sources):
        shutil.copy(corpus / source, tmp_path / name)
    (tmp_path / "mysql-bin.index").write_text("\n".join(names))
    (tmp_path / ".hidden").write_bytes(b"x")
    by_dir = spark.read.format("binlog").load(str(tmp_path))
    by_glob = spark.read.format("binlog").load(str(tmp_path / "mysql-bin.0*"))
    by_list = spark.read.format("binlog").load([str(tmp_path / n) for n in reversed(names)])
    uri = spark.read.format("binlog").load(f"file://{tmp_path}")
    expected = [str(tmp_path / n) for n in names]
    for df in (by_dir, by_glob, by_list, uri):
        assert [r["file"] for r in df.select("file").distinct().orderBy("file").collect()] == expected
    assert by_dir.count() == sum(len(dump_json(p)[0]) for p in expected)
    filtered = spark.read.format("binlog").option("pathGlobFilter", "*.000010").load(str(tmp_path))
    assert filtered.rdd.getNumPartitions() == 1
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("binlog").load(str(tmp_path / "nope")).collect()
    with pytest.raises(Exception, match="shape must be one of"):
        spark.read.format("binlog").option("shape", "rows").load(str(tmp_path)).collect()


def test_arrow_batches_and_tuples_agree(spark, corpus):
    path = str(corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32")
    for shape in ("events", "changes"):
        arrow = spark.read.format("binlog").option("shape", shape).option("batchRows", "7").load(path).collect()
        tuples = spark.read.format("binlog").option("shape", shape).option("arrow", "false").load(path).collect()
        assert arrow == tuples and len(arrow) > 50


def test_partial_tail(spark, corpus, tmp_path):
    """A last event cut off (a file being written): an error like dump's, or left out with partialTail=ignore."""
    src = corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    data = src.read_bytes()
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(data[:5000])
    expected, error = dump_json(path)
    assert error and "ends inside an event" in error
    with pytest.raises(Exception) as info:
        spark.read.format("binlog").load(str(path)).collect()
    assert error in str(info.value)
    rows = spark.read.format("binlog").option("partialTail", "ignore").load(str(path)).collect()
    assert [tuple(r[k] for k in COMMON) for r in rows] == [tuple(o[k] for k in COMMON) for o in expected]


def test_caller_schema_maps_before_after(spark, corpus):
    """A schema with struct/map before/after, a projection and a cast of ts."""
    path = str(corpus / "rust_mysql_common/mariadb-bin.000001")
    schema = ("op string, `table` string, ts timestamp, "
              "after struct<id: long, topic: string, event: string, created: timestamp, missing: int>, "
              "before map<string, string>, file string, pos long, row int")
    rows = spark.read.format("binlog").option("shape", "changes").schema(schema).load(path).collect()
    expected, _ = reference_changes(path)
    assert len(rows) == len(expected) == 2
    for row, ch in zip(rows, expected):
        after = ch["after"]
        assert row["after"]["id"] == after["id"] and row["after"]["topic"] == after["topic"]
        assert row["after"]["event"] == (after["event"] if isinstance(after["event"], str)
                                         else dumps(after["event"]).decode())
        assert row["after"]["created"].strftime("%Y-%m-%d %H:%M:%S") == after["created"][:19]
        assert row["after"]["missing"] is None and row["before"] is None
        assert int(row["ts"].timestamp()) == ch["ts"]
    with pytest.raises(Exception, match="has no column"):
        spark.read.format("binlog").option("shape", "changes").schema("op string, nope int").load(path).collect()
    with pytest.raises(Exception, match="cannot convert"):
        spark.read.format("binlog").option("shape", "changes").schema(
            "op string, after struct<topic: int>").load(path).collect()


def test_index_shape_equals_info(spark, files):
    from binlogd.cli.filetools import info
    from binlogd.protocol.errors import BinlogError

    rows = {r["file"]: r for r in spark.read.format("binlog").option("shape", "index")
            .option("corruptFiles", "skip").load(files).collect()}
    assert set(rows) == set(files)
    for path in files:
        try:
            want = info(path)
        except BinlogError as exc:
            assert rows[path]["_corrupt"] == f"{path}: {exc}"
            continue
        got = rows[path].asDict()
        assert got.pop("_corrupt") is None
        assert got == {**want.__dict__, "file": path}, path


@pytest.fixture
def own_server(server_binaries):
    """A server of this test's own: the typed read below applies one table's schema to every row in
    the binlog, so no other test's tables may be in it (the shared server has them)."""
    from binlogd.cli.localserver import LocalServer

    with LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries) as server:
        server.sql("CREATE DATABASE pipe")
        yield server, "pipe"


def test_active_file_of_a_running_server(spark, own_server):
    """Files our MariaDB writes, the active one included (in-use flag set, still growing)."""
    mariadb, fresh_db = own_server
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, price DECIMAL(10,2), at DATETIME(3), "
                "d DATE, name VARCHAR(20), tags SET('a','b','c'), img BLOB)")
    mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES (1, 12.50, '2026-11-22 10:00:00.125', '2026-11-22', 'café', "
                "'a,c', x'00ff'), (2, NULL, NULL, '0000-00-00', NULL, '', NULL)")
    mariadb.sql(f"UPDATE `{fresh_db}`.t SET price = price + 1 WHERE id = 1")
    mariadb.sql("FLUSH BINARY LOGS")
    mariadb.sql(f"DELETE FROM `{fresh_db}`.t WHERE id = 2")  # in the active file
    paths = [str(p) for p in mariadb.binlog_files()]
    assert len(paths) >= 2
    df = spark.read.format("binlog").load(paths).collect()
    by_file = spark_rows_by_file(df)
    for path in paths:
        expected, error = dump_json(path)
        assert error is None
        got = [tuple(r[k] for k in COMMON) for r in by_file.get(path, [])]
        want = [tuple(o[k] for k in COMMON) for o in expected]
        # the active file may have grown after Spark planned the read (MariaDB's asynchronous BINLOG_CHECKPOINT)
        assert got == (want[:len(got)] if path == paths[-1] else want), path
    changes = (spark.read.format("binlog").option("shape", "changes").load(paths)
               .where(f"schema = '{fresh_db}'").collect())
    assert [(r["op"], r["row"]) for r in changes] == [("insert", 0), ("insert", 1), ("update", 0), ("delete", 0)]
    assert changes[-1]["file"] == paths[-1] and all(r["gtid"] for r in changes)
    assert json.loads(changes[0]["after"]) == {"id": 1, "price": "12.50", "at": "2026-11-22 10:00:00.125",
                                               "d": "2026-11-22", "name": "café", "tags": ["a", "c"],
                                               "img": "AP8="}
    typed = (spark.read.format("binlog").option("shape", "changes")
             .schema("op string, schema string, after struct<id: int, price: decimal(10,2), at: timestamp_ntz, "
                     "d: date, name: string, tags: array<string>, img: binary>")
             .load(paths).where(f"schema = '{fresh_db}' AND op = 'insert'").collect())
    first, second = typed[0]["after"], typed[1]["after"]
    assert first["price"] == Decimal("12.50") and first["at"].isoformat() == "2026-11-22T10:00:00.125000"
    assert first["d"].isoformat() == "2026-11-22" and first["tags"] == ["a", "c"] and first["img"] == b"\x00\xff"
    assert second["d"] is None and second["price"] is None and second["tags"] == []
    assert os.path.getsize(paths[-1]) > 0
