"""``binlogd demo``: a throwaway MariaDB, a steady trickle of changes, and the daemon tailing it.

Change events go to standard output, logs to standard error, and metrics are
served on http://127.0.0.1:9108/metrics (or a free port when that one is busy).
It stops after ``--seconds`` (0 = until Ctrl-C), or quietly with exit 0 when the reader of standard output
goes away (``binlogd demo | head``). Exit 1, with the reason on one line first, when no server can be started
(none installed: binlogd never installs one). Its temp dirs (the server's and the checkpoint's) are removed
on every way out: Ctrl-C at any moment, SIGTERM (exit 143 while the server starts; a clean stop once the daemon
runs), an error.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import sys
import tempfile
import threading

from binlogd.daemon.config import load_config
from binlogd.daemon.operations.logs import setup_logging
from binlogd.daemon.service import Daemon
from binlogd.daemon.sinks.stdout import StdoutSink

from .localserver import LocalServer, free_port, terminate_exits
from .serverbins import ServerSetupError
from .signals import run_loop, run_with_signals, signals_held

_SCHEMA = ("CREATE TABLE demo.orders (id INT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(40), "
           "amount DECIMAL(10,2), placed DATETIME(3), note JSON, status ENUM('new','paid','shipped'))")


def _writer(server: LocalServer, stop, rate: float) -> int:
    """Write transactions (insert, sometimes update/delete) until ``stop`` is set; returns how many."""
    rng = random.Random(42)
    names = ["ana", "björn", "chen", "dilnoza", "eve"]
    count = 0
    with server.connect() as conn, conn.cursor() as cur:
        while not stop.is_set():
            count += 1
            cur.execute("INSERT INTO demo.orders (customer, amount, placed, note, status) "
                        "VALUES (%s, %s, NOW(3), %s, 'new')",
                        (rng.choice(names), f"{rng.uniform(1, 500):.2f}", f'{{"n": {count}}}'))
            if count % 3 == 0:
                cur.execute("UPDATE demo.orders SET status = 'paid' WHERE id = %s", (count - 1,))
            if count % 7 == 0:
                cur.execute("DELETE FROM demo.orders WHERE id = %s", (count - 5,))
            conn.commit()
            stop.wait(1.0 / rate)
    return count


class _Stdout:
    """Standard output for the demo's sink: once its reader has gone (EPIPE), what is written is dropped,
    standard output points at /dev/null (so that nothing fails at exit) and ``gone`` is set."""

    def __init__(self, gone: threading.Event):
        self._out, self.gone = sys.stdout.buffer, gone

    def _closed(self) -> None:
        self.gone.set()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._out.fileno())
        os.close(devnull)

    def write(self, data) -> int:
        if not self.gone.is_set():
            try:
                return self._out.write(data)
            except BrokenPipeError:
                self._closed()
        return len(data)

    def flush(self) -> None:
        if not self.gone.is_set():
            try:
                self._out.flush()
            except BrokenPipeError:
                self._closed()


async def _until(runner: asyncio.Task, gone: threading.Event, seconds: float) -> None:
    """Until the daemon ends, ``seconds`` pass (0: no limit) or standard output's reader has gone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds if seconds else None
    while not runner.done() and not gone.is_set() and (deadline is None or loop.time() < deadline):
        await asyncio.wait([runner], timeout=0.1)


def _metrics_port() -> int:
    """9108 when it is free, else any free port."""
    try:
        with socket.create_server(("127.0.0.1", 9108)):
            return 9108
    except OSError:
        return free_port()


async def _main(args, server: LocalServer, workdir: str) -> int:
    port = _metrics_port()
    config = load_config(None, env={}, overrides={
        "source.host": "127.0.0.1", "source.port": str(server.port), "source.user": server.repl_user,
        "source.password": server.repl_password, "source.heartbeat_seconds": "1",
        "checkpoint.path": f"{workdir}/checkpoint.json", "sink.kind": "stdout",
        "metrics.listen": f"127.0.0.1:{port}", "metrics.table_labels": "true"})
    log = setup_logging("plain", "info")
    log.info("demo: %s %s on 127.0.0.1:%d; metrics on http://127.0.0.1:%d/metrics",
             server.flavor, server.version, server.port, port)
    daemon = Daemon(config, log)
    gone = threading.Event()
    assert isinstance(daemon.sink, StdoutSink)
    daemon.sink.stream = _Stdout(gone)
    stop = threading.Event()
    writer = asyncio.create_task(asyncio.to_thread(_writer, server, stop, args.rate))
    runner = asyncio.create_task(run_with_signals(daemon, log))
    try:
        await _until(runner, gone, args.seconds)
        if gone.is_set():
            log.info("demo: standard output was closed: stopping")
        stop.set()
        written = await writer
        daemon.stop()
        rc = await runner
    finally:
        # Also on the way out of a second Ctrl-C (the daemon raises SystemExit): the runner waits
        # for the writer's thread before returning, so it must see ``stop`` or the demo hangs.
        stop.set()
    log.info("demo: wrote %d transactions; the daemon exited with %d", written, rc)
    return rc


def run_demo(args) -> int:
    """Start the server and the daemon for ``args.seconds`` (0 = until interrupted)."""
    terminate_exits()
    print("binlogd demo: starting a throwaway MariaDB with binary logging ...", file=sys.stderr)
    server = workdir = None
    try:
        # A Ctrl-C or SIGTERM from here on, even inside LocalServer() (which registers its temp dir for
        # removal at exit), ends in the finally below.
        server = LocalServer(extra_args=["--binlog-row-metadata=FULL"])
        try:
            server.start()
        except ServerSetupError as exc:
            print(f"binlogd demo: cannot start a throwaway server: {exc}", file=sys.stderr)
            return 1
        with signals_held():
            workdir = tempfile.TemporaryDirectory(prefix="binlogd-demo-")
        try:
            server.sql("CREATE DATABASE demo")
            server.sql(_SCHEMA)
            return run_loop(lambda: _main(args, server, workdir.name))
        except KeyboardInterrupt:
            return 0
    finally:
        # A throwaway: killed at once rather than shut down cleanly, so the exit takes milliseconds and
        # another Ctrl-C has no clean shutdown to interrupt; signals wait until the dirs are removed.
        with signals_held():
            if server is not None:
                server.kill()
                server.cleanup()
            if workdir is not None:
                workdir.cleanup()
