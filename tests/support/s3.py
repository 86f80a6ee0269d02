"""An S3-compatible server for the object-storage tests: moto's server mode, an emulator of S3's API
(not AWS itself), started as a subprocess on a free port.

    with MotoS3() as s3:               # or the ``s3`` fixture: one server per session
        s3.make_bucket("arch")
        s3.env                         # AWS_* variables that point a client (or a daemon) at it
        s3.client().put_object(...)    # boto3, to check what the store holds independently of binlogd

``MotoS3(auth=True)`` checks signatures against moto's IAM, where no access key exists: every
request is refused as having wrong credentials.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

KEY_ID, SECRET, REGION = "testing", "testing", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoS3:
    """One moto server process. Fields: ``port``, ``endpoint`` (``http://127.0.0.1:port``), ``env``."""

    def __init__(self, auth: bool = False):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": REGION,
                    "AWS_ENDPOINT_URL": self.endpoint}
        self._auth = auth
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> MotoS3:
        env = dict(os.environ, **self.env)
        if self._auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return self
            except OSError:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"moto server exited with {self._proc.returncode}")
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.endpoint} in {timeout} s")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> MotoS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self):
        """A boto3 S3 client on this server (independent of binlogd's storage layer)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY_ID,
                            aws_secret_access_key=SECRET, region_name=REGION)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns its ``s3://name`` URI."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``: key -> its bytes."""
        client, out = self.client(), {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                out[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        return out


@pytest.fixture(scope="session", name="s3")
def s3_server():
    """A moto S3 server for the session, with this process's AWS_* environment pointing at it."""
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")
    pytest.importorskip("s3fs", reason="s3fs (the storage extra) is not installed")
    saved = {k: os.environ.get(k) for k in MotoS3().env}
    with MotoS3() as server:
        os.environ.update(server.env)
        try:
            yield server
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
