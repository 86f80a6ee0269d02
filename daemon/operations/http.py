"""The daemon's HTTP endpoints: /metrics, /healthz and /readyz (ARCHITECTURE.md, "Metrics").

The port is open to whoever can reach it (in Kubernetes, every pod), so no client may stall the
daemon or take its file descriptors:

- One thread runs the server on its own asyncio loop: nothing a client does runs on the daemon's
  loop, and a connection costs a socket, not a thread.
- At most ``max_connections`` are open at once: 64, or an eighth of the soft RLIMIT_NOFILE when that
  is smaller (:func:`connection_cap`). A connection over the cap closes the oldest one still sending
  its request; when every open one is being answered, the new one is closed at once.
- Each connection carries one request and is closed after the response (``Connection: close``). Its
  request head (at most 8 KiB) must arrive within ``request_timeout`` seconds of the accept, which
  bounds idle and slow (slowloris) clients alike, and the response must be taken within
  ``write_timeout`` seconds. A client that fails either is dropped.
- Connections are accepted a few at a time (``ACCEPT_BURST`` per wake-up; the rest wait in the kernel's
  queue, which holds none of our descriptors), so a flood of connects cannot open more sockets before
  the cap closes them. Should the descriptors still run out, the accept pauses for a second and one
  line is logged, not a traceback.

GET and HEAD are served; another method gets 405, a request line that is not HTTP 400, a head over
8 KiB 431, an unknown path 404.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import threading

from binlogd.daemon.operations.metrics import Metrics

__all__ = ["MAX_CONNECTIONS", "MetricsServer", "connection_cap", "parse_listen"]

MAX_CONNECTIONS = 64        # open connections at most (fewer under a low RLIMIT_NOFILE)
ACCEPT_BURST = 8            # connections accepted per wake-up of the listening socket at most
LISTEN_BACKLOG = 128        # the kernel's queue of connections not accepted yet
REQUEST_TIMEOUT = 5.0       # seconds from the accept to the end of the request head
WRITE_TIMEOUT = 10.0        # seconds for the client to take the response
HEAD_LIMIT = 8192           # bytes of request line and headers
_PLAIN = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


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


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """``limit``, or an eighth of the process's soft RLIMIT_NOFILE when that is smaller (at least 1)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft // 8))


class MetricsServer:
    """Serve /metrics, /healthz and /readyz from a thread of its own (see the module docstring).

    Fields:
        metrics: the :class:`Metrics` served.
        listen: ``host:port`` ("" disables the server; port 0 picks a free one).
        ready_max_checkpoint_age: seconds passed to :meth:`Metrics.readiness` by /readyz.
        max_connections: the cap on open connections (None: :func:`connection_cap` at :meth:`start`).
        request_timeout: seconds a client has to send its request head.
        write_timeout: seconds a client has to take the response.
        port: the bound port after :meth:`start` (None when disabled or stopped).
    """

    def __init__(self, metrics: Metrics, listen: str = "127.0.0.1:9108", ready_max_checkpoint_age: float = 60.0,
                 *, max_connections: int | None = None, request_timeout: float = REQUEST_TIMEOUT,
                 write_timeout: float = WRITE_TIMEOUT):
        self.metrics = metrics
        self.listen = listen
        self.ready_max_checkpoint_age = ready_max_checkpoint_age
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.write_timeout = write_timeout
        self.port: int | None = None
        self._cap = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        # Open connections and their handlers (dicts keep insertion order: the first is the oldest).
        # Only the server's thread touches them.
        self._reading: dict[asyncio.StreamWriter, asyncio.Task] = {}   # still sending their request
        self._answering: dict[asyncio.StreamWriter, asyncio.Task] = {}

    def start(self) -> MetricsServer:
        """Bind, then serve in a daemon thread; a no-op when ``listen`` is "" or already started.

        Raises:
            ValueError: the listen address is malformed.
            OSError: the address cannot be bound (message names the address).
        """
        if not self.listen or self._thread is not None:
            return self
        host, port, family = parse_listen(self.listen)
        try:
            sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        except OSError as e:
            raise OSError(e.errno, f"cannot listen for metrics on {self.listen}: {e.strerror or e}") from e
        self._cap = self.max_connections or connection_cap()
        self.port = sock.getsockname()[1]
        started = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(sock, started),),
                                        name="binlogd-metrics", daemon=True)
        self._thread.start()
        started.wait()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and every connection (safe to call twice)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        thread.join(timeout=5)
        self.port = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the server's thread -------------------------------------------------------------------

    async def _serve(self, sock: socket.socket, started: threading.Event) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        self._loop.set_exception_handler(_log_loop_error)
        try:
            # asyncio accepts up to `backlog` connections per wake-up and also passes it to listen():
            # a small burst, then the kernel's queue back at its size
            server = await asyncio.start_server(self._client, sock=sock, limit=HEAD_LIMIT,
                                                backlog=min(ACCEPT_BURST, self._cap))
            sock.listen(LISTEN_BACKLOG)
        finally:
            started.set()
        async with server:
            await self._stopping.wait()
        handlers = [*self._reading.values(), *self._answering.values()]
        for writer in [*self._reading, *self._answering]:
            writer.transport.abort()
        await asyncio.gather(*handlers, return_exceptions=True)  # each ends on its lost connection

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read one request, answer it, close; within the cap and the timeouts."""
        if len(self._reading) + len(self._answering) >= self._cap:
            if not self._reading:
                writer.transport.abort()
                return
            oldest = next(iter(self._reading))  # the oldest connection still sending its request
            del self._reading[oldest]
            oldest.transport.abort()
        self._reading[writer] = asyncio.current_task()
        try:
            async with asyncio.timeout(self.request_timeout):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    head = None
            if writer not in self._reading:  # closed meanwhile by a newer connection over the cap
                return
            self._answering[writer] = self._reading.pop(writer)
            writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the kernel has it all
            writer.write(self._response(head))
            async with asyncio.timeout(self.write_timeout):
                await writer.drain()
            writer.close()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()
        finally:
            self._reading.pop(writer, None)
            self._answering.pop(writer, None)

    def _response(self, head: bytes | None) -> bytes:
        """The whole response to a request head (None: longer than HEAD_LIMIT)."""
        if head is None:
            return _message(431, "request head over 8 KiB\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _message(400, "bad request line\n")
        method, path = parts[0], parts[1].partition("?")[0]
        if method not in ("GET", "HEAD"):
            return _message(405, "only GET and HEAD\n", [("Allow", "GET, HEAD")])
        if path == "/metrics":
            accept = next((line.partition(":")[2].strip() for line in lines[1:]
                           if line.partition(":")[0].strip().lower() == "accept"), "")
            from prometheus_client.exposition import choose_encoder  # at the first scrape

            encoder, content_type = choose_encoder(accept)
            status, body = 200, encoder(self.metrics.registry)
        elif path == "/healthz":
            status, body, content_type = 200, b"ok\n", _PLAIN
        elif path == "/readyz":
            ok, reason = self.metrics.readiness(self.ready_max_checkpoint_age)
            status, body, content_type = (200 if ok else 503), (reason + "\n").encode(), _PLAIN
        else:
            return _message(404, "not found\n")
        return _render(status, body, content_type, head_only=method == "HEAD")


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The metrics loop's errors (an accept out of descriptors, say) as one log line, no traceback."""
    exc = context.get("exception")
    logging.getLogger("binlogd").warning("metrics server: %s%s", context.get("message", "error"),
                                         f" ({exc})" if exc else "")


def _message(status: int, text: str, extra: list[tuple[str, str]] = ()) -> bytes:
    return _render(status, text.encode(), _PLAIN, extra=extra)


def _render(status: int, body: bytes, content_type: str, extra: list[tuple[str, str]] = (),
            head_only: bool = False) -> bytes:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close"),
               *extra]
    head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode("latin-1") + b"\r\n" + (b"" if head_only else body)
