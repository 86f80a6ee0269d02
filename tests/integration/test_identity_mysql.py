"""Compressed MySQL transactions crossed with every sink: ``source.id`` on MySQL 9.7 with
binlog_transaction_compression=ON, whose transactions are each one TRANSACTION_PAYLOAD event holding several rows
events.

The load, each in one transaction: inserts into two tables; updates of several rows of one and deletes of several
rows of the other; a multi-row ``INSERT … SELECT``; once, a big ``INSERT … SELECT`` (3,600 rows in about 50 rows
events of one payload). Into jsonl, Redis, NATS and PostgreSQL, with one SIGKILL in the middle of the load (right
after the big one committed): of the daemon, then a restart; or of the broker, then its restart. Read back
independently of binlogd's sinks, it is proved that:

- every ``source.id`` is delivered once;
- the changes of one transaction (one GTID) share ``file:pos``, which is where the server's SHOW BINLOG EVENTS has
  a ``Transaction_payload`` event; their rows events differ in the inner offset (not 0), and each rows event's
  ``row`` counts 0, 1, 2, …;
- the replay equals each table's SELECT, and the daemon catches up with the server (NATS moves on past the first
  transaction: every transaction is in the stream) and stops within 10 s of a SIGTERM;
- the number of changes per transaction is the number of rows the client's statements changed, and the whole
  count per table and kind is what ``mysqlbinlog -v`` (MySQL's own decoder) prints for the server's binlog.

A broker crash in the middle of one 20,000-row compressed transaction (NATS: part of it stored, a commit cut
short): every id once, and the daemon notices the lost connection at once (no 60 s wait for a commit).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import servers
from tests.support.brokers import broker_for, require
from tests.support.busread import read_bus
from tests.support.daemon import (
    DaemonProcess,
    assert_sink_matches,
    base_overrides,
    read_changes,
    read_checkpoint,
    replay,
    wait_caught_up,
)

pytestmark = pytest.mark.server
SINKS = ["jsonl", "redis", "nats", "postgres"]
ID = re.compile(r"^(?P<file>.+):(?P<pos>\d+):(?P<inner>\d+):(?P<row>\d+)$")


@pytest.fixture(scope="module")
def compressed():
    """MySQL 9.7 with binlog_transaction_compression=ON (MySQL's defaults otherwise, GTIDs on); skipped with
    the reason when it cannot be fetched."""
    with servers.running_mysql(servers.MYSQL_COMPRESSED) as server:
        yield server




class Load:
    """A thread of rounds of three transactions on ``a`` and ``b`` until stopped; ``counts`` maps each
    transaction's GTID number to the rows its statements changed (the client's row counts)."""

    def __init__(self, server: LocalServer, db: str):
        self.server, self.db = server, db
        self.counts: dict[int, int] = {}
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.want_big, self.big_done = threading.Event(), threading.Event()  # one big INSERT ... SELECT
        self._thread = threading.Thread(target=self._run, daemon=True, name="compressed-load")

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self.rounds

    def _txn(self, conn, statements: list[str]) -> None:
        changed = 0
        with conn.cursor() as cur:
            for s in statements:
                changed += cur.execute(s)
        conn.commit()
        with conn.cursor() as cur:  # only this thread writes meanwhile: the set's last number is the commit's
            cur.execute("SELECT @@global.gtid_executed")
            self.counts[gtid_number(cur.fetchone()[0])] = changed

    def _run(self) -> None:
        conn = self.server.connect(database=self.db, autocommit=False)
        try:
            k = 0
            while not self._stop.is_set():
                self.round(conn, k)
                k += 1
                self.rounds = k
                self._stop.wait(0.02)
        except BaseException as exc:  # noqa: BLE001 (raised by stop())
            self.error = exc
        finally:
            conn.close()

    def round(self, conn, k: int) -> None:
        base = 1000 * (k + 1)
        a_rows = ", ".join(f"({base + i}, 'a{k}-{i}-é', {i})" for i in range(10))
        b_rows = ", ".join(f"({base + i}, {base + i}, 'b{k}-{i}')" for i in range(5))
        self._txn(conn, [f"INSERT INTO a VALUES {a_rows}", f"INSERT INTO b VALUES {b_rows}"])
        self._txn(conn, [f"UPDATE a SET n = n + 100, v = CONCAT(v, '+') WHERE id BETWEEN {base} AND {base + 5}",
                         f"DELETE FROM b WHERE id BETWEEN {base} AND {base + 2}"])
        self._txn(conn, [f"INSERT INTO b (id, a_id, w) SELECT id + 500, id, CONCAT('sel ', v) FROM a "
                         f"WHERE id BETWEEN {base} AND {base + 9}"])
        if self.want_big.is_set() and not self.big_done.is_set():  # a's first 60 rows squared: 3,600 rows
            self._txn(conn, ["INSERT INTO c SELECT x.id * 100000 + y.id, REPEAT(x.v, 8) FROM a AS x JOIN a AS y "
                             "WHERE x.id < 7000 AND y.id < 7000"])
            self.big_done.set()


def gtid_number(gtids: str) -> int:
    """The last transaction number of a one-UUID GTID set ("uuid:1-57" -> 57) or of one GTID ("uuid:57")."""
    return int(re.split(r"[:-]", gtids.strip())[-1])


def payload_positions(server: LocalServer) -> set[tuple[str, int]]:
    """(file, pos) of every Transaction_payload event in the server's binlog (SHOW BINLOG EVENTS)."""
    out = set()
    for (name, *_rest) in server.sql("SHOW BINARY LOGS"):
        for row in server.sql(f"SHOW BINLOG EVENTS IN '{name}'"):
            if row[2] == "Transaction_payload":
                out.add((row[0], int(row[1])))
    return out


def mysqlbinlog_counts(server: LocalServer, db: str) -> Counter | None:
    """(op, table) -> rows, as MySQL's own ``mysqlbinlog --base64-output=DECODE-ROWS -v`` prints the server's
    binlog files (it decodes the payloads itself); None when the fetched client has no mysqlbinlog."""
    tool = servers.MYSQL_97.root / "usr/bin/mysqlbinlog"
    if not tool.exists():
        return None
    server.sql("FLUSH BINARY LOGS")  # the files read are closed ones
    names = [r[0] for r in server.sql("SHOW BINARY LOGS")][:-1]
    files = [str(server.binlog_dir / n) for n in names]
    out = subprocess.run([*server.binaries.command(tool), "--base64-output=DECODE-ROWS", "-v", *files],
                         capture_output=True, text=True, timeout=60, errors="replace")
    assert out.returncode == 0, out.stderr[-2000:]
    counts: Counter = Counter()
    rx = re.compile(rf"^### (INSERT INTO|UPDATE|DELETE FROM) `{re.escape(db)}`\.`(\w+)`$")
    for line in out.stdout.splitlines():
        m = rx.match(line)
        if m:
            counts[({"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}[m.group(1)],
                    m.group(2))] += 1
    return counts


def check_identities(changes: list[dict], payloads: set[tuple[str, int]], load: Load) -> None:
    ids = Counter(c["source"]["id"] for c in changes)
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"{len(twice)} change ids delivered twice, e.g. {twice[:5]}"
    by_txn: dict[str, list] = defaultdict(list)
    for c in changes:
        m = ID.match(c["source"]["id"])
        assert m, c["source"]
        assert (m["file"], int(m["pos"]), int(m["row"])) == (c["source"]["file"], c["source"]["pos"],
                                                             c["source"]["row"]), c["source"]
        by_txn[c["source"]["gtid"]].append((m["file"], int(m["pos"]), int(m["inner"]), int(m["row"])))
    sizes = {}
    for gtid, rows in by_txn.items():
        heads = {(f, p) for f, p, _, _ in rows}
        assert len(heads) == 1, f"transaction {gtid}: changes at several positions {sorted(heads)}"
        assert heads <= payloads, f"transaction {gtid}: {heads} is not a Transaction_payload event's position"
        events: dict[int, list[int]] = defaultdict(list)
        for _, _, inner, row in rows:
            events[inner].append(row)
        assert 0 not in events, f"transaction {gtid}: inner offset 0 inside a payload"
        for inner, numbers in events.items():
            assert sorted(numbers) == list(range(len(numbers))), (gtid, inner, sorted(numbers))
        sizes[gtid_number(gtid)] = len(rows)
    assert sizes == load.counts, "changes per transaction (by GTID) != rows the client's statements changed"
    events = sorted(len({inner for _, _, inner, _ in rows}) for rows in by_txn.values())
    several = sum(1 for n in events if n >= 2)
    assert several >= len(by_txn) // 3, f"only {several} of {len(by_txn)} transactions had several rows events"
    assert events[-1] >= 20, f"the big INSERT ... SELECT had only {events[-1]} rows events"


def settings(server, tmp_path, db: str, kind: str, broker) -> dict:
    o = base_overrides(server, tmp_path, **{"source.start": "current", "filters.include_schemas": db,
                                            "source.tls.mode": "disabled"})
    if broker is not None:
        o.update({"sink.kind": kind, f"sink.{kind}.url": broker.url})
    return o


CASES = [(kind, "daemon") for kind in SINKS] + [(kind, "broker") for kind in SINKS[1:]]


@pytest.mark.parametrize("kind,fault", CASES)
def test_compressed_transactions_ids_unique_through_a_kill(kind, fault, compressed, tmp_path):
    """Every change of compressed multi-event transactions reaches the sink once, with ids that share the
    payload's file:pos and differ in the inner offset, through a SIGKILL mid-load (of the daemon, then a restart;
    or of the broker, then its restart, the daemon running on); replay == SELECT; per-transaction counts == the
    client's row counts; totals == mysqlbinlog's."""
    server, db = compressed, f"cid_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
    server.sql(f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, a_id INT, w VARCHAR(60))")
    server.sql(f"CREATE TABLE `{db}`.c (id BIGINT PRIMARY KEY, pad VARCHAR(400))")
    cp = tmp_path / "checkpoint.json"
    try:
        with broker_for(kind) as broker:
            o = settings(server, tmp_path, db, kind, broker)
            d = DaemonProcess(o)
            load = None
            try:
                d.wait_streaming(timeout=60)
                load = Load(server, db).start()
                start = read_checkpoint(cp)["position"]["pos"] if read_checkpoint(cp) else 0
                deadline = time.monotonic() + 30
                while load.rounds < 8 or (read_checkpoint(cp) or {}).get("position", {}).get("pos", 0) <= start:
                    assert time.monotonic() < deadline and d.running, f"no progress; stderr:\n{d.stderr}"
                    time.sleep(0.05)
                load.want_big.set()
                assert load.big_done.wait(30), "the big INSERT ... SELECT did not commit"
                if fault == "daemon":  # mid-load, likely while the big transaction is delivered: the load goes on
                    d.kill()
                    time.sleep(0.5)
                    d = DaemonProcess(o)
                    d.wait_streaming(timeout=60)
                else:
                    broker.kill()
                    time.sleep(0.5)
                    broker.start()
                rounds = load.rounds
                while load.rounds < rounds + 8:
                    assert d.running, d.stderr
                    time.sleep(0.05)
                load.stop()
                load_ = load
                load = None
                wait_caught_up(server, cp, timeout=60, daemon=d, fail_on=None if fault == "broker" else r" ERROR ")
                if fault == "broker":
                    assert d.count(r"ERROR .*unreachable|ERROR .*lost"), d.stderr  # it did see the crash
                t0 = time.monotonic()
                assert d.terminate() == 0, d.stderr
                assert time.monotonic() - t0 < 10, "SIGTERM took 10 s or more"
                assert "Traceback" not in d.stderr, d.stderr
            finally:
                if load is not None:
                    load.stop()
                if d.running:
                    d.kill()
            changes = read_changes(tmp_path / "sink") if broker is None else read_bus(kind, broker.url)
            changes = [c for c in changes if c["schema"] == db]
        check_identities(changes, payload_positions(server), load_)
        assert len({c["source"]["gtid"] for c in changes}) == len(load_.counts) == 3 * load_.rounds + 1
        assert_sink_matches(server, db, ["a", "b", "c"], replay(changes))
        decoded = mysqlbinlog_counts(server, db)
        if decoded is not None:
            ours = Counter((c["op"], c["table"]) for c in changes)
            assert ours == decoded, f"binlogd's changes {dict(ours)} != mysqlbinlog's rows {dict(decoded)}"
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def nats_messages(url: str) -> int:
    import asyncio

    import nats

    async def go():
        nc = await nats.connect(url)
        try:
            return (await nc.jetstream().stream_info("BINLOGD")).state.messages
        finally:
            await nc.close()

    return asyncio.run(go())


@pytest.mark.parametrize("kind", SINKS[1:])
def test_a_broker_crash_in_the_middle_of_a_big_compressed_transaction(kind, compressed, tmp_path):
    """One compressed transaction of 20,000 rows (hundreds of rows events in one payload), the broker SIGKILLed
    while it is delivered (NATS: once part of it is stored, a commit cut short that the next open finds) and
    started again, the daemon running on: every source.id once, 20,000 inserts, replay == SELECT."""
    require(kind)
    server, db = compressed, f"cbig_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.c (id BIGINT PRIMARY KEY, pad VARCHAR(400))")
    cp = tmp_path / "checkpoint.json"
    try:
        with broker_for(kind) as broker:
            d = DaemonProcess(settings(server, tmp_path, db, kind, broker))
            try:
                d.wait_streaming(timeout=60)
                server.sql(f"INSERT INTO `{db}`.c VALUES (0, 'first')")
                wait_caught_up(server, cp, timeout=60, daemon=d)
                base = nats_messages(broker.url) if kind == "nats" else 0
                conn = server.connect(database=db, autocommit=False)
                try:
                    with conn.cursor() as cur:
                        cur.execute("SET SESSION cte_max_recursion_depth = 30000")
                        cur.execute("INSERT INTO c WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s "
                                    "WHERE n < 20000) SELECT n, CONCAT(n, REPEAT('x', 150)) FROM s")
                    conn.commit()
                finally:
                    conn.close()
                if kind == "nats":  # part of the transaction stored, not its commit
                    deadline = time.monotonic() + 30
                    while nats_messages(broker.url) < base + 300:
                        assert time.monotonic() < deadline and d.running, d.stderr
                        time.sleep(0.002)
                broker.kill()
                time.sleep(0.3)
                broker.start()
                server.sql(f"UPDATE `{db}`.c SET pad = 'after' WHERE id < 5")
                # the lost connection is noticed at once, not after the sink's 60 s wait for a commit
                wait_caught_up(server, cp, timeout=30, daemon=d, fail_on=None)
                assert not d.count("no commit in"), d.stderr
                assert d.terminate() == 0, d.stderr
                assert "Traceback" not in d.stderr, d.stderr
            finally:
                if d.running:
                    d.kill()
            changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
        ids = Counter(c["source"]["id"] for c in changes)
        twice = [i for i, n in ids.items() if n > 1]
        assert not twice, f"{len(twice)} change ids twice, e.g. {twice[:5]}"
        assert sum(1 for c in changes if c["op"] == "insert") == 20001
        assert len({ID.match(c["source"]["id"])["inner"] for c in changes if c["op"] == "insert"}) > 100
        assert_sink_matches(server, db, ["c"], replay(changes))
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")
