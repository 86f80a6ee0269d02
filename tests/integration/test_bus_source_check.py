"""A broker's committed position names its source: two daemons of different sources sharing one broker position.

Two servers whose binlogs look alike (both with binlog base name ``binlog``): two MariaDB servers (server_id 11
and 12), or two MySQL 9.7 servers of one server_id (1) and two server UUIDs; and one broker with the default
names (Redis ``binlogd:checkpoint:binlogd``, PostgreSQL ``binlogd_changes``, NATS stream ``BINLOGD``). The first
daemon streams the first server into it and stops. The second, pointed at the other server with a work directory
of its own (no local checkpoint: the broker's is all it has), exits 8 with one ERROR line naming both servers,
and the broker holds exactly what it held before (read back independently). Given a checkpoint key, table or
stream of its own, the same second daemon streams its server there, and the first one's data is untouched.
The JSON-lines sink's position, in the local checkpoint file, is refused too (by the schema history beside it:
exit 8, one line naming both servers, no file changes).

Not another source: a MySQL replica of the first server holds the broker's GTIDs, and a daemon pointed at it
resumes from the broker's checkpoint by GTID, every transaction once.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import servers
from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus, read_nats, read_postgres, read_redis
from tests.support.daemon import (
    DaemonProcess,
    assert_sink_matches,
    base_overrides,
    read_changes,
    replay,
    wait_caught_up,
)

pytestmark = pytest.mark.server
ALL = ["redis", "nats", "postgres"]


@pytest.fixture(scope="module", params=["mariadb", "mysql"])
def two_servers(request):
    """Two servers, started; removed after: MariaDB of the machine's installation, server_id 11 and 12, or MySQL
    9.7, both server_id 1 (each its own server UUID); the MySQL pair skips when 9.7 cannot be fetched."""
    if request.param == "mysql":
        try:
            bins = servers.binaries(servers.MYSQL)
        except servers.Unavailable as exc:
            pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
        pair = [LocalServer(binaries=bins, extra_args=["--binlog-row-metadata=FULL"]) for _ in (1, 2)]
    else:
        pair = [LocalServer(extra_args=["--binlog-row-metadata=FULL", f"--server-id={i}"]) for i in (11, 12)]
    try:
        for s in pair:
            s.start()
        yield pair
    finally:
        for s in pair:
            s.cleanup()


def identity(server: LocalServer) -> tuple[int, str]:
    """(server_id, server_uuid or "") as the server says."""
    if server.flavor == "mysql":
        sid, uuid_ = server.sql("SELECT @@server_id, @@server_uuid")[0]
        return int(sid), uuid_
    return int(server.sql("SELECT @@server_id")[0][0]), ""


OWN = {"redis": {"sink.redis.checkpoint_key": "two:checkpoint", "sink.redis.stream": "two:{schema}.{table}"},
       "nats": {"sink.nats.stream": "TWO", "sink.nats.subject": "two.{schema}.{table}"},
       "postgres": {"sink.postgres.table": "two_changes"}}


def read_own(kind: str, url: str) -> list:
    """What the second daemon wrote under :data:`OWN`'s names."""
    if kind == "redis":
        return read_redis(url, pattern="two:*")
    return read_nats(url, stream="TWO") if kind == "nats" else read_postgres(url, table="two_changes")


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
    """The second daemon exits 8 with one line naming both servers (server_id, and server_uuid on MySQL) and the
    broker's checkpoint; nothing in the broker changed (its own client's full read, before and after). With names
    of its own it streams its server (replay == SELECT), and the first daemon's changes are as they were."""
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
            (id1, uuid1), (id2, uuid2) = identity(first), identity(second)
            if first.flavor == "mysql":  # told apart by the UUID alone
                assert id1 == id2 and uuid1 != uuid2, (id1, id2, uuid1, uuid2)
            else:
                assert id1 != id2, id1
            assert len(changes) == 13 and {c["source"]["server_id"] for c in changes} == {id1}
            assert_sink_matches(first, db, ["t"], replay(changes))
            src = committed_source(kind, broker)
            assert (src["flavor"], int(src["server_id"]), src.get("server_uuid") or "") == \
                (first.flavor, id1, uuid1), src
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
            theirs, _, ours = errors[0].partition("this session's server is")
            assert f"is on {first.flavor} server_id {id1}" in theirs and uuid1 in theirs, errors[0]
            assert ours.startswith(f" {second.flavor} server_id {id2}") and uuid2 in ours, errors[0]
            assert "Traceback" not in d2.stderr
            assert broker_state(kind, broker) == before, "the refused daemon changed the broker"

            second.sql(f"DELETE FROM `{db}`.t")  # the daemon starts at the binlog's end: the table is empty there
            d2 = DaemonProcess({**settings(second, work2), **OWN[kind]})
            try:
                d2.wait_streaming(timeout=60)
                for i in range(5):
                    second.sql(f"INSERT INTO `{db}`.t VALUES ({200 + i}, 'two {i}')")
                second.sql(f"UPDATE `{db}`.t SET v = 'two changed' WHERE id = 201")
                wait_caught_up(second, work2 / "checkpoint.json", timeout=60, daemon=d2)
                assert d2.terminate() == 0, d2.stderr
            finally:
                if d2.running:
                    d2.kill()
            own = [c for c in read_own(kind, broker.url) if c["schema"] == db]
            assert {c["source"]["server_id"] for c in own} == {id2}
            assert_sink_matches(second, db, ["t"], replay(own))
            assert [c for c in read_bus(kind, broker.url) if c["schema"] == db] == changes
    finally:
        for s in (first, second):
            s.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_a_local_checkpoint_of_another_source_is_refused(two_servers, tmp_path):
    """The JSON-lines sink keeps its position in the local checkpoint file: a daemon of the other server given
    the first one's work directory exits 8 with one line naming both servers (the schema history beside the
    checkpoint says whose it is), and every file there is byte for byte as it was."""
    first, second = two_servers
    db = f"loc_{uuid.uuid4().hex[:10]}"
    for s in (first, second):
        s.sql(f"CREATE DATABASE `{db}`")
        s.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    try:
        def settings(server):
            return base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db})

        d = DaemonProcess(settings(first))
        try:
            d.wait_streaming(timeout=60)
            for i in range(5):
                first.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'one {i}')")
            wait_caught_up(first, tmp_path / "checkpoint.json", timeout=60, daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        assert_sink_matches(first, db, ["t"], replay(read_changes(tmp_path / "sink"), schemas=[db]))
        before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        second.sql(f"INSERT INTO `{db}`.t VALUES (100, 'two')")
        d2 = DaemonProcess(settings(second))
        try:
            rc = d2.wait(60)
        finally:
            if d2.running:
                d2.kill()
        assert rc == 8, d2.stderr
        errors = [line for line in d2.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, d2.stderr
        # the local checkpoint's source is the schema history's (beside it) to check
        assert "schema history" in errors[0] and "this session's source" in errors[0], errors[0]
        (id1, uuid1), (id2, uuid2) = identity(first), identity(second)
        theirs, _, ours = errors[0].partition("this session's source")
        assert (uuid1 or f"server_id {id1}") in theirs, errors[0]
        assert (uuid2 or f"server_id {id2}") in ours, errors[0]
        after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert after == before, sorted(set(after) ^ set(before)) or "a file changed"
    finally:
        for s in (first, second):
            s.sql(f"DROP DATABASE IF EXISTS `{db}`")


@pytest.fixture(scope="module")
def mysql_pair():
    """A MySQL 9.7 primary (server_id 1, binlog db1-bin) and its GTID replica (server_id 2, db2-bin), started;
    removed after. Skipped with the reason when 9.7 cannot be fetched."""
    from tests.support.replication import Pair

    try:
        bins = servers.binaries(servers.MYSQL)
    except servers.Unavailable as exc:
        pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
    with Pair(bins) as pair:
        yield pair


@pytest.mark.parametrize("kind", ALL)
def test_a_replica_of_the_same_stream_takes_the_brokers_position(kind, mysql_pair, tmp_path):
    """Not another source: a MySQL 9.7 replica (server_id 2, its own UUID and binlog names) of the server whose
    position the broker holds has that position's GTIDs, so a daemon pointed at it resumes from the broker's
    checkpoint by GTID: it starts (no exit 8), and every transaction reaches the broker once (the replay,
    strict, equals the primary's SELECT)."""
    require(kind)
    from tests.support.replication import wait_gtids

    pair, db = mysql_pair, f"same_{uuid.uuid4().hex[:10]}"
    with KINDS[kind]() as broker:
        primary, replica = pair.primary, pair.replica
        primary.sql(f"CREATE DATABASE `{db}`")
        primary.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
        pair.wait_replica()

        def settings(server, work):
            o = base_overrides(server, work, **{"source.start": "current", "filters.include_schemas": db})
            o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
            return o

        d = DaemonProcess(settings(primary, tmp_path / "one"))
        try:
            d.wait_streaming(timeout=60)
            for i in range(10):
                primary.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'one {i}')")
            wait_gtids(primary, tmp_path / "one" / "checkpoint.json", daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        for i in range(10, 15):  # while no daemon runs: the replica's daemon must send these
            primary.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'while stopped')")
        primary.sql(f"UPDATE `{db}`.t SET v = 'changed' WHERE id < 3")
        pair.wait_replica()
        d = DaemonProcess(settings(replica, tmp_path / "two"))
        try:
            d.wait_streaming(timeout=60)
            wait_gtids(replica, tmp_path / "two" / "checkpoint.json", daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        assert "another source" not in d.stderr, d.stderr
        changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
        assert len(changes) == 18, len(changes)
        files = [c["source"]["file"].split(".")[0] for c in changes]
        assert files == ["db1-bin"] * 10 + ["db2-bin"] * 8, files  # the rest from the replica's binlog
        assert_sink_matches(primary, db, ["t"], replay(changes))
