"""The stdout sink, and make_sink's kinds."""

from __future__ import annotations

import errno
import io
import json
import sys
from types import SimpleNamespace

import pytest

from binlogd.daemon.sinks import SinkError, make_sink
from binlogd.daemon.sinks.archive import ArchiveSink
from binlogd.daemon.sinks.jsonl import JsonLinesSink
from binlogd.daemon.sinks.stdout import StdoutSink
from tests.support.sinks import change


def commit(sink) -> dict:
    """Flush, hand over and sync, as the Committer does: the state once durable."""
    state = sink.flush()
    sink.begin_sync()
    sink.sync()
    return state


def test_stdout_writes_json_lines_and_flushes_on_commit():
    raw = io.BytesIO()
    buffered = io.BufferedWriter(raw, buffer_size=1 << 16)
    sink = StdoutSink(buffered)
    sink.open(None)
    sink.change(change(0))
    sink.change(change(1))
    assert raw.getvalue() == b""  # not flushed before the commit
    assert commit(sink) == {}
    assert [json.loads(line) for line in raw.getvalue().splitlines()] == [change(0), change(1)]
    assert raw.getvalue().endswith(b"\n") and raw.getvalue().count(b"\n") == 2


def test_stdout_commit_calls_flush():
    class Counting(io.BytesIO):
        flushes = 0

        def flush(self):
            self.flushes += 1
            super().flush()

    out = Counting()
    sink = StdoutSink(out)
    sink.change({"a": 1})
    assert out.flushes == 0
    commit(sink)
    assert out.flushes == 1
    assert out.getvalue() == b'{"a":1}\n'


def test_stdout_broken_pipe_is_a_sink_error():
    class Broken(io.BytesIO):
        def flush(self):
            raise OSError(errno.EPIPE, "Broken pipe")

    sink = StdoutSink(Broken())
    sink.change({"a": 1})
    with pytest.raises(SinkError, match="Broken pipe"):
        commit(sink)


def test_stdout_defaults_to_the_process_stdout(monkeypatch):
    buf = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", SimpleNamespace(buffer=buf))
    sink = StdoutSink()
    sink.change({"a": 1})
    commit(sink)
    assert buf.getvalue() == b'{"a":1}\n'


def test_make_sink_kinds(tmp_path):
    cfg = SimpleNamespace(kind="jsonl", path=str(tmp_path), max_file_bytes=5, max_file_seconds=0, fsync=False,
                          format="binlogd", server_name="binlogd")
    sink = make_sink(cfg)
    assert isinstance(sink, JsonLinesSink) and sink.max_file_bytes == 5 and sink.fsync is False
    archive = SimpleNamespace(kind="archive", path=str(tmp_path), fsync=True, upload=SimpleNamespace(url=""))
    assert isinstance(make_sink(archive), ArchiveSink)
    assert make_sink(archive).wants_rows is False
    assert isinstance(make_sink(SimpleNamespace(kind="stdout", format="debezium", server_name="x")), StdoutSink)
    with pytest.raises(SinkError, match="kafka"):
        make_sink(SimpleNamespace(kind="kafka", format="binlogd", server_name="binlogd"))


@pytest.mark.parametrize("fmt", ["binlogd", "debezium"])
def test_stdout_takes_change_lines_in_the_binlogd_format_only(fmt):
    from binlogd.library.serialize import dumps

    text = b"".join(dumps(change(i)) + b"\n" for i in range(3))
    out = io.BytesIO()
    sink = StdoutSink(out, format=fmt)
    took = sink.change_lines(memoryview(text), count=3, prefix="snapshot:0:0", first=0, schema="db", table="t")
    commit(sink)
    assert took is (fmt == "binlogd") and out.getvalue() == (text if took else b"")
