"""The Redis sink's big transactions (past ``STAGE_BYTES``: staged, then moved in bounded batches), against a
real redis-server and the machine's MariaDB:

- a 400,000-row INSERT ... SELECT (about 150 MB of changes) is delivered exactly once while another client
  PINGs Redis in a loop: no PING waits long (printed: the longest wait);
- the daemon stopped (SIGSTOP) in the middle of the move, then SIGKILLed and restarted, or its Redis
  connection killed and the daemon let go on: every row once (compared with the server's SELECT), no
  staging or pending key left, the broker's checkpoint the transaction's;
- SIGINT while the daemon stages: no staging left once it has exited; after a restart every row once;
- on a bare Redis (keys prepared by hand): ``open`` finishes a decided commit that a crash left half moved,
  in bounded batches, and deletes staging that was never decided; ``close`` deletes undecided staging.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

from tests.support.brokers import RedisServer, require
from tests.support.daemon import DaemonProcess, base_overrides, wait_caught_up, wait_until
from tests.support.faults import local_server

ROWS = 400_000
CHECKPOINT = "binlogd:checkpoint:binlogd"
STAGING, PENDING = f"{CHECKPOINT}:staging", f"{CHECKPOINT}:pending"


@pytest.fixture(scope="module")
def srv():
    """The machine's MariaDB, for the module."""
    with local_server() as server:
        yield server


@pytest.fixture
def redis_server():
    require("redis")
    with RedisServer() as server:
        yield server


def _client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=60)


@pytest.fixture
def client(redis_server):
    """A client of ``redis_server``, closed after."""
    c = _client(redis_server.url)
    yield c
    c.close()


def _setup(srv, name: str) -> str:
    """A fresh schema ``name`` with the empty table ``t``; returns the table's stream."""
    srv.sql(f"DROP DATABASE IF EXISTS `{name}`")
    srv.sql(f"CREATE DATABASE `{name}`")
    srv.sql(f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, v VARCHAR(200) NOT NULL)")
    return f"binlogd:{name}.t"


def _overrides(srv, tmp_path, redis_server, db: str, **extra) -> dict:
    return base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": db,
                                            "sink.kind": "redis", "sink.redis.url": redis_server.url}, **extra)


def _big_insert(srv, db: str) -> None:
    """One transaction of ROWS inserts (MariaDB's sequence engine)."""
    srv.sql(f"INSERT INTO `{db}`.t SELECT seq, CONCAT('row ', seq, ' ', REPEAT('x', 120)) FROM `{db}`.seq_1_to_{ROWS}",
            timeout=120)


def _check_once(srv, client, db: str, stream: str) -> None:
    """Every row of ``db``.t in the stream exactly once, with the server's values; no staging or pending key."""
    seen, values, last = Counter(), {}, "-"
    while True:
        batch = client.xrange(stream, last, "+", count=20_000)
        for _, fields in batch:
            change = json.loads(fields[b"change"])
            assert change["op"] == "insert", change
            row = change["after"]
            seen[row["id"]] += 1
            values[row["id"]] = row["v"]
        if len(batch) < 20_000:
            break
        last = "(" + batch[-1][0].decode()
    twice = [k for k, n in seen.items() if n > 1]
    assert not twice, f"{len(twice)} rows delivered more than once, e.g. {twice[:5]}"
    server = dict(srv.sql(f"SELECT id, v FROM `{db}`.t"))
    assert len(server) == ROWS
    missing = sorted(set(server) - set(values))
    assert not missing, f"{len(missing)} rows missing, e.g. {missing[:5]}"
    assert values == server
    assert not client.exists(STAGING) and not client.exists(PENDING)


class Pinger(threading.Thread):
    """PINGs Redis in a loop on its own connection; ``worst`` is the longest wait for a reply (seconds)."""

    def __init__(self, url: str):
        super().__init__(daemon=True, name="redis-pinger")
        self.client, self.worst, self.count = _client(url), 0.0, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            t = time.perf_counter()
            self.client.ping()
            self.worst = max(self.worst, time.perf_counter() - t)
            self.count += 1
            time.sleep(0.002)

    def stop(self) -> float:
        self.halt.set()
        self.join(30)
        self.client.close()
        return self.worst


def test_big_transaction_once_and_redis_never_held(srv, redis_server, client, tmp_path):
    db = "staging_big"
    stream = _setup(srv, db)
    d = DaemonProcess(_overrides(srv, tmp_path, redis_server, db))
    pinger = Pinger(redis_server.url)
    try:
        d.wait_streaming(timeout=60)
        pinger.start()
        t0 = time.monotonic()
        _big_insert(srv, db)
        t1 = time.monotonic()
        staged = wait_until(lambda: client.exists(STAGING), timeout=60, interval=0.005, what="staging")
        t2 = time.monotonic()
        wait_until(lambda: client.exists(PENDING), timeout=120, interval=0.005, what="the commit decided")
        t3 = time.monotonic()
        wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=120, daemon=d)
        worst = pinger.stop()
        print(f"\nlongest PING wait during a {ROWS}-row transaction: {worst * 1000:.1f} ms ({pinger.count} PINGs); "
              f"insert {t1 - t0:.1f} s, staging from {t2 - t0:.1f} s, decided at {t3 - t0:.1f} s, "
              f"moved at {time.monotonic() - t0:.1f} s")
        assert staged and pinger.count > 100
        assert worst < 1.0, f"a PING waited {worst:.2f} s: a script or transaction held Redis"
        assert d.terminate() == 0, d.stderr
        _check_once(srv, client, db, stream)
    finally:
        if pinger.is_alive():
            pinger.stop()
        if d.running:
            d.kill()


def _snapshot(client, stream: str) -> tuple:
    """(pending key, entries staged, entries in ``stream``), read in one MULTI/EXEC."""
    p = client.pipeline(transaction=True)
    p.get(PENDING)
    p.xlen(STAGING)
    p.xlen(stream)
    return tuple(p.execute())


def _wait_mid_move(client, stream: str) -> None:
    """Until the commit is decided (pending key) and part of it moved; each look finds every row either
    staged or moved, never both or neither."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        decided, staged, moved = _snapshot(client, stream)
        if decided:
            assert staged + moved == ROWS, (staged, moved)
            if moved:
                return
        time.sleep(0.001)
    raise AssertionError("the move did not start within 120 s")


@pytest.mark.parametrize("fault", ["sigkill", "connection killed"])
def test_fault_in_the_middle_of_the_move(srv, redis_server, client, tmp_path, fault):
    """Stopped mid-move: ``sigkill`` then a restart, whose open finishes the move; ``connection killed``:
    Redis drops the daemon's connections, the daemon goes on, and its reopen finishes the move."""
    db = "staging_" + fault.split()[0]
    stream = _setup(srv, db)
    o = _overrides(srv, tmp_path, redis_server, db)
    d = DaemonProcess(o)
    try:
        d.wait_streaming(timeout=60)
        before = client.get(CHECKPOINT)
        _big_insert(srv, db)
        _wait_mid_move(client, stream)
        os.kill(d.pid, signal.SIGSTOP)
        time.sleep(0.2)  # a batch sent before the stop runs meanwhile
        decided, staged, moved = _snapshot(client, stream)
        print(f"\nstopped with {moved} entries moved and {staged} staged")
        assert decided and staged > 0 and 0 < moved < ROWS, (staged, moved)
        assert moved + staged == ROWS
        assert client.get(CHECKPOINT) == before  # the checkpoint moves after the last batch
        if fault == "sigkill":
            d.kill()
            d = DaemonProcess(o)
            d.wait_streaming(timeout=60)
            assert d.count("wins over the local checkpoint"), d.stderr
        else:
            killed = client.client_kill_filter(_type="normal", skipme=True)
            assert killed >= 1
            os.kill(d.pid, signal.SIGCONT)
            d.wait_for_line("retrying", timeout=60)
        wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=120, daemon=d, fail_on=None)
        assert d.count("finished moving"), d.stderr
        assert client.get(CHECKPOINT) == decided
        assert d.terminate() == 0, d.stderr
        _check_once(srv, client, db, stream)
    finally:
        if d.running:
            os.kill(d.pid, signal.SIGCONT)
            d.kill()


def test_sigint_while_staging(srv, redis_server, client, tmp_path):
    db = "staging_sigint"
    stream = _setup(srv, db)
    o = _overrides(srv, tmp_path, redis_server, db, **{"daemon.shutdown_seconds": "0.05"})
    d = DaemonProcess(o)
    try:
        d.wait_streaming(timeout=60)
        _big_insert(srv, db)
        wait_until(lambda: client.xlen(STAGING) > 0, timeout=60, interval=0.001, what="staging")
        d.proc.send_signal(signal.SIGINT)
        rc = d.wait(60)
        assert rc == 0, d.stderr
        assert not client.exists(PENDING), "decided before the SIGINT took effect: the test proves nothing"
        assert not client.exists(STAGING), "staging left behind by a stopped daemon"
        assert client.xlen(stream) == 0
        d = DaemonProcess(o)
        d.wait_streaming(timeout=60)
        wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=120, daemon=d)
        assert d.terminate() == 0, d.stderr
        _check_once(srv, client, db, stream)
    finally:
        if d.running:
            d.kill()


# ---------------------------------------------------------------- open and close on a bare Redis
def _payload(i: int) -> bytes:
    return json.dumps({"op": "insert", "schema": "d", "table": "a", "after": {"id": i, "v": "x" * 100},
                       "source": {"file": "b.000001", "pos": 1000 + i, "row": 0}}).encode()


def _ids(client, stream: str) -> list:
    return [json.loads(fields[b"change"])["after"]["id"] for _, fields in client.xrange(stream)]


def _evals(client) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("eval", "evalsha"))


@pytest.mark.parametrize("bound", ["entries", "bytes"])
def test_open_finishes_a_decided_half_moved_commit(redis_server, client, monkeypatch, bound):
    """Four entries moved before the crash, seven still staged, the commit decided: open moves the seven,
    in order, once, at most MOVE_ENTRIES (or one over MOVE_BYTES) per script, then sets the checkpoint."""
    from binlogd.daemon.sinks import redis as redis_sink
    from binlogd.library.checkpointfile import Checkpoint
    from binlogd.protocol.position import Position

    if bound == "entries":
        monkeypatch.setattr(redis_sink, "MOVE_ENTRIES", 3)
    else:
        monkeypatch.setattr(redis_sink, "MOVE_BYTES", 1)
    old, new = (Checkpoint(Position("b.000001", pos)).to_bytes() for pos in (1000, 2000))
    client.set(CHECKPOINT, old)
    for i in range(4):
        client.xadd("binlogd:d.a", {"change": _payload(i)})
    for i in range(4, 11):
        client.xadd(STAGING, {"s": "binlogd:d.a" if i % 2 else "binlogd:d.b", "change": _payload(i)})
    client.set(PENDING, new)
    evals = _evals(client)
    sink = redis_sink.RedisSink(redis_server.url)
    sink.open(None)
    try:
        assert sink.remote.to_bytes() == new
    finally:
        sink.close()
    assert _ids(client, "binlogd:d.a") == [0, 1, 2, 3, 5, 7, 9]
    assert _ids(client, "binlogd:d.b") == [4, 6, 8, 10]
    assert client.get(CHECKPOINT) == new
    assert not client.exists(STAGING) and not client.exists(PENDING)
    assert _evals(client) - evals >= (3 if bound == "entries" else 7)


def test_open_and_close_delete_undecided_staging(redis_server, client, monkeypatch):
    """Staging with no pending key was never committed: open deletes it and leaves the checkpoint; a sink
    closed while it stages (no commit) deletes its staging too."""
    from binlogd.daemon.sinks import bus
    from binlogd.daemon.sinks import redis as redis_sink
    from binlogd.library.checkpointfile import Checkpoint
    from binlogd.protocol.position import Position

    old = Checkpoint(Position("b.000001", 1000)).to_bytes()
    client.set(CHECKPOINT, old)
    for i in range(5):
        client.xadd(STAGING, {"s": "binlogd:d.a", "change": _payload(i)})
    sink = redis_sink.RedisSink(redis_server.url)
    sink.open(None)
    sink.close()
    assert not client.exists(STAGING) and not client.exists("binlogd:d.a")
    assert client.get(CHECKPOINT) == old

    monkeypatch.setattr(bus, "PIECE_BYTES", 20_000)
    monkeypatch.setattr(redis_sink, "STAGE_BYTES", 100_000)
    sink = redis_sink.RedisSink(redis_server.url)
    sink.open(None)
    try:
        for i in range(1000):  # ~300 kB, no commit
            sink.change({"schema": "d", "table": "a", "op": "insert", "after": {"id": i, "v": "x" * 200},
                         "source": {"file": "b.000001", "pos": 2000 + i, "row": 0, "server_id": 1, "gtid": None,
                                    "id": f"b.000001:{2000 + i}:0:0"}})
        sink.flush()
        wait_until(lambda: client.xlen(STAGING) >= 300, timeout=30, interval=0.01, what="staged entries")
    finally:
        sink.close()
    assert not client.exists(STAGING) and not client.exists("binlogd:d.a")
    assert client.get(CHECKPOINT) == old


def test_open_refuses_to_move_into_a_key_of_another_type(redis_server, client):
    """A decided commit whose stream became a string: open stops with exit 6 naming the key, and the batch
    moved nothing (staging, pending key and checkpoint as they were)."""
    from binlogd.daemon.sinks import SinkError
    from binlogd.daemon.sinks.redis import RedisSink
    from binlogd.library.checkpointfile import Checkpoint
    from binlogd.protocol.position import Position

    old, new = (Checkpoint(Position("b.000001", pos)).to_bytes() for pos in (1000, 2000))
    client.set(CHECKPOINT, old)
    client.set("binlogd:d.a", "not a stream")
    for i in range(5):
        client.xadd(STAGING, {"s": "binlogd:d.b" if i < 2 else "binlogd:d.a", "change": _payload(i)})
    client.set(PENDING, new)
    sink = RedisSink(redis_server.url)
    with pytest.raises(SinkError) as err:
        sink.open(None)
    sink.close()
    assert err.value.fatal and err.value.exit_code == 6, err.value
    assert "WRONGTYPE" in str(err.value) and "binlogd:d.a" in str(err.value)
    assert client.xlen(STAGING) == 5 and not client.exists("binlogd:d.b")
    assert client.get(PENDING) == new and client.get(CHECKPOINT) == old
