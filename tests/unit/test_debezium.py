"""``[sink] format = "debezium"``: library.debezium's envelope of real changes, its three writers, the sinks, the config.

The changes come from the shared corpus of real binlogs, decoded by the project's decoder and turned into
binlogd change events by :func:`library.serialize.change_events`. Each envelope is checked field by field
against its change (op mapping, before/after, source position, GTID, time), not against stored output;
the row-image writer (:func:`library.debezium.change_lines`, C and pure Python) must give the bytes of
the dict path for every rows event of the corpus.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import time
from types import SimpleNamespace

import orjson
import pytest

from binlogd.daemon.config import ConfigError, load_config
from binlogd.daemon.sinks import make_sink
from binlogd.daemon.sinks.jsonl import JsonLinesSink
from binlogd.daemon.sinks.stdout import StdoutSink
from binlogd.library import debezium, jsonrows
from binlogd.library.serialize import change_events, dumps, flatten, split_json_diffs
from binlogd.protocol import events as E
from binlogd.protocol import rowcodec
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.reader import iter_events
from tests.support.paths import CORPUS
from tests.support.sinks import commit_sink

CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".txt",
                                                                                          ".json", ".py"))
SOURCE_KEYS = ["version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns", "table",
               "server_id", "gtid", "file", "pos", "row", "id", "thread", "query"]
ENVELOPE_KEYS = ["before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"]
NOW = 1_764_270_000_123_456_789  # a fixed processing time (ns) where bytes are compared


def _read(path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _rows_events(path):
    """(rows event, its changes) of one corpus file, the GTID a fixed text; events whose rows do not
    decode (damaged corpus files) are left out, as the decoder's own tests cover them."""
    out = []
    try:
        for ev in iter_events(_read(path)):
            for item in flatten(ev):
                if isinstance(item, E.RowsEvent):
                    try:
                        out.append((item, list(change_events(item, path.name, "0-1-42"))))
                    except BinlogError:
                        continue
    except BinlogError:
        pass
    return out


def event_file(changes: list) -> str | None:
    """The binlog file name the changes of one rows event carry."""
    return changes[0]["source"]["file"] if changes else None


@pytest.fixture(scope="module")
def corpus_changes() -> list:
    """Every (rows event, changes) of the corpus."""
    out = [pair for path in CORPUS_FILES for pair in _rows_events(path)]
    assert out, f"no rows event in {CORPUS}"
    return out


def check_envelope(env: dict, change: dict, server_name: str = "binlogd") -> None:
    """The envelope's fields against its change's own values."""
    src, dsrc = change["source"], env["source"]
    keys = list(env)
    if "json_diffs" in change:  # a partial JSON update's diffs follow "after"
        assert keys.pop(keys.index("after") + 1) == "json_diffs" and env["json_diffs"] == change["json_diffs"]
    assert keys == ENVELOPE_KEYS and list(dsrc) == SOURCE_KEYS, (list(env), list(dsrc))
    assert env["op"] == {"insert": "c", "update": "u", "delete": "d", "read": "r"}[change["op"]]
    assert env["before"] == change["before"] and env["after"] == change["after"]
    assert (dsrc["file"], dsrc["pos"], dsrc["row"], dsrc["id"], dsrc["gtid"], dsrc["server_id"]) == (
        src["file"], src["pos"], src["row"], src["id"], src["gtid"], src["server_id"])
    assert (dsrc["db"], dsrc["table"]) == (change["schema"], change["table"])
    assert (dsrc["ts_ms"], dsrc["ts_us"], dsrc["ts_ns"]) == (change["ts"] * 1000, change["ts"] * 10**6,
                                                             change["ts"] * 10**9)
    assert (dsrc["connector"], dsrc["name"], dsrc["version"]) == ("mysql", server_name, debezium.version())
    assert (dsrc["sequence"], dsrc["thread"], dsrc["query"], env["transaction"]) == (None, None, None, None)
    assert env["ts_us"] // 1000 == env["ts_ms"] and env["ts_ns"] // 1000 == env["ts_us"]


def test_corpus_envelopes_match_their_changes(corpus_changes) -> None:
    ops = {}
    for event, changes in corpus_changes:
        assert len(changes) == len(event.rows)
        for change in changes:
            env = debezium.envelope(change, "dbserver1", NOW)
            check_envelope(env, change, "dbserver1")
            assert env["source"]["snapshot"] == "false" and env["ts_ns"] == NOW
            if change["op"] == "update":  # before/after are the rows event's own pair (after without its diffs)
                before, after = event.rows[change["source"]["row"]]
                assert (env["before"], env["after"]) == (before, split_json_diffs(after)[0])
            ops[env["op"]] = ops.get(env["op"], 0) + 1
    assert set(ops) == {"c", "u", "d"}, ops  # the corpus has all three kinds


@pytest.mark.parametrize("speedups", [True, False], ids=["C", "pure-python"])
def test_row_image_writer_gives_the_dict_path_bytes(corpus_changes, speedups) -> None:
    """debezium.change_lines (row images, no dicts) == debezium_json of each change, a line each, for every rows event."""
    before = rowcodec.speedups_enabled(), jsonrows.use_speedups(speedups)
    try:
        for event, changes in corpus_changes:
            lines, n = debezium.change_lines(event, event_file(changes), "0-1-42", server_name="srv",
                                                  now_ns=NOW)
            assert n == len(changes)
            assert lines == b"".join(debezium.debezium_json(c, "srv", NOW) + b"\n" for c in changes), event.header.pos
    finally:
        rowcodec.use_speedups(before[0])
        jsonrows.use_speedups(before[1])


def test_from_binlogd_json_bytes(corpus_changes) -> None:
    """A bus sink may hold a change as the binlogd format's JSON: the same envelope as from the dict."""
    event, changes = next((e, c) for e, c in corpus_changes if e.kind == "update")
    lines, _ = jsonrows.change_lines(event, changes[0]["source"]["file"], "0-1-42")
    for line, change in zip(lines.split(b"\n"), changes):
        assert debezium.debezium_json(line, now_ns=NOW) == dumps(debezium.envelope(change, now_ns=NOW))
        assert debezium.debezium_json(line + b"\n", now_ns=NOW) == debezium.debezium_json(change, now_ns=NOW)
    with pytest.raises(ValueError):
        debezium.debezium_json(b"{not json")


@pytest.mark.parametrize("snapshot, text", [(True, "true"), ("incremental", "incremental"), ("last", "last"),
                                            (None, "false"), (False, "false")])
def test_snapshot_reads(corpus_changes, snapshot, text) -> None:
    """A snapshot row (op read, source.snapshot) is Debezium's op "r" with its snapshot text."""
    insert = next(c for _, cs in corpus_changes for c in cs if c["op"] == "insert")
    read = {**insert, "op": "read", "source": {**insert["source"], "snapshot": snapshot}}
    env = debezium.envelope(read, now_ns=NOW)
    check_envelope(env, read)
    assert (env["op"], env["source"]["snapshot"], env["before"]) == ("r", text, None)


def test_bad_changes_are_value_errors(corpus_changes) -> None:
    change = corpus_changes[0][1][0]
    with pytest.raises(ValueError, match="op 'upsert'"):
        debezium.envelope({**change, "op": "upsert"})
    with pytest.raises(ValueError, match="snapshot"):
        debezium.envelope({**change, "source": {**change["source"], "snapshot": "maybe"}})


def test_processing_time_is_now(corpus_changes) -> None:
    event, changes = corpus_changes[0]
    t0 = time.time_ns()
    env = debezium.envelope(changes[0])
    lines, _ = debezium.change_lines(event, "f.000001", None)
    t1 = time.time_ns()
    assert t0 // 10**6 <= env["ts_ms"] <= t1 // 10**6
    assert all(t0 // 10**6 <= orjson.loads(line)["ts_ms"] <= t1 // 10**6 for line in lines.splitlines())


def test_formatter_and_rows_writer() -> None:
    assert debezium.formatter("binlogd") is dumps
    assert debezium.rows_writer("binlogd") is jsonrows.change_lines  # the binlogd path is the untouched one
    for fn in (debezium.formatter, debezium.rows_writer):
        with pytest.raises(ValueError, match="'avro'"):
            fn("avro")


# -- the sinks -----------------------------------------------------------------------------------------------


def test_jsonl_sink_writes_envelopes(corpus_changes, tmp_path) -> None:
    """rows() (row images) and change() (a dict, as snapshots give) both write envelopes, committed by offset."""
    sink = JsonLinesSink(tmp_path, fsync=False, format="debezium", server_name="inventory")
    sink.open(None)
    expect = []
    for event, changes in corpus_changes[:50]:
        assert sink.rows(event, event_file(changes), "0-1-42") == len(changes)
        expect += changes
    read = {**expect[0], "op": "read", "source": {**expect[0]["source"], "snapshot": True}}
    sink.change(read)
    expect.append(read)
    state = commit_sink(sink)
    sink.close()
    lines = (tmp_path / state["file"]).read_bytes().splitlines()
    assert len(lines) == len(expect) and state["offset"] == (tmp_path / state["file"]).stat().st_size
    for line, change in zip(lines, expect):
        check_envelope(orjson.loads(line), change, "inventory")


def test_stdout_sink_writes_envelopes(corpus_changes) -> None:
    out = io.BytesIO()
    sink = StdoutSink(out, format="debezium")
    event, changes = corpus_changes[0]
    sink.rows(event, event_file(changes), None)
    sink.change(changes[0])
    sink.flush()
    got = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert len(got) == len(changes) + 1
    for env, change in zip(got, changes):  # rows() was given no GTID
        check_envelope(env, {**change, "source": {**change["source"], "gtid": None}})
    check_envelope(got[-1], changes[0])


def test_binlogd_format_is_unchanged(corpus_changes, tmp_path) -> None:
    """The default writes ARCHITECTURE.md's change events, byte for byte what jsonrows.change_lines gives."""
    sink = JsonLinesSink(tmp_path, fsync=False)
    sink.open(None)
    want = b""
    for event, changes in corpus_changes[:20]:
        sink.rows(event, event_file(changes), "0-1-42")
        want += jsonrows.change_lines(event, event_file(changes), "0-1-42")[0]
    state = commit_sink(sink)
    sink.close()
    assert (tmp_path / state["file"]).read_bytes() == want


def test_make_sink_passes_the_format(tmp_path) -> None:
    cfg = SimpleNamespace(kind="jsonl", path=str(tmp_path), max_file_bytes=0, max_file_seconds=0, fsync=False,
                          format="debezium", server_name="srv")
    assert make_sink(cfg)._json.keywords == {"server_name": "srv"}


# -- config ----------------------------------------------------------------------------------------------------


def test_config_defaults_and_env() -> None:
    c = load_config(None, env={})
    assert (c.sink.format, c.sink.server_name) == ("binlogd", "binlogd")
    c = load_config(None, env={"BINLOGD_SINK__FORMAT": "Debezium", "BINLOGD_SINK__SERVER_NAME": "dbserver1"})
    assert (c.sink.format, c.sink.server_name) == ("debezium", "dbserver1")
    c = load_config(None, env={}, overrides={"sink.format": "debezium", "sink.kind": "stdout"})
    assert c.sink.format == "debezium"


@pytest.mark.parametrize("overrides, key", [
    ({"sink.format": "avro"}, "sink.format"),
    ({"sink.server_name": " "}, "sink.server_name"),
    ({"sink.format": "debezium", "sink.kind": "archive"}, "sink.format"),
])
def test_config_errors(overrides, key) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={}, overrides=overrides)
    assert ei.value.key == key


def test_bad_format_env_names_the_variable() -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={"BINLOGD_SINK__FORMAT": "kafka"})
    assert ei.value.key == "sink.format" and ei.value.origin == "BINLOGD_SINK__FORMAT"
    assert "'binlogd', 'debezium'" in str(ei.value) and "'kafka'" in str(ei.value)


def test_cli_bad_format_exits_2_with_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "binlogd.cli", "run", "--set", "sink.format=json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "sink.format" in run.stderr and "'json'" in run.stderr
    assert "Traceback" not in run.stderr
