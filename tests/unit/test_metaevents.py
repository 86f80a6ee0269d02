"""The events beyond rows without a server: their ids' order among changes, their two formats, the config rules.

The server-side behaviour (positions from the server's own log, SIGKILLs) is in
``tests/integration/test_events_beyond_rows.py``.
"""

from __future__ import annotations

import json

import pytest

from binlogd.daemon.config import load_config
from binlogd.daemon.configbase import ConfigError
from binlogd.library import identity, metaevents
from binlogd.library.debezium import meta_formatter
from binlogd.library.schema.model import ColumnDef, TableDef


def test_ids_sort_in_delivery_order():
    delivered = [
        identity.boundary_key("b.000001", 100),
        identity.order_key(identity.heartbeat_id("b.000001", 100, 5)),
        identity.order_key(identity.heartbeat_id("b.000001", 100, 6)),
        identity.order_key(identity.incremental_prefix("b.000001", 100, 0, 1) + ":0"),
        identity.order_key(identity.begin_id("b.000001", 100)),
        identity.order_key(identity.stream_prefix("b.000001", 180) + ":0"),
        identity.order_key(identity.stream_prefix("b.000001", 180) + ":7"),
        identity.order_key(identity.stream_prefix("b.000001", 240, 30) + ":0"),
        identity.order_key(identity.commit_id("b.000001", 240, 90)),
        identity.order_key(identity.ddl_id("b.000001", 300, 0)),
        identity.order_key(identity.ddl_id("b.000001", 300, 1)),
        identity.order_key(identity.begin_id("b.000002", 4)),
    ]
    assert delivered == sorted(delivered) and len(set(delivered)) == len(delivered)


def test_a_commit_sorts_after_the_rows_of_the_event_that_ends_it():
    """A statement logged without BEGIN ends its transaction with its own rows event."""
    rows = identity.order_key(identity.stream_prefix("b.1", 500) + ":999999")
    assert rows < identity.order_key(identity.commit_id("b.1", 500))


@pytest.mark.parametrize("bad", ["b.1:5:0:nope", "b.1:5:x:commit", "b.1:5:hx:heartbeat", "b.1:5:0:ddl.x"])
def test_malformed_ids_are_refused(bad):
    with pytest.raises(ValueError):
        identity.order_key(bad)


TABLE = TableDef("s", "t", (ColumnDef("id", "bigint", unsigned=True, nullable=False),
                            ColumnDef("d", "decimal", precision=10, scale=2),
                            ColumnDef("name", "varchar", length=40, charset="utf8mb4"),
                            ColumnDef("e", "enum", values=("a", "it's"))), ("id",))


def test_ddl_columns_are_the_definition_after_the_statement():
    event = metaevents.ddl("s", "t", "ALTER TABLE t ADD e ENUM('a','it''s')", {"id": "f:1:0:ddl.0"}, 9, TABLE)
    assert event["columns"] == [
        {"name": "id", "type": "bigint unsigned", "nullable": False, "primary_key": True},
        {"name": "d", "type": "decimal(10,2)", "nullable": True},
        {"name": "name", "type": "varchar(40)", "nullable": True, "charset": "utf8mb4"},
        {"name": "e", "type": "enum('a','it''s')", "nullable": True}]
    assert metaevents.ddl("s", "t", "DROP TABLE t", {}, 9, None)["columns"] == []


SOURCE = {"server_id": 1, "file": "b.000001", "pos": 120, "gtid": "0-1-5", "id": "b.000001:120:0:begin"}


def test_debezium_forms():
    write = meta_formatter("debezium", "dbserver1")
    begin = json.loads(write(metaevents.begin("0-1-5", SOURCE, 7)))
    assert begin == {"status": "BEGIN", "id": "0-1-5", "ts_ms": 7000, "event_count": None,
                     "data_collections": None, "source": {"id": SOURCE["id"]}}
    end_source = {**SOURCE, "pos": 400, "id": "b.000001:400:0:commit"}
    end = json.loads(write(metaevents.commit("0-1-5", end_source, 8, {"s.a": 2, "s.b": 1})))
    assert (end["status"], end["event_count"], end["data_collections"]) == (
        "END", 3, [{"data_collection": "s.a", "event_count": 2}, {"data_collection": "s.b", "event_count": 1}])
    ddl_source = {**SOURCE, "pos": 500, "id": "b.000001:500:0:ddl.0"}
    ddl = json.loads(write(metaevents.ddl("s", "t", "CREATE TABLE t (...)", ddl_source, 9, TABLE)))
    assert (ddl["databaseName"], ddl["schemaName"], ddl["source"]["id"], ddl["source"]["pos"]) == (
        "s", None, ddl_source["id"], 500)
    change = ddl["tableChanges"][0]
    assert (change["type"], change["id"], change["table"]["primaryKeyColumnNames"]) == ("CREATE", '"s"."t"', ["id"])
    assert [(c["name"], c["typeName"], c["position"], c["optional"]) for c in change["table"]["columns"]] == [
        ("id", "BIGINT UNSIGNED", 1, False), ("d", "DECIMAL", 2, True), ("name", "VARCHAR", 3, True),
        ("e", "ENUM", 4, True)]
    beat = json.loads(write(metaevents.heartbeat({**SOURCE, "id": "b.000001:120:h5:heartbeat"}, 11)))
    assert beat == {"ts_ms": 11000, "source": {"id": "b.000001:120:h5:heartbeat", "file": "b.000001", "pos": 120,
                                               "gtid": "0-1-5"}}


def test_binlogd_form_is_the_event_itself():
    event = metaevents.commit("0-1-5", SOURCE, 8, {"s.a": 2})
    assert json.loads(meta_formatter("binlogd")(event)) == {
        "op": "commit", "transaction": "0-1-5", "ts": 8, "source": SOURCE, "events": 2, "tables": {"s.a": 2}}


@pytest.mark.parametrize("overrides, key", [
    ({"sink.kind": "mirror", "sink.transaction_events": "true"}, "sink.transaction_events"),
    ({"sink.kind": "nats", "sink.nats.schema_subject": "a.>"}, "sink.nats.schema_subject"),
    ({"sink.kind": "nats", "sink.nats.heartbeat_subject": "_binlogd.x"}, "sink.nats.heartbeat_subject"),
    ({"sink.kind": "postgres", "sink.postgres.schema_table": "binlogd_changes"}, "sink.postgres.schema_table"),
    ({"sink.kind": "postgres", "sink.postgres.heartbeat_table": "a-b"}, "sink.postgres.heartbeat_table"),
    ({"sink.kind": "archive", "sink.heartbeat_seconds": "5"}, "sink.heartbeat_seconds"),
    ({"sink.schema_events": "true", "schema.source": "none"}, "sink.schema_events"),
    ({"sink.heartbeat_seconds": "-1"}, "sink.heartbeat_seconds"),
])
def test_config_rules(overrides, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, overrides={"sink.path": "/tmp/x", **overrides})
    assert err.value.key == key


def test_config_defaults_are_off():
    sink = load_config(None, env={}).sink
    assert (sink.transaction_events, sink.schema_events, sink.heartbeat_seconds) == (False, False, 0.0)
    assert sink.events() == {}


@pytest.mark.parametrize("kind, names", [
    ("redis", ["binlogd.transaction", "binlogd", "__debezium-heartbeat.binlogd"]),
    ("nats", ["binlogd.transaction", "binlogd", "__debezium-heartbeat.binlogd"]),
    ("postgres", ["binlogd_transaction", "binlogd", "__debezium_heartbeat_binlogd"]),
])
def test_bus_destinations_default_like_debezium(kind, names):
    on = {"sink.transaction_events": "true", "sink.schema_events": "true", "sink.heartbeat_seconds": "5"}
    sink = load_config(None, env={}, overrides={"sink.kind": kind, **on}).sink
    assert sink.events() == dict(zip(["transaction", "schema", "heartbeat"], names))
    sink = load_config(None, env={}, overrides={"sink.kind": kind, "sink.schema_events": "true"}).sink
    assert sink.events() == {"schema": names[1]}


@pytest.mark.parametrize("fmt, key", [("binlogd", "op"), ("debezium", "status")])
def test_stdout_writes_them_in_line(fmt, key):
    import io

    from binlogd.daemon.sinks.stdout import StdoutSink

    out = io.BytesIO()
    sink = StdoutSink(out, format=fmt)
    sink.meta(metaevents.begin("0-1-5", SOURCE, 7))
    sink.flush()
    line = out.getvalue()
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and key in json.loads(line)
