"""VECTOR columns on MariaDB 11.7+: a list of numbers, with the column type from the schema source.

MariaDB logs a VECTOR(n) as a binary VARCHAR of 4n bytes, with nothing in the TABLE_MAP (FULL or
MINIMAL metadata) that marks it. The daemon's schema source (:class:`binlogd.daemon.replication.schemaqueries.ServerSchema`,
SHOW CREATE TABLE) says ``vector(n)``; the decoder then reads the value as n float32. Expected values
come from the server (``Vec_ToText``) and are compared as float32. A VARBINARY of the same size stays a
base64 string, and without a schema source a VECTOR is the base64 of its bytes (nothing says otherwise).
"""

from __future__ import annotations

import base64
import json
import struct
import uuid

import pytest

from binlogd.cli.filetools import dump_events
from binlogd.daemon.replication.schemaqueries import ServerSchema
from binlogd.library.schema.model import compile_schema
from binlogd.protocol import events as E
from binlogd.protocol.constants import ColumnType as T
from tests.support.daemon import base_overrides, read_changes, running_daemon, wait_caught_up

pytestmark = pytest.mark.server

ROWS = [(1, "[1,2,3.5]", None, b"abc"), (2, "[-0.1,0.001,300000.5]", json.dumps([i / 7 for i in range(100)]), b"\0\xff\0\xff"),
        (3, "[0,-0.0,0.000001]", "[" + ",".join(["2.5"] * 100) + "]", None)]


@pytest.fixture(params=["mariadb", "mariadb_minimal"], ids=["full", "minimal"])
def server(request, server_binaries):
    srv = request.getfixturevalue(request.param)
    if srv.flavor != "mariadb" or srv.version_tuple < (11, 7):
        pytest.skip(f"VECTOR columns need MariaDB 11.7+ (this server is {srv.flavor} {srv.version})")
    return srv


@pytest.fixture
def db(server, request):
    """A new schema on ``server`` (FULL or MINIMAL metadata), dropped after the test."""
    name = f"vec_{request.node.name.split('[')[0][5:25]}_{uuid.uuid4().hex[:8]}"
    server.sql(f"CREATE DATABASE `{name}`")
    yield name
    server.sql(f"DROP DATABASE IF EXISTS `{name}`")


def f32(values) -> list[bytes]:
    return [struct.pack("<f", float(v)) for v in values]


def write_vectors(server, db: str) -> dict:
    """In the empty schema ``db``, create t with VECTOR(3), VECTOR(100) and VARBINARY(12) columns, insert, update, delete;
    return the table's final rows as the server shows them (id -> (v, w, b))."""
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VECTOR(3) NOT NULL, w VECTOR(100), b VARBINARY(12))")
    conn = server.connect(database=db)
    try:
        with conn.cursor() as cur:
            for id_, v, w, b in ROWS:
                cur.execute("INSERT INTO t VALUES (%s, Vec_FromText(%s), Vec_FromText(%s), %s)", (id_, v, w, b))
            cur.execute("UPDATE t SET v = Vec_FromText('[4,5,6]'), w = NULL WHERE id = 2")
            cur.execute("DELETE FROM t WHERE id = 3")
            cur.execute("SELECT id, Vec_ToText(v), Vec_ToText(w), b FROM t ORDER BY id")
            return {r[0]: (json.loads(r[1]), json.loads(r[2]) if r[2] else None, r[3]) for r in cur.fetchall()}
    finally:
        conn.close()


def server_schema(server) -> ServerSchema:
    import aiomysql

    return ServerSchema(lambda: aiomysql.connect(**server.connect_kwargs(), autocommit=True))


async def test_vectors_decode_as_lists_with_the_schema_source(server, db):
    final = write_vectors(server, db)
    source = server_schema(server)

    async def fetch():
        try:
            return compile_schema(await source.create_table(db, "t"))
        finally:
            await source.close()

    known = await fetch()
    assert known.vector_dimensions == (None, 3, 100, None)
    path = server.binlog_files()[-1]
    maps, images = [], []
    for event in dump_events(path, schema_source=lambda s, t: known if (s, t) == (db, "t") else None):
        if isinstance(event, E.TableMapEvent) and event.schema == db:
            maps.append(event.columns)
        elif isinstance(event, E.RowsEvent) and event.schema == db:
            images += [img for row in event.rows for img in (row if event.kind == "update" else (row,))]
    assert maps and all([(c.type, c.vector_dimensions) for c in cols] ==
                        [(T.LONG, None), (T.VECTOR, 3), (T.VECTOR, 100), (T.VARCHAR, None)] for cols in maps)
    for (id_, v, w, b), img in zip(ROWS, images):  # names: FULL metadata, or the schema source (MINIMAL)
        assert img["id"] == id_ and f32(img["v"]) == f32(json.loads(v))
        assert img["w"] is None if w is None else f32(img["w"]) == f32(json.loads(w))
        assert img["b"] == (None if b is None else base64.b64encode(b).decode())
    before, after, deleted = images[3:]  # the update's two images, the delete's
    assert f32(before["w"]) == f32(json.loads(ROWS[1][2]))
    assert after["id"] == 2 and f32(after["v"]) == f32(final[2][0]) and after["w"] is None
    assert deleted["id"] == 3 and f32(deleted["v"]) == f32([0, -0.0, 0.000001])


def test_without_a_schema_source_a_vector_is_its_bytes(server, db):
    write_vectors(server, db)
    for event in dump_events(server.binlog_files()[-1]):
        if isinstance(event, E.RowsEvent) and event.schema == db and event.kind == "insert":
            first = event.rows[0]
            values = list(first.values())
            assert base64.b64decode(values[1]) == b"".join(f32([1, 2, 3.5]))
            return
    pytest.fail("no insert of the vector table in the binlog")


def test_daemon_change_events_carry_lists(server, db, tmp_path):
    """``binlogd run`` (JSON-lines sink, default schema source): VECTOR values are lists in the change events."""
    with running_daemon(base_overrides(server, tmp_path, **{"filters.include_schemas": db})) as daemon:
        final = write_vectors(server, db)
        wait_caught_up(server, tmp_path / "checkpoint.json", daemon=daemon)
    changes = [c for c in read_changes(tmp_path / "sink") if c["schema"] == db]
    assert [c["op"] for c in changes] == ["insert"] * 3 + ["update", "delete"]
    for (id_, v, w, _b), change in zip(ROWS, changes):
        assert change["after"]["id"] == id_ and f32(change["after"]["v"]) == f32(json.loads(v))
        assert change["after"]["w"] is None if w is None else f32(change["after"]["w"]) == f32(json.loads(w))
    assert f32(changes[3]["after"]["v"]) == f32(final[2][0]) and changes[3]["after"]["w"] is None
    assert changes[4]["before"]["id"] == 3 and f32(changes[4]["before"]["v"]) == f32([0, -0.0, 0.000001])
