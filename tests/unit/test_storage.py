"""binlogd.library.storage's options: an explicit endpoint wins over AWS_ENDPOINT_URL, path-style addressing and
region reach the S3 client; plain paths and file:// URIs need no fsspec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from binlogd.library import storage
from tests.support.paths import CORPUS, REPO
from tests.support.s3 import s3_server  # noqa: F401 - the ``s3`` fixture


def test_explicit_endpoint_path_style_and_region(s3, monkeypatch):
    s3.make_bucket("opts")
    s3.client().put_object(Bucket="opts", Key="a/x.000001", Body=b"\xfebin" + b"\0" * 60)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there: the option must win
    opts = storage.Options(endpoint=s3.endpoint, region="us-east-1", path_style=True)
    fs, path = storage.filesystem("s3://opts/a/x.000001", opts)
    assert path == "opts/a/x.000001"
    config = fs.client_kwargs, fs.config_kwargs
    assert config == ({"endpoint_url": s3.endpoint, "region_name": "us-east-1"}, {"s3": {"addressing_style": "path"}})
    with storage.open_input("s3://opts/a/x.000001", opts) as fh:
        assert (fh.size, fh.read(4), fh.bytes_read) == (64, b"\xfebin", 4)
    assert [(e.uri, e.size) for e in storage.list_files("s3://opts/a/", opts)] == [("s3://opts/a/x.000001", 64)]
    with pytest.raises(storage.StorageError, match="s3://opts/a/x.000001"):
        storage.open_input("s3://opts/a/x.000001")  # without the option: AWS_ENDPOINT_URL, where nothing answers


def test_info_and_dump_take_the_store_options(s3, monkeypatch, capsysbinary):
    """``--endpoint/--region/--path-style`` reach the store for ``info`` and ``dump`` (over AWS_ENDPOINT_URL)."""
    from binlogd.cli import main

    s3.make_bucket("flags")
    data = (CORPUS / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    s3.client().put_object(Bucket="flags", Key="mysql-bin.000001", Body=data)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there: the flag must win
    monkeypatch.setattr(storage, "_default_options", storage.Options())  # main() configures it for this process
    uri = "s3://flags/mysql-bin.000001"
    flags = ["--endpoint", s3.endpoint, "--region", "us-east-1", "--path-style"]
    assert main(["info", "--json", *flags, uri]) == 0
    assert json.loads(capsysbinary.readouterr().out)["size"] == len(data)
    assert main(["dump", "--json", *flags, uri]) == 0
    assert json.loads(capsysbinary.readouterr().out.splitlines()[0])["type"] == "FORMAT_DESCRIPTION"
    monkeypatch.setattr(storage, "_default_options", storage.Options())
    assert main(["info", uri]) == 1  # without the flags: AWS_ENDPOINT_URL, where nothing answers


def test_local_paths_need_no_fsspec(tmp_path):
    path = tmp_path / "f.000001"
    path.write_bytes(b"\xfebin1234")
    probe = ("import sys; sys.modules['fsspec'] = None; from binlogd.library import storage; "
             f"fh = storage.open_input({str(path)!r}); g = storage.open_input('file://' + {str(path)!r}); "
             "print(fh.read(), g.read(), fh.size, storage.is_remote('file:///x'))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "b'\\xfebin1234' b'\\xfebin1234' 8 False", out.stderr


def test_remote_without_package_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(storage.StorageError, match=r"^gs://b/x: reading gs:// needs the gcsfs package"):
        storage.filesystem("gs://b/x")
