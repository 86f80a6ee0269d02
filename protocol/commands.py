"""Replication command payloads (without the 4-byte packet header; frame them with
:func:`protocol.packet.encode_packet` at sequence id 0).

Layouts, all integers little-endian (as the server reads them in
``sql/rpl_source.cc``):

- COM_REGISTER_SLAVE (0x15): u32 server_id, u8-length host, u8-length user,
  u8-length password, u16 port, u32 replication rank (ignored), u32 master_id.
- COM_BINLOG_DUMP (0x12): u32 position, u16 flags, u32 server_id, file name
  (rest of the packet, no terminator).
- COM_BINLOG_DUMP_GTID (0x1e): u16 flags, u32 server_id, u32 name length,
  name, u64 position, u32 data size, data (the encoded GTID set).

Invalid arguments (a value that does not fit its field) raise ValueError: they
are caller bugs, not protocol errors.
"""

from __future__ import annotations

import struct

from .gtid import MysqlGtidSet

__all__ = [
    "BINLOG_DUMP_NON_BLOCK",
    "BINLOG_THROUGH_GTID",
    "BINLOG_THROUGH_POSITION",
    "COM_BINLOG_DUMP",
    "COM_BINLOG_DUMP_GTID",
    "COM_REGISTER_SLAVE",
    "com_binlog_dump",
    "com_binlog_dump_gtid",
    "com_register_slave",
]

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E

#: Dump flag: send EOF instead of waiting when the end of the binlog is reached.
BINLOG_DUMP_NON_BLOCK = 0x01
#: COM_BINLOG_DUMP_GTID flag: the file name and position are used.
BINLOG_THROUGH_POSITION = 0x02
#: COM_BINLOG_DUMP_GTID flag: the GTID set data is present and used.
BINLOG_THROUGH_GTID = 0x04

_REGISTER_HEAD = struct.Struct("<BI")
_REGISTER_TAIL = struct.Struct("<HII")
_DUMP_HEAD = struct.Struct("<BIHI")
_DUMP_GTID_HEAD = struct.Struct("<BHII")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")

# The server copies the file name into a FN_REFLEN (512) buffer with a terminator.
_MAX_FILE_NAME = 511


def _short_string(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"{what} is {len(raw)} bytes; at most 255 fit")
    return bytes([len(raw)]) + raw


def _pack(s: struct.Struct, *values: int) -> bytes:
    try:
        return s.pack(*values)
    except struct.error as exc:
        raise ValueError(f"value out of range for the command field: {exc}") from None


def com_register_slave(
    server_id: int,
    host: str = "",
    user: str = "",
    password: str = "",
    port: int = 0,
    master_id: int = 0,
) -> bytes:
    """Payload of COM_REGISTER_SLAVE announcing this client as replica ``server_id``.

    ``host``/``user``/``password``/``port`` are what SHOW REPLICAS reports (the
    server's report_* settings); the replication rank is sent as 0.
    Returns the payload bytes. Raises ValueError when a string exceeds 255
    bytes (UTF-8) or a number does not fit its u16/u32 field.
    """
    return (
        _pack(_REGISTER_HEAD, COM_REGISTER_SLAVE, server_id)
        + _short_string(host, "host")
        + _short_string(user, "user")
        + _short_string(password, "password")
        + _pack(_REGISTER_TAIL, port, 0, master_id)
    )


def com_binlog_dump(file: str, pos: int, server_id: int, flags: int = 0) -> bytes:
    """Payload of COM_BINLOG_DUMP: stream ``file`` from byte ``pos`` as replica ``server_id``.

    ``flags`` may be BINLOG_DUMP_NON_BLOCK. An empty ``file`` means the oldest
    binlog. Returns the payload bytes. Raises ValueError when ``pos`` does not
    fit 4 bytes (use :func:`com_binlog_dump_gtid` for larger positions), or
    ``server_id``/``flags`` do not fit their u32/u16 fields.
    """
    return _pack(_DUMP_HEAD, COM_BINLOG_DUMP, pos, flags, server_id) + file.encode("utf-8")


def com_binlog_dump_gtid(
    server_id: int,
    file: str,
    pos: int,
    gtid_set: MysqlGtidSet,
    flags: int = 0,
) -> bytes:
    """Payload of COM_BINLOG_DUMP_GTID: stream every transaction not in ``gtid_set``.

    BINLOG_THROUGH_GTID is always set in ``flags``; ``file``/``pos`` may be
    ``""``/4 (the server then finds the first file needed). The data field is
    ``gtid_set.encode()`` (the untagged format unless the set holds tags).
    Returns the payload bytes. Raises ValueError when the file name exceeds
    511 bytes or a number does not fit its u16/u32/u64 field.
    """
    name = file.encode("utf-8")
    if len(name) > _MAX_FILE_NAME:
        raise ValueError(f"binlog file name is {len(name)} bytes; at most {_MAX_FILE_NAME} fit")
    data = gtid_set.encode()
    return (
        _pack(_DUMP_GTID_HEAD, COM_BINLOG_DUMP_GTID, flags | BINLOG_THROUGH_GTID, server_id, len(name))
        + name
        + _pack(_U64, pos)
        + _pack(_U32, len(data))
        + data
    )
