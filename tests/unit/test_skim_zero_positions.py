"""Skimming events that log next_position 0 (MariaDB 11.4+ inside a transaction, binlog_legacy_event_pos=OFF).

Such an event starts where the one before it ended, so a run of them continues at ``expect`` plus their
lengths; the C and Python loops must agree, and an event with a real next_position must still sit exactly
where the run has got to.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from binlogd.protocol import skim
from binlogd.protocol.constants import EventType as ET

LOOPS = [False] + ([True] if skim.C is not None else [])
TABLE = bytes(256)[:ET.WRITE_ROWS] + b"\x09" + bytes(256)[ET.WRITE_ROWS + 1:]
BODY = b"\x01\x00\x00\x00\x00\x00\x00\x00" + b"\x02\x00" + b"\x09" * 30


def rows_event(next_position: int) -> bytes:
    """A WRITE_ROWS event with a CRC32 footer whose header logs ``next_position``."""
    length = 19 + len(BODY) + 4
    raw = struct.pack("<IBIIIH", 1700000000, ET.WRITE_ROWS, 1, length, next_position, 0) + BODY
    return raw + struct.pack("<I", zlib.crc32(raw))


LENGTH = len(rows_event(0))


@pytest.mark.parametrize("use_c", LOOPS)
def test_a_run_of_zero_positions_continues_from_expect(use_c):
    raws = [rows_event(0) for _ in range(5)]
    run = skim.skim_run(raws, 0, 5, TABLE, 4, zlib.crc32, 1000, use_c=use_c)
    assert run.stop == 5 and run.nbytes == 5 * LENGTH and run.counts == {ET.WRITE_ROWS: 5}
    assert run.next_position == 1000 + 5 * LENGTH


@pytest.mark.parametrize("use_c", LOOPS)
def test_zero_and_real_positions_mix(use_c):
    """11.8's files: zeros inside the transaction, then an event logging its real end re-anchors the run."""
    end3 = 1000 + 3 * LENGTH
    raws = [rows_event(0), rows_event(0), rows_event(end3), rows_event(0)]
    run = skim.skim_run(raws, 0, 4, TABLE, 4, zlib.crc32, 1000, use_c=use_c)
    assert run.stop == 4 and run.next_position == end3 + LENGTH


@pytest.mark.parametrize("use_c", LOOPS)
def test_a_real_position_that_disagrees_with_the_run_stops_it(use_c):
    raws = [rows_event(0), rows_event(0), rows_event(1000 + 3 * LENGTH + 1), rows_event(0)]
    run = skim.skim_run(raws, 0, 4, TABLE, 4, zlib.crc32, 1000, use_c=use_c)
    assert run.stop == 2 and run.next_position == 1000 + 2 * LENGTH


def test_c_and_python_agree_on_large_offsets():
    """Offsets past 4 GiB (expect + length beyond 32 bits) are counted the same by both loops."""
    if len(LOOPS) < 2:
        pytest.skip("protocol._skim is not built")
    expect = (1 << 32) - LENGTH // 2
    raws = [rows_event(0) for _ in range(3)]
    runs = [skim.skim_run(raws, 0, 3, TABLE, 4, zlib.crc32, expect, use_c=c) for c in LOOPS]
    assert runs[0] == runs[1] and runs[0].next_position == expect + 3 * LENGTH
