"""The archive sink's uploads, end to end: a real MariaDB, ``binlogd run`` with ``[sink.upload]`` to moto's
S3 emulator behind a :class:`tests.support.s3.Gate` (outages on demand).

Each closed binlog file must reach the bucket byte-identical to the server's file (closed files carry
no in-use flag, so no byte differs), through an upload stuck mid-request and a SIGKILL, and through a
store outage in the middle of an upload; with ``delete_after_upload`` the local copy goes only once
its object is verified, and the metrics count the failures. The oracle is the server's own files,
and the bucket read with boto3.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import base_overrides, metric, parse_metrics, running_daemon, scrape, wait_caught_up
from tests.support.s3 import Gate, s3_server  # noqa: F401 - the ``s3`` fixture

pytestmark = pytest.mark.server


def _write(srv, start: int, n: int, blob: int = 200) -> None:
    conn = srv.connect(database="z")
    try:
        cur = conn.cursor()
        for i in range(start, start + n):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, bytes([i % 256]) * blob))
    finally:
        conn.close()


def _uploaded(s3, bucket: str) -> dict[str, bytes]:
    return {k.rpartition("/")[2]: v for k, v in s3.objects(bucket, "binlogs/").items()}


def _wait(predicate, timeout: float = 60.0, what: str = "", daemon=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; stderr:\n{daemon.stderr}" if daemon else ""))
        time.sleep(0.1)


def _closed(srv) -> dict[str, bytes]:
    """The server's closed binlog files (all but the active one): name -> bytes."""
    return {p.name: p.read_bytes() for p in srv.binlog_files()[:-1]}


def _rotate(srv, start: int, n: int, blob: int = 200) -> None:
    """Rows, a new binlog file, then commits in it (each sync after the checkpoint moves releases the file)."""
    _write(srv, start, n, blob)
    srv.sql("FLUSH BINARY LOGS")
    _write(srv, start + n, 3)


def test_uploads_survive_sigkill_and_outage_mid_upload(tmp_path, server_binaries, s3):
    bucket = f"it-archive-{uuid.uuid4().hex[:8]}"  # one per run: the session's store outlives it
    s3.make_bucket(bucket)
    gate = Gate(s3.port)
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL"], binaries=server_binaries)
    try:
        srv.start()
        srv.sql("CREATE DATABASE z")
        srv.sql("CREATE TABLE z.t (id INT PRIMARY KEY, b LONGBLOB)")
        _write(srv, 1, 5)
        env = dict(s3.env, AWS_ENDPOINT_URL=gate.endpoint)
        overrides = base_overrides(srv, tmp_path, **{
            "sink.kind": "archive", "source.start": f"file:{srv.binlog_files()[0].name}:4",
            "sink.upload.url": f"s3://{bucket}/binlogs", "sink.upload.retry_seconds": "0.3",
            "sink.upload.delete_after_upload": "true"})
        cp, archive = tmp_path / "checkpoint.json", tmp_path / "sink"

        # 1. two rotations, store up: both closed files uploaded, identical, deleted locally
        with running_daemon(overrides, env=env) as d:
            _rotate(srv, 100, 20)
            _rotate(srv, 200, 20)
            wait_caught_up(srv, cp, daemon=d)
            _wait(lambda: set(_uploaded(s3, bucket)) == set(_closed(srv)), what="the first uploads", daemon=d)
        assert _uploaded(s3, bucket) == _closed(srv)
        assert not any((archive / name).exists() for name in _closed(srv))

        # 2. SIGKILL during an upload: the request is stuck after 64 KiB of a ~300 KB file
        gate.mode, gate.hang_after = "hang", 64 << 10
        with running_daemon(overrides, env=env, stop="kill") as d:
            _rotate(srv, 300, 300, blob=1000)
            stuck = srv.binlog_files()[-2].name
            _wait(lambda: gate.hung >= 1, what="an upload stuck mid-request", daemon=d)
        assert (archive / stuck).exists() and stuck not in _uploaded(s3, bucket)
        assert stuck not in (archive / ".uploaded").read_text().split()

        # 3. restart: the upload starts over, hangs, then the store goes down in the middle of it; another
        #    file closes meanwhile; both wait on local disk, then go up when the store is back
        gate.cut()
        with running_daemon(overrides, env=env) as d:
            _wait(lambda: gate.hung >= 1, what="the resumed upload stuck mid-request", daemon=d)
            gate.mode = "down"
            gate.cut()
            d.wait_for_line(r"upload of .* failed", timeout=120)
            _rotate(srv, 700, 300, blob=1000)
            wait_caught_up(srv, cp, daemon=d)
            time.sleep(1.0)
            waiting = [name for name in _closed(srv) if name not in _uploaded(s3, bucket)]
            assert len(waiting) == 2 and all((archive / name).exists() for name in waiting), waiting
            port = int(re.search(r"metrics on http://[\d.]+:(\d+)/", d.wait_for_line("metrics on")).group(1))
            samples = parse_metrics(scrape(port)[1])
            assert metric(samples, "binlogd_upload_pending_files") == 2
            assert metric(samples, "binlogd_upload_errors_total") >= 1
            gate.mode = "open"
            _wait(lambda: set(_uploaded(s3, bucket)) == set(_closed(srv)), timeout=120, what="uploads after the outage",
                  daemon=d)
            _wait(lambda: metric(parse_metrics(scrape(port)[1]), "binlogd_upload_pending_files") == 0,
                  what="an empty queue")
            samples = parse_metrics(scrape(port)[1])
            assert metric(samples, "binlogd_upload_bytes_total") == sum(len(_closed(srv)[n]) for n in waiting)
        assert _uploaded(s3, bucket) == _closed(srv)  # every closed file, byte for byte
        left = sorted(p.name for p in archive.iterdir())
        assert left == sorted([".uploaded", srv.binlog_files()[-1].name]), left
    finally:
        gate.close()
        srv.cleanup()
