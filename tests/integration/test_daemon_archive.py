"""The raw archive sink: byte-exact copies of the primary's binlog files.

``sink.kind = archive`` from ``file:<first binlog>:4`` on a private server. Closed files (rotated by
``FLUSH BINARY LOGS``) must be byte-identical to the server's. The active file differs in exactly one
byte: offset 21, the low byte of the FDE's flags, where the server's file on disk has
LOG_EVENT_BINLOG_IN_USE_F (0x01) set while the file is open; the server clears it in the copy of the
FDE it sends (its CRC32 is computed with the flag clear, so the checksum bytes agree). Then the
archive daemon is stopped mid-file (SIGTERM) and, later, killed (SIGKILL) and restarted while writes
continue: the archive must still be identical. Run with MariaDB's ANNOTATE_ROWS events on (the
default) and off.
"""

from __future__ import annotations

import time

import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import base_overrides, running_daemon, wait_caught_up

pytestmark = pytest.mark.server

FDE_FLAGS_OFFSET = 4 + 17        # magic + the flags field of the common header (2 bytes, little-endian)
LOG_EVENT_BINLOG_IN_USE_F = 0x01


def _write(srv, start: int, n: int) -> None:
    conn = srv.connect(database="z")
    try:
        cur = conn.cursor()
        for i in range(start, start + n):
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (i, f"r{i}", bytes([i % 256]) * (i % 900)))
            cur.execute("UPDATE t SET v = CONCAT(v, '.') WHERE id = %s", (i - 1,))
            cur.execute("COMMIT")
    finally:
        conn.close()


def _wait_sizes(srv, archive_dir, timeout: float = 3.0) -> None:
    """MariaDB appends BINLOG_CHECKPOINT events after a commit, asynchronously: wait (bounded) until
    every archived file has caught up with the server's file size before comparing bytes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = srv.binlog_files()
        if all((archive_dir / p.name).exists() and (archive_dir / p.name).stat().st_size == p.stat().st_size
               for p in files):
            return
        time.sleep(0.05)


def _compare(srv, archive_dir) -> dict:
    """Assert the archive against the server's files; returns {name: "identical"|"in-use byte"}."""
    _wait_sizes(srv, archive_dir)
    files = srv.binlog_files()
    active = files[-1]
    out = {}
    for path in files:
        mine = archive_dir / path.name
        assert mine.exists(), f"{path.name} is not in the archive ({sorted(p.name for p in archive_dir.iterdir())})"
        theirs, ours = path.read_bytes(), mine.read_bytes()
        if path == active and len(ours) < len(theirs):
            # MariaDB's dump thread sends a BINLOG_CHECKPOINT written after the last commit only
            # with the next event: the server may be ahead by such events, and by nothing else.
            tail_types, pos = [], len(ours)
            while pos + 19 <= len(theirs):
                tail_types.append(theirs[pos + 4])
                pos += int.from_bytes(theirs[pos + 9:pos + 13], "little")
            assert pos == len(theirs) and set(tail_types) == {161}, \
                f"{path.name}: the server has {len(theirs) - len(ours)} more bytes, events {tail_types}"
            theirs = theirs[:len(ours)]
        assert len(ours) == len(theirs), f"{path.name}: archive {len(ours)} bytes, server {len(theirs)}"
        diff = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
        if path != active:
            assert diff == [], f"closed file {path.name} differs at offsets {diff[:10]}"
            out[path.name] = "identical"
        else:
            assert diff == [FDE_FLAGS_OFFSET], f"active file {path.name} differs at offsets {diff[:10]}, " \
                                               f"expected exactly [{FDE_FLAGS_OFFSET}]"
            assert theirs[FDE_FLAGS_OFFSET] == ours[FDE_FLAGS_OFFSET] | LOG_EVENT_BINLOG_IN_USE_F, \
                (theirs[FDE_FLAGS_OFFSET], ours[FDE_FLAGS_OFFSET])
            assert not ours[FDE_FLAGS_OFFSET] & LOG_EVENT_BINLOG_IN_USE_F
            out[path.name] = "in-use byte"
    extra = {p.name for p in archive_dir.iterdir() if p.name.startswith(srv.binlog_basename + ".")} \
        - {p.name for p in files}
    assert not extra, f"archive files the server does not have: {extra}"
    return out


@pytest.mark.parametrize("annotate", ["ON", "OFF"], ids=["annotate_rows_on", "annotate_rows_off"])
def test_archive_byte_identical_with_resume(tmp_path, annotate, server_binaries):
    # binlog_annotate_row_events=ON is MariaDB's default: the files then hold ANNOTATE_ROWS events,
    # which the primary sends only to a replica that asks for them (BINLOG_SEND_ANNOTATE_ROWS_EVENT in
    # COM_BINLOG_DUMP's flags); a byte-exact archive must ask. OFF runs the same checks without them.
    # MySQL's counterpart: binlog_rows_query_log_events, ROWS_QUERY events (sent to every replica)
    option = "--binlog-rows-query-log-events" if server_binaries.flavor == "mysql" else "--binlog-annotate-row-events"
    srv = LocalServer(extra_args=["--binlog-row-metadata=FULL", f"{option}={annotate}"], binaries=server_binaries)
    try:
        srv.start()
        srv.sql("CREATE DATABASE z")
        srv.sql("CREATE TABLE z.t (id INT PRIMARY KEY, v VARCHAR(50), b BLOB)")
        _write(srv, 1, 5)
        first = srv.binlog_files()[0].name
        overrides = base_overrides(srv, tmp_path, **{"sink.kind": "archive", "source.start": f"file:{first}:4"})
        cp = tmp_path / "checkpoint.json"
        archive = tmp_path / "sink"

        with running_daemon(overrides) as d:
            _write(srv, 6, 20)
            srv.sql("FLUSH BINARY LOGS")
            _write(srv, 26, 20)
            srv.sql("FLUSH BINARY LOGS")
            _write(srv, 46, 10)
            wait_caught_up(srv, cp, daemon=d)
            first_pass = _compare(srv, archive)
        assert list(first_pass.values()).count("identical") >= 2, first_pass
        assert not (tmp_path / "schema-history.jsonl").exists()  # a sink that takes no rows keeps no history

        # stopped mid-file (SIGTERM above): writes meanwhile, then resume the partial file
        _write(srv, 56, 10)
        with running_daemon(overrides) as d:
            _write(srv, 66, 10)
            wait_caught_up(srv, cp, daemon=d)
            _compare(srv, archive)
            srv.sql("FLUSH BINARY LOGS")
            _write(srv, 76, 10)
            wait_caught_up(srv, cp, daemon=d)

        # crash mid-file: the archive may hold bytes past the checkpoint, which the restart cuts off
        with running_daemon(overrides, stop="kill") as d:
            _write(srv, 86, 30)
        _write(srv, 116, 5)
        with running_daemon(overrides) as d:
            srv.sql("FLUSH BINARY LOGS")
            _write(srv, 121, 5)
            wait_caught_up(srv, cp, daemon=d)
        result = _compare(srv, archive)
        print("archive:", result)
        assert len(result) == len(srv.binlog_files()) >= 5
    finally:
        srv.cleanup()
