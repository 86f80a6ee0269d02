"""The bus sinks (Redis Streams, NATS JetStream, PostgreSQL) against real brokers and a real MariaDB.

- a big transaction (12 MB, past Redis's staging threshold and many pieces) with small inserts, updates and
  deletes around it: read back, replayed == the table's SELECT, no change id twice;
- the broker's committed position wins over an older local checkpoint (and the log says so); for NATS,
  whose position is the local file, a re-read past the duplicate window is skipped by the last message;
- an idle selected table on a busy server: the committed position still follows the primary;
- a change over the size limit, a broker refusing auth, a stream/table of another shape: one clear error
  line and the documented exit code (7, 3, 6).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter

import pytest

from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus, redis_checkpoint
from tests.support.daemon import (
    DaemonProcess,
    _file_key,
    assert_sink_matches,
    base_overrides,
    master_status,
    read_checkpoint,
    replay,
    run_to_exit,
    wait_caught_up,
)

pytestmark = pytest.mark.server
ALL = ["redis", "nats", "postgres"]


def overrides(kind, broker, srv, tmp_path, db, **extra) -> dict:
    o = base_overrides(srv, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
    o.update({"sink.kind": kind, f"sink.{kind}.url": extra.pop("url", None) or broker.url})
    o.update({k.replace("__", "."): str(v) for k, v in extra.items()})
    return o


def remote_position(kind, broker, tmp_path) -> tuple:
    """The committed position the broker holds (NATS: the local checkpoint's)."""
    if kind == "redis":
        cp = redis_checkpoint(broker.url)
    elif kind == "postgres":
        import psycopg

        with psycopg.connect(broker.url) as conn:
            row = conn.execute("SELECT checkpoint::text FROM binlogd_changes_checkpoint").fetchone()
        cp = json.loads(row[0]) if row else None
    else:
        cp = read_checkpoint(tmp_path / "checkpoint.json")
    return (_file_key(cp["position"]["file"]), int(cp["position"]["pos"])) if cp else (-1, 0)


def short_dedup_stream(broker) -> None:
    """Create the JetStream stream first, with a 1 s duplicate window."""
    import nats
    from nats.js import api

    async def go():
        nc = await nats.connect(broker.url)
        try:
            await nc.jetstream().add_stream(name="BINLOGD", subjects=["binlogd.>"], storage=api.StorageType.FILE,
                                            duplicate_window=1.0)
        finally:
            await nc.close()

    asyncio.run(go())


def check_readback(kind, broker, srv, db, tables) -> list:
    changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
    ids = Counter(c["source"]["id"] for c in changes)
    assert not [p for p, n in ids.items() if n > 1], "a change delivered twice"
    assert all(c["source"]["id"] == f"{c['source']['file']}:{c['source']['pos']}:0:{c['source']['row']}"
               for c in changes), "a streamed change's id is not its file:pos:0:row"
    assert_sink_matches(srv, db, tables, replay(changes, schemas=[db]))
    return changes


@pytest.mark.parametrize("kind", ALL)
def test_big_transaction_remote_checkpoint_and_idle_table(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    db, srv = fresh_db, mariadb
    srv.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v MEDIUMTEXT, n INT)")
    srv.sql(f"CREATE TABLE `{db}`.other (id INT PRIMARY KEY AUTO_INCREMENT, x INT)")
    with KINDS[kind]() as broker:
        if kind == "nats":
            short_dedup_stream(broker)
        o = overrides(kind, broker, srv, tmp_path, db)
        cp_path = tmp_path / "checkpoint.json"
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            for i in range(20):
                srv.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'small {i}', {i})")
            early = tmp_path / "early.json"
            wait_caught_up(srv, cp_path, timeout=60, daemon=d)
            shutil.copy(cp_path, early)          # a local checkpoint the broker will be ahead of
            conn = srv.connect(database=db, autocommit=False)
            with conn.cursor() as cur:          # one 12 MB transaction of 3000 rows
                cur.executemany("INSERT INTO t VALUES (%s, %s, %s)",
                                [(1000 + i, "x" * 4000 + str(i), i) for i in range(3000)])
                cur.execute("UPDATE t SET n = n + 1 WHERE id < 1500")
                cur.execute("DELETE FROM t WHERE id % 7 = 0")
            conn.commit()
            conn.close()
            srv.sql(f"UPDATE `{db}`.t SET v = 'changed' WHERE id = 3")
            wait_caught_up(srv, cp_path, timeout=90, daemon=d)
            assert d.terminate() == 0, d.stderr
            first = check_readback(kind, broker, srv, db, ["t"])
            if kind == "redis":
                import redis

                assert not redis.Redis.from_url(broker.url).exists("binlogd:checkpoint:binlogd:staging")

            # the local checkpoint goes back; the restarted daemon must not deliver anything twice
            shutil.copy(early, cp_path)
            if kind == "nats":
                import time

                time.sleep(1.5)  # past the stream's duplicate window: only the last-message check helps
            d = DaemonProcess(o)
            d.wait_streaming(timeout=60)
            if kind != "nats":
                assert d.count("wins over the local checkpoint"), d.stderr
            srv.sql(f"INSERT INTO `{db}`.t VALUES (99999, 'after restart', 0)")
            # an idle selected table on a busy server: only `other` changes, filtered out
            o2 = {"filters.include_tables": f"{db}.t"}
            assert d.terminate() == 0, d.stderr
            d = DaemonProcess({**o, **o2})
            d.wait_streaming(timeout=60)
            for _ in range(30):
                srv.sql(f"INSERT INTO `{db}`.other (x) VALUES (1)")
            target = master_status(srv)
            wait_caught_up(srv, cp_path, timeout=60, daemon=d, fail_on=None)
            assert remote_position(kind, broker, tmp_path) >= (_file_key(target[0]), target[1])
            assert d.terminate() == 0, d.stderr
            changes = check_readback(kind, broker, srv, db, ["t"])
            assert len(changes) == len(first) + 1
        finally:
            if d.running:
                d.kill()


@pytest.mark.parametrize("kind", ALL)
def test_change_over_the_size_limit(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    db, srv = fresh_db, mariadb
    srv.sql(f"CREATE TABLE `{db}`.big (id INT PRIMARY KEY, v LONGTEXT)")
    with KINDS[kind]() as broker:
        extra = {} if kind == "nats" else {f"sink__{kind}__max_change_bytes": 5000}
        o = overrides(kind, broker, srv, tmp_path, db, **extra)
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            srv.sql(f"INSERT INTO `{db}`.big VALUES (1, 'small')")
            wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=d)  # committed before the big one
            size = 1_200_000 if kind == "nats" else 6000   # NATS: over the server's 1 MB max_payload
            srv.sql(f"INSERT INTO `{db}`.big VALUES (2, REPEAT('z', {size}))")
            rc = d.wait(60)
        finally:
            if d.running:
                d.kill()
        assert rc == 7, d.stderr
        errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and f"{db}.big at " in errors[0] and "over the limit" in errors[0], d.stderr
        assert "Traceback" not in d.stderr
        assert [c["after"]["id"] for c in read_bus(kind, broker.url) if c["schema"] == db] == [1]


AUTH = {"redis": {"password": "right"}, "nats": {"user": "u", "password": "right"},
        "postgres": {"password": "right"}}


@pytest.mark.parametrize("kind", ALL)
def test_broker_refuses_auth(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    with KINDS[kind](**AUTH[kind]) as broker:
        url = broker.url.replace("right", "wrong")
        rc, err = run_to_exit(overrides(kind, broker, mariadb, tmp_path, fresh_db, url=url), timeout=60)
    assert rc == 3, err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "authentication failed" in errors[0], err
    assert "wrong" not in err and "Traceback" not in err


@pytest.mark.parametrize("kind", ALL)
def test_stream_or_table_of_another_shape(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    db, srv = fresh_db, mariadb
    srv.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    with KINDS[kind]() as broker:
        if kind == "redis":
            import redis

            redis.Redis.from_url(broker.url).set(f"binlogd:{db}.t", "not a stream")
        elif kind == "postgres":
            import psycopg

            with psycopg.connect(broker.url) as conn:
                conn.execute("CREATE TABLE binlogd_changes (id int primary key, change text)")
        else:
            import nats
            from nats.js import api

            async def go():
                nc = await nats.connect(broker.url)
                await nc.jetstream().add_stream(name="BINLOGD", subjects=["elsewhere.>"],
                                                storage=api.StorageType.MEMORY)
                await nc.close()

            asyncio.run(go())
        d = DaemonProcess(overrides(kind, broker, srv, tmp_path, db))
        try:
            if kind == "redis":  # found when the first change of the table is written
                d.wait_streaming(timeout=60)
                srv.sql(f"INSERT INTO `{db}`.t VALUES (1)")
            rc = d.wait(60)
        finally:
            if d.running:
                d.kill()
    assert rc == 6, d.stderr
    errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and ("another shape" in errors[0] or "not a stream" in errors[0]
                                 or "needs 'binlogd.>'" in errors[0]), d.stderr
    assert "Traceback" not in d.stderr


@pytest.mark.parametrize("kind", ALL)
def test_broker_unreachable_at_start(kind, mariadb, fresh_db, tmp_path):
    require(kind)
    from tests.support.brokers import free_port

    port = free_port()  # nothing listens there
    url = {"redis": f"redis://127.0.0.1:{port}/0", "nats": f"nats://127.0.0.1:{port}",
           "postgres": f"postgresql://binlogd@127.0.0.1:{port}/binlogd"}[kind]
    rc, err = run_to_exit(overrides(kind, None, mariadb, tmp_path, fresh_db, url=url), timeout=60)
    assert rc == 4, err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "unreachable" in errors[0] and f"127.0.0.1:{port}" in errors[0], err
    assert "Traceback" not in err
