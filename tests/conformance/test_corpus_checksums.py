"""Conformance against the shared corpus (../shared/binlogs): CRC32 checksums.

A byte flipped anywhere an event's checksum covers is a ChecksumError at that event's offset; the FDE's
in-use flag, which the server clears in place when it closes the file, is outside the checksum.
"""

from __future__ import annotations

import pytest

from binlogd.protocol.errors import ChecksumError
from binlogd.protocol.reader import iter_events
from tests.support import manifest as M

_entry, _data, _materialise = M.entry, M.data, M.materialise


def _crc_file() -> tuple[str, bytes, list[M.RawHeader]]:
    path = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    data = _data(path)
    headers, _ = M.raw_headers(data)
    return path, data, headers


@pytest.mark.parametrize("which", [1, 10, "rows", "last"])
def test_flipped_body_byte_is_a_checksum_error(which, corpus):
    path, data, headers = _crc_file()
    assert _entry(path).checksum == "CRC32"
    if which == "rows":
        target = next(h for h in headers if h.type_code in (30, 31, 32))
    elif which == "last":
        target = headers[-1]
    else:
        target = headers[which]
    buf = bytearray(data)  # in memory only; the corpus file is never touched
    buf[target.pos + 19 + (target.length - 23) // 2] ^= 0x40
    decoded = 0
    with pytest.raises(ChecksumError) as info:
        for event in iter_events(bytes(buf)):
            _materialise(event)
            decoded += 1
    assert info.value.offset == target.pos
    assert decoded == headers.index(target)


def test_flipped_footer_byte_is_a_checksum_error(corpus):
    _, data, headers = _crc_file()
    target = headers[5]
    buf = bytearray(data)
    buf[target.pos + target.length - 1] ^= 0x01
    with pytest.raises(ChecksumError) as info:
        list(iter_events(bytes(buf)))
    assert info.value.offset == target.pos


def test_fde_body_flip_is_a_checksum_error(corpus):
    _, data, _ = _crc_file()
    buf = bytearray(data)
    buf[4 + 19 + 10] ^= 0x01  # inside the server version string
    with pytest.raises(ChecksumError) as info:
        list(iter_events(bytes(buf)))
    assert info.value.offset == 4


@pytest.mark.parametrize("path", ["mysql-binlog-connector-java/mysql-bin.checksum-crc32",
                                  "rust-mysql-binlog/bin-log.000001",
                                  "rust_mysql_common/mariadb-bin.000001"])
def test_fde_in_use_flag_is_outside_the_checksum(path, corpus):
    """The server checksums the FDE with LOG_EVENT_BINLOG_IN_USE_F clear and clears the flag in
    place when it closes the file: toggling that flag (header flags, offset 4+17) keeps the CRC valid."""
    data = _data(path)
    assert _entry(path).checksum == "CRC32"
    buf = bytearray(data)
    original = buf[4 + 17] & 0x01
    buf[4 + 17] ^= 0x01
    events = []
    for event in iter_events(bytes(buf)):
        _materialise(event)
        events.append(event)
    assert len(events) == _entry(path).total
    assert events[0].header.flags & 0x01 == (original ^ 0x01)


def test_crc_of_every_event_is_checked(corpus):
    """Flipping one body byte of any event of a small CRC32 file fails at that event."""
    data = _data("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    headers, _ = M.raw_headers(data)
    for h in headers:
        buf = bytearray(data)
        buf[h.pos + 19] ^= 0x80 if h.pos != 4 else 0x00  # FDE: its first body byte is the version
        if h.pos == 4:
            buf[h.pos + 20] ^= 0x01
        with pytest.raises(ChecksumError) as info:
            list(iter_events(bytes(buf)))
        assert info.value.offset == h.pos
