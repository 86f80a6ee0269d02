"""The snapshot's pure parts: [snapshot] config, the checkpoint's ``snapshot`` object, keyset SQL, row values,
text-protocol row parsing, and the metrics."""

from __future__ import annotations

import json

import orjson
import pytest

from binlogd.daemon.config import ConfigError, load_config
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.snapshot.tables import TableInfo
from binlogd.daemon.snapshot.wire import ChunkReader, ResultRows
from binlogd.daemon.state import ResumeState
from binlogd.library.checkpointfile import Checkpoint
from binlogd.protocol import textrows
from binlogd.protocol.position import Position
from tests.support.textproto import lenenc


def test_snapshot_config_defaults_and_checks():
    cfg = load_config(None, env={})
    assert (cfg.snapshot.mode, cfg.snapshot.chunk_rows, cfg.snapshot.readers, cfg.snapshot.signal_table) == \
        ("never", 10000, 4, "")
    cfg = load_config(None, env={"BINLOGD_SNAPSHOT__MODE": "initial", "BINLOGD_SNAPSHOT__CHUNK_ROWS": "7",
                                 "BINLOGD_SNAPSHOT__READERS": "1", "BINLOGD_SNAPSHOT__SIGNAL_TABLE": "db.signals"})
    assert (cfg.snapshot.mode, cfg.snapshot.chunk_rows, cfg.snapshot.readers, cfg.snapshot.signal_table) == \
        ("initial", 7, 1, "db.signals")
    for key, value, words in (("snapshot.mode", "always", "snapshot.mode"), ("snapshot.chunk_rows", "0", "chunk_rows"),
                              ("snapshot.readers", "0", "readers"), ("snapshot.readers", "17", "readers"),
                              ("snapshot.signal_table", "signals", "database.table"),
                              ("snapshot.signal_table", "a.b.c", "database.table")):
        with pytest.raises(ConfigError) as err:
            load_config(None, env={}, overrides={key: value})
        assert words in str(err.value) and "\n" not in str(err.value)


def test_checkpoint_snapshot_round_trip_and_absent_by_default():
    plain = Checkpoint(Position("b.000001", 4), {"file": "changes-000001.jsonl", "offset": 0}, {"resume": "file"})
    assert "snapshot" not in json.loads(plain.to_bytes())
    assert Checkpoint.parse(plain.to_bytes()).snapshot is None
    state = {"position": {"file": "b.000001", "pos": 4}, "tables": [["d", "t"]], "done": 0, "last": [1, "x"],
             "rows": 5}
    resume = ResumeState(Position("b.000001", 4), True, {"offset": 3}, {"host": "h"}, None, state)
    back = ResumeState.from_checkpoint(Checkpoint.parse(resume.checkpoint().to_bytes()))
    assert back.snapshot == state and back.by_gtid and back.position == resume.position


def _escape(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_keyset_sql_composite_key():
    info = TableInfo("d", "t", ("a", "b", "v"), ("int", "varchar", "int"), ("a", "b"), 10)
    assert info.chunk_sql(None, 5, _escape) == "SELECT `a`, `b`, `v` FROM `d`.`t` ORDER BY `a`, `b` LIMIT 5"
    sql = info.chunk_sql(["3", "it's"], 5, _escape)
    assert sql == ("SELECT `a`, `b`, `v` FROM `d`.`t` WHERE `a` >= 3 AND ((`a` > 3) OR (`a` = 3 AND `b` > 'it\\'s'))"
                   " ORDER BY `a`, `b` LIMIT 5")
    with pytest.raises(ValueError):
        info.chunk_sql(["3 OR 1=1", "x"], 5, _escape)
    with pytest.raises(ValueError):
        info.chunk_sql(["3"], 5, _escape)
    keyless = TableInfo("d", "n", ("x", "f"), ("int", "float"))
    assert keyless.chunk_sql(None, None, _escape) == "SELECT `x`, (`f` + 0e0) FROM `d`.`n`"
    ranged = TableInfo("d", "r", ("id", "v"), ("bigint", "int"), ("id",))
    assert ranged.integer_key and not info.integer_key and not TableInfo("d", "v", ("k",), ("varchar",), ("k",)).integer_key
    assert ranged.chunk_sql(["10"], 5, _escape, upto=["20"]) == ("SELECT `id`, `v` FROM `d`.`r` WHERE `id` >= 10 AND "
                                                                 "((`id` > 10)) AND `id` <= 20 ORDER BY `id` LIMIT 5")
    assert ranged.chunk_sql(None, 5, _escape, upto=["-3"]).endswith("WHERE `id` <= -3 ORDER BY `id` LIMIT 5")
    for upto in (["1 OR 1=1"], ["1", "2"]):
        with pytest.raises(ValueError):
            ranged.chunk_sql(None, 5, _escape, upto=upto)
    with pytest.raises(ValueError):
        info.chunk_sql(None, 5, _escape, upto=["3"])   # a key range needs a one-column key
    binary = TableInfo("d", "b", ("k",), ("varbinary",), ("k",))
    assert binary.chunk_sql([{"hex": "00ff"}], 1, _escape).endswith("WHERE `k` >= X'00ff' AND ((`k` > X'00ff')) "
                                                                     "ORDER BY `k` LIMIT 1")


def test_text_row_fields_and_json():
    """A text-protocol row packet's values (NULL, 1-, 2- and 3-byte lengths), and its JSON off the wire equal to
    the values :meth:`TableInfo.row` gives PyMySQL's text."""
    values = [b"-5", None, b"x" * 300, b"\x00\xff", b"a,c", b"1.100000023841858", b"\x02\x01", b"12.5000",
              b"2026-01-01 00:00:00.5", "é\"\\\n".encode(), b"70000" * 14000]
    packet = b"".join(lenenc(v) for v in values)
    assert textrows.fields(packet, len(values)) == values
    info = TableInfo("d", "t", tuple(f"c{i}" for i in range(len(values))),
                     ("bigint", "int", "varchar", "blob", "set", "float", "bit", "decimal", "datetime", "text",
                      "longtext"))
    buf = bytearray(len(packet).to_bytes(3, "little") + b"\x01" + packet)
    change, = ChunkReader(info).changes(ResultRows(buf, 0, len(buf), 1, 0, len(values)), {}, 0, 0, "snapshot:0:0")
    row = orjson.loads(orjson.dumps(change["after"]))
    assert row == {"c0": -5, "c1": None, "c2": "x" * 300, "c3": "AP8=", "c4": ["a", "c"], "c5": 1.1, "c6": 513,
                   "c7": "12.5000", "c8": "2026-01-01 00:00:00.5", "c9": "é\"\\\n", "c10": "70000" * 14000}
    text = [v if v is None or t in ("blob", "bit") else v.decode() for v, t in zip(values, info.types)]
    assert orjson.loads(orjson.dumps(info.row(tuple(text)), default=lambda b: "AP8=")) == row


def test_snapshot_metrics():
    m = Metrics()
    m.snapshot_state(1)
    m.snapshot_chunk("d.t", 10, 1, 3)
    m.snapshot_chunk("d.t", 4, 2, 1)
    reg = m.registry
    assert reg.get_sample_value("binlogd_snapshot_state") == 1
    assert reg.get_sample_value("binlogd_snapshot_rows_total", {"table": "d.t"}) == 14
    assert reg.get_sample_value("binlogd_snapshot_chunks_done", {"table": "d.t"}) == 2
    assert reg.get_sample_value("binlogd_snapshot_chunks_total", {"table": "d.t"}) == 2  # never under done


def test_all_at_once_runs_the_ranges_together_and_raises_the_first_error():
    """The key ranges' runner: nothing to run gives nothing; the ranges run at once and their results come in
    order; an error cancels the others and is raised (the first in the coroutines' order)."""
    import asyncio

    from binlogd.daemon.snapshot.ranges import all_at_once

    async def go():
        assert await all_at_once([]) == []
        order, cancelled = [], []

        async def step(name, then=None):
            order.append(name)
            await asyncio.sleep(0.01)
            if then is not None:
                raise then
            return name

        async def forever():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        assert await all_at_once([step("a"), step("b")]) == ["a", "b"]
        assert order == ["a", "b"]
        with pytest.raises(KeyError):
            await all_at_once([step("c", KeyError("first")), step("d", OSError("lost")), forever()])
        assert cancelled == [True]

    asyncio.run(go())
