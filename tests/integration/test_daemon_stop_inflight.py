"""``Daemon`` as a library object, and ``stop()`` cancels what is in flight (issue 27).

- A server that accepts the TCP connection and never greets (a black hole, beside no real server: what a
  real one does not do on demand): ``stop()`` during the connect, and during the failover probe of two such
  hosts, ends the daemon at once with exit 0, long before ``source.connect_timeout``.
- ``async with Daemon(config)`` installs no signal handler; ``binlogd run``'s :func:`run_with_signals`
  installs SIGTERM/SIGINT/SIGHUP handlers while the daemon runs and removes them after.
- :func:`close_tasks`: cancels, waits, returns what each task ended with, and never swallows the caller's
  own cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time

import pytest

from binlogd.cli.signals import run_with_signals
from binlogd.daemon.config import load_config
from binlogd.daemon.service import EXIT_OK, Daemon
from binlogd.daemon.tasks import close_tasks


class BlackHole:
    """A listening socket on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def holes():
    made = [BlackHole(), BlackHole()]
    yield made
    for hole in made:
        hole.close()


def _config(tmp_path, **source):
    overrides = {"source.connect_timeout": "60", "source.heartbeat_seconds": "1", "daemon.shutdown_seconds": "5",
                 "checkpoint.path": str(tmp_path / "cp.json"), "sink.path": str(tmp_path / "out"),
                 "metrics.listen": "", "source.password": "x", "source.tls.mode": "disabled"}
    overrides.update(source)
    return load_config(None, env={}, overrides=overrides)


async def _stop_after(daemon: Daemon, seconds: float) -> tuple[int, float]:
    await daemon.start()
    await asyncio.sleep(seconds)
    assert daemon.running, "the daemon ended by itself: nothing was in flight"
    t0 = time.monotonic()
    rc = await asyncio.wait_for(daemon.stop(), 10)
    return rc, time.monotonic() - t0


async def test_stop_during_a_connect_ends_at_once(tmp_path, holes):
    daemon = Daemon(_config(tmp_path, **{"source.host": "127.0.0.1", "source.port": str(holes[0].port)}))
    rc, took = await _stop_after(daemon, 1.0)
    assert rc == EXIT_OK and took < 1.0, (rc, took)
    assert daemon.sessions == 0 and not (tmp_path / "cp.json").exists()


async def test_stop_during_a_failover_probe_ends_at_once(tmp_path, holes):
    hosts = ",".join(f"127.0.0.1:{hole.port}" for hole in holes)
    daemon = Daemon(_config(tmp_path, **{"source.hosts": hosts}))
    assert type(daemon.hosts).__name__ == "Failover"
    rc, took = await _stop_after(daemon, 1.0)
    assert rc == EXIT_OK and took < 1.0, (rc, took)


async def test_async_with_installs_no_signal_handler(tmp_path, holes):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    async with Daemon(_config(tmp_path, **{"source.port": str(holes[0].port)})) as daemon:
        await asyncio.sleep(0.2)
        assert {sig: signal.getsignal(sig) for sig in before} == before
    assert not daemon.running and daemon.exit_code == EXIT_OK


async def test_run_with_signals_installs_then_removes_its_handlers(tmp_path, holes):
    daemon = Daemon(_config(tmp_path, **{"source.port": str(holes[0].port)}))
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    seen = []

    async def send_term():
        while not daemon.running:
            await asyncio.sleep(0.05)
        seen.append({sig for sig, handler in before.items() if signal.getsignal(sig) != handler})
        signal.raise_signal(signal.SIGHUP)   # logged, ignored
        await asyncio.sleep(0.2)
        assert daemon.running
        signal.raise_signal(signal.SIGTERM)  # stops it

    sender = asyncio.create_task(send_term())
    rc = await asyncio.wait_for(run_with_signals(daemon, logging.getLogger("test")), 10)
    await sender
    assert rc == EXIT_OK
    assert seen == [{signal.SIGTERM, signal.SIGINT, signal.SIGHUP}]
    after = {sig: signal.getsignal(sig) for sig in before}
    # removed: asyncio puts SIGINT back to Python's default handler, not to the runner's
    assert after[signal.SIGTERM] == before[signal.SIGTERM] and after[signal.SIGHUP] == before[signal.SIGHUP]
    assert after[signal.SIGINT] in (before[signal.SIGINT], signal.default_int_handler)


async def test_close_tasks_returns_what_each_task_ended_with():
    async def forever():
        await asyncio.Event().wait()

    async def fails():
        raise ValueError("its own")

    async def done():
        return 1

    failing, finished = asyncio.create_task(fails()), asyncio.create_task(done())
    await asyncio.sleep(0)
    hanging = asyncio.create_task(forever())
    await asyncio.sleep(0)
    ended = await close_tasks(hanging, None, failing, finished)
    assert [type(e).__name__ if e else None for e in ended] == ["CancelledError", "ValueError", None]
    assert hanging.cancelled() and await close_tasks() == []


async def test_close_tasks_never_swallows_the_callers_cancellation():
    closing = asyncio.Event()

    async def slow_to_close():
        try:
            await asyncio.Event().wait()
        finally:
            closing.set()
            await asyncio.sleep(0.3)  # its own cleanup, awaited by close_tasks

    owned = asyncio.create_task(slow_to_close())
    await asyncio.sleep(0)

    async def caller():
        await close_tasks(owned)
        return "not cancelled"

    outer = asyncio.create_task(caller())
    await closing.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert owned.done(), "close_tasks returned before the task it closes had ended"
