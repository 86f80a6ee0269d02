"""The archive's uploader (daemon/sinks/upload.py) against moto's S3 emulator and a ``file://`` store.

Files are real binlogs from the corpus (and one of 11 MiB, for a multipart upload); the oracle is the
bytes the store holds, read with boto3 (or from disk for ``file://``), the journal, and the metrics.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.sinks.upload import JOURNAL, Uploader
from tests.support.paths import CORPUS
from tests.support.s3 import s3_server  # noqa: F401 - the ``s3`` fixture

SOURCES = ["canal/mysql-bin.000001", "canal/mysql-bin.000002", "rust_mysql_common/ver_trunk_row_v2.001"]


def _archive(directory: Path, big: bool = False) -> dict[str, bytes]:
    """An archive directory of mysql-bin.000001.. (corpus files); returns name -> bytes."""
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not present at {CORPUS}")
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, src in enumerate(SOURCES, 1):
        data = (CORPUS / src).read_bytes()
        if big and i == 1:  # 11 MiB: three parts of 5 MiB
            data = data + bytes(range(256)) * (11 * 4096 - len(data) // 256)
        name = f"mysql-bin.{i:06d}"
        (directory / name).write_bytes(data)
        out[name] = data
    return out


def _wait(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class _Store:
    """Where an uploader writes, and what is there (read independently of binlogd)."""

    def __init__(self, kind: str, s3, tmp_path: Path, bucket: str):
        self.kind, self.s3, self.bucket = kind, s3, bucket
        if kind == "s3":
            s3.make_bucket(bucket)
            self.url = f"s3://{bucket}/arch/"
        else:
            self.root = tmp_path / "store"
            self.url = f"file://{self.root}/arch"

    def objects(self) -> dict[str, bytes]:
        if self.kind == "s3":
            return {k.rpartition("/")[2]: v for k, v in self.s3.objects(self.bucket, "arch/").items()}
        d = self.root / "arch"
        return {p.name: p.read_bytes() for p in d.iterdir()} if d.is_dir() else {}


@pytest.fixture(params=["s3", "file"])
def store(request, s3, tmp_path):
    return _Store(request.param, s3, tmp_path, f"up-{request.node.name.split('[')[0][5:20].replace('_', '-')}"
                                                 f"-{request.param}")


def test_closed_files_uploaded_verified_and_journaled(store, tmp_path):
    local = _archive(tmp_path / "archive", big=True)
    metrics = Metrics()
    up = Uploader(tmp_path / "archive", store.url, metrics=metrics, part_size=5 << 20, retry_seconds=0.2)
    try:
        up.release("mysql-bin.000003")  # the checkpoint names 000003: 000001 and 000002 are closed
        _wait(lambda: not up.pending, what="uploads")
    finally:
        up.stop()
    held = store.objects()
    assert held == {n: local[n] for n in ("mysql-bin.000001", "mysql-bin.000002")}  # byte-identical, not 000003
    assert (tmp_path / "archive" / JOURNAL).read_text().split() == ["mysql-bin.000001", "mysql-bin.000002"]
    reg = metrics.registry
    assert reg.get_sample_value("binlogd_upload_pending_files") == 0
    assert reg.get_sample_value("binlogd_upload_bytes_total") == len(local["mysql-bin.000001"]) + len(
        local["mysql-bin.000002"])
    assert reg.get_sample_value("binlogd_upload_errors_total") == 0
    assert (tmp_path / "archive" / "mysql-bin.000001").exists()  # delete_after_upload is off


def test_multipart_etag(s3, tmp_path):
    local = _archive(tmp_path / "archive", big=True)
    s3.make_bucket("multipart")
    up = Uploader(tmp_path / "archive", "s3://multipart/p", part_size=5 << 20, retry_seconds=0.2)
    try:
        up.release("mysql-bin.000002")
        _wait(lambda: not up.pending, what="upload")
    finally:
        up.stop()
    head = s3.client().head_object(Bucket="multipart", Key="p/mysql-bin.000001")
    assert head["ETag"].strip('"').endswith("-3")  # three parts of 5, 5 and 1 MiB
    assert s3.objects("multipart", "p/") == {"p/mysql-bin.000001": local["mysql-bin.000001"]}


def test_store_down_files_wait_then_resume_and_delete(s3, tmp_path):
    local = _archive(tmp_path / "archive")
    metrics = Metrics()
    url = "s3://later-bucket/x"
    up = Uploader(tmp_path / "archive", url, metrics=metrics, delete_after_upload=True, retry_seconds=0.2)
    try:
        up.release("mysql-bin.000003")  # the bucket does not exist yet: the store refuses every upload
        _wait(lambda: metrics.registry.get_sample_value("binlogd_upload_errors_total") >= 2, what="errors")
        assert metrics.registry.get_sample_value("binlogd_upload_pending_files") == 2
        assert all((tmp_path / "archive" / n).exists() for n in local)  # queued on local disk, none deleted
        s3.make_bucket("later-bucket")
        _wait(lambda: not up.pending, what="uploads after the outage")
    finally:
        up.stop()
    assert s3.objects("later-bucket", "x/") == {f"x/{n}": local[n] for n in ("mysql-bin.000001", "mysql-bin.000002")}
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == [JOURNAL, "mysql-bin.000003"]


def test_resume_after_restart_skips_journaled(store, tmp_path):
    """A new uploader (a restarted daemon) uploads what the journal does not list, and nothing twice."""
    local = _archive(tmp_path / "archive")
    (tmp_path / "archive" / JOURNAL).write_text("mysql-bin.000001\n")  # uploaded before the "crash"
    up = Uploader(tmp_path / "archive", store.url, retry_seconds=0.2)
    try:
        up.release("mysql-bin.000003")
        assert up.pending == ["mysql-bin.000002"]
        _wait(lambda: not up.pending, what="upload")
    finally:
        up.stop()
    assert store.objects() == {"mysql-bin.000002": local["mysql-bin.000002"]}


def test_verification_failure_keeps_the_file(s3, tmp_path, monkeypatch):
    """A store whose checksum disagrees (a corrupted upload): not journaled, not deleted, counted, retried."""
    _archive(tmp_path / "archive")
    s3.make_bucket("corrupt")
    metrics = Metrics()
    up = Uploader(tmp_path / "archive", "s3://corrupt/p", metrics=metrics, delete_after_upload=True,
                  retry_seconds=0.2)
    import binlogd.daemon.sinks.upload as upload

    monkeypatch.setattr(upload, "_etag", lambda path, part: "0" * 32)
    try:
        up.release("mysql-bin.000002")
        _wait(lambda: metrics.registry.get_sample_value("binlogd_upload_errors_total") >= 2, what="errors")
    finally:
        up.stop()
    assert (tmp_path / "archive" / "mysql-bin.000001").exists()
    assert not (tmp_path / "archive" / JOURNAL).exists()
    assert up.pending == ["mysql-bin.000001"]


