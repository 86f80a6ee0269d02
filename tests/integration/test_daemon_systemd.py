"""systemd Type=notify: READY=1 after the first dump, STATUS lines, STOPPING=1 on stop, watchdog pings."""

from __future__ import annotations

import asyncio
import socket

from binlogd.daemon.config import load_config
from binlogd.daemon.service import Daemon


async def test_daemon_notifies_systemd(mariadb, tmp_path, monkeypatch):
    sock_path = tmp_path / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(sock_path))
    receiver.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_path))
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # 0.4 s: pings every 0.2 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    config = load_config(None, env={}, overrides={
        "source.port": str(mariadb.port), "source.password": "replpass", "source.heartbeat_seconds": "0.5",
        "checkpoint.path": str(tmp_path / "cp.json"), "sink.path": str(tmp_path / "out"), "metrics.listen": ""})
    messages: list[str] = []

    async def scenario() -> int:
        daemon = Daemon(config)
        task = asyncio.create_task(daemon.run())
        for _ in range(100):
            await asyncio.sleep(0.05)
            try:
                while True:
                    messages.append(receiver.recv(4096).decode())
            except BlockingIOError:
                pass
            if any("READY=1" in m for m in messages) and sum(m == "WATCHDOG=1" for m in messages) >= 2:
                break
        daemon.stop()
        return await asyncio.wait_for(task, 20)

    try:
        assert await scenario() == 0
        try:
            while True:
                messages.append(receiver.recv(4096).decode())
        except BlockingIOError:
            pass
    finally:
        receiver.close()
    ready = [m for m in messages if m.startswith("READY=1")]
    assert len(ready) == 1 and "STATUS=streaming from" in ready[0], messages
    assert sum(m == "WATCHDOG=1" for m in messages) >= 2, messages
    assert messages[-1] == "STOPPING=1" or "STOPPING=1" in messages, messages
    assert "replpass" not in "".join(messages)
