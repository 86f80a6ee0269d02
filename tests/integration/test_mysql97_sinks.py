"""Each bus sink (Redis Streams, NATS JetStream, PostgreSQL; brokers from tests/support/brokers.py) streaming
MySQL 9.7, plain and with binlog_transaction_compression=ON (every transaction one TRANSACTION_PAYLOAD event):
multi-statement transactions of inserts, updates and deletes, read back from the broker and replayed, equal the
server's table, every change once.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import servers
from tests.support.brokers import KINDS, require
from tests.support.busread import read_bus
from tests.support.daemon import DaemonProcess, assert_sink_matches, base_overrides, replay, wait_caught_up

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=[servers.MYSQL, servers.MYSQL_COMPRESSED])
def mysql(request):
    try:
        bins = servers.binaries(request.param)
    except servers.Unavailable as exc:
        pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
    server = LocalServer(binaries=bins, extra_args=["--binlog-row-metadata=FULL"])
    request.addfinalizer(server.cleanup)
    return server.start()


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_transactions_read_back_from_the_broker_equal_the_table(kind, mysql, tmp_path) -> None:
    require(kind)
    db = f"m97s_{uuid.uuid4().hex[:10]}"
    mysql.sql(f"CREATE DATABASE `{db}`")
    mysql.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
    with KINDS[kind]() as broker:
        o = base_overrides(mysql, tmp_path, **{"source.start": "current", "filters.include_schemas": db,
                                               "source.tls.mode": "disabled", "sink.kind": kind,
                                               f"sink.{kind}.url": broker.url})
        d = DaemonProcess(o)
        try:
            d.wait_streaming(timeout=60)
            conn = mysql.connect(database=db, autocommit=False)
            try:
                with conn.cursor() as cur:
                    for k in range(40):  # several rows events per transaction
                        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)",
                                        [(k * 10 + i, f"row {k} {i}", i) for i in range(5)])
                        cur.execute("UPDATE t SET n = n + 1 WHERE id DIV 10 = %s AND n < 3", (k,))
                        cur.execute("DELETE FROM t WHERE id = %s", (k * 10 + 4,))
                        conn.commit()
            finally:
                conn.close()
            wait_caught_up(mysql, tmp_path / "checkpoint.json", timeout=60, daemon=d)
            assert d.terminate() == 0, d.stderr
        finally:
            if d.running:
                d.kill()
        changes = [c for c in read_bus(kind, broker.url) if c["schema"] == db]
    assert Counter(c["op"] for c in changes) == {"insert": 200, "update": 120, "delete": 40}
    assert_sink_matches(mysql, db, ["t"], replay(changes))  # strict: a change twice or lost fails
