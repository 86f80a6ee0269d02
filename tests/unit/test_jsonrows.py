"""The C JSON row writer (library._jsonrows) against the reference path, byte for byte.

The reference is what the JSON-lines sink and ``binlogd dump --json`` wrote before the C writer:
row dicts from the generated Python decoders (no C at all) given to ``serialize.dumps`` (orjson).
Both must give the same bytes, or both raise EventDecodeError:
- every event of every binlog of the shared corpus (``event_json``) and the change lines of every
  rows event (``change_lines``);
- synthetic tables of every column type with plausible and mutated value bytes (hypothesis), and
  mutated real rows of the corpus;
- text: every byte sequence as UTF-8 text (escapes, control characters, invalid UTF-8 written as
  Python's backslashreplace does), and the scalars against orjson itself.
The every-type tables of a real server are in tests/integration/test_jsonrows.py.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from functools import partial

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from binlogd.library import jsonrows
from binlogd.library.serialize import change_events, dumps, event_to_dict, flatten, split_json_diffs
from binlogd.protocol import events as E
from binlogd.protocol import rowcodec
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.errors import BinlogError, EventDecodeError
from binlogd.protocol.reader import iter_events
from binlogd.protocol.rowcodec import TableCodec
from binlogd.protocol.rows import RowImages
from binlogd.protocol.tablemap import Column
from tests.support.paths import CORPUS, REPO
from tests.support.rowfuzz import mutate, synthetic_rows

C = pytest.importorskip("binlogd.library._jsonrows", reason="the C extension is not built (pip install -e .)")

CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".sql", ".txt",
                                                                                          ".json", ".py"))


@pytest.fixture(autouse=True)
def _restore_modes():
    rows_mode, json_mode = rowcodec.speedups_enabled(), jsonrows.use_speedups(True)
    assert json_mode, "the C JSON writer is built but off (BINLOGD_PURE_PYTHON set?)"
    yield
    rowcodec.use_speedups(rows_mode)
    jsonrows.use_speedups(json_mode)


def _outcome(fn):
    """("ok", value), or ("error", the exception's type): EventDecodeError for malformed rows, and what
    orjson raises for a value JSON cannot hold (a BIT of more than 64 bits from a damaged TABLE_MAP)."""
    try:
        return "ok", fn()
    except (EventDecodeError, TypeError) as exc:
        return "error", type(exc)


def _both(fn):
    """(reference, native): fn run with no C at all, then with the C JSON writer.

    When the C writer raises, rows_json falls back on the reference, which raises the canonical error:
    the C writer must then have raised on rows the reference rejects, never on rows it writes.
    """
    rowcodec.use_speedups(False)
    jsonrows.use_speedups(False)
    reference = _outcome(fn)
    rowcodec.use_speedups(True)
    jsonrows.use_speedups(True)
    raised = []
    real = C.rows

    def rows(*args):
        try:
            return real(*args)
        except Exception as exc:
            raised.append(exc)
            raise

    jsonrows.C.rows = rows
    try:
        native = _outcome(fn)
    finally:
        jsonrows.C.rows = real
    assert not raised or reference[0] == "error", f"the C writer raised {raised[0]!r} on rows the reference writes"
    return reference, native


def _read(path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


# --------------------------------------------------------------------------- whole files


def _reference_event(event, name: str, end: int) -> bytes:
    return dumps(event_to_dict(event, name, end))


def _reference_changes(event, name: str, gtid: str) -> tuple[bytes, int]:
    changes = list(change_events(event, name, gtid))
    return b"".join(dumps(c) + b"\n" for c in changes), len(changes)


def _file_json(data: bytes, name: str, write_event=jsonrows.event_json, write_changes=jsonrows.change_lines) -> list:
    """Every event's JSON and every rows event's change lines (or the error) in the current mode."""
    out = []
    try:
        for ev in iter_events(data):
            end = ev.header.pos + ev.header.event_length
            for item in flatten(ev):
                out.append(_outcome(partial(write_event, item, name, end)))
                if isinstance(item, E.RowsEvent):
                    out.append(_outcome(partial(write_changes, item, name, "0-1-2")))
    except BinlogError as exc:
        out.append(("stopped", type(exc).__name__))
    return out


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_same_bytes(path) -> None:
    data = _read(path)
    rowcodec.use_speedups(False)
    jsonrows.use_speedups(False)
    reference = _file_json(data, path.name, _reference_event, _reference_changes)
    rowcodec.use_speedups(True)
    jsonrows.use_speedups(True)
    native = _file_json(data, path.name)
    assert len(native) == len(reference)
    for k, (a, b) in enumerate(zip(reference, native)):
        assert a == b, f"item {k} of {path.name}:\nreference {a!r:.400}\nnative    {b!r:.400}"


def test_corpus_goes_through_c(monkeypatch) -> None:
    """The corpus comparison is worth something only if the C writer wrote (nearly) every rows event."""
    calls = {"ok": 0, "failed": 0}
    real = C.rows

    def counting(*args):
        try:
            out = real(*args)
        except Exception:
            calls["failed"] += 1
            raise
        calls["ok"] += 1
        return out

    monkeypatch.setattr(jsonrows.C, "rows", counting)
    for path in CORPUS_FILES:
        _file_json(_read(path), path.name)
    if not CORPUS_FILES:
        pytest.skip("no corpus")
    assert calls["ok"] > 1000 and calls["failed"] == 0, calls


def test_one_switch_turns_every_speedup_off() -> None:
    """BINLOGD_PURE_PYTHON=1 turns off the JSON writer, the row image decoder, the skim, the framing loop and
    the SQL writer of ``binlogd sql``."""
    code = ("from binlogd.protocol import packet, rowcodec, skim; from binlogd.library import jsonrows; from binlogd.library.sqlwriter import native; "
            "print(jsonrows._speedups, rowcodec.speedups_enabled(), skim._USE_C, packet._ok_payloads_c is not None, "
            "native.speedups_enabled())")
    env = dict(os.environ, BINLOGD_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"] * 5
    env.pop("BINLOGD_PURE_PYTHON")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"] * 5


# --------------------------------------------------------------------------- synthetic rows


def _event(columns, data: bytes, kind: str = "insert", null_offset: int = 0) -> E.RowsEvent:
    codec = TableCodec(tuple(columns))
    bits = (1 << len(columns)) - 1
    header = E.EventHeader(1700000000, 30, 7, 19 + len(data), 0, 0, 1234)
    images = RowImages(codec, kind, data, bits, bits if kind == "update" else None, False, header, null_offset)
    return E.RowsEvent(header, kind, 70, 1, "db", "t", codec.labels, images)


def _lines(columns, data: bytes, kind: str = "insert", null_offset: int = 0):
    """A function giving the change lines and the dump form of rows events made afresh (no cached rows)."""
    return lambda: (jsonrows.change_lines(_event(columns, data, kind, null_offset), "f.000001", None),
                    jsonrows.event_json(_event(columns, data, kind, null_offset), "f.000001"))


def _text(collation) -> Column:
    return Column(0, T.VARCHAR, 300, nullable=True, name='k"\\\x01é', collation=collation)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=20).map(lambda s: s.encode()),
       st.sampled_from([45, 33, None, 8, 63]))
def test_text_bytes(raw, collation) -> None:
    """Any bytes in a text column: UTF-8 (invalid bytes as \\xNN), another charset, unknown (base64)."""
    data = b"\x00" + len(raw).to_bytes(2, "little") + raw
    reference, native = _both(_lines([_text(collation)], data))
    assert reference == native


def test_every_ascii_character_and_invalid_utf8() -> None:
    raw = bytes(range(128)) + "é€😀\u2028".encode() + b"\xc3\x28\xe2\x82\xf0\x9f\x98\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf\xff"
    data = b"\x00" + len(raw).to_bytes(2, "little") + raw
    reference, native = _both(_lines([_text(45)], data))
    assert reference == native and reference[0] == "ok"
    assert b'\\\\xc3(' in native[1][0][0] and b"\\u001f" in native[1][0][0]


@settings(max_examples=300, deadline=None)
@given(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text())
def test_scalars_as_orjson(value) -> None:
    assert C.scalar(value) == orjson.dumps(value)


def test_scalar_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        C.scalar([1])
    with pytest.raises(orjson.JSONEncodeError):
        C.scalar(2**64)


def test_update_and_delete_framing() -> None:
    cols = [Column(0, T.LONG, 0, nullable=False, name="id"), Column(1, T.VARCHAR, 10, collation=45, name="v")]
    data = b"\x00\x01\x00\x00\x00\x02hi" + b"\x02\x02\x00\x00\x00"
    for kind, raw in (("update", data * 2), ("delete", data), ("insert", data)):
        reference, native = _both(_lines(cols, raw, kind))
        assert reference == native and native[0] == "ok", kind
    lines = native[1][0][0].splitlines()
    assert orjson.loads(lines[1]) == {"op": "insert", "schema": "db", "table": "t", "before": None,
                                      "after": {"id": 2, "v": None}, "ts": 1700000000,
                                      "source": {"server_id": 7, "file": "f.000001", "pos": 1234, "gtid": None,
                                                 "row": 1, "id": "f.000001:1234:0:1"}}


def test_duplicate_labels_and_empty_images_take_the_reference() -> None:
    cols = [Column(0, T.TINY, 0, nullable=False, name="a"), Column(1, T.TINY, 0, nullable=False, name="a")]
    reference, native = _both(_lines(cols, b"\x00\x01\x02"))
    assert reference == native == ("ok", ((b'{"op":"insert","schema":"db","table":"t","before":null,"after":{"a":2},'
                                           b'"ts":1700000000,"source":{"server_id":7,"file":"f.000001","pos":1234,'
                                           b'"gtid":null,"row":0,"id":"f.000001:1234:0:0"}}\n', 1), b'{"file":"f.000001","pos":1234,"next_pos":1256,'
                                          b'"timestamp":1700000000,"type":"WRITE_ROWS","server_id":7,"schema":"db",'
                                          b'"table":"t","table_id":70,"flags":1,"rows":[{"a":2}]}'))
    codec = TableCodec((Column(0, T.LONG, 0),))
    h = E.EventHeader(1, 30, 1, 20, 0, 0, 4)
    empty = E.RowsEvent(h, "insert", 1, 0, "d", "t", codec.labels, RowImages(codec, "insert", b"\x00", 0, None,
                                                                                False, h, 0))
    with pytest.raises(EventDecodeError, match="row 1 of insert: row image is empty"):
        jsonrows.change_lines(empty, "f", None)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_synthetic_tables(data) -> None:
    columns, kind, null_offset, raw = synthetic_rows(data)
    reference, native = _both(_lines(columns, raw, kind, null_offset))
    assert reference == native
    event(reference[0])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_corpus_rows(data) -> None:
    """Real rows events of the corpus with bytes changed, cut or added."""
    samples = _corpus_samples()
    if not samples:
        pytest.skip("no corpus rows")
    images = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]
    edits = data.draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6))
    raw = mutate(images.data, edits, data.draw(st.none() | st.integers(0, 1 << 20)), data.draw(st.binary(max_size=8)))

    def run():
        copy = RowImages(images.codec, images.kind, raw, images.present_before, images.present_after, images.partial,
                         images.header, images.null_offset)
        return jsonrows.change_lines(E.RowsEvent(images.header, images.kind, 1, 0, "s", "t", images.codec.labels,
                                                 copy), "f", None)[0]

    reference, native = _both(run)
    assert reference == native
    event(reference[0])


_SAMPLES: list | None = None


def _corpus_samples() -> list[RowImages]:
    """One rows event per (table shape, kind, bitmaps) of the corpus, its images copied out of the file."""
    global _SAMPLES
    if _SAMPLES is None:
        seen, _SAMPLES = set(), []
        for path in CORPUS_FILES:
            try:
                for ev in iter_events(_read(path)):
                    for item in flatten(ev):
                        images = getattr(item, "images", None)
                        if type(images) is not RowImages or len(images.data) > 20000:
                            continue
                        key = (images.codec.columns, images.kind, images.present_before, images.present_after)
                        if key not in seen:
                            seen.add(key)
                            _SAMPLES.append(RowImages(images.codec, images.kind, bytes(images.data),
                                                      images.present_before, images.present_after, images.partial,
                                                      images.header, images.null_offset))
            except BinlogError:
                continue
    return _SAMPLES


def test_sinks_write_the_reference_lines(tmp_path) -> None:
    """The JSON-lines and stdout sinks' rows() write what change() wrote for each change dict, and count them."""
    import io

    from binlogd.daemon.sinks.jsonl import JsonLinesSink
    from binlogd.daemon.sinks.stdout import StdoutSink

    samples = [s for s in _corpus_samples() if s.kind == "update"][:5]
    samples += [s for s in _corpus_samples() if s.kind != "update"][:10]
    if not samples:
        pytest.skip("no corpus rows")
    events = [E.RowsEvent(s.header, s.kind, 1, 0, "s", "t", s.codec.labels, s) for s in samples]
    by_rows, by_change = JsonLinesSink(tmp_path / "a"), JsonLinesSink(tmp_path / "b")
    out_rows, out_change = io.BytesIO(), io.BytesIO()
    for sink in (by_rows, by_change):
        sink.open(None)
    counts = []
    for ev in events:
        counts.append(by_rows.rows(ev, "f.000001", "0-1-2"))
        counts.append(StdoutSink(out_rows).rows(ev, "f.000001", "0-1-2"))
        for change in change_events(ev, "f.000001", "0-1-2"):
            by_change.change(change)
            StdoutSink(out_change).change(change)
    by_rows.flush(), by_change.flush()
    by_rows.close(), by_change.close()
    written = (tmp_path / "a" / "changes-000001.jsonl").read_bytes()
    assert written == (tmp_path / "b" / "changes-000001.jsonl").read_bytes() == out_rows.getvalue()
    assert out_rows.getvalue() == out_change.getvalue()
    assert sum(counts) == 2 * written.count(b"\n") and written.count(b"\n") >= len(events)


def test_images_json_are_dumps_of_each_image() -> None:
    """images_json (the Spark source's columns): one JSON text per image, an update's before then after."""
    samples = _corpus_samples()
    if not samples:
        pytest.skip("no corpus rows")
    for s in samples:
        rowcodec.use_speedups(False)
        jsonrows.use_speedups(False)
        rows = E.RowsEvent(s.header, s.kind, 1, 0, "s", "t", s.codec.labels, s).rows
        reference = [dumps(image) for row in rows for image in (
            (row[0], split_json_diffs(row[1])[0]) if s.kind == "update" else (row,))]
        rowcodec.use_speedups(True)
        jsonrows.use_speedups(True)
        assert jsonrows.images_json(E.RowsEvent(s.header, s.kind, 1, 0, "s", "t", s.codec.labels, s)) == reference
