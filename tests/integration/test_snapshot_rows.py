"""What an initial snapshot's rows carry and how a table without a key is read, on each real server.

- the snapshot's last row carries ``source.snapshot: "last"`` (Debezium's), every other read ``true`` (binlogd
  format) or ``"true"`` (Debezium format), and every read's ``source.id`` is ``snapshot:<table>:<run>:<row>``;
- a table without a primary key bigger than the daemon may hold (about 150 MB of rows) is read with bounded
  memory (the daemon's peak RSS stays far below the table's size), every row once, equal to the table;
- the fast path's lines (the result set read off the wire, written as JSON lines in one call) are the bytes of
  the PyMySQL path's change dicts, every type, the last row included; the wire reader gives the transport back
  after a result, an error and a cancel.
"""

from __future__ import annotations

import re
import time
import uuid

import orjson
import pytest

from tests.support.daemon import DaemonProcess, base_overrides, read_changes, wait_caught_up
from tests.support.snapshots import reload_account

pytestmark = pytest.mark.server


def _db() -> str:
    return f"snr_{uuid.uuid4().hex[:10]}"


def _run_snapshot(server, tmp_path, db: str, **extra) -> DaemonProcess:
    o = base_overrides(server, tmp_path, snapshot__mode="initial", filters__include_schemas=db, **extra)
    d = DaemonProcess({**o, **reload_account(server)})
    try:
        d.wait_for_line(r"snapshot: done", timeout=120)
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=d)
    except BaseException:
        d.kill()
        raise
    return d


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_the_last_row_says_last(mariadb, tmp_path, fmt):
    server, db = mariadb, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v INT)")
    server.sql(f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, v INT)")
    server.sql(f"INSERT INTO `{db}`.a VALUES " + ", ".join(f"({i}, {i})" for i in range(25)))
    server.sql(f"INSERT INTO `{db}`.b VALUES " + ", ".join(f"({i}, {i})" for i in range(17)))
    try:
        d = _run_snapshot(server, tmp_path, db, snapshot__chunk_rows=4, sink__format=fmt)
        assert d.terminate() == 0, d.stderr
        lines = read_changes(tmp_path / "sink")
        reads = [c for c in lines if c.get("op") in ("read", "r")]
        assert len(reads) == 42
        flags = [c["source"]["snapshot"] for c in reads]
        want = [True] * 41 + ["last"] if fmt == "binlogd" else ["true"] * 41 + ["last"]
        assert flags == want
        ids = [c["source"]["id"] for c in reads]
        assert ids == [f"snapshot:0:0:{i}" for i in range(25)] + [f"snapshot:1:0:{i}" for i in range(17)]
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return int(re.search(r"VmHWM:\s+(\d+) kB", fh.read()).group(1)) / 1024


def test_a_keyless_table_is_read_with_bounded_memory(mariadb, tmp_path):
    server, db = mariadb, _db()
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.logs (n INT, msg VARCHAR(300))")
    server.sql(f"INSERT INTO `{db}`.logs VALUES " + ", ".join(f"({i}, REPEAT('m', 290))" for i in range(1000)))
    for _ in range(9):  # 512,000 rows, about 150 MB of values
        server.sql(f"INSERT INTO `{db}`.logs SELECT n + (SELECT COUNT(*) FROM `{db}`.logs), msg FROM `{db}`.logs")
    total = int(server.sql(f"SELECT COUNT(*) FROM `{db}`.logs")[0][0])
    try:
        began = time.monotonic()
        d = _run_snapshot(server, tmp_path, db, snapshot__chunk_rows=5000)
        peak = _peak_rss_mb(d.proc.pid)
        assert d.terminate() == 0, d.stderr
        print(f"\n{total} keyless rows in {time.monotonic() - began:.1f}s, the daemon's peak RSS {peak:.0f} MB")
        reads = [c for c in read_changes(tmp_path / "sink") if c["op"] == "read"]
        assert sorted(c["after"]["n"] for c in reads) == list(range(total))
        assert all(len(c["after"]["msg"]) == 290 for c in reads)
        assert peak < 150, f"peak RSS {peak:.0f} MB for a keyless table of ~150 MB: it was held in memory"
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _connect(server):
    from binlogd.daemon.replication import _aiomysql

    return _aiomysql.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                             ssl=None, connect_timeout=5)


def test_wire_lines_equal_the_pymysql_dict_path(mariadb_minimal):
    """The fast path (result set off the wire, values straight to JSON lines, the last row "last") gives the
    bytes the PyMySQL path gives: its converted values in change dicts, serialised by the sinks' dumps; the
    fallback dicts (``ChunkReader.changes``) serialise to the same bytes; every type of the many-type table."""
    import asyncio

    from binlogd.daemon.snapshot.tables import describe, raw_connection, read_chunk
    from binlogd.daemon.snapshot.wire import ChunkReader
    from binlogd.library.serialize import dumps
    from tests.integration.test_snapshot import TYPE_ROWS, TYPES

    server, db = mariadb_minimal, _db()
    server.sql(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    source = {"server_id": 1, "file": "b.000001", "pos": 4, "gtid": None, "snapshot": True}

    async def both():
        conn = await _connect(server)
        try:
            await raw_connection(conn)
            info = await describe(conn, db, "types")
            plain = list(info.changes(await read_chunk(conn, info, None, None), source, 9, 0, "snapshot:0:0"))
            plain[-1]["source"]["snapshot"] = "last"
            reader = ChunkReader(info)
            result, last = await reader.fetch(conn, None, 2)
            wire = bytes(reader.lines(result, source, 9, 0, "snapshot:0:0"))
            dicts = reader.changes(result, source, 9, 0, "snapshot:0:0")
            result, _ = await reader.fetch(conn, last, None)
            wire += bytes(reader.lines(result, source, 9, 2, "snapshot:0:0", last=True))
            dicts += reader.changes(result, source, 9, 2, "snapshot:0:0")
            dicts[-1]["source"]["snapshot"] = "last"
            return b"".join(dumps(c) + b"\n" for c in plain), wire, b"".join(dumps(c) + b"\n" for c in dicts), last
        finally:
            conn.close()

    try:
        server.sql(f"CREATE TABLE types {TYPES}", database=db)
        server.sql("INSERT INTO types VALUES " + ", ".join(TYPE_ROWS), database=db)
        plain, wire, dicts, last = asyncio.run(both())
        assert last == ["2"]
        assert wire == plain == dicts
        afters = [orjson.loads(line)["after"] for line in wire.splitlines()]
        assert [r["id"] for r in afters] == [1, 2, 3, 4]
        assert afters[3]["f"] == 123456790.0 and afters[0]["f"] == 1.1, afters  # float32 shortest, not 6 digits
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{db}`")


def _values(result) -> list:
    """Every row of a :class:`ResultRows` as its raw values, walked with protocol.textrows."""
    from binlogd.protocol import textrows

    out, pos = [], result.start
    while pos < result.end:
        nxt = textrows.row_at(result.buf, pos, result.end)[0]
        out.append(textrows.fields(textrows.payload(result.buf, pos, nxt), result.columns))
        pos = nxt
    return out


def test_wire_reader_lends_the_transport_and_gives_it_back(mariadb_minimal):
    """query_result reads straight from the socket, then hands the connection back to aiomysql: a result of
    many socket reads equals PyMySQL's, a server error leaves the connection usable, and a cancel in the
    middle of a result closes it (it cannot be used out of step)."""
    import asyncio

    import pymysql

    from binlogd.daemon.snapshot.wire import query_result

    server = mariadb_minimal

    async def go():
        conn = await _connect(server)
        try:
            sql = ("SELECT seq, REPEAT(CHAR(65 + seq % 26), 2000) FROM mysql.seq_1_to_3000" if server.flavor == "mariadb"
                   else "WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < 3000) SELECT "
                   "/*+ SET_VAR(cte_max_recursion_depth = 3000) */ seq, REPEAT(CHAR(65 + seq % 26), 2000) FROM s")
            result = await query_result(conn, sql)
            wire = _values(result)
            async with conn.cursor() as cur:
                await cur.execute(sql)
                plain = [[str(a).encode(), b if isinstance(b, bytes) else b.encode()] for a, b in await cur.fetchall()]
            with pytest.raises((pymysql.err.ProgrammingError, pymysql.err.OperationalError)) as err:  # MySQL: 1049
                await query_result(conn, "SELECT * FROM no_such_db.no_such_table")
            assert err.value.args[0] in (1049, 1146)
            after_error = await query_result(conn, "SELECT 41 + 1")
            task = asyncio.ensure_future(query_result(conn, "SELECT SLEEP(5)"))
            await asyncio.sleep(0.3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return wire, plain, result, _values(after_error), after_error.last_values(), conn.closed
        finally:
            conn.close()

    wire, plain, result, after_error, last_values, closed = asyncio.run(go())
    assert len(wire) == 3000 and wire == plain and len(result) == 3000 and result.columns == 2
    assert result.last_values() == plain[-1]
    assert after_error == [[b"42"]] and last_values == [b"42"]
    assert closed
