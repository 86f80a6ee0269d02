"""A broker that loses its last transactions while the daemon runs: the daemon sends them again.

- Redis restarted from an older AOF: the AOF directory is copied while the daemon runs, more is written and
  delivered, Redis is stopped, the copy put back and Redis started again. The daemon's session fails, it
  reopens the sink, reads the older checkpoint and sends again from there.
- PostgreSQL with rows deleted behind the daemon: the changes table's rows after the seq it held at one time are
  deleted and the checkpoint row is set back to the checkpoint it held then (saved at that time), in one
  transaction that also terminates the daemon's connections (pg_terminate_backend), so the daemon reopens.
- NATS restarted from an older copy of JetStream's store (taken with the server stopped): the stream holds
  neither the later changes nor the later checkpoint messages (nor their Nats-Msg-Ids for the duplicate window).

Each on MariaDB (resumed by file and position) and on MySQL 9.7 with compressed transactions (resumed by GTID,
each transaction one payload of several rows events): once with the daemon idle while the broker loses its tail,
once twice under a write load (the loss while the daemon is delivering). In both: the WARNING "... holds less than was delivered to it ..." appears once per gap,
binlogd_sink_gaps_total (scraped from /metrics) counts the gaps, the broker's committed position reaches the server's
binlog end, and at the end the broker holds every change exactly once (read back with the broker's own client:
no ``source.id`` twice) and the replay equals the table's SELECT.

Also on Redis: an AOF copied while a big transaction (past the staging threshold) was being staged, whose
undecided staging the daemon's open deletes before it sends the transaction again; and a broker emptied
(checkpoint included): the warning that it holds no checkpoint, counted as a gap, and what follows once.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
import uuid
from collections import Counter

import psycopg
import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import servers
from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus, redis_checkpoint
from tests.support.daemon import (
    DaemonProcess,
    _file_key,
    assert_sink_matches,
    base_overrides,
    master_status,
    metric,
    parse_metrics,
    replay,
    scrape,
    wait_caught_up,
)

pytestmark = pytest.mark.server
GAP = "holds less than was delivered to it"


@pytest.fixture(scope="module")
def server():
    """A MariaDB server of the machine's installation (FULL row metadata), started; removed after."""
    s = LocalServer(extra_args=["--binlog-row-metadata=FULL"])
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


@pytest.fixture(scope="module")
def mysql_compressed():
    """MySQL 9.7 with binlog_transaction_compression=ON (resumed by GTID; each transaction one payload),
    started; removed after. Skipped with the reason when it cannot be fetched."""
    with servers.running_mysql(servers.MYSQL_COMPRESSED) as server:
        yield server


@pytest.fixture(params=["mariadb", "mysql-compressed"])
def source(request, server):
    """The MariaDB server, or the compressed MySQL 9.7 one."""
    return server if request.param == "mariadb" else request.getfixturevalue("mysql_compressed")


def write(server: LocalServer, db: str, first: int, count: int) -> None:
    """``count`` transactions: each inserts two rows, updates an earlier one and every third deletes one."""
    conn = server.connect(database=db, autocommit=False)
    try:
        with conn.cursor() as cur:
            for k in range(first, first + count):
                cur.execute("INSERT INTO t VALUES (%s, %s, 0), (%s, %s, 0)", (2 * k, f"v{k}", 2 * k + 1, f"w{k}"))
                cur.execute("UPDATE t SET n = n + 1, v = CONCAT(v, '+') WHERE id = %s", (2 * k - 3,))
                if k % 3 == 0:
                    cur.execute("DELETE FROM t WHERE id = %s", (2 * k - 4,))
                conn.commit()
    finally:
        conn.close()


def committed(kind: str, broker) -> dict | None:
    """The checkpoint the broker holds, read with its own client (NATS: the newest message on the stream's
    checkpoint subject)."""
    if kind == "redis":
        return redis_checkpoint(broker.url)
    if kind == "nats":
        return nats_checkpoint(broker.url)
    with psycopg.connect(broker.url) as conn:
        row = conn.execute("SELECT checkpoint::text FROM binlogd_changes_checkpoint").fetchone()
    return json.loads(row[0]) if row else None


def nats_checkpoint(url: str, stream: str = "BINLOGD") -> dict | None:
    import nats
    from nats.js.errors import NotFoundError

    async def go():
        nc = await nats.connect(url)
        try:
            msg = await nc.jetstream().get_last_msg(stream, f"_binlogd.checkpoint.{stream}")
            return json.loads(msg.data)
        except NotFoundError:
            return None
        finally:
            await nc.close()

    return asyncio.run(go())


def wait_broker_caught_up(kind: str, broker, server, d: DaemonProcess, timeout: float = 40.0) -> dict:
    """Until the broker's own checkpoint is at or past the server's binlog end."""
    file, pos = master_status(server)
    deadline = time.monotonic() + timeout
    while True:
        try:
            cp = committed(kind, broker)
        except Exception:  # noqa: BLE001 (a broker coming back)
            cp = None
        if cp and (_file_key(cp["position"]["file"]), int(cp["position"]["pos"])) >= (_file_key(file), pos):
            return cp
        assert d.running, f"binlogd exited (rc={d.proc.returncode}); stderr:\n{d.stderr}"
        assert time.monotonic() < deadline, \
            f"the broker's checkpoint {cp and cp['position']} did not reach {file}:{pos}; stderr:\n{d.stderr}"
        time.sleep(0.1)


def aof_dir(broker):
    """Redis 7's AOF directory (appendonlydir: its manifest and files)."""
    found = [p for p in broker.dir.iterdir() if p.is_dir() and p.name.startswith("appendonly")]
    assert len(found) == 1, sorted(p.name for p in broker.dir.iterdir())
    return found[0]


def lose_redis(broker, saved) -> None:
    """Stop Redis, put the older AOF copy back, start it again (same port)."""
    broker.stop()
    live = aof_dir(broker)
    shutil.rmtree(live)
    shutil.copytree(saved, live)
    broker.start()


def copy_nats(broker, to) -> None:
    """A copy of JetStream's store taken with the NATS server stopped (it starts again at once)."""
    broker.stop()
    shutil.copytree(broker.dir / "js", to)
    broker.start()


def lose_nats(broker, saved) -> None:
    """Stop NATS, put the older store copy back, start it again (same port)."""
    broker.stop()
    shutil.rmtree(broker.dir / "js")
    shutil.copytree(saved, broker.dir / "js")
    broker.start()


def lose_postgres(broker, saved_seq: int, saved_cp: str) -> int:
    """In one transaction: delete the changes after ``saved_seq``, set the checkpoint row back to ``saved_cp``,
    and terminate binlogd's connections (the lock keeps its next open waiting until the commit). Returns how
    many rows were deleted."""
    out = broker.psql(
        "BEGIN; LOCK TABLE binlogd_changes, binlogd_changes_checkpoint IN ACCESS EXCLUSIVE MODE; "
        f"WITH gone AS (DELETE FROM binlogd_changes WHERE seq > {saved_seq} RETURNING 1) "
        "SELECT count(*) FROM gone; "
        f"UPDATE binlogd_changes_checkpoint SET checkpoint = '{saved_cp.replace(chr(39), chr(39) * 2)}'::jsonb; "
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        f"WHERE usename = '{broker.user}' AND pid <> pg_backend_pid(); COMMIT;", database=broker.database)
    return int(out.split()[0])


@pytest.mark.parametrize("kind", ["redis", "postgres", "nats"])
def test_a_broker_that_lost_its_last_transactions_is_sent_them_again(kind, source, tmp_path):
    """After the broker lost what was delivered after a point (an older AOF; rows and checkpoint set back), the
    running daemon re-sends from the broker's checkpoint: one gap warning, gaps_total 1, every change once,
    replay == SELECT."""
    require(kind)
    server = source
    db = f"gap_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(200), n INT)")
    try:
        with KINDS[kind]() as broker:
            o = base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
            o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
            d = DaemonProcess(o)
            try:
                d.wait_streaming(timeout=60)
                port = d.metrics_port()
                write(server, db, 1, 20)
                wait_caught_up(server, tmp_path / "checkpoint.json", timeout=40, daemon=d)
                before = wait_broker_caught_up(kind, broker, server, d)
                held = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
                if kind == "redis":
                    saved = tmp_path / "aof-copy"
                    shutil.copytree(aof_dir(broker), saved)   # while the daemon runs
                elif kind == "nats":
                    saved = tmp_path / "js-copy"
                    copy_nats(broker, saved)
                else:
                    saved_seq = max(c["_id"] for c in held)
                    saved_cp = broker.psql("SELECT checkpoint::text FROM binlogd_changes_checkpoint",
                                           database=broker.database).strip()
                    assert json.loads(saved_cp)["position"] == before["position"]
                write(server, db, 21, 20)
                after = wait_broker_caught_up(kind, broker, server, d)
                assert after["position"] != before["position"]
                assert len([c for c in read_bus(kind, broker.url) if c["schema"] == db]) > len(held)
                assert d.count(GAP) == 0, d.stderr

                if kind in ("redis", "nats"):
                    (lose_redis if kind == "redis" else lose_nats)(broker, saved)
                    assert committed(kind, broker)["position"] == before["position"], "the older copy is not back"
                    assert len([c for c in read_bus(kind, broker.url) if c["schema"] == db]) == len(held)
                else:
                    assert lose_postgres(broker, saved_seq, saved_cp) > 0
                write(server, db, 41, 10)  # the daemon finds its connection gone at the latest here
                d.wait_for_line(GAP, timeout=40)
                wait_broker_caught_up(kind, broker, server, d)
                write(server, db, 51, 5)
                wait_broker_caught_up(kind, broker, server, d)
                gaps = metric(parse_metrics(scrape(port)[1]), "binlogd_sink_gaps_total")
                assert d.terminate() == 0, d.stderr
            finally:
                if d.running:
                    d.kill()
            changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
        assert "Traceback" not in d.stderr, d.stderr
        warnings = [line for line in d.stderr.splitlines() if GAP in line]
        assert len(warnings) == 1 and " WARNING " in warnings[0], d.stderr
        assert before["position"]["file"] in warnings[0] and str(before["position"]["pos"]) in warnings[0], \
            warnings[0]
        assert gaps == 1, f"binlogd_sink_gaps_total is {gaps}"
        ids = Counter(c["source"]["id"] for c in changes)
        twice = [i for i, n in ids.items() if n > 1]
        assert not twice, f"{len(twice)} changes held twice, e.g. {twice[:5]}"
        assert_sink_matches(server, db, ["t"], replay(changes))
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


class Writer:
    """A thread of :func:`write` transactions, one at a time with a short pause, until stopped."""

    def __init__(self, server: LocalServer, db: str, first: int):
        self.server, self.db, self.next = server, db, first
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gap-writer")
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                write(self.server, self.db, self.next, 1)
                self.next += 1
                self._stop.wait(0.01)
        except BaseException as exc:  # noqa: BLE001 (raised by stop())
            self.error = exc

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.next


def saved_state(kind: str, broker, tmp_path, n: int):
    """What the broker holds now, kept to be put back by :func:`lose`, and the checkpoint it held at that time
    or later (the broker's own checkpoint read after the copy: never behind the copy's)."""
    if kind == "redis":
        copy = tmp_path / f"aof-copy-{n}"
        shutil.copytree(aof_dir(broker), copy)  # while the daemon delivers: a prefix of the AOF
        return copy, committed(kind, broker)
    if kind == "nats":
        copy = tmp_path / f"js-copy-{n}"
        copy_nats(broker, copy)
        return copy, committed(kind, broker)
    seq, cp = broker.psql("SELECT (SELECT coalesce(max(seq), 0) FROM binlogd_changes) || ' ' || checkpoint::text "
                          "FROM binlogd_changes_checkpoint", database=broker.database).strip().split(" ", 1)
    return (int(seq), cp), json.loads(cp)


def lose(kind: str, broker, saved) -> None:
    if kind == "redis":
        lose_redis(broker, saved)
    elif kind == "nats":
        lose_nats(broker, saved)
    else:
        lose_postgres(broker, *saved)


def position(cp: dict) -> tuple:
    return _file_key(cp["position"]["file"]), int(cp["position"]["pos"])


@pytest.mark.parametrize("kind", ["redis", "postgres", "nats"])
def test_a_broker_losing_its_tail_twice_under_a_write_load(kind, source, tmp_path):
    """A write load runs throughout; twice the broker is set back to what it held a moment before (after it
    committed more): two gap warnings, binlogd_sink_gaps_total 2, every change once, replay == SELECT."""
    require(kind)
    server = source
    db = f"gap2_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(200), n INT)")
    writer = None
    try:
        with KINDS[kind]() as broker:
            o = base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
            o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
            d = DaemonProcess(o)
            try:
                d.wait_streaming(timeout=60)
                port = d.metrics_port()
                writer = Writer(server, db, 1)
                for n in (1, 2):
                    wait_broker_caught_up(kind, broker, server, d)  # (the load goes on meanwhile)
                    saved, at = saved_state(kind, broker, tmp_path, n)
                    deadline = time.monotonic() + 30
                    while position(committed(kind, broker)) <= position(at):  # more committed since
                        assert time.monotonic() < deadline and d.running, d.stderr
                        time.sleep(0.05)
                    lose(kind, broker, saved)
                    lost_at = writer.next
                    deadline = time.monotonic() + 40
                    while d.count(GAP) < n or writer.next < lost_at + 30:  # and 30 more written since the loss
                        assert time.monotonic() < deadline and d.running, f"no gap warning #{n}:\n{d.stderr}"
                        time.sleep(0.05)
                writer.stop()
                writer = None
                wait_broker_caught_up(kind, broker, server, d)
                gaps = metric(parse_metrics(scrape(port)[1]), "binlogd_sink_gaps_total")
                assert d.terminate() == 0, d.stderr
            finally:
                if writer is not None:
                    writer.stop()
                if d.running:
                    d.kill()
            changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
        assert "Traceback" not in d.stderr, d.stderr
        warnings = [line for line in d.stderr.splitlines() if GAP in line]
        assert len(warnings) == 2 and all(" WARNING " in w for w in warnings), d.stderr
        assert gaps == 2, f"binlogd_sink_gaps_total is {gaps}"
        ids = Counter(c["source"]["id"] for c in changes)
        twice = [i for i, n in ids.items() if n > 1]
        assert not twice, f"{len(twice)} changes held twice, e.g. {twice[:5]}"
        assert_sink_matches(server, db, ["t"], replay(changes))
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


STAGING = "binlogd:checkpoint:binlogd:staging"


def test_redis_restarted_from_an_aof_taken_while_a_big_transaction_was_staged(server, tmp_path):
    """A big transaction (about 40 MB, past the Redis sink's staging threshold) is being staged when the AOF is
    copied; it commits, more follows, and Redis comes back from the copy: its undecided staging is deleted at
    open, the checkpoint is the one before the big transaction, one gap warning, and the big transaction is
    sent again: every change once, no staging key left, replay == SELECT."""
    require("redis")
    import redis

    db = f"gapbig_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v MEDIUMTEXT, n INT)")
    try:
        with KINDS["redis"]() as broker:
            o = base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
            o.update({"sink.kind": "redis", "sink.redis.url": broker.url})
            d = DaemonProcess(o)
            r = redis.Redis.from_url(broker.url)
            saved = tmp_path / "aof-copy"
            try:
                d.wait_streaming(timeout=60)
                port = d.metrics_port()
                write(server, db, 1, 10)
                before = wait_broker_caught_up("redis", broker, server, d)
                failed = []

                def insert_big():
                    try:
                        server.sql("INSERT INTO t SELECT 100000 + seq, REPEAT(CHAR(65 + seq % 26), 4000), seq "
                                   "FROM seq_1_to_10000", database=db)
                    except BaseException as exc:  # noqa: BLE001 (checked below)
                        failed.append(exc)

                big = threading.Thread(target=insert_big, daemon=True)
                big.start()
                deadline = time.monotonic() + 40
                while not r.exists(STAGING):
                    assert not failed, failed
                    assert time.monotonic() < deadline and d.running, f"no staging seen; stderr:\n{d.stderr}"
                    time.sleep(0.005)
                shutil.copytree(aof_dir(broker), saved)  # with part of the big transaction staged
                assert any(STAGING.encode() in f.read_bytes() for f in saved.iterdir()), "no staging in the copy"
                big.join(60)
                assert not failed, failed
                write(server, db, 11, 10)
                after = wait_broker_caught_up("redis", broker, server, d, timeout=60)
                assert position(after) > position(before)
                r.close()
                lose_redis(broker, saved)
                r = redis.Redis.from_url(broker.url)
                assert committed("redis", broker)["position"] == before["position"], "the older AOF is not back"
                write(server, db, 21, 5)
                d.wait_for_line(GAP, timeout=60)
                wait_broker_caught_up("redis", broker, server, d, timeout=60)
                assert not r.exists(STAGING), "staging left behind"
                gaps = metric(parse_metrics(scrape(port)[1]), "binlogd_sink_gaps_total")
                assert d.terminate() == 0, d.stderr
            finally:
                r.close()
                if d.running:
                    d.kill()
            changes = [c for c in read_bus("redis", broker.url) if c["schema"] == db]
        assert "Traceback" not in d.stderr, d.stderr
        assert d.count(GAP) == 1 and gaps == 1, (gaps, d.stderr)
        ids = Counter(c["source"]["id"] for c in changes)
        twice = [i for i, n in ids.items() if n > 1]
        assert not twice, f"{len(twice)} changes held twice, e.g. {twice[:5]}"
        assert sum(1 for c in changes if c["after"] and c["after"]["id"] >= 100000) == 10000
        assert_sink_matches(server, db, ["t"], replay(changes))
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


NO_CHECKPOINT = "holds no checkpoint, though binlogd had delivered"


def wipe(kind: str, broker) -> None:
    """Everything binlogd wrote is gone and binlogd's connections are closed (a failover to an empty replica)."""
    if kind == "redis":
        import redis

        r = redis.Redis.from_url(broker.url)
        try:
            r.flushall()
            r.client_kill_filter(_type="normal", skipme=True)
        finally:
            r.close()
    else:
        broker.psql("BEGIN; LOCK TABLE binlogd_changes, binlogd_changes_checkpoint IN ACCESS EXCLUSIVE MODE; "
                    "TRUNCATE binlogd_changes, binlogd_changes_checkpoint; "
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    f"WHERE usename = '{broker.user}' AND pid <> pg_backend_pid(); COMMIT;", database=broker.database)


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_a_broker_emptied_behind_the_daemon(kind, server, tmp_path):
    """A broker that lost everything, checkpoint included: one warning that it holds no checkpoint, counted in
    binlogd_sink_gaps_total; the daemon goes on from what it had delivered, and what is written after reaches
    the broker once (a table written only after the loss replays to its SELECT)."""
    require(kind)
    db = f"wipe_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(200), n INT)")
    server.sql(f"CREATE TABLE `{db}`.later (id INT PRIMARY KEY, v VARCHAR(200), n INT)")
    try:
        with KINDS[kind]() as broker:
            o = base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db})
            o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
            d = DaemonProcess(o)
            try:
                d.wait_streaming(timeout=60)
                port = d.metrics_port()
                write(server, db, 1, 10)
                wait_broker_caught_up(kind, broker, server, d)
                wipe(kind, broker)
                assert committed(kind, broker) is None
                conn = server.connect(database=db)
                try:
                    with conn.cursor() as cur:
                        for i in range(10):
                            cur.execute("INSERT INTO later VALUES (%s, %s, 0)", (i, f"later {i}"))
                        cur.execute("UPDATE later SET n = 5 WHERE id < 4")
                        cur.execute("DELETE FROM later WHERE id = 9")
                finally:
                    conn.close()
                d.wait_for_line(NO_CHECKPOINT, timeout=40)
                wait_broker_caught_up(kind, broker, server, d)
                gaps = metric(parse_metrics(scrape(port)[1]), "binlogd_sink_gaps_total")
                assert d.terminate() == 0, d.stderr
            finally:
                if d.running:
                    d.kill()
            changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
        assert "Traceback" not in d.stderr, d.stderr
        assert d.count(NO_CHECKPOINT) == 1 and d.count(GAP) == 0 and gaps == 1, (gaps, d.stderr)
        ids = Counter(c["source"]["id"] for c in changes)
        assert not [i for i, n in ids.items() if n > 1], "a change held twice"
        assert_sink_matches(server, db, ["later"], replay([c for c in changes if c["table"] == "later"]))
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
