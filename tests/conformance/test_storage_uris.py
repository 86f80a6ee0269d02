"""``binlogd info`` and ``dump`` on object-store URIs (moto's S3 emulator) and ``file://`` URIs.

The oracle is the same tool on the local corpus file: every key of ``info --json`` (but ``file``)
and every line of ``dump`` must agree; ``info`` must read only the first events and the last few KB
(``bytes_read`` well under the object's size, the same as locally). Bad input: one line naming the URI, exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from binlogd.library import storage
from tests.support.paths import CORPUS, REPO
from tests.support.s3 import MotoS3, s3_server  # noqa: F401 - the ``s3`` fixture

BUCKET = "corpus"
FILES = ["canal/mysql-bin.000001", "rust_mysql_common/ver_trunk_row_v2.001",
         "mysql-binlog-connector-java/mysql-bin.sakila"]


def _binlogd(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlogd.cli", *args], capture_output=True, timeout=120,
                          cwd=REPO, env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def uploaded(s3):
    """The FILES in bucket BUCKET (uploaded with boto3, not binlogd)."""
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not present at {CORPUS}")
    s3.make_bucket(BUCKET)
    for name in FILES:
        s3.client().upload_file(str(CORPUS / name), BUCKET, name)
    return s3


def _uri(kind: str, name: str) -> str:
    return f"s3://{BUCKET}/{name}" if kind == "s3" else f"file://{CORPUS / name}"


@pytest.mark.parametrize("kind", ["s3", "file"])
@pytest.mark.parametrize("name", FILES)
def test_info_uri_equals_local(uploaded, kind, name):
    local = _binlogd("info", "--json", str(CORPUS / name))
    remote = _binlogd("info", "--json", _uri(kind, name))
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    want, got = json.loads(local.stdout), json.loads(remote.stdout)
    assert got.pop("file") == _uri(kind, name)
    want.pop("file")
    assert got == want
    if want["method"] == "seek":  # the first events and the last few KB, not the object
        assert got["bytes_read"] < 8192 < got["size"]


@pytest.mark.parametrize("kind", ["s3", "file"])
@pytest.mark.parametrize("name", FILES)
def test_dump_uri_equals_local(uploaded, kind, name):
    local = _binlogd("dump", "--json", str(CORPUS / name))
    remote = _binlogd("dump", "--json", _uri(kind, name))
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    lines = remote.stdout.splitlines()
    assert len(lines) > 10
    # dump --json names the file it read: compare the rest of every line
    strip = [json.loads(line) | {"file": None} for line in lines]
    assert strip == [json.loads(line) | {"file": None} for line in local.stdout.splitlines()]


def _one_line(proc: subprocess.CompletedProcess, uri: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 1 and proc.stdout == b""
    assert err.count("\n") == 1 and uri in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", ["info", "dump"])
def test_missing_bucket_and_object(uploaded, command):
    for uri in ("s3://no-such-bucket/x/mysql-bin.000001", f"s3://{BUCKET}/no/such-object.000001"):
        assert "no such object or bucket" in _one_line(_binlogd(command, uri), uri)


@pytest.mark.parametrize("command", ["info", "dump"])
def test_wrong_credentials(command):
    pytest.importorskip("moto.server")
    with MotoS3(auth=True) as strict:  # moto checks keys against its IAM, which has none: every key is wrong
        uri = "s3://corpus/canal/mysql-bin.000001"
        err = _one_line(_binlogd(command, uri, env=strict.env), uri)
        assert "access denied" in err or "InvalidAccessKeyId" in err


@pytest.mark.parametrize("kind", ["s3", "file"])
@pytest.mark.parametrize("command", ["info", "dump"])
def test_not_a_binlog(uploaded, tmp_path, kind, command):
    path = tmp_path / "README.000001"
    path.write_bytes(b"this is not a binlog, just text\n" * 10)
    uploaded.client().upload_file(str(path), BUCKET, "junk/README.000001")
    uri = f"s3://{BUCKET}/junk/README.000001" if kind == "s3" else f"file://{path}"
    assert "magic" in _one_line(_binlogd(command, uri), uri)


@pytest.mark.parametrize("kind", ["s3", "file"])
def test_truncated_object(uploaded, tmp_path, kind):
    data = (CORPUS / FILES[1]).read_bytes()
    cut = tmp_path / "cut.000001"
    cut.write_bytes(data[:len(data) - 100])
    uploaded.client().upload_file(str(cut), BUCKET, "cut/cut.000001")
    uri = f"s3://{BUCKET}/cut/cut.000001" if kind == "s3" else f"file://{cut}"
    local, remote = _binlogd("info", "--json", str(cut)), _binlogd("info", "--json", uri)
    want, got = json.loads(local.stdout), json.loads(remote.stdout)
    assert want["truncated_at"] is not None and got["truncated_at"] == want["truncated_at"]
    dumped = _binlogd("dump", uri)
    assert dumped.returncode == 1 and uri in dumped.stderr.decode()


def test_list_files_prefix_and_glob(uploaded):
    listed = storage.list_files(f"s3://{BUCKET}/canal/")
    assert [(e.uri, e.size) for e in listed] == [(f"s3://{BUCKET}/canal/mysql-bin.000001",
                                                 (CORPUS / FILES[0]).stat().st_size)]
    globbed = storage.list_files(f"s3://{BUCKET}/*/*.001")
    assert [e.uri for e in globbed] == [f"s3://{BUCKET}/rust_mysql_common/ver_trunk_row_v2.001"]
    with pytest.raises(storage.StorageError, match="s3://no-such-bucket/"):
        storage.list_files("s3://no-such-bucket/")


def test_unsupported_scheme():
    proc = _binlogd("info", "ftp://host/mysql-bin.000001")
    assert "unsupported URI scheme" in _one_line(proc, "ftp://host/mysql-bin.000001")
