"""Binlog format v1 and v3 headers (MySQL 3.23 / 4.0), built byte by byte: the corpus has none."""

from __future__ import annotations

import struct
import zlib

import pytest

from binlogd.protocol.constants import MAGIC
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import ChecksumError
from binlogd.protocol.events import FormatDescriptionEvent, QueryEvent, RotateEvent
from binlogd.protocol.reader import iter_events


def _event(version: int, type_code: int, body: bytes, pos: int, ts: int = 1000) -> bytes:
    if version == 1:
        return struct.pack("<IBII", ts, type_code, 7, 13 + len(body)) + body
    length = 19 + len(body)
    return struct.pack("<IBIIIH", ts, type_code, 7, length, pos + length, 0) + body


def _start_v3(version: int) -> bytes:
    return struct.pack("<H", version) + b"3.23.58-log".ljust(50, b"\0") + struct.pack("<I", 999)


def _query_v3(schema: bytes, sql: bytes) -> bytes:
    # v1/v3 QUERY post-header: thread id, exec time, schema length, error code (11 bytes, no status block)
    return struct.pack("<IIBH", 5, 0, len(schema), 0) + schema + b"\0" + sql


@pytest.mark.parametrize("version", [1, 3])
def test_v1_and_v3_files_decode(version):
    header = 13 if version == 1 else 19
    data = bytearray(MAGIC)
    data += _event(version, 1, _start_v3(version), len(data))
    data += _event(version, 2, _query_v3(b"db1", b"INSERT INTO t VALUES (1)"), len(data), ts=1001)
    rotate_body = (b"" if version == 1 else struct.pack("<Q", 4)) + b"host-bin.002"
    data += _event(version, 4, rotate_body, len(data), ts=1002)
    events = list(iter_events(bytes(data)))
    fde, query, rotate = events
    assert isinstance(fde, FormatDescriptionEvent) and fde.binlog_version == version
    assert fde.header_length == header and fde.server_version == "3.23.58-log"
    assert isinstance(query, QueryEvent) and (query.schema, query.query) == ("db1", "INSERT INTO t VALUES (1)")
    assert query.header.timestamp == 1001 and query.header.pos == 4 + fde.header.event_length
    assert isinstance(rotate, RotateEvent) and rotate.next_file == "host-bin.002" and rotate.position == 4


def test_fde_checksum_ignores_in_use_flag():
    """The server computes the FDE's CRC32 with LOG_EVENT_BINLOG_IN_USE_F clear, then sets the flag."""
    body = struct.pack("<H", 4) + b"8.0.32".ljust(50, b"\0") + struct.pack("<I", 0) + bytes([19]) + bytes(40) + b"\x01"
    length = 19 + len(body) + 4
    clean = struct.pack("<IBIIIH", 5, 15, 1, length, 4 + length, 0) + body
    crc = struct.pack("<I", zlib.crc32(clean))
    in_use = bytearray(clean + crc)
    in_use[17] |= 0x01
    event = Decoder().decode(bytes(in_use), 4)
    assert isinstance(event, FormatDescriptionEvent) and event.checksum_alg == 1
    broken = bytearray(in_use)
    broken[30] ^= 0xFF
    with pytest.raises(ChecksumError) as err:
        Decoder().decode(bytes(broken), 4)
    assert err.value.offset == 4
