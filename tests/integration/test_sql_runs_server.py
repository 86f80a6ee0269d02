"""Runs of rows events on a real server's binlog (CRC32 checksums; on MariaDB 11.4+ inside a transaction every
event's end_log_pos is 0): statements of thousands of rows span many rows events, which ``binlogd sql`` checks
and writes a run at a time (``Decoder.rows_like``, ``_sqlrows.rows_events``). The SQL replays into an empty
server to the first server's tables; it equals the SQL written event by event and the reference path's; and a
copy of the file damaged or altered inside a run is reported, or written, as it is without runs.
"""

from __future__ import annotations

import zlib

import pytest

from binlogd.cli.sqlout.groups import RowsRun, file_groups
from binlogd.protocol.decoder import Decoder
from tests.support.sqlout import client, dump, flush, new_files, same_sql, speedups, sql_main, target

pytestmark = pytest.mark.server
ROWS = 3000


@pytest.fixture
def workload(mariadb, fresh_db):
    """A transaction of 3000 inserts, updates and deletes in three statements, alone in its binlog file."""
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(12,3), "
                "at DATETIME(6), note BLOB)")
    first = flush(mariadb)
    conn = mariadb.connect(charset="utf8mb4")
    try:
        with conn.cursor() as cur:
            cur.execute(f"USE `{fresh_db}`")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t VALUES " + ",".join(
                f"({i}, 'name {i} é', {i * 7 - 5000}.125, '2026-11-27 10:{i % 60:02d}:00.{i:06d}', x'{i:08x}')"
                for i in range(ROWS)))
            cur.execute("UPDATE t SET name = CONCAT(name, '!'), note = NULL WHERE id % 2 = 0")
            cur.execute("DELETE FROM t WHERE id % 3 = 0")
            cur.execute("COMMIT")
    finally:
        conn.close()
    flush(mariadb)
    return new_files(mariadb, first)[0]


def _runs(path) -> list[RowsRun]:
    return [e for g in file_groups(str(path), print, None, runs=True) for e in g.events if isinstance(e, RowsRun)]


def test_runs_replay_to_the_servers_tables(workload, mariadb, fresh_db, capsysbinary) -> None:
    runs = _runs(workload)
    assert {r.first.kind for r in runs} == {"insert", "update", "delete"}
    assert all(r.crc == 4 for r in runs) and sum(r.count for r in runs) > 20
    code, sql, err = same_sql(capsysbinary, workload)
    assert code == 0, err
    assert same_sql(capsysbinary, workload, "--flashback")[0] == 0
    with target(mariadb) as empty:
        create = [mariadb.sql(f"SHOW CREATE DATABASE `{fresh_db}`")[0][1], f"USE `{fresh_db}`",
                  mariadb.sql(f"SHOW CREATE TABLE `{fresh_db}`.t")[0][1]]
        client(empty, ";\n".join(create).encode() + b";")
        client(empty, sql)
        assert dump(empty, fresh_db) == dump(mariadb, fresh_db)


def _copy(tmp_path, workload, name: str, change) -> str:
    """A copy of the file with ``change(bytearray, offset)`` applied to the 5th event of its longest run."""
    data = bytearray(workload.read_bytes())
    run = max(_runs(workload), key=lambda r: r.count)
    at = run.start
    for _ in range(4):
        at += int.from_bytes(data[at + 9:at + 13], "little")
    change(data, at, run)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _fix_crc(data: bytearray, at: int) -> None:
    length = int.from_bytes(data[at + 9:at + 13], "little")
    data[at + length - 4:at + length] = zlib.crc32(data[at:at + length - 4]).to_bytes(4, "little")


def test_a_bad_checksum_inside_a_run(workload, tmp_path, capsysbinary) -> None:
    def flip(data, at, run):
        data[at + run.head + 3] ^= 0x01

    code, out, err = same_sql(capsysbinary, _copy(tmp_path, workload, "crc", flip))
    assert code == 1 and b"CRC32 mismatch" in err, err
    assert b"INSERT" not in out  # nothing of the transaction the error is in


def test_a_row_the_c_writer_rejects_inside_a_run(workload, tmp_path, capsysbinary) -> None:
    def cut(data, at, run):  # the event's last row one byte short, its checksum made good again
        length = int.from_bytes(data[at + 9:at + 13], "little")
        del data[at + length - 5]
        data[at + 9:at + 13] = (length - 1).to_bytes(4, "little")
        _fix_crc(data, at)

    code, _, err = same_sql(capsysbinary, _copy(tmp_path, workload, "row", cut))
    assert code == 1 and err.startswith(b"binlogd sql:"), err


def test_a_later_timestamp_inside_a_run(workload, tmp_path, capsysbinary) -> None:
    def later(data, at, run):
        data[at:at + 4] = (int.from_bytes(data[at:at + 4], "little") + 60).to_bytes(4, "little")
        _fix_crc(data, at)

    path = _copy(tmp_path, workload, "later", later)
    assert len(_runs(path)) == len(_runs(workload)) + 1
    code, out, _ = same_sql(capsysbinary, path)
    unaltered = same_sql(capsysbinary, workload)[1].count(b"SET TIMESTAMP=")  # one per second the statements took
    assert code == 0 and out.count(b"SET TIMESTAMP=") == unaltered + 2  # and the altered event's, and back again


def test_a_start_inside_the_transaction(mariadb, workload, capsysbinary, monkeypatch) -> None:
    """A start inside the transaction, after the events passed over by their headers (before it: the file's
    other transactions), reads the transaction again whole: the same SQL as with every event read."""
    run = max(_runs(workload), key=lambda r: r.count)
    starts = [run.start, run.start + run.first.header.event_length, run.stop - 1]
    with speedups(True):
        fast = [sql_main(capsysbinary, [workload, "--start-position", start]) for start in starts]
        monkeypatch.setattr(Decoder, "past_row_context", lambda self, view, pos, stop: (pos, False))
        slow = [sql_main(capsysbinary, [workload, "--start-position", start]) for start in starts]
    assert fast == slow
    assert all(code == 0 and b"moved to its start" in err and sql.count(b"INSERT INTO") > 10
               for code, sql, err in fast)
