"""A broker's committed position names its source: two daemons of different sources sharing one broker position.

Two MariaDB servers (server_id 11 and 12, both with binlog base name ``binlog``, so their file:pos look alike)
and one broker with the default names (Redis ``binlogd:checkpoint:binlogd``, PostgreSQL ``binlogd_changes``,
NATS stream ``BINLOGD``). The first daemon streams server 11 into it and stops. The second, pointed at server
12 with a work directory of its own (no local checkpoint: the broker's is all it has), exits 8 with one
ERROR line naming both servers, and the broker holds exactly what it held before (read back independently).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus
from tests.support.daemon import DaemonProcess, assert_sink_matches, base_overrides, replay, wait_caught_up

pytestmark = pytest.mark.server
ALL = ["redis", "nats", "postgres"]


@pytest.fixture(scope="module")
def two_servers():
    """Two MariaDB servers of the machine's installation, server_id 11 and 12, started; removed after."""
    servers = [LocalServer(extra_args=["--binlog-row-metadata=FULL", f"--server-id={i}"]) for i in (11, 12)]
    try:
        for s in servers:
            s.start()
        yield servers
    finally:
        for s in servers:
            s.cleanup()


def broker_state(kind: str, broker) -> object:
    """Everything the broker holds, read with its own client: Redis every key's type and content, PostgreSQL
    both tables' rows, NATS the stream's state and every message (subject, headers, data)."""
    if kind == "redis":
        import redis

        r = redis.Redis.from_url(broker.url)
        try:
            out = {}
            for key in sorted(r.scan_iter(match="*")):
                t = r.type(key)
                out[key] = (t, r.xrange(key) if t == b"stream" else r.dump(key))
            return out
        finally:
            r.close()
    if kind == "postgres":
        import psycopg

        with psycopg.connect(broker.url) as conn:
            changes = conn.execute("SELECT seq, change::text FROM binlogd_changes ORDER BY seq").fetchall()
            cp = conn.execute("SELECT checkpoint::text FROM binlogd_changes_checkpoint").fetchall()
        return changes, cp

    import nats
    from nats.js.errors import NotFoundError

    async def go():
        nc = await nats.connect(broker.url)
        try:
            js = nc.jetstream()
            info = await js.stream_info("BINLOGD")
            msgs = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    m = await js.get_msg("BINLOGD", seq)
                except NotFoundError:
                    continue
                msgs.append((seq, m.subject, dict(m.headers or {}), m.data))
            return (info.state.messages, info.state.first_seq, info.state.last_seq), msgs
        finally:
            await nc.close()

    return asyncio.run(go())


def committed_source(kind: str, broker) -> dict:
    """The ``source`` block of the checkpoint the broker holds, read with its own client."""
    if kind == "redis":
        from tests.support.busread import redis_checkpoint

        return redis_checkpoint(broker.url)["source"]
    if kind == "postgres":
        import psycopg

        with psycopg.connect(broker.url) as conn:
            return json.loads(conn.execute("SELECT checkpoint::text FROM binlogd_changes_checkpoint")
                              .fetchone()[0])["source"]
    _, msgs = broker_state(kind, broker)
    cps = [m for m in msgs if m[1].startswith("_binlogd.checkpoint.")]
    assert len(cps) == 1, f"{len(cps)} checkpoint messages in the stream (rolled up: one)"
    return json.loads(cps[0][3])["source"]


@pytest.mark.parametrize("kind", ALL)
def test_a_daemon_of_another_source_refuses_the_brokers_position(kind, two_servers, tmp_path):
    """The second daemon (server 12) exits 8 with one line naming server_id 11 and server_id 12 and the
    broker's checkpoint; nothing in the broker changed (its own client's full read, before and after)."""
    require(kind)
    first, second = two_servers
    db = f"src_{uuid.uuid4().hex[:10]}"
    for s in (first, second):
        s.sql(f"CREATE DATABASE `{db}`")
        s.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    try:
        with KINDS[kind]() as broker:
            def settings(server, work):
                o = base_overrides(server, work, **{"source.start": "current", "filters.include_schemas": db})
                o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
                return o

            work1, work2 = tmp_path / "one", tmp_path / "two"
            d = DaemonProcess(settings(first, work1))
            try:
                d.wait_streaming(timeout=60)
                for i in range(10):
                    first.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'one {i}')")
                first.sql(f"UPDATE `{db}`.t SET v = 'changed' WHERE id < 3")
                wait_caught_up(first, work1 / "checkpoint.json", timeout=60, daemon=d)
                assert d.terminate() == 0, d.stderr
            finally:
                if d.running:
                    d.kill()
            changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
            assert len(changes) == 13 and {c["source"]["server_id"] for c in changes} == {11}
            assert_sink_matches(first, db, ["t"], replay(changes))
            src = committed_source(kind, broker)
            assert (src["flavor"], int(src["server_id"])) == ("mariadb", 11), src
            before = broker_state(kind, broker)

            for i in range(5):  # the second server has changes a wrong resume would deliver
                second.sql(f"INSERT INTO `{db}`.t VALUES ({100 + i}, 'two {i}')")
            d2 = DaemonProcess(settings(second, work2))
            try:
                rc = d2.wait(60)
            finally:
                if d2.running:
                    d2.kill()
            assert rc == 8, d2.stderr
            errors = [line for line in d2.stderr.splitlines() if " ERROR " in line]
            assert len(errors) == 1, d2.stderr
            assert "is of another source" in errors[0], errors[0]
            assert "server_id 11" in errors[0] and "server_id 12" in errors[0], errors[0]
            assert "Traceback" not in d2.stderr
            assert broker_state(kind, broker) == before, "the refused daemon changed the broker"
    finally:
        for s in (first, second):
            s.sql(f"DROP DATABASE IF EXISTS `{db}`")
