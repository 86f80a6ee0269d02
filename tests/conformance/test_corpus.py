"""Conformance against the shared corpus of real binlogs (../shared/binlogs, MANIFEST.md).

Every expected value here comes from MANIFEST.md (event counts from a header walk by
whoever built the corpus; values the source projects' own tests assert), from the
oracle files next to it, or from the source tests quoted in the manifest — never from
this decoder's own output.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import pytest

from binlogd.protocol import events as E
from binlogd.protocol.errors import BinlogError, EventDecodeError
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.reader import EventReader, iter_events
from tests.support import manifest as M

ENTRIES = M.entries_or_empty()
BY_PATH = {e.path: e for e in ENTRIES}

CORRUPT_RELAY = "rust_mysql_common/corrupt-relay-bin.000624"
RENUMBERED = ("rust_mysql_common/ver_5_1-wl2325_r.001", "rust_mysql_common/ver_5_1-wl2325_s.001")
EXCEPTIONS = {CORRUPT_RELAY, *RENUMBERED}

POSITIVE = [e for e in ENTRIES if not e.negative and e.path not in EXCEPTIONS]
NEGATIVE = [e for e in ENTRIES if e.negative]


_ids, _entry, _data, _materialise = M.ids, M.entry, M.data, M.materialise


@lru_cache(maxsize=None)
def _events(path: str) -> tuple[E.Event, ...]:
    out = []
    for event in iter_events(_data(path)):
        _materialise(event)
        out.append(event)
    return tuple(out)


def _events_of(path: str, corpus: Path) -> tuple[E.Event, ...]:
    assert corpus == M.CORPUS
    return _events(path)


def _rows_events(events, cls=E.RowsEvent):
    return [e for e in events if isinstance(e, cls)]


# =========================================================================== manifest sanity


def test_manifest_parses(corpus):
    """Every file line of MANIFEST.md parses, and each bracketed total is the sum of its counts."""
    text = (corpus / "MANIFEST.md").read_text(encoding="utf-8")
    section = text.split("## Text oracles")[0]
    lines = [line for line in section.splitlines() if line.startswith("- `")]
    assert len(ENTRIES) == len(lines) > 50
    for e in ENTRIES:
        assert e.file(corpus).is_file(), e.path
        if e.total is not None:
            assert sum(e.raw_counts.values()) == e.total, e.path
    assert {e.path for e in NEGATIVE} == {
        "canal/tsdb/mysql-bin.000001", "mysql-binlog-connector-java/mysql-bin.sakila.gz",
        "rust_mysql_common/binlog_truncated_event.000001",
        "rust_mysql_common/binlog_truncated_prev_gtid_event.000001"}


def test_manifest_counts_agree_with_raw_header_walk(corpus):
    """Our independent raw header walk agrees with the manifest's own counts (checks the oracle, not us)."""
    for e in ENTRIES:
        if e.negative or e.total is None:
            continue
        headers, partial = M.raw_headers(_data(e.path))
        assert partial is None, e.path
        assert len(headers) == e.total, e.path


# =========================================================================== whole-file decoding


@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_decodes_to_end_with_manifest_counts(entry, corpus):
    """Magic to EOF with no error, every row materialised, per-type counts equal the manifest's."""
    events = _events_of(entry.path, corpus)
    counts = Counter(e.header.type_name for e in events)  # top-level only, as the manifest counts
    assert dict(counts) == entry.counts
    assert len(events) == entry.total
    # every event sits where the header walk says it does
    headers, _ = M.raw_headers(_data(entry.path))
    assert [e.header.pos for e in events] == [h.pos for h in headers]
    assert [e.header.event_length for e in events] == [h.length for h in headers]


def test_corrupt_relay_log_fails_at_the_broken_query(corpus):
    """corrupt-relay-bin.000624 holds a QUERY (171 bytes) whose status-vars length runs past its end.

    rust_mysql_common's own roundtrip test expects an error there (mod.rs: "contains broken query
    event", UnexpectedEof, event_size 171). Everything before it must decode; it must raise an
    EventDecodeError naming that event's offset.
    """
    entry = _entry(CORRUPT_RELAY)
    assert "broken QUERY event (size 171)" in entry.line
    data = _data(entry.path)
    headers, _ = M.raw_headers(data)
    # An independent look at the raw bytes: a QUERY body is a 13-byte post-header (thread id,
    # exec time, db length at +8, error code, status-vars length at +11), the status vars, the db
    # name and its NUL, then the statement. The broken event's lengths do not fit in its body.
    broken = []
    for h in headers:
        if h.type_code == 2:
            body = data[h.pos + 19:h.pos + h.length]  # no checksums in a 5.0 file
            db_len, status_len = body[8], int.from_bytes(body[11:13], "little")
            if 13 + status_len + db_len + 1 > len(body):
                broken.append(h)
    assert len(broken) == 1
    assert broken[0].length == 171
    index = headers.index(broken[0])
    assert (broken[0].pos, index) == (91204, 872)
    seen = []
    with pytest.raises(EventDecodeError) as info:
        for event in iter_events(data):
            _materialise(event)
            seen.append(event)
    assert len(seen) == 872
    assert info.value.offset == 91204


# The 5.2.2 "a_drop6p" (wl2325, "alcatel") tree numbered event types 16-22 differently from
# every released server. MySQL maps them to today's numbers when it reads such a file, and so
# does our decoder (header.type_name is the mapped name). The manifest's counts come from a
# naive header walk that names the raw codes with today's numbers, so compare after applying
# the same permutation to the manifest's names:  raw code -> (manifest's naive name, real event)
_OLD_CODES = {
    16: ("XID", "TABLE_MAP"),
    17: ("BEGIN_LOAD_QUERY", "PRE_GA_WRITE_ROWS"),
    18: ("EXECUTE_LOAD_QUERY", "PRE_GA_UPDATE_ROWS"),
    19: ("TABLE_MAP", "PRE_GA_DELETE_ROWS"),
    20: ("PRE_GA_WRITE_ROWS", "XID"),
    21: ("PRE_GA_UPDATE_ROWS", "BEGIN_LOAD_QUERY"),
    22: ("PRE_GA_DELETE_ROWS", "EXECUTE_LOAD_QUERY"),
}
_NAIVE_TO_REAL = dict(_OLD_CODES.values())


@pytest.mark.parametrize("path", RENUMBERED)
def test_renumbered_tree_counts_after_permutation(path, corpus):
    entry = _entry(path)
    assert entry.server_version.startswith("5.2.2-a_drop6p")
    expected: Counter[str] = Counter()
    for name, n in entry.counts.items():
        expected[_NAIVE_TO_REAL.get(name, name)] += n
    events = _events_of(path, corpus)
    assert dict(Counter(e.header.type_name for e in events)) == dict(expected)
    assert len(events) == entry.total
    # and the raw codes in the file are the old ones the manifest named naively
    headers, _ = M.raw_headers(_data(path))
    for h, ev in zip(headers, events):
        if h.type_code in _OLD_CODES:
            assert ev.header.type_name == _OLD_CODES[h.type_code][1]


_EXPECTS_N = re.compile(r"(?:test expects|expects) (\d+) events")
COUNTED = [e for e in POSITIVE if _EXPECTS_N.search(e.notes.split("[")[0])]


@pytest.mark.parametrize("entry", COUNTED, ids=_ids(COUNTED))
def test_event_total_the_source_test_expects(entry, corpus):
    """e.g. checksum-crc32: 303, checksum-none: 191, sakila: 1462 (the Java/Rust projects' own asserts)."""
    n = int(_EXPECTS_N.search(entry.notes.split("[")[0]).group(1))
    assert len(_events_of(entry.path, corpus)) == n


def test_checksum_files_totals(corpus):
    assert len(_events_of("mysql-binlog-connector-java/mysql-bin.checksum-crc32", corpus)) == 303
    assert len(_events_of("mysql-binlog-connector-java/mysql-bin.checksum-none", corpus)) == 191
    assert "303" in _entry("mysql-binlog-connector-java/mysql-bin.checksum-crc32").line
    assert "191" in _entry("mysql-binlog-connector-java/mysql-bin.checksum-none").line


# =========================================================================== negative samples


def _expected_error_offset(entry: M.Entry, size: int) -> int:
    text = entry.line
    m = re.search(r"(\d+)-byte partial header", text) or re.search(r"trailing (\d+) bytes", text)
    if m:
        return size - int(m.group(1))  # the partial event starts where the complete ones end
    assert "magic" in text, f"manifest line names neither a partial event nor a bad magic: {text}"
    return 0


@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_negative_file_raises_binlog_error_with_offset(entry, corpus):
    data = _data(entry.path)
    expected = _expected_error_offset(entry, len(data))
    try:
        for event in iter_events(data):
            _materialise(event)
    except BinlogError as exc:
        assert exc.offset == expected, str(exc)
        assert str(expected) in str(exc)
    except Exception as exc:  # noqa: BLE001 - any other type is the failure under test
        pytest.fail(f"{type(exc).__name__} instead of a BinlogError: {exc!r}")
    else:
        pytest.fail("no error")


def test_negative_offsets_from_manifest(corpus):
    """The offsets the brief names follow from the manifest's own description of the files."""
    assert _expected_error_offset(_entry("rust_mysql_common/binlog_truncated_event.000001"),
                                  len(_data("rust_mysql_common/binlog_truncated_event.000001"))) == 4
    assert _expected_error_offset(_entry("rust_mysql_common/binlog_truncated_prev_gtid_event.000001"),
                                  len(_data("rust_mysql_common/binlog_truncated_prev_gtid_event.000001"))) == 120


@pytest.mark.parametrize("path", ["canal/tsdb/mysql-bin.000001", "mysql-binlog-connector-java/mysql-bin.sakila.gz"])
def test_magic_check_fails(path, corpus):
    with pytest.raises(BinlogError) as info:
        list(iter_events(_data(path)))
    assert info.value.offset == 0
    assert "magic" in str(info.value)


@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_negative_file_incremental_reader(entry, corpus):
    """The incremental EventReader (7-byte feeds) reports the same offset, never another exception type."""
    data = _data(entry.path)
    expected = _expected_error_offset(entry, len(data))
    reader = EventReader()
    with pytest.raises(BinlogError) as info:
        for i in range(0, len(data), 7):
            reader.feed(data[i:i + 7])
            while reader.next_event() is not None:
                pass
        reader.close()
    assert info.value.offset == expected


def test_partial_prefixes_never_crash(corpus):
    """Every prefix of a small file either decodes or raises a BinlogError (never another type)."""
    data = _data("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    headers, _ = M.raw_headers(data)
    bounds = {h.pos for h in headers} | {len(data)}
    for cut in range(len(data) + 1):
        try:
            n = sum(1 for _ in iter_events(data[:cut]))
        except BinlogError as exc:
            assert exc.offset is not None
            assert cut not in bounds or cut < 4
        else:
            assert cut in bounds and n == sum(1 for h in headers if h.pos + h.length <= cut)


# =========================================================================== values the sources assert


def test_rust_mysql_binlog_bin_log(corpus):
    entry = _entry("rust-mysql-binlog/bin-log.000001")
    line = entry.line
    query = re.search(r"first interesting event = QUERY '([^']*)'", line).group(1)
    schema, table = re.search(r"rows for (\w+)\.(\w+)", line).groups()
    gtid = re.search(r"GTID ([0-9a-f-]{36}:\d+)", line).group(1)
    ts = int(re.search(r"ts (\d+)", line).group(1))
    row_id, row_dec = re.search(r"row \((\d+), ([\d.]+), <string>\)", line).groups()
    scale = int(re.search(r"DECIMAL\(\d+, (\d+)\)", query).group(1))
    expected_dec = str(Decimal(row_dec).quantize(Decimal(1).scaleb(-scale)))  # "0.10000"

    events = _events_of(entry.path, corpus)
    queries = [e for e in events if isinstance(e, E.QueryEvent)]
    assert queries[0].query == query
    i, rows_ev = next((i, e) for i, e in enumerate(events) if isinstance(e, E.RowsEvent))
    assert (rows_ev.schema, rows_ev.table) == (schema, table)
    last_gtid = [e for e in events[:i] if isinstance(e, E.GtidEvent)][-1]
    assert last_gtid.gtid == gtid
    assert rows_ev.header.timestamp == ts
    row = rows_ev.rows[0]
    values = list(row.values())
    assert values[0] == int(row_id)
    assert isinstance(values[1], str) and values[1] == expected_dec == "0.10000"
    assert isinstance(values[2], str)


def test_previous_gtids_untagged(corpus):
    entry = _entry("rust_mysql_common/binlog_transaction_previous_GTID_no_tag.000001")
    text = re.search(r"expects PREVIOUS_GTIDS (\S+)", entry.line).group(1)
    lo, hi = map(int, re.search(r"interval \[(\d+),(\d+)\)", entry.line).groups())
    sid = text.split(":")[0]
    events = _events_of(entry.path, corpus)
    prev = [e for e in events if isinstance(e, E.PreviousGtidsEvent)]
    assert len(prev) == 1
    got = MysqlGtidSet.parse(prev[0].gtid_set)
    assert got == MysqlGtidSet.parse(text)
    expected = MysqlGtidSet()
    expected.add_interval(sid, lo, hi)
    assert got == expected


def test_previous_gtids_tagged_and_gtid_tagged(corpus):
    entry = _entry("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    m = re.search(r"PREVIOUS_GTIDS (\S+) \+ (:\S+);", entry.line)
    text = m.group(1) + m.group(2)  # uuid:1-13 + :mytag:1-2
    gno = int(re.search(r"gno=(\d+)", entry.line).group(1))
    tag = re.search(r"tag '(\w+)'", entry.line).group(1)
    sid = text.split(":")[0]
    events = _events_of(entry.path, corpus)
    prev = [e for e in events if isinstance(e, E.PreviousGtidsEvent)]
    assert MysqlGtidSet.parse(prev[0].gtid_set) == MysqlGtidSet.parse(text)
    expected = MysqlGtidSet()
    expected.add_interval(sid, 1, 14)
    expected.add_interval(sid, 1, 3, tag=tag)
    assert MysqlGtidSet.parse(prev[0].gtid_set) == expected
    tagged = [e for e in events if e.header.type_name == "GTID_TAGGED"]
    assert len(tagged) == 1
    g = tagged[0]
    assert isinstance(g, E.GtidEvent)
    assert (g.sid, g.gno, g.tag) == (sid, gno, tag)
    assert g.gtid == f"{sid}:{tag}:{gno}"


_COLLATION_IDS = {"unknown": None, "utf8mb4_general_ci": 45, "binary": 63, "utf8mb4_0900_ai_ci": 255}


def _expand(items: str) -> list:
    out = []
    for item in (s.strip() for s in items.split(",")):
        m = re.fullmatch(r"(\w+) x(\d+)", item)
        out.extend([m.group(1)] * int(m.group(2)) if m else [item])
    return out


def test_mariadb_full_row_metadata(corpus):
    entry = _entry("rust_mysql_common/mariadb-bin.000001")
    m = re.search(r"asserts schema (\w+), table (\w+), cols ([\w,]+), PK flag on (\w+), collations \[([^\]]*)\]",
                  entry.line)
    schema, table, cols, pk, collations = m.groups()
    cols = cols.split(",")
    collations = [_COLLATION_IDS[c] for c in _expand(collations)]
    events = _events_of(entry.path, corpus)
    maps = [e for e in events if isinstance(e, E.TableMapEvent)]
    assert len(maps) == entry.counts["TABLE_MAP"]
    for tm in maps:
        assert (tm.schema, tm.table) == (schema, table)
        assert [c.name for c in tm.columns] == cols
        assert [c.name for c in tm.columns if c.primary_key] == [pk]
        assert [c.collation for c in tm.columns] == collations
    for rows_ev in _rows_events(events):
        assert (rows_ev.schema, rows_ev.table) == (schema, table)
        assert list(rows_ev.columns) == cols
        for row in rows_ev.rows:
            assert list(row) == cols


def test_minimal_row_metadata(corpus):
    """binlog_row_metadata=MINIMAL: no names, so values are keyed "@N" (1-based, as mysqlbinlog).

    The manifest (quoting rust_mysql_common) says "column @2 collation utf8mb4_0900_ai_ci,
    @4 == 3230202323": rust numbers columns from 0, so those are our columns[2] / "@3" and
    columns[4] / "@5". Reading the event: the row image carries only some columns (its
    columns-present bitmap leaves two out), and the 3230202323 (an INT UNSIGNED past 2**31)
    is the value of the 5th column, i.e. our "@5" — not "@4".
    """
    entry = _entry("rust_mysql_common/minimal_row_metadata.000001")
    coll_col, coll_name, val_col, value = re.search(
        r"column @(\d+) collation (\w+), @(\d+) == (\d+)", entry.line).groups()
    coll_idx, val_idx, value = int(coll_col), int(val_col), int(value)  # 0-based (rust)
    events = _events_of(entry.path, corpus)
    tm = [e for e in events if isinstance(e, E.TableMapEvent)][0]
    assert all(c.name is None for c in tm.columns)
    assert tm.columns[coll_idx].collation == _COLLATION_IDS[coll_name]
    rows_ev = _rows_events(events)[0]
    assert rows_ev.columns == tuple(f"@{i + 1}" for i in range(len(tm.columns)))
    row = rows_ev.rows[0]
    label = f"@{val_idx + 1}"
    assert label == "@5"
    assert row[label] == value
    assert set(row) <= set(rows_ev.columns)
    assert [k for k, v in row.items() if v == value] == [label]


# From rust_mysql_common src/binlog/mod.rs (the mysql-enum-string-set.000001 asserts the manifest quotes).
_F1 = "0123456789" * 10
_LONG = ("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
         "012345678901234567890123456780123456789012345678901234567890123456789012345678901234567890123456789"
         "012345678901234567890123456789012345678901234567890123456780123456789012345678901234567890123456789")


def test_enum_string_set_row_images(corpus):
    entry = _entry("rust_mysql_common/mysql-enum-string-set.000001")
    assert "after-update: 'field1','field_2',enum 2,set 0b1010,long string" in entry.line
    events = _events_of(entry.path, corpus)
    create = next(e.query for e in events if isinstance(e, E.QueryEvent) and e.query.startswith("CREATE TABLE"))
    enum_names = re.findall(r"'([^']*)'", re.search(r"ENUM\(([^)]*)\)", create).group(1))
    set_names = re.findall(r"'([^']*)'", re.search(r"SET\(([^)]*)\)", create).group(1))

    def image(f1, f2, enum_index, set_bits, f5):
        return [f1, f2, enum_names[enum_index - 1],
                [n for i, n in enumerate(set_names) if set_bits >> i & 1], f5]

    written = image(_F1, _LONG, 1, 0b0101, "0123456789")
    updated = image("field1", "field_2", 2, 0b1010, _LONG)
    assert updated[2:4] == ["variant2", ["two", "four"]]

    tm = [e for e in events if isinstance(e, E.TableMapEvent)][0]
    assert tm.columns[2].enum_values == tuple(enum_names)
    assert tm.columns[3].set_values == tuple(set_names)
    rows = _rows_events(events)
    assert [r.kind for r in rows] == ["insert", "update", "delete"]
    assert [list(r.values()) for r in rows[0].rows] == [written]
    ((before, after),) = rows[1].rows
    assert list(before.values()) == written
    assert list(after.values()) == updated
    assert [list(r.values()) for r in rows[2].rows] == [updated]


def test_bit_columns(corpus):
    entry = _entry("rust_mysql_common/mysql_type_bit.000001")
    a, b, c = re.search(r"\[bytes (0b[01]+), '(\w+)', bytes (0b[01]+)\]", entry.line).groups()
    rows = _rows_events(_events_of(entry.path, corpus))
    assert len(rows) == 1
    assert [list(r.values()) for r in rows[0].rows] == [[int(a, 2), b, int(c, 2)]]
    assert [int(a, 2), int(c, 2)] == [4, 32]


def test_negative_time(corpus):
    entry = _entry("rust_mysql_common/time_issue.000001")
    days, h, mi, s = map(int, re.search(r"Time\(neg, (\d+) days, (\d\d):(\d\d):(\d\d)\)", entry.line).groups())
    quoted = re.search(r"i\.e\. '([^']+)'", entry.line).group(1)
    assert quoted == f"-{days * 24 + h}:{mi:02d}:{s:02d}"
    rows = _rows_events(_events_of(entry.path, corpus))
    assert [list(r.values()) for r in rows[0].rows] == [[quoted]]
    assert quoted == "-507:48:27"


_DECIMAL_TEXT = re.compile(r"-?\d+\.\d+")


def test_json_opaque_values(corpus):
    """Opaque JSON scalars: dates/times as text, DECIMAL as decimal.Decimal (exact), others as JSON."""
    entry = _entry("rust_mysql_common/json-opaque.binlog")
    expected = json.loads("[" + re.search(r"expects col values (.*?) \[\d+ events", entry.line).group(1) + "]")
    assert len(expected) == 8
    rows = [row for r in _rows_events(_events_of(entry.path, corpus)) for row in r.rows]
    got = [next(iter(row.values())) for row in rows]
    assert len(got) == len(expected)
    for g, want in zip(got, expected):
        assert isinstance(g, dict) and list(g) == list(want)
        (key, value), = want.items()
        if isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value):
            assert isinstance(g[key], Decimal), (key, g[key])
            assert str(g[key]) == value
        else:
            assert g[key] == value and type(g[key]) is type(value)


def _f32(x: float) -> bytes:
    return struct.pack("<f", x)


def test_vector(corpus):
    entry = _entry("rust_mysql_common/vector.binlog")
    dims_text = re.search(r"TABLE_MAP dims (.*?); rows", entry.line).group(1)
    dims = {t: [int(x) for x in d.split(",")] for t, d in re.findall(r"(\w+)=\[([\d,]+)\]", dims_text)}
    rows_text = re.findall(r"id=(\d+) -> (?:float32 LE )?\[([-\d.,]+)\]", entry.line)
    expected_rows = {int(i): [float(x) for x in v.split(",")] for i, v in rows_text}
    assert dims == {"foo": [3], "bar": [2, 4]} and set(expected_rows) == {1, 2}

    events = _events_of(entry.path, corpus)
    maps = [e for e in events if isinstance(e, E.TableMapEvent)]
    assert {tm.table for tm in maps} == set(dims)
    for tm in maps:
        vec = [c for c in tm.columns if c.type == 242]  # MYSQL_TYPE_VECTOR
        assert [c.vector_dimensions for c in vec] == dims[tm.table]
    foo_rows = [e for e in _rows_events(events) if e.table == "foo"]
    assert foo_rows
    foo_map = next(tm for tm in maps if tm.table == "foo")
    id_col = foo_map.columns[0].name or "@1"
    vec_col = next(c for c in foo_map.columns if c.type == 242)
    vec_key = vec_col.name or f"@{vec_col.index + 1}"
    for ev in foo_rows:
        by_id = {row[id_col]: row[vec_key] for row in ev.rows}
        assert set(by_id) == set(expected_rows)
        for i, want in expected_rows.items():
            got = by_id[i]
            assert isinstance(got, list) and len(got) == len(want) == dims["foo"][0]
            assert [_f32(x) for x in got] == [_f32(x) for x in want]


def test_transaction_compression_inner_events(corpus):
    entry = _entry("rust_mysql_common/transaction_compression.000001")
    names = [M.our_type_name(n.strip()) for n in
             re.search(r"decompressed payload = ([A-Z_, ]+)", entry.line).group(1).split(",")]
    payloads = [e for e in _events_of(entry.path, corpus) if isinstance(e, E.TransactionPayloadEvent)]
    assert len(payloads) == 1
    assert [e.header.type_name for e in payloads[0].events] == names
    assert names == ["QUERY", "TABLE_MAP", "WRITE_ROWS", "XID"]


@pytest.mark.parametrize("path,n_payloads", [("mysql-binlog-connector-java/mysql-bin.compressed", 1),
                                             ("mysql-binlog-connector-rust/mysql-bin.000057", 2)])
def test_transaction_payload_inner_events_decode(path, n_payloads, corpus):
    entry = _entry(path)
    assert entry.counts.get("TRANSACTION_PAYLOAD") == n_payloads
    payloads = [e for e in _events_of(path, corpus) if isinstance(e, E.TransactionPayloadEvent)]
    assert len(payloads) == n_payloads
    for p in payloads:
        inner = p.events
        assert inner, "empty payload"
        # a compressed transaction is a whole transaction: BEGIN ... rows ... XID
        assert isinstance(inner[0], E.QueryEvent) and inner[0].query == "BEGIN"
        assert inner[-1].header.type_name == "XID"
        assert any(isinstance(e, E.RowsEvent) for e in inner)
        for e in inner:
            _materialise(e)
            assert not isinstance(e, E.UnknownEvent)
        assert sum(e.header.event_length for e in inner) == p.uncompressed_size
        for rows_ev in _rows_events(inner):
            tms = [e for e in inner if isinstance(e, E.TableMapEvent) and e.table_id == rows_ev.table_id]
            assert tms and (rows_ev.schema, rows_ev.table) == (tms[0].schema, tms[0].table)
            for row in rows_ev.rows:
                images = row if rows_ev.kind == "update" else (row,)
                for image in images:
                    assert len(image) == len(tms[0].columns)


def test_bug32407_rows(corpus):
    entry = _entry("rust_mysql_common/bug32407.001")
    values = [int(v) for v in re.search(r"SELECT \* FROM t1 -> ([\d,]+)", entry.line).group(1).split(",")]
    rows = [row for r in _rows_events(_events_of(entry.path, corpus)) if r.table == "t1" for row in r.rows]
    assert [list(row.values()) for row in rows] == [[v] for v in values]


# ----------------------------------------------------------------- the binlog_old_versions oracle

ORACLE = "rust_mysql_common/oracle/mysql-server_binlog_old_versions.result"


def _oracle_t1(section_prefix: str) -> dict[int, str]:
    """t1's rows in the oracle section whose title starts with ``section_prefix``."""
    text = (M.CORPUS / ORACLE).read_text(encoding="utf-8")
    sections = re.split(r"^==== (.*?) ====$", text, flags=re.M)
    for title, body in zip(sections[1::2], sections[2::2]):
        if title.startswith(section_prefix):
            lines = body.split("SELECT * FROM t1 ORDER BY a;\n", 1)[1].splitlines()
            assert lines[0] == "a\tb"
            rows = {}
            for line in lines[1:]:
                if line.startswith(("SELECT", "DROP")):
                    break
                a, b = line.split("\t")
                rows[int(a)] = b
            return rows
    raise AssertionError(f"no oracle section {section_prefix!r}")


def _replay_t1(events) -> tuple[dict[int, str], set[int]]:
    """Apply the row events on t1, then key the result by column @1; also return every key they touched.

    t1 has no key (``a int, b char(50)``) and one UPDATE event carries (0→1, 1→2): rows are
    applied one after another to a multiset, as the server does, and keyed only at the end.
    """
    rows: list[tuple[int, str]] = []
    touched: set[int] = set()
    for ev in _rows_events(events):
        if ev.table != "t1":
            continue
        for row in ev.rows:
            if ev.kind == "insert":
                rows.append((row["@1"], row["@2"]))
                touched.add(row["@1"])
            elif ev.kind == "update":
                before, after = row
                rows.remove((before["@1"], before["@2"]))
                rows.append((after["@1"], after["@2"]))
                touched |= {before["@1"], after["@1"]}
            else:
                rows.remove((row["@1"], row["@2"]))
                touched.add(row["@1"])
    table = dict(rows)
    assert len(table) == len(rows)
    return table, touched


def _statement_texts(events) -> str:
    return "\n".join(e.query for e in events if isinstance(e, E.QueryEvent))


@pytest.mark.parametrize("row_file,stmt_file,section", [
    ("rust_mysql_common/ver_5_1_23.001", "rust_mysql_common/ver_5_1_23.001", "Read modern binlog (version 5.1.23)"),
    # the alcatel tree could not mix formats: its row events are in _r, its statements in _s
    ("rust_mysql_common/ver_5_1-wl2325_r.001", "rust_mysql_common/ver_5_1-wl2325_s.001", "Read binlog from alcatel tree"),
])
def test_old_versions_replay_matches_oracle(row_file, stmt_file, section, corpus):
    """Replaying the row events reproduces exactly the oracle's t1 rows that row events made.

    The script (binlog_old_versions.test) inserts (0,'one'),(1,'two'), updates a=a+1 and deletes
    a=2 with row events; every other t1 row of the oracle comes from a statement in the binlog.
    """
    oracle = _oracle_t1(section)
    table, touched = _replay_t1(_events_of(row_file, corpus))
    assert table, "no row events replayed"
    statements = _statement_texts(_events_of(stmt_file, corpus))

    def made_by_statement(b: str) -> bool:
        return f"'{b}')" in statements

    for key, b in table.items():
        assert oracle.get(key) == b, key
    for key in touched - set(table):  # removed by row events: gone, unless a later statement re-made it
        assert key not in oracle or made_by_statement(oracle[key]), key
    for key, b in oracle.items():
        if key not in table:
            assert made_by_statement(b), (key, b)
    assert table == {1: "one"}


# ----------------------------------------------------------------- ybinlogp


def test_ybinlogp_default_path(corpus):
    entry = _entry("ybinlogp/mysql-bin.default-path")
    m = re.search(r"last=ROTATE to (\S+) pos (\d+), \[-2\]=XID, \[-3\]=QUERY db (\w+) '(.*?)' \[", entry.line)
    next_file, pos, db, statement = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    their_count = int(re.search(r"L12-29: (\d+) events \(their count; excludes FDE\)", entry.line).group(1))
    events = _events_of(entry.path, corpus)
    assert len([e for e in events if not isinstance(e, E.FormatDescriptionEvent)]) == their_count
    last = events[-1]
    assert isinstance(last, E.RotateEvent)
    assert (last.next_file, last.position) == (next_file, pos)
    assert events[-2].header.type_name == "XID"
    q = events[-3]
    assert isinstance(q, E.QueryEvent)
    assert (q.schema, q.query) == (db, statement)
    assert statement in (M.CORPUS / "ybinlogp/oracle/gen_test_data.sql").read_text()


def test_ybinlogp_delayed_event(corpus):
    """ybinlogp_test.py: events[30].time == datetime(2013, 7, 30, 10, 2, 37), a naive local time.

    ybinlogp builds Event.time with datetime.fromtimestamp() (local time of the machine that ran
    the test) and its event list starts after the FORMAT_DESCRIPTION, so its events[30] is our
    events[31]. Assumption: Yelp's machines ran on US Pacific time, which on 2013-07-30 is PDT,
    UTC-7; 10:02:37 PDT is 17:02:37 UTC = 1375203757. (Read as UTC it would be 1375178557, which
    matches nothing in the file.) The neighbouring events are at 12:02:37 PDT: this one is the
    event the file's name advertises, two hours older than the FORMAT_DESCRIPTION.
    """
    entry = _entry("ybinlogp/mysql-bin.delayed-event")
    y, mo, d, h, mi, s = map(int, re.search(r"events\[30\]\.time == (\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+) \(local time\)",
                                             entry.line).groups())
    pdt = timezone(timedelta(hours=-7), "PDT")
    expected = int(datetime(y, mo, d, h, mi, s, tzinfo=pdt).timestamp())
    assert expected == 1375203757
    events = _events_of(entry.path, corpus)
    assert events[31].header.timestamp == expected
    fde_ts = events[0].header.timestamp
    older = [i for i, e in enumerate(events) if e.header.timestamp < fde_ts]
    assert older == [31]
    # the same file without the delay: identical but for that one timestamp
    plain = _events_of("ybinlogp/mysql-bin.default-path", corpus)
    assert [e.header.type_name for e in plain] == [e.header.type_name for e in events]
    assert plain[31].header.timestamp != expected


def test_aurora_padding_vendor_event(corpus):
    entry = _entry("mysql-binlog-connector-java/mysql-bin.aurora-padding")
    assert "vendor event type 100" in entry.line and "5th is QUERY 'BEGIN'" in entry.line
    events = _events_of(entry.path, corpus)
    data = _data(entry.path)
    fourth, fifth = events[3], events[4]
    assert isinstance(fourth, E.UnknownEvent)
    assert fourth.header.type_code == 100 and fourth.header.type_name == "UNKNOWN_100"
    h = fourth.header
    assert fourth.body == data[h.pos + 19:h.pos + h.event_length - 4]  # raw body, CRC32 footer excluded
    assert isinstance(fifth, E.QueryEvent) and fifth.query == "BEGIN"


# =========================================================================== start/stop contract


def test_iter_events_start_at_a_rows_event_uses_the_earlier_table_map(corpus):
    """iter_events' docstring: events before ``start`` that set up state (FDE, table maps) are decoded silently."""
    path = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(path))
    first_rows = next(h for h in headers if h.type_code == 30)
    full = {e.header.pos: e for e in _events_of(path, corpus)}
    got = list(iter_events(_data(path), start=first_rows.pos))
    assert got[0].header.pos == first_rows.pos
    assert got[0].rows == full[first_rows.pos].rows
    assert [e.header.pos for e in got] == [h.pos for h in headers if h.pos >= first_rows.pos]


def test_iter_events_start_stop_at_boundaries(corpus):
    path = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    headers, _ = M.raw_headers(_data(path))
    gtids = [h for h in headers if h.type_code == 34]
    start, stop = gtids[3].pos, gtids[6].pos
    got = list(iter_events(_data(path), start=start, stop=stop))
    assert [e.header.pos for e in got] == [h.pos for h in headers if start <= h.pos < stop]
    for e in got:
        _materialise(e)
