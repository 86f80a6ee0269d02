"""Positions on the files side, against an independent header walk of the server's own binlog files.

A real workload (multi-statement transactions, multi-row events, a row too big for one rows event, DDL,
an autocommit statement) is written on each real server; the file is closed with FLUSH BINARY LOGS and
walked here with ``struct`` alone (offset 4, then each header's event_length). MariaDB 11.4+ logs
``end_log_pos`` 0 for every event inside a transaction, so on 11.8 the logged next_position is no
position at all; every position we report must still be the walk's:

- ``binlogd dump --json``: ``pos`` and ``next_pos`` of every event are the walk's start and end;
- ``binlogd dump`` (text): ``# at`` is the walk's start, ``end_log_pos`` the logged value, as mysqlbinlog;
- the skim (``Decoder.skim_run``, C and Python): every run ends where the walk says;
- the Spark shapes (``pipeline.decode``): ``events`` pos/next_pos, ``changes`` pos (the rows event's
  start, one change per row of it), ``index`` (``binlogd info``).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from binlogd.cli import main
from binlogd.pipeline import decode as D
from binlogd.protocol import skim
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.rows import ROWS_TYPES

pytestmark = pytest.mark.server

LOOPS = [False] + ([True] if skim.C is not None else [])


def header_walk(path: Path) -> list[tuple[int, int, int, int]]:
    """(start, end, logged next_position, type code) of every event, from the headers alone."""
    data = path.read_bytes()
    assert data[:4] == b"\xfebin"
    out, pos = [], 4
    while pos < len(data):
        _ts, type_code, _sid, length, logged, _flags = struct.unpack_from("<IBIIIH", data, pos)
        assert length >= 19 and pos + length <= len(data), f"bad header at {pos}"
        out.append((pos, pos + length, logged, type_code))
        pos += length
    return out


@pytest.fixture(scope="module")
def closed_file(mariadb) -> Path:
    """A binlog file holding only this module's workload, closed by a ROTATE."""
    mariadb.sql("FLUSH BINARY LOGS")
    path = mariadb.binlog_files()[-1]
    db = "positions_files"
    mariadb.sql(f"DROP DATABASE IF EXISTS {db}")
    mariadb.sql(f"CREATE DATABASE {db}")
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(100), b LONGBLOB)")
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, n INT)")
    conn = mariadb.connect(database=db, autocommit=False)
    try:
        with conn.cursor() as cur:
            for i in range(30):
                cur.executemany("INSERT INTO t VALUES (%s, %s, NULL)", [(i * 10 + k, f"row {i} {k}") for k in range(5)])
                cur.execute("INSERT INTO u VALUES (%s, %s)", (i, i))
                cur.execute("UPDATE t SET v = CONCAT(v, '!') WHERE id BETWEEN %s AND %s", (i * 10, i * 10 + 2))
                cur.execute("DELETE FROM t WHERE id = %s", (i * 10 + 4,))
                conn.commit()
            # rows far bigger than binlog_row_event_max_size: several rows events in one transaction
            cur.executemany("INSERT INTO t VALUES (%s, 'big', %s)", [(1000 + k, bytes([k]) * 300_000) for k in range(3)])
            conn.commit()
    finally:
        conn.close()
    mariadb.sql(f"ALTER TABLE {db}.u ADD COLUMN w INT")
    mariadb.sql(f"UPDATE {db}.u SET w = n * 2")
    assert mariadb.binlog_files()[-1] == path, "the workload rotated the binlog: the test needs one file"
    mariadb.sql("FLUSH BINARY LOGS")
    return path


def test_the_workload_logs_zero_positions_exactly_where_the_server_should(mariadb, closed_file):
    """Not vacuous: 11.4+ logs end_log_pos 0 inside transactions, older servers log real ends everywhere."""
    walk = header_walk(closed_file)
    zeros = [(start, tc) for start, end, logged, tc in walk if logged == 0]
    wrong = [(start, logged) for start, end, logged, tc in walk if logged not in (0, end)]
    assert not wrong, f"logged next_position neither 0 nor the event's end: {wrong[:5]}"
    if mariadb.version_tuple >= (11, 4):
        assert len(zeros) > 100, f"only {len(zeros)} events log end_log_pos 0 on {mariadb.version}"
        assert ET.TABLE_MAP in {tc for _, tc in zeros} and ROWS_TYPES & {tc for _, tc in zeros}
    else:
        assert zeros == []


def test_dump_json_positions_are_the_walks(capsys, closed_file):
    assert main(["dump", "--json", str(closed_file)]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    walk = header_walk(closed_file)
    assert [(o["pos"], o["next_pos"]) for o in objects] == [(start, end) for start, end, _, _ in walk]
    assert [ET[o["type"]] for o in objects] == [tc for _, _, _, tc in walk]


def test_dump_text_prints_the_start_and_the_logged_end(capsys, closed_file):
    assert main(["dump", str(closed_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = [int(line.split()[2]) for line in lines if line.startswith("# at ")]
    logged = [int(line.split("end_log_pos ")[1].split()[0]) for line in lines if " end_log_pos " in line]
    walk = header_walk(closed_file)
    assert at == [start for start, _, _, _ in walk]
    assert logged == [logged for _, _, logged, _ in walk]


@pytest.mark.parametrize("use_c", LOOPS, ids=["python", "c"][:len(LOOPS)])
def test_skim_runs_end_where_the_walk_says(closed_file, use_c, monkeypatch):
    """The raw path's row-less decoder and skim, fed the file's events as the daemon feeds them."""
    monkeypatch.setattr(skim, "_USE_C", use_c)
    data = closed_file.read_bytes()
    walk = header_walk(closed_file)
    raws = [data[start:end] for start, end, _, _ in walk]
    decoder, i, pos, taken = Decoder(rows=False), 0, 4, 0
    while i < len(raws):
        run = decoder.skim_run(raws, i, len(raws), pos)
        if run.stop > i:
            assert run.next_position == walk[run.stop - 1][1], f"run from event {i} at {pos}"
            assert run.nbytes == walk[run.stop - 1][1] - pos
            taken += run.stop - i
            i, pos = run.stop, run.next_position
            continue
        assert decoder.decode(raws[i], pos).header.pos == walk[i][0]
        pos = walk[i][1]
        i += 1
    skimmable = sum(tc in ROWS_TYPES or tc == ET.TABLE_MAP or tc == ET.ANNOTATE_ROWS for _, _, _, tc in walk)
    assert taken == skimmable > 100


def test_spark_events_shape_positions_are_the_walks(closed_file):
    rows = D.EventRows(str(closed_file))
    cols = [sum(parts, []) for parts in zip(*D.read_binlog(str(closed_file), rows))]
    got = dict(zip(D.EVENTS_COLUMNS, cols))
    walk = header_walk(closed_file)
    assert list(zip(got["pos"], got["next_pos"], got["event_length"])) == \
        [(start, end, end - start) for start, end, _, _ in walk]


def test_spark_changes_shape_positions_are_the_rows_events(capsys, closed_file):
    """Each change's pos is the start of the rows event that carried it, one change per row of that event."""
    assert main(["dump", "--json", str(closed_file)]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [(o["pos"], row) for o in objects if "rows" in o for row in range(len(o["rows"]))]
    rows = D.ChangeRows(str(closed_file))
    cols = [sum(parts, []) for parts in zip(*D.read_binlog(str(closed_file), rows))]
    got = dict(zip(D.CHANGES_COLUMNS, cols))
    assert list(zip(got["pos"], got["row"])) == expected
    rows_starts = {start for start, _, _, tc in header_walk(closed_file) if tc in ROWS_TYPES}
    assert set(got["pos"]) == rows_starts and len(expected) > 150


def test_spark_index_shape_and_info(capsys, closed_file):
    """Found by seeking on 11.8 too: the last GTID is reached across events that log next_position 0."""
    got = {name: col[0] for name, col in zip(D.INDEX_COLUMNS, D.read_index(str(closed_file)))}
    walk = header_walk(closed_file)
    assert got["size"] == walk[-1][1] == closed_file.stat().st_size
    assert got["method"] == "seek" and got["closed_cleanly"] is True
    assert got["next_file"] and walk[-1][3] == ET.ROTATE
    assert main(["dump", "--json", str(closed_file)]) == 0
    gtids = [o["gtid"] for o in map(json.loads, capsys.readouterr().out.splitlines()) if o["type"] in ("MARIADB_GTID", "GTID")]
    assert (got["first_gtid"], got["last_gtid"]) == (gtids[0], gtids[-1]) and len(gtids) > 30
