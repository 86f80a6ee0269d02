"""``binlogd info`` on binlog format v1/v3 files (MySQL 3.23 / 4.0), built byte by byte: the corpus has none.

Those formats have no in-use flag, so ``closed_cleanly`` says whether the file ends with its closing
ROTATE or STOP: true with one, false without (a server that died, or a copy cut short). README.md
documents this.
"""

from __future__ import annotations

import json
import struct

import pytest

from binlogd.cli import filetools, main
from binlogd.protocol.constants import MAGIC

START, QUERY, STOP, ROTATE = 1, 2, 3, 4


def _event(version: int, type_code: int, body: bytes, pos: int, ts: int) -> bytes:
    if version == 1:
        return struct.pack("<IBII", ts, type_code, 7, 13 + len(body)) + body
    length = 19 + len(body)
    return struct.pack("<IBIIIH", ts, type_code, 7, length, pos + length, 0) + body


def binlog(version: int, ending: str) -> bytes:
    """A START, two QUERY events, then ``ending``: "rotate", "stop", "none" or "cut" (a last event cut short)."""
    data = bytearray(MAGIC)
    data += _event(version, START, struct.pack("<H", version) + b"4.0.30-log".ljust(50, b"\0") + struct.pack("<I", 9),
                   len(data), 1000)
    for i in range(2):
        data += _event(version, QUERY, struct.pack("<IIBH", 5, 0, 2, 0) + b"db\0" + b"INSERT INTO t VALUES (%d)" % i,
                       len(data), 1001 + i)
    if ending == "rotate":
        data += _event(version, ROTATE, (b"" if version == 1 else struct.pack("<Q", 4)) + b"host-bin.002", len(data), 1003)
    elif ending == "stop":
        data += _event(version, STOP, b"", len(data), 1003)
    elif ending == "cut":
        data += _event(version, QUERY, struct.pack("<IIBH", 5, 0, 2, 0) + b"db\0COMMIT", len(data), 1003)[:-3]
    return bytes(data)


@pytest.mark.parametrize("version", [1, 3])
@pytest.mark.parametrize("ending, closed", [("rotate", True), ("stop", True), ("none", False), ("cut", False)])
def test_closed_cleanly_means_a_closing_event(tmp_path, version, ending, closed):
    path = tmp_path / "host-bin.001"
    path.write_bytes(binlog(version, ending))
    result = filetools.info(path)
    assert result.binlog_version == version and result.method == "scan"
    assert result.closed_cleanly is closed
    assert result.next_file == ("host-bin.002" if ending == "rotate" else None)
    assert result.truncated_at == (None if ending != "cut" else len(binlog(version, "none")))
    assert result.end_time == (1003 if closed else 1002)


def test_info_json_says_false_for_a_v3_file_without_its_end(tmp_path, capsys):
    path = tmp_path / "host-bin.001"
    path.write_bytes(binlog(3, "none"))
    assert main(["info", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["closed_cleanly"] is False
