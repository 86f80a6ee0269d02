"""An asyncio TCP proxy for fault tests: client ↔ proxy (127.0.0.1) ↔ server, with faults on demand.

The proxy runs its own event loop in a daemon thread, so it serves a ``binlogd run`` subprocess or an
in-process daemon alike; every control method is called from the test's thread::

    with FaultProxy("127.0.0.1", server.port) as proxy:
        ... point the daemon at 127.0.0.1:proxy.port ...
        proxy.wait_dump()                # a connection has sent COM_BINLOG_DUMP(_GTID)
        proxy.drop_after(1234)           # cut it after 1234 more server→client bytes
        proxy.stall(5.0)                 # current connections forward nothing for 5 s
        proxy.one_byte = True            # server→client bytes one per send()

It understands just enough of the MySQL protocol (plain text only: use ``source.tls.mode=disabled``)
to follow the packet framing in both directions. It knows when a connection has sent the binlog dump
command (from then on every server packet is an event, an ERR or an EOF), and whether a cut landed
inside a packet, and so inside an event.

Faults:
- :meth:`drop_after`: the streaming connections (or all) are closed after ``n`` more server→client
  bytes: the first ``n`` are forwarded, the rest discarded; both sockets are closed (FIN) or reset
  (``reset=True``: RST). ``align="packet"`` moves the cut forward to the next packet boundary, between
  two events of a transaction, not inside one.
- :meth:`stall`: the connections open now stop forwarding in both directions for ``seconds``. New
  connections are not stalled. A close by either side is still noticed at once, and that ends the
  connection.
- :attr:`one_byte`: server→client data is written one byte per ``send()`` (TCP_NODELAY, a drain
  and a loop turn between bytes).
- :attr:`s2c_rate`: a server→client byte rate limit (bytes per second; 0 = none) in small chunks.
- :attr:`refuse`: new client connections are closed at once.

Counters (:attr:`counters`, a :class:`Counters`) and per-connection records (:attr:`conns`,
:class:`ConnRecord`: when it opened, started dumping, last forwarded a server byte, closed, and who
closed it) let the tests assert what happened and time it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass

COM_BINLOG_DUMP = 0x12
COM_BINLOG_DUMP_GTID = 0x1E


@dataclass
class Counters:
    """What the proxy did (read from the test thread; written only by the proxy's loop)."""

    accepted: int = 0            # client connections accepted
    refused: int = 0             # closed at once because of :attr:`FaultProxy.refuse`
    upstream_failed: int = 0     # the server could not be reached
    closed: int = 0              # connections finished (any cause)
    bytes_c2s: int = 0           # client → server bytes forwarded
    bytes_s2c: int = 0           # server → client bytes forwarded
    s2c_sends: int = 0           # writes toward the client (each drained)
    s2c_packets: int = 0         # complete server packets forwarded
    dumps: int = 0               # connections that sent COM_BINLOG_DUMP / COM_BINLOG_DUMP_GTID
    drops: int = 0               # connections cut by drop_after
    drops_mid_packet: int = 0    # ... with the cut inside a packet
    drops_mid_event: int = 0     # ... inside an event packet (after the dump command)
    drops_at_boundary: int = 0   # ... exactly between two packets
    resets: int = 0              # cuts done with RST instead of FIN
    stalls: int = 0              # connections stalled


class _Framer:
    """Follows MySQL packet framing (3-byte length, 1-byte sequence) over a byte stream."""

    def __init__(self) -> None:
        self.header = bytearray()
        self.left = 0            # payload bytes still to come in the current packet
        self.first = -1          # the current packet's first payload byte (-1: not seen yet)
        self.seq = 0
        self.packets = 0         # packets completed
        self.completed: list[tuple[int, int]] = []  # (seq, first byte) of packets completed by feed

    @property
    def at_boundary(self) -> bool:
        return not self.header and self.left == 0

    def feed(self, data: bytes) -> None:
        self.completed = []
        i, n = 0, len(data)
        while i < n:
            if self.left == 0:
                take = min(4 - len(self.header), n - i)
                self.header += data[i:i + take]
                i += take
                if len(self.header) == 4:
                    self.left = int.from_bytes(self.header[:3], "little")
                    self.seq = self.header[3]
                    self.header.clear()
                    self.first = -1
                    if self.left == 0:
                        self.packets += 1
                        self.completed.append((self.seq, -1))
                continue
            if self.first < 0:
                self.first = data[i]
            take = min(self.left, n - i)
            self.left -= take
            i += take
            if self.left == 0:
                self.packets += 1
                self.completed.append((self.seq, self.first))


@dataclass
class ConnRecord:
    """One proxied connection, as the tests see it (times are ``time.monotonic()``)."""

    id: int
    opened_at: float
    dump_at: float | None = None          # when the client's dump command went through
    last_s2c_at: float | None = None      # last server→client byte forwarded
    closed_at: float | None = None
    closed_by: str | None = None          # "client", "server", "drop", "proxy" (stop), "upstream"
    bytes_s2c: int = 0
    stalled_from: float | None = None
    stalled_until: float = 0.0
    cut: str | None = None                # "mid_event", "mid_packet" or "boundary" when dropped
    # control, set from the test thread
    drop_left: int | None = None
    drop_align: str = "byte"
    drop_reset: bool = False

    @property
    def open(self) -> bool:
        return self.closed_at is None

    @property
    def streaming(self) -> bool:
        return self.dump_at is not None and self.closed_at is None


class FaultProxy:
    """Forward ``listen_host:port`` (port 0: a free one, see :attr:`port`) to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1", listen_port: int = 0,
                 connect_timeout: float = 5.0):
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.connect_timeout = connect_timeout
        self.port: int | None = None
        self.counters = Counters()
        self.conns: list[ConnRecord] = []
        self.one_byte = False
        self.s2c_rate = 0.0
        self.refuse = False
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle (test thread)
    def start(self, timeout: float = 10.0) -> FaultProxy:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._handle, self.listen[0], self.listen[1]))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001 (re-raised by start)
                self._error = exc
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=main, daemon=True, name="fault-proxy")
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("the proxy did not start")
        if self._error is not None:
            raise self._error
        return self

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults (test thread)
    def _targets(self, only_streaming: bool) -> list[ConnRecord]:
        with self._lock:
            return [c for c in self.conns if c.open and (c.streaming or not only_streaming)]

    def drop_after(self, nbytes: int, *, align: str = "byte", reset: bool = False,
                   only_streaming: bool = True) -> list[ConnRecord]:
        """Cut the open (streaming) connections after ``nbytes`` more server→client bytes.

        ``align="packet"`` cuts at the first packet boundary at or after that byte instead.
        Returns the connections armed (empty when none is open).
        """
        assert align in ("byte", "packet")
        targets = self._targets(only_streaming)
        for c in targets:
            c.drop_align, c.drop_reset = align, reset
            c.drop_left = max(0, int(nbytes))
        return targets

    def stall(self, seconds: float, *, only_streaming: bool = False) -> list[ConnRecord]:
        """The connections open now forward nothing, either way, for ``seconds``."""
        now = time.monotonic()
        targets = self._targets(only_streaming)
        for c in targets:
            c.stalled_from, c.stalled_until = now, now + seconds
            self.counters.stalls += 1
        return targets

    def close_all(self) -> None:
        """Reset every open connection at once (a network failure)."""
        for c in self._targets(False):
            c.drop_align, c.drop_reset, c.drop_left = "byte", True, 0
        # a connection with no traffic would only notice at its next byte: abort the writers too
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._abort_idle)

    def _abort_idle(self) -> None:
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()

    # ------------------------------------------------------------------ waiting (test thread)
    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition"):
        """Wait until ``predicate(self)`` is truthy (re-checked on every proxy event and every 50 ms)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"proxy: {what} not met within {timeout}s (counters {self.counters})")
                self._cond.wait(min(left, 0.05))

    def wait_dump(self, count: int | None = None, timeout: float = 30.0) -> ConnRecord:
        """Wait until a connection is streaming (the ``count``-th dump overall when given); return it."""
        def pred(p):
            if count is not None and p.counters.dumps < count:
                return None
            live = [c for c in p.conns if c.streaming]
            return live[-1] if live else None
        return self.wait_for(pred, timeout, f"a streaming connection (dump #{count})")

    def streaming(self) -> list[ConnRecord]:
        return self._targets(True)

    # ------------------------------------------------------------------ the proxy (its loop)
    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        with self._lock:
            rec = ConnRecord(len(self.conns) + 1, time.monotonic())
            self.conns.append(rec)
        self.counters.accepted += 1
        if self.refuse:
            self.counters.refused += 1
            rec.closed_at, rec.closed_by = time.monotonic(), "refused"
            cwriter.transport.abort()
            self._notify()
            return
        try:
            sreader, swriter = await asyncio.wait_for(asyncio.open_connection(*self.target), self.connect_timeout)
        except (OSError, asyncio.TimeoutError):
            self.counters.upstream_failed += 1
            rec.closed_at, rec.closed_by = time.monotonic(), "upstream"
            cwriter.transport.abort()
            self._notify()
            return
        for w in (cwriter, swriter):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._writers.add(w)
        ended = asyncio.get_running_loop().create_future()

        def finish(by: str, reset: bool = False) -> None:
            if ended.done():
                return
            rec.closed_at, rec.closed_by = time.monotonic(), by
            for w in (cwriter, swriter):
                with contextlib.suppress(Exception):
                    (w.transport.abort if reset else w.close)()
            ended.set_result(by)
            self.counters.closed += 1
            self._notify()

        c2s = asyncio.create_task(self._pump_c2s(rec, creader, swriter, finish))
        s2c = asyncio.create_task(self._pump_s2c(rec, sreader, cwriter, finish))
        try:
            await ended
        except asyncio.CancelledError:  # the proxy is stopping
            finish("proxy", reset=True)
        finally:
            for t in (c2s, s2c):
                t.cancel()
            await asyncio.gather(c2s, s2c, return_exceptions=True)
            if not ended.done():
                finish("proxy", reset=True)
            self._writers.discard(cwriter)
            self._writers.discard(swriter)

    async def _wait_stall(self, rec: ConnRecord) -> None:
        while time.monotonic() < rec.stalled_until:
            await asyncio.sleep(min(0.02, max(0.0, rec.stalled_until - time.monotonic())))

    async def _pump_c2s(self, rec, reader, writer, finish) -> None:
        framer = _Framer()
        held = bytearray()  # read during a stall (to notice a close) but not forwarded yet
        try:
            while True:
                if held and time.monotonic() >= rec.stalled_until:
                    writer.write(bytes(held))
                    held.clear()
                    await writer.drain()
                stalled = time.monotonic() < rec.stalled_until
                try:
                    data = await asyncio.wait_for(reader.read(65536), 0.05) if stalled or held \
                        else await reader.read(65536)
                except asyncio.TimeoutError:
                    continue
                if not data:
                    finish("client")
                    return
                framer.feed(data)
                for seq, first in framer.completed:
                    if seq == 0 and first in (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID) and rec.dump_at is None:
                        rec.dump_at = time.monotonic()
                        self.counters.dumps += 1
                        self._notify()
                self.counters.bytes_c2s += len(data)
                if time.monotonic() < rec.stalled_until:
                    held += data
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            finish("client", reset=True)

    async def _send(self, rec, writer, data: bytes) -> None:
        """Forward ``data`` to the client (whole, one byte per send, or rate-limited), counting as it goes."""
        if not data:
            return
        step = 1 if self.one_byte else max(1, min(1024, int(self.s2c_rate / 50))) if self.s2c_rate > 0 \
            else len(data)
        for i in range(0, len(data), step):
            chunk = data[i:i + step]
            writer.write(chunk)
            await writer.drain()
            self.counters.s2c_sends += 1
            rec.last_s2c_at = time.monotonic()
            rec.bytes_s2c += len(chunk)
            self.counters.bytes_s2c += len(chunk)
            if self.one_byte:
                await asyncio.sleep(0)
            elif self.s2c_rate > 0:
                await asyncio.sleep(len(chunk) / self.s2c_rate)

    async def _pump_s2c(self, rec, reader, writer, finish) -> None:
        framer = _Framer()
        try:
            while True:
                if time.monotonic() < rec.stalled_until:
                    await self._wait_stall(rec)
                    continue
                data = await reader.read(65536)
                if not data:
                    finish("server")
                    return
                cut_here = None
                if rec.drop_left is not None:
                    if rec.drop_left <= len(data):
                        cut_here = rec.drop_left
                        if rec.drop_align == "packet":
                            cut_here = _boundary_at_or_after(framer, data, cut_here)
                            if cut_here is None:  # the packet goes on past this chunk: cut at its end
                                rec.drop_left = 0
                    else:
                        rec.drop_left -= len(data)
                part = data if cut_here is None else data[:cut_here]
                streaming_before = rec.dump_at is not None
                framer.feed(part)
                self.counters.s2c_packets += len(framer.completed)
                await self._send(rec, writer, part)
                if cut_here is None:
                    continue
                self.counters.drops += 1
                if rec.drop_reset:
                    self.counters.resets += 1
                if framer.at_boundary:
                    rec.cut = "boundary"
                    self.counters.drops_at_boundary += 1
                else:
                    self.counters.drops_mid_packet += 1
                    # after the dump command every server packet is an event (first byte 0x00 = OK),
                    # unless it is the final ERR/EOF; a cut in a header is inside the next event
                    in_event = streaming_before and (bool(framer.header) or framer.first in (0, -1))
                    rec.cut = "mid_event" if in_event else "mid_packet"
                    if in_event:
                        self.counters.drops_mid_event += 1
                finish("drop", reset=rec.drop_reset)
                return
        except (ConnectionError, OSError):
            finish("server", reset=True)


def _boundary_at_or_after(framer: _Framer, data: bytes, start: int) -> int | None:
    """The smallest ``i >= start`` such that ``framer`` fed ``data[:i]`` sits between two packets, or
    None when no boundary falls inside ``data`` (``framer`` itself is not changed)."""
    probe = _Framer()
    probe.header, probe.left, probe.first = bytearray(framer.header), framer.left, framer.first
    probe.feed(data[:start])
    i = start
    while i < len(data) or probe.at_boundary:
        if probe.at_boundary:
            return i
        step = 4 - len(probe.header) if probe.header or probe.left == 0 else probe.left
        step = min(step, len(data) - i)
        probe.feed(data[i:i + step])
        i += step
    return None
