"""Running the daemon in-process against the fake MySQL primary (:mod:`tests.support.fakeprimary`).

The corpus files it serves, their server UUIDs, a config for the daemon, and readers of what it wrote.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from binlogd.daemon.config import load_config
from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.service import Daemon
from binlogd.library.checkpointfile import Checkpoint
from binlogd.protocol.gtid import MysqlGtidSet
from tests.support.fakeprimary import FakePrimary
from tests.support.fakewire import BinlogFile
from tests.support.paths import CORPUS

F57 = "mysql-binlog-connector-rust/mysql-bin.000057"          # 8.0.31: GTIDs :11 DDL, :12 :13 TRANSACTION_PAYLOAD
U57 = "76f3e7be-6720-11ed-9cad-0242ac110002"                  # PREVIOUS_GTIDS :1-10
FENUM = "rust_mysql_common/mysql-enum-string-set.000001"      # 8.0.28: :1 :2 DDL, :3 insert, :4 update, :5 delete
UENUM = "93e95066-a2f4-11ec-9b69-9657f0ae95e2"                # PREVIOUS_GTIDS empty
FTAG = "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001"  # 9.6.0: mytag:3 insert, then ROTATE
UTAG = "55778904-0299-11f1-b1b8-4ef0c4956feb"                 # PREVIOUS_GTIDS :1-13:mytag:1-2
FNONE = "mysql-binlog-connector-java/mysql-bin.checksum-none"  # 5.7.20, binlog_checksum=NONE, no GTIDs
UOTHER = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

PASSWORD = "fake-s3cret"
HB = 0.3
SERVER_ID = 4242


def binlog(rel: str, name: str | None = None) -> BinlogFile:
    return BinlogFile.from_path(CORPUS / rel, name)


def config(tmp_path: Path, port: int, start: str = "current", *, password: str = PASSWORD,
           heartbeat: float = HB, **extra: str):
    overrides = {
        "source.host": "127.0.0.1", "source.port": str(port), "source.user": "repl",
        "source.password": password, "source.server_id": str(SERVER_ID), "source.start": start,
        "source.heartbeat_seconds": str(heartbeat), "source.connect_timeout": "5",
        "checkpoint.path": str(tmp_path / "state" / "checkpoint.json"),
        "sink.kind": "jsonl", "sink.path": str(tmp_path / "changes"), "sink.fsync": "false",
        "metrics.listen": "", "schema.source": "none",
        "reconnect.initial_seconds": "0.05", "reconnect.max_seconds": "0.2", "reconnect.jitter": "0",
    }
    overrides.update(extra)
    return load_config(None, env={}, overrides=overrides)


def heartbeats(primary: FakePrimary, n: int):
    """Predicate: the latest connection has received ``n`` heartbeats."""
    return lambda: bool(primary.connections) and primary.connections[-1].heartbeats_sent >= n


def checkpoint(tmp_path: Path) -> Checkpoint | None:
    return CheckpointStore(tmp_path / "state" / "checkpoint.json", lock=False).load()


def sink_rows(tmp_path: Path) -> list[dict]:
    out = []
    for path in sorted((tmp_path / "changes").glob("changes-*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def by_gtid(rows: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["source"]["gtid"], []).append(r["op"])
    return out


def metric(daemon: Daemon, name: str, **labels) -> float | None:
    return daemon.metrics.registry.get_sample_value(name, labels or None)


class Running:
    """``Daemon.run()`` as a task; ``wait`` polls a condition with a deadline; ``stop`` returns the exit code.

    ``stop`` first quiets the primary's heartbeats, so that a packet landing as the reader task is
    cancelled (see ``test_stop_returns_promptly_while_heartbeats_arrive``) cannot make other tests hang.
    """

    def __init__(self, cfg, primary: FakePrimary | None = None):
        self.daemon = Daemon(cfg, log=logging.getLogger("binlogd"))
        self.primary = primary
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(self.daemon.run())
        return self

    async def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if self.task.done():
                raise AssertionError(f"daemon exited ({self.task.result()!r}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            await asyncio.sleep(0.02)

    async def exit_code(self, timeout: float) -> int:
        return await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def stop(self, timeout: float = 10) -> int:
        if self.primary is not None:
            self.primary.quiet = True
            await asyncio.sleep(0.05)   # let a heartbeat already on the wire be read
        self.daemon.stop()
        return await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def __aexit__(self, *exc) -> None:
        if self.task is not None and not self.task.done():
            if self.primary is not None:
                self.primary.quiet = True
            self.daemon.stop()
            try:
                await asyncio.wait_for(asyncio.shield(self.task), 3)
            except asyncio.TimeoutError:
                self.task.cancel()
                try:
                    await self.task
                except (asyncio.CancelledError, Exception):
                    pass


async def within(coro, timeout: float = 90):
    """Await ``coro``, failing the test with TimeoutError after ``timeout`` seconds (async tests)."""
    return await asyncio.wait_for(coro, timeout)


def at_pos(tmp_path: Path, file: str, pos: int):
    def check():
        cp = checkpoint(tmp_path)
        return cp is not None and cp.position.file == file and cp.position.pos == pos and cp
    return check


def gtid_reaches(tmp_path: Path, text: str):
    want = MysqlGtidSet.parse(text)

    def check():
        cp = checkpoint(tmp_path)
        return cp is not None and MysqlGtidSet.parse(cp.position.gtid_set) == want and cp
    return check


