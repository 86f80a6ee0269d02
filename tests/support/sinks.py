"""Feeding sinks in tests: the archive's corpus files, event streams, fsync recording, a bus sink's commits."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

from binlogd.daemon.sinks.archive import ArchiveSink
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_BINLOG_IN_USE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.reader import iter_events


def _fsync_recorder(monkeypatch):
    calls: list[tuple[int, int, bool]] = []
    real = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        calls.append((st.st_dev, st.st_ino, os.path.stat.S_ISDIR(st.st_mode)))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


ARCHIVE_FILES = [
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32",  # CRC32, ends with ROTATE
    "mysql-binlog-connector-java/mysql-bin.checksum-none",   # checksums off, ends with STOP
    "rust_mysql_common/mariadb-bin.000001",                  # MariaDB, FDE flagged in use
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",
    "mysql-binlog-connector-rust/mysql-bin.000057",           # TRANSACTION_PAYLOAD
    "rust_mysql_common/binlog_transaction.000001",            # 5.0, no checksums
    "canal/mysql-bin.000001",                                 # 5.1
    "mysql-binlog-connector-java/mysql-bin.sakila",           # 1.4 MB
]


def checksummed(data: bytes) -> bool:
    return next(iter_events(data)).checksum_alg == 1


def crc_footer(raw: bytes, crc: bool) -> bytes:
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def artificial_rotate(name: str, pos: int, crc: bool) -> tuple[bytes, object]:
    """The ROTATE a primary sends first: timestamp 0, type 4, flags ARTIFICIAL, log_pos 0."""
    body = struct.pack("<Q", pos) + name.encode()
    length = 19 + len(body) + (4 if crc else 0)
    raw = crc_footer(struct.pack("<IBIIIH", 0, ET.ROTATE, 1, length, 0, LOG_EVENT_ARTIFICIAL_F) + body, crc)
    event = Decoder(checksum_alg=1 if crc else 0).decode(raw)
    assert event.header.type_code == ET.ROTATE and (event.next_file, event.position) == (name, pos)
    return raw, event


def heartbeat(name: str, pos: int, crc: bool, tc: int = ET.HEARTBEAT) -> tuple[bytes, object]:
    """A heartbeat as the primary sends it: its log_pos is where the primary is (non-zero)."""
    body = name.encode() if tc == ET.HEARTBEAT else b""
    length = 19 + len(body) + (4 if crc else 0)
    raw = crc_footer(struct.pack("<IBIIIH", 0, tc, 1, length, pos, 0) + body, crc)
    if tc == ET.HEARTBEAT:
        event = Decoder(checksum_alg=1 if crc else 0).decode(raw)
    else:
        from binlogd.protocol.events import EventHeader, HeartbeatEvent
        event = HeartbeatEvent(EventHeader(0, tc, 1, length, pos, 0, 0), name, pos)
    assert event.header.type_code == tc and event.header.next_position == pos
    return raw, event


def resent_fde(data: bytes, fde_raw: bytes) -> tuple[bytes, object]:
    """The FDE a primary sends when a dump starts past offset 4: log_pos 0, in-use flag clear, CRC redone."""
    crc = checksummed(data)
    raw = bytearray(fde_raw[:-4] if crc else fde_raw)
    raw[13:17] = b"\0\0\0\0"
    raw[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    raw = crc_footer(bytes(raw), crc)
    return raw, Decoder().decode(raw)


def stream(data: bytes) -> list[tuple[bytes, object]]:
    """(raw bytes, decoded event) of every event of a binlog file, as a dump would deliver them."""
    return [(data[ev.header.pos:ev.header.pos + ev.header.event_length], ev) for ev in iter_events(data)]


def feed_archive(sink: ArchiveSink, items) -> None:
    for raw, event in items:
        sink.event(raw, event)


def change(i: int, table: str = "t") -> dict:
    return {"op": "insert", "source": {"file": "binlog.000001", "pos": 100 + i, "row": i},
            "schema": "db", "table": table, "after": {"id": i, "name": f"row-{i}", "note": "x" * 20}}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def commit_sink(sink) -> dict:
    """Commit what ``sink`` holds as the daemon's Committer does (flush, begin_sync, sync); returns the state
    the flush gave, once it is durable."""
    state = sink.flush()
    sink.begin_sync()
    sink.sync()
    return state


# =========================================================================== JSON lines


def commit_changes(sink, changes: list, pos: int) -> bytes:
    """Give a bus sink ``changes``, then commit them as the daemon's Committer does (flush, the mark with a
    checkpoint at ``b.000001:pos``, sync); returns that checkpoint's bytes."""
    from binlogd.library.checkpointfile import Checkpoint
    from binlogd.protocol.position import Position

    for change in changes:
        sink.change(change)
    sink.flush()
    checkpoint = Checkpoint(Position("b.000001", pos))
    sink.flushed(checkpoint)
    sink.begin_sync()
    sink.sync()
    return checkpoint.to_bytes()
