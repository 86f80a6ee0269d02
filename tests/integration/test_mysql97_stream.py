"""Oracle MySQL 9.7 with its own defaults (binlog_row_metadata=MINIMAL, caching_sha2_password) plus GTIDs, as a
real server: ``binlogd run`` streams it and the sink's replay is compared with the server's own tables.

- streaming by GTID (COM_BINLOG_DUMP_GTID: the server's dump thread says ``Binlog Dump GTID``) over TLS, stopped,
  written while stopped and resumed from the checkpoint: every change once, the checkpoint's GTID set is the
  server's ``gtid_executed``; on the compressed server (binlog_transaction_compression=ON) too, whose binlog then
  holds TRANSACTION_PAYLOAD events;
- caching_sha2_password's full authentication (a new account, the server's cache flushed) over TLS and without
  it, where the password goes RSA-encrypted with the server's public key (the connection is plain TCP);
- tagged GTIDs (``SET gtid_next = 'AUTOMATIC:tag'``) in the changes, the checkpoint and a resume.

The column names come from the server (MINIMAL metadata names none): the schema history seeded at the start.
"""

from __future__ import annotations

import json
import struct
import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from binlogd.protocol.gtid import MysqlGtidSet
from tests.support import servers
from tests.support.daemon import assert_sink_matches, daemon_following, read_changes, read_checkpoint, replay
from tests.support.flavour import gtid_position
from tests.support.replication import wait_gtids

pytestmark = pytest.mark.server

@pytest.fixture(scope="module")
def started():
    """The module's servers by fixture id, each started once; stopped and removed after the module."""
    running: dict[str, LocalServer] = {}
    yield running
    for server in running.values():
        server.cleanup()


def mysql_server(started: dict, version: str) -> LocalServer:
    """MySQL 9.7 of ``version`` (:data:`servers.MYSQL` or :data:`servers.MYSQL_COMPRESSED`) with MySQL's defaults
    plus GTIDs; skipped with the reason when it cannot be fetched."""
    if version not in started:
        try:
            bins = servers.binaries(version)
        except servers.Unavailable as exc:
            pytest.skip(f"MySQL 9.7 unavailable (fetching it from Debian is outside our control): {exc}")
        started[version] = LocalServer(binaries=bins).start()
    return started[version]


@pytest.fixture(params=[servers.MYSQL, servers.MYSQL_COMPRESSED])
def mysql_any(request, started) -> LocalServer:
    """Each of the plain and the compressed server."""
    return mysql_server(started, request.param)


@pytest.fixture
def mysql(started) -> LocalServer:
    """The plain server."""
    return mysql_server(started, servers.MYSQL)


def new_schema(server: LocalServer) -> str:
    name = f"m97_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE `{name}`")
    server.sql(f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT, d DECIMAL(10,2), "
               "ts DATETIME(3), b VARBINARY(8))")
    return name


def write(server: LocalServer, db: str, first: int, count: int, tag: str | None = None) -> None:
    """``count`` transactions, each an insert of id ``first + i``, an update of the row before it and every
    fifth one a delete; with ``tag``, each has a tagged GTID."""
    conn = server.connect(database=db, autocommit=False)
    try:
        with conn.cursor() as cur:
            for k in range(first, first + count):
                if tag:
                    cur.execute(f"SET gtid_next = 'AUTOMATIC:{tag}'")
                cur.execute("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)",
                            (k, f"é😀{k}", -k * 10**12, f"{k}.25", f"2026-12-01 10:00:{k % 60:02d}.125",
                             bytes([k % 256, 0, 255])))
                cur.execute("UPDATE t SET v = CONCAT(v, '+'), n = n + 1 WHERE id = %s", (k - 1,))
                if k % 5 == 0:
                    cur.execute("DELETE FROM t WHERE id = %s", (k - 3,))
                conn.commit()
    finally:
        conn.close()


def dump_threads(server: LocalServer, user: str) -> list[tuple[str, str]]:
    """(command, connection type) of ``user``'s connections that are dumping the binlog."""
    return [tuple(r) for r in server.sql(
        "SELECT PROCESSLIST_COMMAND, CONNECTION_TYPE FROM performance_schema.threads "
        f"WHERE PROCESSLIST_USER = '{user}' AND PROCESSLIST_COMMAND LIKE 'Binlog Dump%'")]


def mine(sink, db: str) -> list[dict]:
    return [c for c in read_changes(sink) if c["schema"] == db]


def test_streams_by_gtid_over_tls_and_resumes_exactly_once(mysql_any: LocalServer, tmp_path) -> None:
    server = mysql_any
    db = new_schema(server)
    settings = {"source.tls.mode": "required", "source.start": "current"}
    with daemon_following(server, tmp_path, **settings) as d:
        write(server, db, 1, 30)
        cp = wait_gtids(server, d.checkpoint, daemon=d)
        assert dump_threads(server, server.repl_user) == [("Binlog Dump GTID", "SSL/TLS")]
    assert cp["source"]["resume"] == "gtid" and cp["source"]["flavor"] == "mysql", cp
    write(server, db, 31, 20)  # while stopped
    with daemon_following(server, tmp_path, **settings) as d:
        write(server, db, 51, 20)
        cp = wait_gtids(server, d.checkpoint, daemon=d)
    assert MysqlGtidSet.parse(cp["position"]["gtid_set"]) == MysqlGtidSet.parse(gtid_position(server))
    changes = mine(tmp_path / "sink", db)
    assert len(changes) == 70 + 69 + 14, len(changes)
    assert all(c["source"]["gtid"] for c in changes)
    assert_sink_matches(server, db, ["t"], replay(changes))
    events = {r[2] for r in server.sql(f"SHOW BINLOG EVENTS IN '{cp['position']['file']}'")}
    assert ("Transaction_payload" in events) == (servers.COMPRESSION in server.binaries.server_args), events


@pytest.mark.parametrize("tls", ["required", "disabled"])
def test_caching_sha2_full_authentication(mysql: LocalServer, tmp_path, tls: str) -> None:
    """A new account and a flushed cache: the server asks for the full password, over TLS as it is, else
    encrypted with the server's RSA public key (the server refuses it in clear over plain TCP)."""
    user, password = f"sha2_{uuid.uuid4().hex[:8]}", "pä$$-wörd-€"
    mysql.sql(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY '{password}'")
    mysql.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{user}'@'127.0.0.1'")
    mysql.sql("FLUSH PRIVILEGES")  # empties caching_sha2_password's cache: no fast authentication
    db = new_schema(mysql)
    settings = {"source.user": user, "source.password": password, "source.tls.mode": tls, "source.start": "current"}
    with daemon_following(mysql, tmp_path, **settings) as d:
        write(mysql, db, 1, 5)
        wait_gtids(mysql, d.checkpoint, daemon=d)
        assert dump_threads(mysql, user) == [("Binlog Dump GTID", "SSL/TLS" if tls == "required" else "TCP/IP")]
    assert_sink_matches(mysql, db, ["t"], replay(mine(tmp_path / "sink", db)))


def test_tagged_gtids_in_changes_checkpoint_and_resume(mysql: LocalServer, tmp_path) -> None:
    db = new_schema(mysql)
    uuid_ = mysql.sql("SELECT @@server_uuid")[0][0]
    settings = {"source.start": "current", "source.tls.mode": "disabled"}
    with daemon_following(mysql, tmp_path, **settings) as d:
        write(mysql, db, 1, 10, tag="orders")
        write(mysql, db, 11, 5)
        wait_gtids(mysql, d.checkpoint, daemon=d)
    write(mysql, db, 16, 10, tag="orders")  # while stopped
    write(mysql, db, 26, 3, tag="billing")
    cp = read_checkpoint(tmp_path / "checkpoint.json")
    assert ":orders:1-10" in cp["position"]["gtid_set"].replace("\n", ""), cp["position"]
    with daemon_following(mysql, tmp_path, **settings) as d:
        write(mysql, db, 29, 2, tag="orders")
        cp = wait_gtids(mysql, d.checkpoint, daemon=d)
    assert MysqlGtidSet.parse(cp["position"]["gtid_set"]) == MysqlGtidSet.parse(gtid_position(mysql))
    changes = mine(tmp_path / "sink", db)
    tags = {c["source"]["gtid"].rsplit(":", 1)[0] for c in changes}
    assert tags == {f"{uuid_}:orders", f"{uuid_}:billing", uuid_}, tags
    assert_sink_matches(mysql, db, ["t"], replay(changes))


def _f32(values) -> list[float]:
    return [struct.unpack("<f", struct.pack("<f", float(v)))[0] for v in values]


def test_vector_columns_stream_as_lists(mysql: LocalServer, tmp_path) -> None:
    """MySQL 9's VECTOR(n) (its own column type in the TABLE_MAP): each change's value is the list of the n
    float32 the server stores (its bytes, as VECTOR_TO_STRING rounds to 6 digits)."""
    db = f"m97v_{uuid.uuid4().hex[:10]}"
    mysql.sql(f"CREATE DATABASE `{db}`")
    mysql.sql(f"CREATE TABLE `{db}`.v (id INT PRIMARY KEY, e VECTOR(3), w VECTOR(100))")
    with daemon_following(mysql, tmp_path, **{"source.start": "current", "source.tls.mode": "disabled"}) as d:
        long = "[" + ",".join(str(i / 7) for i in range(100)) + "]"
        for k, e in ((1, "[1,2,3.5]"), (2, "[-0.1,0.001,300000.5]"), (3, "[0,-0.0,0.000001]")):
            mysql.sql(f"INSERT INTO `{db}`.v VALUES ({k}, STRING_TO_VECTOR('{e}'), "
                      f"{'NULL' if k == 1 else f'STRING_TO_VECTOR({long!r})'})")
        mysql.sql(f"UPDATE `{db}`.v SET e = STRING_TO_VECTOR('[3.25,-1e-7,65504]') WHERE id = 1")
        mysql.sql(f"DELETE FROM `{db}`.v WHERE id = 3")
        wait_gtids(mysql, d.checkpoint, daemon=d)
    state = replay(mine(tmp_path / "sink", db))[(db, "v")]
    def floats(hexed: str | None) -> list[float] | None:  # the stored bytes: n little-endian float32
        return None if hexed is None else list(struct.unpack(f"<{len(hexed) // 8}f", bytes.fromhex(hexed)))

    want = {k: {"id": k, "e": floats(e), "w": floats(w)}
            for k, e, w in mysql.sql(f"SELECT id, HEX(e), HEX(w) FROM `{db}`.v")}
    got = {k: {"id": row["id"], "e": _f32(row["e"]), "w": row["w"] and _f32(row["w"])} for k, row in state.items()}
    assert got == want and sorted(want) == [1, 2]


def test_partial_json_updates_stream_with_the_full_columns_right(mysql: LocalServer, tmp_path) -> None:
    """binlog_row_value_options=PARTIAL_JSON: JSON_SET/JSON_REPLACE/JSON_REMOVE updates are logged as
    PARTIAL_UPDATE_ROWS events; the daemon streams them without an error, and every column logged whole has
    the value the server holds (the JSON column's form is the partial JSON format's, checked elsewhere)."""
    db = f"m97j_{uuid.uuid4().hex[:10]}"
    mysql.sql(f"CREATE DATABASE `{db}`")
    mysql.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, n INT, s VARCHAR(20), j JSON)")
    with daemon_following(mysql, tmp_path, **{"source.start": "current", "source.tls.mode": "disabled"}) as d:
        conn = mysql.connect(database=db)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
                for k in range(1, 21):
                    cur.execute("INSERT INTO t VALUES (%s, %s, %s, %s)",
                                (k, k, f"s{k}", json.dumps({"a": k, "b": "x" * 50, "c": [1, 2, 3]})))
                for k in range(1, 21):
                    fn = ("JSON_SET(j, '$.a', n * 10, '$.d', 'new')", "JSON_REPLACE(j, '$.b', 'short')",
                          "JSON_REMOVE(j, '$.c[1]')")[k % 3]
                    cur.execute(f"UPDATE t SET n = n + 100, s = CONCAT(s, '!'), j = {fn} WHERE id = %s", (k,))
        finally:
            conn.close()
        cp = wait_gtids(mysql, d.checkpoint, daemon=d)
    assert " ERROR " not in d.stderr, d.stderr
    events = [r[2] for r in mysql.sql(f"SHOW BINLOG EVENTS IN '{cp['position']['file']}'")]
    assert events.count("Update_rows_partial") >= 20, sorted(set(events))
    changes = mine(tmp_path / "sink", db)
    updates = {c["after"]["id"]: c["after"] for c in changes if c["op"] == "update"}
    want = {k: (n, s) for k, n, s in mysql.sql(f"SELECT id, n, s FROM `{db}`.t")}
    assert {k: (a["n"], a["s"]) for k, a in updates.items()} == want and len(want) == 20
