"""The bus sinks' pieces that need no broker: config subsections, position keys, URL redaction, COPY text,
and the checks made before connecting."""

from __future__ import annotations

import pytest

from binlogd.daemon.config import ConfigError, load_config
from binlogd.daemon.sinks import SinkError, make_sink
from binlogd.daemon.sinks.bus import position_key, redact
from binlogd.daemon.sinks.postgres import copy_text


def test_config_subsections_and_env_overrides():
    cfg = load_config(None, env={"BINLOGD_SINK__KIND": "redis", "BINLOGD_SINK__REDIS__URL": "redis://:pw@h:1/2",
                                 "BINLOGD_SINK__NATS__STREAM": "S", "BINLOGD_SINK__POSTGRES__TABLE": "cdc.changes"})
    assert cfg.sink.kind == "redis" and cfg.sink.redis.url == "redis://:pw@h:1/2"
    assert cfg.sink.redis.stream == "binlogd:{schema}.{table}"
    assert (cfg.sink.nats.stream, cfg.sink.nats.subject) == ("S", "binlogd.{schema}.{table}")
    assert cfg.sink.postgres.table == "cdc.changes"
    sink = make_sink(cfg.sink)
    assert sink.KIND == "redis" and "pw" not in sink.name


@pytest.mark.parametrize("key, value", [("sink.nats.subject", "{schema}.{table}"),
                                        ("sink.nats.subject", "a.>.{table}"),
                                        ("sink.postgres.table", "drop table; x"),
                                        ("sink.redis.max_change_bytes", "0")])
def test_config_rejects(key, value):
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, overrides={key: value})
    assert key in str(err.value)


def test_position_key_orders_files_then_positions():
    assert position_key("b.000009", 999_999, 5) < position_key("b.000010", 4, 0)
    assert position_key("b.000010", 4, 0) < position_key("b.000010", 4, 1) < position_key("b.000010", 5, -1)


def test_redact():
    assert redact("redis://:secret@127.0.0.1:1/0") == "redis://:***@127.0.0.1:1/0"
    assert redact("postgresql://u:p%40ss@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_copy_text_escapes():
    meta = ("s\tx", "t\\y", "b.000001", 120, 3, None, "insert", 7)
    text = copy_text([(meta, b'{"a":"q\\"\\\\n"}')])
    assert text == b'{"a":"q\\\\"\\\\\\\\n"}\tb.000001\t120\t3\t\\N\ts\\tx\tt\\\\y\tinsert\t7\n'


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres"])
def test_open_refuses_another_sinks_state(kind):
    sink = make_sink(load_config(None, env={}, overrides={"sink.kind": kind}).sink)
    with pytest.raises(SinkError) as err:
        sink.open({"file": "changes-000001.jsonl", "offset": 10})
    assert err.value.fatal and err.value.exit_code == 8 and "not a" in str(err.value)
