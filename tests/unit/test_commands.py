"""Tests for protocol.commands: byte layouts of the replication commands."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from binlogd.protocol.commands import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_THROUGH_GTID,
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_REGISTER_SLAVE,
    com_binlog_dump,
    com_binlog_dump_gtid,
    com_register_slave,
)
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.packet import BufferedPacketReader, encode_packet

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_command_codes():
    assert (COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID) == (0x12, 0x15, 0x1E)
    assert (BINLOG_DUMP_NON_BLOCK, BINLOG_THROUGH_GTID) == (1, 4)


def test_register_slave_exact_bytes():
    got = com_register_slave(4201, host="replica-1", user="repl", password="pw", port=3306, master_id=1)
    expected = bytes.fromhex(
        "15" "69100000"                # command, server_id 4201
        "09" + b"replica-1".hex() +    # host
        "04" + b"repl".hex() +         # user
        "02" + b"pw".hex() +           # password
        "ea0c"                         # port 3306
        "00000000"                     # replication rank
        "01000000"                     # master_id
    )
    assert got == expected


def test_register_slave_defaults():
    assert com_register_slave(7) == b"\x15\x07\x00\x00\x00" + b"\x00\x00\x00" + b"\x00\x00" + bytes(8)


@pytest.mark.parametrize(
    "kwargs",
    [dict(server_id=-1), dict(server_id=1 << 32), dict(server_id=1, port=70000), dict(server_id=1, host="h" * 256),
     dict(server_id=1, user="é" * 128), dict(server_id=1, master_id=-5)],
)
def test_register_slave_rejects_out_of_range(kwargs):
    with pytest.raises(ValueError):
        com_register_slave(**kwargs)


def test_binlog_dump_exact_bytes():
    got = com_binlog_dump("mysql-bin.000042", 4, 4201, BINLOG_DUMP_NON_BLOCK)
    expected = bytes.fromhex("12" "04000000" "0100" "69100000") + b"mysql-bin.000042"
    assert got == expected
    assert com_binlog_dump("", 0xFFFFFFFF, 1) == bytes.fromhex("12" "ffffffff" "0000" "01000000")


@pytest.mark.parametrize("args", [("f", 1 << 32, 1), ("f", -1, 1), ("f", 4, 1 << 32), ("f", 4, 1, 1 << 16)])
def test_binlog_dump_rejects_out_of_range(args):
    with pytest.raises(ValueError):
        com_binlog_dump(*args)


def _split_dump_gtid(payload: bytes):
    cmd, flags, server_id, name_len = struct.unpack_from("<BHII", payload, 0)
    pos = 11
    name = payload[pos : pos + name_len]
    pos += name_len
    (binlog_pos,) = struct.unpack_from("<Q", payload, pos)
    (data_size,) = struct.unpack_from("<I", payload, pos + 8)
    data = payload[pos + 12 :]
    assert len(data) == data_size
    return cmd, flags, server_id, name, binlog_pos, data


def test_binlog_dump_gtid_exact_bytes():
    gset = MysqlGtidSet.parse(f"{U1}:1-5")
    got = com_binlog_dump_gtid(4201, "mysql-bin.000003", 4, gset)
    data = (
        struct.pack("<Q", 1) + bytes.fromhex(U1.replace("-", "")) + struct.pack("<Q", 1) + struct.pack("<QQ", 1, 6)
    )
    expected = (
        bytes.fromhex("1e" "0400" "69100000" "10000000")
        + b"mysql-bin.000003"
        + bytes.fromhex("0400000000000000")
        + struct.pack("<I", len(data))
        + data
    )
    assert got == expected


def test_binlog_dump_gtid_fields_and_flags():
    gset = MysqlGtidSet.parse(f"{U1}:1-13:mytag:1-2")
    cmd, flags, server_id, name, pos, data = _split_dump_gtid(
        com_binlog_dump_gtid(99, "", 1 << 40, gset, flags=BINLOG_DUMP_NON_BLOCK)
    )
    assert cmd == 0x1E and server_id == 99 and name == b"" and pos == 1 << 40
    assert flags == BINLOG_DUMP_NON_BLOCK | BINLOG_THROUGH_GTID
    assert data == gset.encode() and MysqlGtidSet.decode(data) == gset
    assert data[7] == 1  # tagged format marker


def test_binlog_dump_gtid_empty_set_sends_untagged_empty_encoding():
    *_, data = _split_dump_gtid(com_binlog_dump_gtid(1, "", 4, MysqlGtidSet()))
    assert data == bytes(8)


@pytest.mark.parametrize(
    "args",
    [(1, "x" * 512, 4), (1 << 32, "f", 4), (1, "f", -1), (1, "f", 1 << 64)],
)
def test_binlog_dump_gtid_rejects_out_of_range(args):
    with pytest.raises(ValueError):
        com_binlog_dump_gtid(*args, MysqlGtidSet())
    with pytest.raises(ValueError):
        com_binlog_dump_gtid(1, "f", 4, MysqlGtidSet(), flags=1 << 16)


def test_command_framed_at_seq_zero_reads_back():
    payload = com_binlog_dump("mysql-bin.000001", 4, 5)
    framed = encode_packet(payload, 0)
    assert framed[3] == 0  # the sequence id
    r = BufferedPacketReader()
    r.feed(framed)
    assert bytes(r.next_payload()) == payload and r.next_payload() is None


def test_modules_stay_sans_io():
    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys; import binlogd.protocol.gtid, binlogd.protocol.packet, binlogd.protocol.commands; "
        "bad = {'asyncio', 'socket', 'pymysql', 'aiomysql', 'logging', 'binlogd.daemon'} & set(sys.modules); "
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
