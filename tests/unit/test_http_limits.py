"""daemon.http: the metrics server's limits, seen from real TCP clients.

The cap on connections (oldest request-sender closed first, the newest refused when every slot is
answering), the request and write deadlines (idle, slowloris and never-reading clients are dropped),
malformed requests, and the fd bound under hundreds of idle clients. tests/integration/
test_metrics_abuse.py runs the same attack against a real daemon under a low RLIMIT_NOFILE.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from binlogd.daemon.operations.http import MetricsServer
from binlogd.daemon.operations.metrics import Metrics


def _connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s


def _request(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send ``raw``, return everything the server sends back before closing."""
    with _connect(port) as s:
        s.settimeout(timeout)
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def _closed_by_server(s: socket.socket, timeout: float) -> float:
    """Seconds until the server closes ``s`` (EOF or reset); AssertionError if it stays open."""
    start = time.monotonic()
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"still open after {timeout}s") from None
    return time.monotonic() - start


def _healthz(port: int) -> int:
    return _status(_request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))


@pytest.fixture
def server():
    servers = []

    def make(**kw) -> MetricsServer:
        srv = MetricsServer(Metrics(), "127.0.0.1:0", **kw).start()
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop()


def test_methods_paths_and_bad_requests(server):
    port = server().port
    assert _status(_request(port, b"GET /healthz HTTP/1.1\r\n\r\n")) == 200
    head = _request(port, b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.startswith(b"Content-Length")))
    assert _status(head) == 200 and head.endswith(b"\r\n\r\n") and length > 1000
    got = _request(port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
    assert b"application/openmetrics-text" in got.split(b"\r\n\r\n")[0] and got.endswith(b"# EOF\n")
    post = _request(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert _status(post) == 405 and b"Allow: GET, HEAD" in post
    assert _status(_request(port, b"GET /nope HTTP/1.1\r\n\r\n")) == 404
    assert _status(_request(port, b"hello there\r\n\r\n")) == 400
    assert _status(_request(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")) == 431
    assert _healthz(port) == 200


def test_idle_and_slowloris_clients_are_dropped_at_the_request_deadline(server):
    port = server(request_timeout=0.5).port
    idle = _connect(port)
    slow = _connect(port)
    start = time.monotonic()
    slow.sendall(b"GET /metrics HTTP/1.1\r\n")
    for _ in range(10):  # a byte every 0.1 s: progress, but never the end of the head
        time.sleep(0.1)
        try:
            slow.sendall(b"X")
        except OSError:
            break
    assert _closed_by_server(slow, 5) + (time.monotonic() - start) < 2.5
    assert _closed_by_server(idle, 5) < 2.0
    assert _healthz(port) == 200


def test_over_the_cap_the_oldest_request_sender_is_closed(server):
    port = server(max_connections=4, request_timeout=30).port
    idle = [_connect(port) for _ in range(4)]
    time.sleep(0.2)
    newest = _connect(port)
    assert _closed_by_server(idle[0], 5) < 5  # the oldest goes, long before its deadline
    assert _healthz(port) == 200  # closes idle[1] to get in
    for s in idle[3:] + [newest]:
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(1)  # still open
    for s in idle + [newest]:
        s.close()


def test_a_client_that_never_reads_holds_its_slot_only_until_the_write_deadline():
    """With one slot, answering a client that takes nothing refuses others, until write_timeout drops it."""
    metrics = Metrics(table_labels=True)
    for i in range(40000):  # a response of ~10 MB, more than the kernel buffers of both ends hold
        metrics.rows("schema_with_a_long_name", f"table_{i:05d}_with_a_long_name_too", "insert", 1)
    srv = MetricsServer(metrics, "127.0.0.1:0", max_connections=1, write_timeout=2.0).start()
    try:
        stuck = _connect(srv.port, rcvbuf=4096)
        stuck.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        stuck.settimeout(30)
        assert stuck.recv(1, socket.MSG_PEEK) == b"H"  # the response is being written
        answering = time.monotonic()
        refused = _connect(srv.port)
        assert _closed_by_server(refused, 5) < 1.0
        while True:
            try:
                assert _healthz(srv.port) == 200
                break
            except (ConnectionError, IndexError):  # refused: closed before any response
                assert time.monotonic() - answering < 10, "the never-reading client kept the only slot"
                time.sleep(0.1)
        assert time.monotonic() - answering > 1.5, "the slot was free before the write deadline"
        stuck.close()
    finally:
        srv.stop()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_hundreds_of_idle_clients_hold_at_most_the_cap(server):
    port = server(max_connections=16, request_timeout=30).port
    before = _open_fds()
    clients = [_connect(port) for _ in range(300)]
    try:
        time.sleep(0.5)
        assert _healthz(port) == 200
        server_side = _open_fds() - before - len(clients)
        assert server_side <= 16 + 1, f"the server holds {server_side} sockets"
    finally:
        for s in clients:
            s.close()


def test_the_cap_follows_rlimit_nofile():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (80, 80));"
            "from binlogd.daemon.operations.http import connection_cap; print(connection_cap(), connection_cap(4))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["10", "4"]


def test_stop_closes_connections_and_the_port(server):
    srv = server(request_timeout=30)
    port = srv.port
    idle = _connect(port)
    time.sleep(0.1)
    srv.stop()
    assert _closed_by_server(idle, 5) < 5
    with pytest.raises(ConnectionRefusedError):
        _connect(port)
