"""``binlogd info`` / ``binlogd dump`` on the shared corpus.

Expected values come from MANIFEST.md, DESIGN.md, a raw header walk written here (no decoder
involved) and, where the brief asks for it, a full ``iter_events`` walk whose values the corpus
tests check against the manifest.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from binlogd.cli import filetools, main
from binlogd.protocol import events as E
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.fileinfo import describe
from binlogd.protocol.reader import iter_events
from tests.support import manifest as M

ENTRIES = M.entries_or_empty()
BY_PATH = {e.path: e for e in ENTRIES}
CORRUPT_RELAY = "rust_mysql_common/corrupt-relay-bin.000624"
READABLE = [e for e in ENTRIES if not e.negative]
NEGATIVE = [e for e in ENTRIES if e.negative]
DESIGN = M.CORPUS.parent / "DESIGN.md"

DUMP_FIRST_KEYS = ["file", "pos", "next_pos", "timestamp", "type", "server_id"]
_CHECKSUM = {"CRC32": "CRC32", "NONE": "NONE", "n/a": None}
_ROTATE, _STOP = 4, 3


_ids, _entry, _data = M.ids, M.entry, M.data


@lru_cache(maxsize=None)
def _walk(path: str) -> tuple[E.Event, ...]:
    return tuple(iter_events(_data(path)))


def _gtid_of(event: E.Event) -> str | None:
    if isinstance(event, E.GtidEvent) and event.header.type_name != "ANONYMOUS_GTID":
        return event.gtid
    if isinstance(event, E.MariadbGtidEvent):
        return event.gtid
    return None


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# =========================================================================== info


@pytest.mark.parametrize("entry", READABLE, ids=_ids(READABLE))
def test_info_agrees_with_manifest_and_full_walk(entry, corpus):
    path = entry.file(corpus)
    data = _data(entry.path)
    headers, partial = M.raw_headers(data)
    assert partial is None
    result = filetools.info(path)

    assert result.size == len(data)
    assert result.server_version == entry.server_version
    assert result.binlog_version == struct.unpack_from("<H", data, 4 + 19)[0] == 4
    assert result.checksum == _CHECKSUM[entry.checksum]
    assert result.closed_cleanly == (not headers[0].flags & 0x01)
    assert result.truncated_at is None
    last = headers[-1]
    assert result.method == ("seek" if last.type_code in (_ROTATE, _STOP) else "scan")

    if entry.path == CORRUPT_RELAY:
        # the decoder stops at its broken QUERY (see test_corpus): use the raw headers (a 5.0 file has no GTIDs)
        assert (result.begin_time, result.end_time) == (headers[0].timestamp, last.timestamp)
        assert (result.first_gtid, result.last_gtid) == (None, None)
        return
    events = _walk(entry.path)
    assert result.begin_time == events[0].header.timestamp
    assert result.end_time == events[-1].header.timestamp
    gtids = [g for g in map(_gtid_of, events) if g is not None]
    assert result.first_gtid == (gtids[0] if gtids else None)
    assert result.last_gtid == (gtids[-1] if gtids else None)
    closing = events[-1]
    assert result.next_file == (closing.next_file if isinstance(closing, E.RotateEvent) else None)


def test_info_checksum_crc32_file(corpus):
    entry = _entry("mysql-binlog-connector-java/mysql-bin.checksum-crc32")
    result = filetools.info(entry.file(corpus))
    assert (result.method, result.next_file, result.checksum) == ("seek", "mysql-bin.000002", "CRC32")


def test_info_next_file_from_manifest(corpus):
    entry = _entry("ybinlogp/mysql-bin.default-path")
    next_file = re.search(r"last=ROTATE to (\S+) pos", entry.line).group(1)
    result = filetools.info(entry.file(corpus))
    assert (result.method, result.next_file) == ("seek", next_file)


def test_info_truncated_file_reports_truncated_at(corpus):
    entry = _entry("rust_mysql_common/binlog_truncated_prev_gtid_event.000001")
    data = _data(entry.path)
    trailing = int(re.search(r"trailing (\d+) bytes", entry.line).group(1))
    result = filetools.info(entry.file(corpus))
    assert result.truncated_at == len(data) - trailing == 120
    assert result.method == "scan"
    assert result.server_version == entry.server_version
    assert result.checksum == "CRC32"
    assert result.next_file is None
    headers, _ = M.raw_headers(data)
    assert result.end_time == headers[-1].timestamp  # the last complete event (the FDE)


@pytest.mark.parametrize("path,offset", [("rust_mysql_common/binlog_truncated_event.000001", 4),
                                         ("canal/tsdb/mysql-bin.000001", 0),
                                         ("mysql-binlog-connector-java/mysql-bin.sakila.gz", 0)])
def test_info_unreadable_files_raise_binlog_error(path, offset, corpus):
    _entry(path)
    with pytest.raises(BinlogError) as info:
        filetools.info(corpus / path)
    assert info.value.offset == offset


# Large files that a ROTATE closes, written by servers too old for GTIDs (MySQL 5.1 / 5.6.4:
# GTIDs arrived in 5.6.5). Seeking needs the FDE, a few headers after it and the tail; it must
# not read the whole file, let alone read it many times over.
BOUNDED = ["canal/mysql-bin.000001", "rust_mysql_common/ver_trunk_row_v2.001"]


class _CountingFile(io.FileIO):
    """A file that counts the bytes read from it."""

    bytes_read = 0

    def read(self, n=-1):
        data = super().read(n)
        self.bytes_read += len(data)
        return data


def _info_counting(path) -> tuple[object, int]:
    with _CountingFile(path) as f:
        return describe(f, str(path)), f.bytes_read


@pytest.mark.parametrize("path", BOUNDED)
def test_info_reads_a_bounded_number_of_bytes(path, corpus):
    entry = _entry(path)
    size = len(_data(path))
    headers, _ = M.raw_headers(_data(path))
    assert headers[-1].type_code == _ROTATE and size > 20_000
    result, total = _info_counting(entry.file(corpus))
    assert result.method == "seek"
    assert total <= min(64 * 1024, size // 2), f"read {total} bytes of a {size}-byte file"


def test_info_never_reads_more_than_the_file(corpus):
    """A 5.7 file with anonymous GTIDs closed by ROTATE: even looking back for a last GTID, reading
    every byte once is the most that can be needed."""
    path = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    size = len(_data(path))
    _, total = _info_counting(corpus / path)
    assert total <= size, f"read {total} bytes of a {size}-byte file"


# =========================================================================== CLI: info


def _design_info_keys() -> set[str]:
    text = DESIGN.read_text(encoding="utf-8")
    bullet = re.search(r"^- `binlogd info --json`:(.*?)(?=^- |^#)", text, flags=re.M | re.S).group(1)
    return {k for k in re.findall(r"`([^`]+)`", bullet) if re.fullmatch(r"[a-z_]+", k)}


def test_cli_info_json_keys(corpus, capsys):
    if not DESIGN.is_file():
        pytest.skip("DESIGN.md not found")
    keys = _design_info_keys()
    assert {"file", "size", "checksum", "method", "closed_cleanly"} <= keys
    paths = [str(corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32"),
             str(corpus / "rust_mysql_common/binlog_truncated_prev_gtid_event.000001")]
    rc, out, err = _run(capsys, "info", "--json", *paths)
    assert rc == 0, err
    objs = _json_lines(out)
    assert [o["file"] for o in objs] == paths
    for obj in objs:
        assert set(obj) == keys | {"truncated_at", "bytes_read"}  # bytes_read: README, "Object storage"
    assert objs[0]["checksum"] == "CRC32" and objs[0]["method"] == "seek"
    assert objs[0]["next_file"] == "mysql-bin.000002"
    assert objs[1]["truncated_at"] == 120 and objs[1]["method"] == "scan"
    assert isinstance(objs[0]["begin_time"], int) and isinstance(objs[0]["closed_cleanly"], bool)


def test_cli_info_text(corpus, capsys):
    rc, out, err = _run(capsys, "info", str(corpus / "rust_mysql_common/bug32407.001"))
    assert rc == 0, err
    assert "5.7.1-m11-log" in out and "master-bin.000002" in out


# =========================================================================== CLI: dump --json


def _dump(capsys, path: Path, *extra: str) -> tuple[int, list[dict], str]:
    rc, out, err = _run(capsys, "dump", "--json", *extra, str(path))
    return rc, _json_lines(out), err


@pytest.mark.parametrize("path", ["rust_mysql_common/mysql-enum-string-set.000001",
                                  "rust_mysql_common/mariadb-bin.000001",
                                  "canal/mysql-bin.000001",
                                  "rust_mysql_common/ver_5_1_23.001"])
def test_dump_json_lines(path, corpus, capsys):
    entry = _entry(path)
    rc, objs, err = _dump(capsys, entry.file(corpus))
    assert rc == 0, err
    headers, _ = M.raw_headers(_data(path))
    assert len(objs) == entry.total
    assert Counter(o["type"] for o in objs) == Counter(entry.counts)
    for obj, h in zip(objs, headers):
        assert list(obj)[:6] == DUMP_FIRST_KEYS
        assert obj["file"] == str(entry.file(corpus))
        assert (obj["pos"], obj["next_pos"], obj["timestamp"], obj["server_id"]) == \
            (h.pos, h.next_position, h.timestamp, h.server_id)
    for obj in objs:
        if obj["type"] in ("WRITE_ROWS", "UPDATE_ROWS", "DELETE_ROWS", "WRITE_ROWS_V1", "UPDATE_ROWS_V1",
                           "DELETE_ROWS_V1"):
            assert isinstance(obj["schema"], str) and isinstance(obj["table"], str)
            assert isinstance(obj["rows"], list) and obj["rows"]
            for row in obj["rows"]:
                if obj["type"].startswith("UPDATE"):
                    assert set(row) == {"before", "after"}
                    assert isinstance(row["before"], dict) and isinstance(row["after"], dict)
                else:
                    assert isinstance(row, dict) and "before" not in row


def test_dump_json_update_rows_values(corpus, capsys):
    """mysql-enum-string-set: the UPDATE's after image the manifest quotes ('field1','field_2',…)."""
    entry = _entry("rust_mysql_common/mysql-enum-string-set.000001")
    rc, objs, err = _dump(capsys, entry.file(corpus))
    assert rc == 0, err
    create = next(o["query"] for o in objs if o["type"] == "QUERY" and o["query"].startswith("CREATE TABLE"))
    table = re.match(r"CREATE TABLE (\w+)\(", create).group(1)
    (update,) = [o for o in objs if o["type"] == "UPDATE_ROWS"]
    assert (update["schema"], update["table"]) == (next(o["schema"] for o in objs if o["type"] == "TABLE_MAP"), table)
    ((row,),) = [update["rows"]]
    after = list(row["after"].values())
    assert after[:2] == ["field1", "field_2"]
    assert after[2] == "variant2" and after[3] == ["two", "four"]  # enum 2, set 0b1010 of CREATE TABLE's names


def test_dump_json_decimal_is_an_exact_string(corpus, capsys):
    """DESIGN: DECIMAL → JSON string, exact, with its scale (bin-log.000001: DECIMAL(10, 5) 0.1)."""
    rc, objs, err = _dump(capsys, corpus / "rust-mysql-binlog/bin-log.000001")
    assert rc == 0, err
    first = next(o for o in objs if o["type"] == "WRITE_ROWS")
    assert list(first["rows"][0].values())[:2] == [1, "0.10000"]


def test_dump_json_payload_followed_by_inner_events(corpus, capsys):
    entry = _entry("rust_mysql_common/transaction_compression.000001")
    inner = [M.our_type_name(n.strip()) for n in
             re.search(r"decompressed payload = ([A-Z_, ]+)", entry.line).group(1).split(",")]
    rc, objs, err = _dump(capsys, entry.file(corpus))
    assert rc == 0, err
    assert len(objs) == entry.total + len(inner)
    i = next(i for i, o in enumerate(objs) if o["type"] == "TRANSACTION_PAYLOAD")
    assert [o["type"] for o in objs[i + 1:i + 1 + len(inner)]] == inner
    top = objs[:i + 1] + objs[i + 1 + len(inner):]
    assert Counter(o["type"] for o in top) == Counter(entry.counts)
    rows = objs[i + 1 + inner.index("WRITE_ROWS")]
    assert rows["schema"] and rows["table"] and rows["rows"]
    for o in objs:
        assert list(o)[:6] == DUMP_FIRST_KEYS


def test_dump_json_vector_values(corpus, capsys):
    rc, objs, err = _dump(capsys, corpus / "rust_mysql_common/vector.binlog")
    assert rc == 0, err
    foo = next(o for o in objs if o["type"] == "WRITE_ROWS" and o["table"] == "foo")
    values = [list(r.values())[1] for r in foo["rows"]]
    f32 = lambda xs: [struct.pack("<f", x) for x in xs]  # noqa: E731
    assert [f32(v) for v in values] == [f32([1.1, 2.2, 3.3]), f32([1.0, -1.0, 0.0])]


# ----------------------------------------------------------------- positions and datetimes


def test_dump_start_stop_position_at_transaction_boundaries(corpus, capsys):
    path = corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    headers, _ = M.raw_headers(_data("mysql-binlog-connector-java/mysql-bin.checksum-crc32"))
    starts = [h.pos for h in headers if h.type_code == 34]  # ANONYMOUS_GTID: each transaction's first event
    start, stop = starts[2], starts[5]
    rc, objs, err = _dump(capsys, path, "--start-position", str(start), "--stop-position", str(stop))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers if start <= h.pos < stop]
    assert any(o["type"].endswith("_ROWS") and o["rows"] for o in objs)


def test_dump_stop_position_right_after_a_rows_event(corpus, capsys):
    """The last event printed is a rows event (its rows are read from the mapped file)."""
    rel = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(rel))
    rows_h = next(h for h in headers if h.type_code == 30)
    stop = rows_h.pos + rows_h.length
    rc, objs, err = _dump(capsys, corpus / rel, "--stop-position", str(stop))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers if h.pos < stop]
    assert objs[-1]["type"] == "WRITE_ROWS" and len(objs[-1]["rows"]) == 2


def test_dump_start_position_at_a_table_map(corpus, capsys):
    rel = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(rel))
    tm = next(h for h in headers if h.type_code == 19)
    xid = next(h for h in headers if h.type_code == 16 and h.pos > tm.pos)
    stop = xid.pos + xid.length
    rc, objs, err = _dump(capsys, corpus / rel, "--start-position", str(tm.pos), "--stop-position", str(stop))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers if tm.pos <= h.pos < stop]
    assert [o["type"] for o in objs] == ["TABLE_MAP", "WRITE_ROWS", "TABLE_MAP", "WRITE_ROWS", "XID"]
    assert all(o["rows"] for o in objs if o["type"] == "WRITE_ROWS")


def _iso(ts: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).isoformat(sep=" ")  # explicit +00:00


def test_dump_start_datetime(corpus, capsys):
    rel = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(rel))
    stamps = sorted({h.timestamp for h in headers})
    assert len(stamps) >= 3
    start = stamps[2]
    rc, objs, err = _dump(capsys, corpus / rel, "--start-datetime", _iso(start))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers if h.timestamp >= start]
    assert all(o["timestamp"] >= start for o in objs)


def test_dump_stop_datetime(corpus, capsys):
    rel = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(rel))
    stamps = sorted({h.timestamp for h in headers})
    stop = stamps[2]
    first_at_stop = next(i for i, h in enumerate(headers) if h.timestamp >= stop)
    rc, objs, err = _dump(capsys, corpus / rel, "--stop-datetime", _iso(stop))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers[:first_at_stop]]
    assert all(o["timestamp"] < stop for o in objs)


def test_dump_start_and_stop_datetime_window(corpus, capsys):
    rel = "rust_mysql_common/vector.binlog"
    headers, _ = M.raw_headers(_data(rel))
    stamps = sorted({h.timestamp for h in headers})
    lo, hi = stamps[1], stamps[2]
    rc, objs, err = _dump(capsys, corpus / rel, "--start-datetime", _iso(lo), "--stop-datetime", _iso(hi))
    assert rc == 0, err
    assert [o["pos"] for o in objs] == [h.pos for h in headers if lo <= h.timestamp < hi]
    assert objs


def test_dump_text_output(corpus, capsys):
    rc, out, err = _run(capsys, "dump", str(corpus / "rust_mysql_common/bug32407.001"))
    assert rc == 0, err
    assert "CREATE TABLE t1 (a int) engine = myisam" in out
    assert len(out.splitlines()) >= 7


# =========================================================================== CLI: errors


def _expected_offset(entry: M.Entry) -> int:
    m = re.search(r"(\d+)-byte partial header", entry.line) or re.search(r"trailing (\d+) bytes", entry.line)
    return len(_data(entry.path)) - int(m.group(1)) if m else 0


@pytest.mark.parametrize("command", ["dump", "info"])
@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_cli_negative_file_one_line_error(entry, command, corpus, capsys):
    path = str(entry.file(corpus))
    rc, out, err = _run(capsys, command, "--json", path)
    if command == "info" and "trailing" in entry.line:
        # a complete FDE then a partial event: info describes the file and says where it breaks off
        assert rc == 0, err
        assert _json_lines(out)[0]["truncated_at"] == _expected_offset(entry)
        return
    assert rc == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert path in lines[0]
    assert f"offset {_expected_offset(entry)}" in lines[0]


def test_cli_dump_prints_events_before_the_error(corpus, capsys):
    entry = _entry("rust_mysql_common/binlog_truncated_prev_gtid_event.000001")
    rc, out, err = _run(capsys, "dump", "--json", str(entry.file(corpus)))
    assert rc == 1
    assert [o["type"] for o in _json_lines(out)] == ["FORMAT_DESCRIPTION"]  # [1 events: FDEx1]
    assert "offset 120" in err


def test_cli_corrupt_relay_log(corpus, capsys):
    rc, out, err = _run(capsys, "dump", "--json", str(corpus / CORRUPT_RELAY))
    assert rc == 1
    assert len(_json_lines(out)) == 872
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "offset 91204" in err


@pytest.mark.parametrize("argv", [
    [], ["dump"], ["info"], ["frobnicate"],
    ["dump", "--start-position", "x", "f"],
    ["dump", "--start-datetime", "yesterday", "f"],
    ["info", "--bogus", "f"],
])
def test_cli_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage" in capsys.readouterr().err.lower()


@pytest.mark.parametrize("command", ["dump", "info"])
def test_cli_missing_file(command, tmp_path, capsys):
    missing = str(tmp_path / "no-such-binlog.000001")
    rc, out, err = _run(capsys, command, missing)
    assert rc == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0]
    assert "No such file" in lines[0]


def test_cli_info_bad_file_among_good_ones(corpus, capsys):
    good = str(corpus / "rust_mysql_common/bug32407.001")
    bad = str(corpus / "mysql-binlog-connector-java/mysql-bin.sakila.gz")
    rc, out, err = _run(capsys, "info", "--json", good, bad, good)
    assert rc == 1
    assert [o["file"] for o in _json_lines(out)] == [good, good]
    assert len(err.strip().splitlines()) == 1 and bad in err
