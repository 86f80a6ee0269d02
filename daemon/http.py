"""The daemon's HTTP endpoints: /metrics, /healthz and /readyz (DESIGN.md, "Metrics")."""

from __future__ import annotations

import socket
import socketserver
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from .metrics import Metrics

__all__ = ["MetricsServer", "parse_listen"]


def parse_listen(listen: str) -> tuple[str, int, int]:
    """Parse ``host:port`` / ``[v6]:port`` / ``:port`` into (host, port, address family).

    Raises:
        ValueError: naming the address when it has no valid port.
    """
    host, sep, port_s = listen.rpartition(":")
    if not sep or not port_s.isdigit() or int(port_s) > 65535:
        raise ValueError(f"metrics listen address {listen!r} is not host:port")
    family = socket.AF_INET
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], socket.AF_INET6
    elif ":" in host:
        family = socket.AF_INET6
    return host, int(port_s), family


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class MetricsServer:
    """Serve /metrics, /healthz and /readyz from a threaded WSGI server in a daemon thread.

    Fields:
        metrics: the :class:`Metrics` served.
        listen: ``host:port`` ("" disables the server; port 0 picks a free one).
        ready_max_checkpoint_age: seconds passed to :meth:`Metrics.readiness` by /readyz.
        port: the bound port after :meth:`start` (None when disabled or stopped).
    """

    def __init__(self, metrics: Metrics, listen: str = "127.0.0.1:9108", ready_max_checkpoint_age: float = 60.0):
        self.metrics = metrics
        self.listen = listen
        self.ready_max_checkpoint_age = ready_max_checkpoint_age
        self.port: int | None = None
        self._server: _ThreadingServer | None = None
        self._thread: threading.Thread | None = None
        self._metrics_app = make_wsgi_app(metrics.registry)

    def _app(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path == "/healthz":
            status, body = "200 OK", "ok\n"
        elif path == "/readyz":
            ok, reason = self.metrics.readiness(self.ready_max_checkpoint_age)
            status, body = ("200 OK" if ok else "503 Service Unavailable"), reason + "\n"
        else:
            status, body = "404 Not Found", "not found\n"
        data = body.encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
        return [data]

    def start(self) -> MetricsServer:
        """Bind and serve in a daemon thread; a no-op when ``listen`` is "".

        Raises:
            ValueError: the listen address is malformed.
            OSError: the address cannot be bound (message names the address).
        """
        if not self.listen or self._server is not None:
            return self
        host, port, family = parse_listen(self.listen)
        cls = _ThreadingServer6 if family == socket.AF_INET6 else _ThreadingServer
        try:
            server = make_server(host, port, self._app, server_class=cls, handler_class=_QuietHandler)
        except OSError as e:
            raise OSError(e.errno, f"cannot listen for metrics on {self.listen}: {e.strerror or e}") from e
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="binlogd-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (safe to call twice)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self.port = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
