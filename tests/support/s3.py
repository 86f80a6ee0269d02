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
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

KEY_ID, SECRET, REGION = "testing", "testing", "us-east-1"
_REQUEST = re.compile(rb"(?:GET|HEAD|PUT|POST|DELETE) \S+(?= HTTP/1\.[01]\r\n)")


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


class Gate:
    """A TCP proxy in front of the store for outage tests: ``127.0.0.1:port`` forwards to ``target_port``.

    Modes (set :attr:`mode`): ``"open"`` forwards; ``"down"`` closes new connections at once (a store that
    is down); ``"hang"`` forwards the first :attr:`hang_after` client bytes of each new connection and then
    holds the rest (an upload stuck mid-request). :meth:`cut` closes every open connection. Counters:
    :attr:`hung` (connections holding bytes now), :attr:`accepted`; :attr:`requests`: the HTTP request
    lines forwarded (``"GET /bucket?list-type=2&prefix=..."``), to count listings.
    """

    def __init__(self, target_port: int):
        import threading

        self.target_port, self.mode, self.hang_after = target_port, "open", 1 << 20
        self.hung = self.accepted = 0
        self.requests: list[str] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "down":
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            limit = self.hang_after if self.mode == "hang" else None
            threading.Thread(target=self._pump, args=(client, upstream, limit, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int | None, requests: bool = False) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                if requests:
                    self.requests += [m.decode("latin-1") for m in _REQUEST.findall(data)]
                if limit is not None and sent + len(data) > limit:
                    dst.sendall(data[:limit - sent])
                    self.hung += 1
                    while src.recv(65536):  # hold the rest until the connection is cut
                        pass
                    return
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Close every connection open now (the client sees a reset or an early EOF)."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.hung = 0

    def close(self) -> None:
        self.cut()
        self._listener.close()
