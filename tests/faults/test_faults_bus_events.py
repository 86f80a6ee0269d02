"""A SIGKILL of the daemon in the middle of a big transaction's commit to a bus sink, with ``[sink]
transaction_events`` on: the broker then holds part of it (NATS: published messages past the checkpoint; Redis:
entries in the staging stream; PostgreSQL: an open COPY), its begin among them. After a restart the broker holds
each event once, and no begin without its commit.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.integration.test_bus_events import Names, counts, in_order, overrides, read_all, transactions
from tests.support.brokers import KINDS, require
from tests.support.daemon import DaemonProcess, wait_caught_up, wait_until

pytestmark = pytest.mark.server
ROWS = 20_000        # the big transaction: 20 000 rows of 2 KB, past Redis's 32 MB staging threshold


def cut_short(kind: str, broker, names: Names, base: int) -> bool:
    """Whether the broker holds part of an uncommitted commit now (``base``: NATS's last sequence before it)."""
    if kind == "redis":
        import redis

        r = redis.Redis.from_url(broker.url)
        try:
            return r.exists(f"{names.config['sink.redis.checkpoint_key']}:staging") == 1
        finally:
            r.close()
    if kind == "nats":
        return nats_last_seq(broker, names) > base + 1000
    import psycopg

    with psycopg.connect(broker.url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%%' AND state = 'active' "
                            "AND pid <> pg_backend_pid()").fetchone()[0] > 0


def nats_last_seq(broker, names: Names) -> int:
    import nats

    async def go():
        nc = await nats.connect(broker.url)
        try:
            return (await nc.jetstream().stream_info(names.stream)).state.last_seq
        finally:
            await nc.close()

    return asyncio.run(go())


def insert_big(server, db: str, errors: list) -> None:
    """The big transaction (multi-row INSERTs, one COMMIT); an error goes to ``errors``."""
    try:
        conn = server.connect(database=db, autocommit=False)
        try:
            conn.cursor().executemany("INSERT INTO t VALUES (%s, %s)",
                                      [(1000 + i, "x" * 2000) for i in range(ROWS)])
            conn.commit()
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 (reported by the test)
        errors.append(exc)


def kill_inside_a_big_commit(server, db: str, kind: str, broker, names: Names, daemon) -> None:
    """Insert :data:`ROWS` rows in one transaction into ``db``.t and SIGKILL ``daemon`` once part of its commit is
    in the broker (:func:`cut_short`); returns when the insert has ended (AssertionError if it failed)."""
    base = nats_last_seq(broker, names) if kind == "nats" else 0
    errors: list = []
    big = threading.Thread(target=insert_big, args=(server, db, errors))
    big.start()
    wait_until(lambda: cut_short(kind, broker, names, base), timeout=60, interval=0.02,
               what="part of the big transaction in the broker")
    daemon.kill()
    big.join()
    assert not errors, errors


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_sigkill_inside_a_big_commit(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    db, names = fresh_db, Names(kind)
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v TEXT)")
    with KINDS[kind]() as broker:
        o = overrides(kind, broker, names, mariadb, tmp_path, db, sink__transaction_events="true",
                      sink__heartbeat_seconds="0.5")
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            for i in range(5):
                mariadb.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'small')")
            wait_caught_up(mariadb, tmp_path / "checkpoint.json", timeout=60, daemon=d)
            kill_inside_a_big_commit(mariadb, db, kind, broker, names, d)
        finally:
            if d.running:
                d.kill()
        _, events = read_all(kind, broker.url, names)
        ops = [e["op"] for e in events["transaction"]]
        # NATS keeps what it stored of the commit cut short (the big one's begin among it), to be gone on with;
        # Redis and PostgreSQL show nothing of it
        assert ops[-2:] == (["commit", "begin"] if kind == "nats" else ["begin", "commit"]), ops
        for i in range(5, 10):
            mariadb.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'after')")
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            wait_caught_up(mariadb, tmp_path / "checkpoint.json", timeout=120, daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        changes, events = read_all(kind, broker.url, names)
    found = transactions(in_order(changes, events))   # no id twice, no begin without its commit
    assert [sum(counts(c).values()) for _, _, c in found] == [1] * 5 + [ROWS] + [1] * 5
    ids = sorted(ch["after"]["id"] for _, chs, _ in found for ch in chs)
    assert ids == list(range(10)) + list(range(1000, 1000 + ROWS))
