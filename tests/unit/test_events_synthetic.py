"""Event types the real-binlog corpus has no samples of, built byte by byte from the documented layouts.

Each event is written by the small encoder below (19-byte v4 header, optional CRC32 footer) from the
layouts in the MySQL sources' event headers (libbinlogevents/include/*.h, sql/log_event.h) and
MariaDB's replication-protocol pages, then decoded by a Decoder that first saw a real
FORMAT_DESCRIPTION from the corpus (so the post-header lengths are a real server's):

- ``mysql50``: MySQL 5.0.16 (no checksums), ``mysql56``: MySQL 5.6.4 (checksum NONE),
- ``mysql57``: MySQL 5.7.21 (CRC32), ``mariadb``: MariaDB 10.5.15 (CRC32).

Besides every field of every event, each case is checked against a flipped byte (ChecksumError at the
event's position) and against every truncation of its body (EventDecodeError at the event's
position, never IndexError or struct.error; lengths that cannot hold the event must fail).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from binlogd.protocol import events as E
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_IGNORABLE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, ChecksumError, EventDecodeError

POS = 4219  # where every synthetic event "starts" (any offset; errors must name it)
TS = 1_700_000_123
SID = 0x01020304

FDE_FILES = {
    "mysql50": "rust_mysql_common/bug16266.000001",  # 5.0.16-debug-log, binlog v4, no checksums
    "mysql56": "rust_mysql_common/ver_trunk_row_v2.001",  # 5.6.4-m7, checksum NONE
    "mysql57": "mysql-binlog-connector-java/mysql-bin.checksum-crc32",  # 5.7.21, CRC32
    "mariadb": "rust_mysql_common/mariadb-bin.000001",  # 10.5.15-MariaDB, CRC32
}
CRC_FLAVOR = {"mysql50": "mysql57", "mysql56": "mysql57", "mysql57": "mysql57", "mariadb": "mariadb"}


# --------------------------------------------------------------------------- the little encoder


def u8(v: int) -> bytes:
    return struct.pack("<B", v)


def u16(v: int) -> bytes:
    return struct.pack("<H", v)


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def lenc(n: int) -> bytes:
    """MySQL length-encoded integer."""
    if n < 251:
        return u8(n)
    if n < 1 << 16:
        return b"\xfc" + u16(n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + u64(n)


def pstr(raw: bytes) -> bytes:
    """One length byte, then the bytes."""
    return u8(len(raw)) + raw


def event(type_code: int, body: bytes, *, crc: bool, pos: int = POS, ts: int = TS, server_id: int = SID,
          flags: int = 0, next_pos: int | None = None) -> bytes:
    """A v4 event: timestamp u32, type u8, server_id u32, event_length u32, next_position u32, flags u16."""
    length = 19 + len(body) + (4 if crc else 0)
    nxt = pos + length if next_pos is None else next_pos
    raw = struct.pack("<IBIIIH", ts, type_code, server_id, length, nxt, flags) + body
    return raw + u32(zlib.crc32(raw)) if crc else raw


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def bin_decimal(text: str, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL: big-endian groups of 9 digits in 4 bytes, short groups at both ends,
    sign in the top bit (set for >= 0), negative values stored with every byte inverted."""
    neg = text.startswith("-")
    ip, _, fp = text.lstrip("-").partition(".")
    intg = precision - scale
    ip, fp = ip.rjust(intg, "0"), fp.ljust(scale, "0")
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(ip[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(ip[i:i + 9]).to_bytes(4, "big")
    full = scale - scale % 9
    for i in range(0, full, 9):
        out += int(fp[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fp[full:]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if neg:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def query_body(sql: bytes, *, schema: bytes = b"shop", status: bytes = b"", thread_id: int = 77,
               exec_time: int = 3, error_code: int = 0, extra_post: bytes = b"") -> bytes:
    """QUERY: thread_id u32, exec_time u32, schema_len u8, error_code u16, status_len u16
    [, EXECUTE_LOAD_QUERY's extra post-header], status vars, schema, NUL, statement."""
    return (struct.pack("<IIBHH", thread_id, exec_time, len(schema), error_code, len(status)) + extra_post
            + status + schema + b"\0" + sql)


def mariadb_compress(raw: bytes) -> bytes:
    """MariaDB compressed payload: 0x80 | size-bytes, the size big-endian, then a zlib stream."""
    lenlen = 1 if len(raw) < 1 << 8 else 2 if len(raw) < 1 << 16 else 3 if len(raw) < 1 << 24 else 4
    return u8(0x80 | lenlen) + len(raw).to_bytes(lenlen, "big") + zlib.compress(raw)


# Legacy LOAD DATA (LOAD 6, NEW_LOAD 12, CREATE_FILE 8), per sql/log_event.{h,cc} of 4.x/5.0:
# post-header (LOAD_HEADER_LEN 18) = thread_id u32, exec_time u32, skip_lines u32, table_len u8,
# db_len u8, num_fields u32; CREATE_FILE adds its own post-header (CREATE_FILE_HEADER_LEN 4, file_id)
# after those 18 bytes. Body: sql_ex (LOAD: old 7-byte form; NEW_LOAD, CREATE_FILE: five counted
# strings + opt_flags), num_fields field-name lengths, the names each NUL-terminated, table NUL,
# db NUL, file name (to the end for LOAD/NEW_LOAD; CREATE_FILE: NUL, then the first data block).
def sql_ex_old() -> bytes:
    # field_term, enclosed, line_term, line_start, escaped, opt_flags, empty_flags (line_start empty)
    return b"\t" + b'"' + b"\n" + b"\0" + b"\\" + u8(0x01) + u8(0x08)


def sql_ex_new() -> bytes:
    return pstr(b"|~") + pstr(b"'") + pstr(b"\r\n") + pstr(b"") + pstr(b"\\") + u8(0x02)


LOAD_FIELDS = (b"id", b"name", b"price")


def legacy_load_body(type_code: int, *, file_id: int | None = None, block: bytes = b"") -> bytes:
    post = struct.pack("<IIIBBI", 4242, 9, 1, len(b"items"), len(b"shop"), len(LOAD_FIELDS))
    if type_code == ET.CREATE_FILE:
        post += u32(file_id)
    body = (post + (sql_ex_old() if type_code == ET.LOAD else sql_ex_new())
            + bytes(len(f) for f in LOAD_FIELDS) + b"".join(f + b"\0" for f in LOAD_FIELDS)
            + b"items\0" + b"shop\0" + b"/tmp/items.txt")
    if type_code == ET.CREATE_FILE:
        body += b"\0" + block
    return body


# --------------------------------------------------------------------------- environment


@dataclass
class Env:
    fde: dict[str, bytes]
    table_map: bytes  # a real MariaDB TABLE_MAP (CRC32)
    table_map_pos: int
    write_rows: bytes  # the real WRITE_ROWS_V1 that follows it
    write_rows_pos: int

    def decoder(self, flavor: str) -> Decoder:
        dec = Decoder()
        fde = dec.decode(self.fde[flavor], 4)
        assert isinstance(fde, E.FormatDescriptionEvent)
        return dec


def _events(data: bytes):
    pos = 4
    while pos < len(data):
        length = struct.unpack_from("<I", data, pos + 9)[0]
        yield pos, data[pos:pos + length]
        pos += length


@pytest.fixture(scope="module")
def env(corpus: Path) -> Env:
    fdes = {}
    for flavor, name in FDE_FILES.items():
        pos, raw = next(_events((corpus / name).read_bytes()))
        assert raw[4] == ET.FORMAT_DESCRIPTION
        fdes[flavor] = raw
    maria = list(_events((corpus / FDE_FILES["mariadb"]).read_bytes()))
    i = next(k for k, (_, raw) in enumerate(maria) if raw[4] == ET.TABLE_MAP)
    assert maria[i + 1][1][4] == ET.WRITE_ROWS_V1
    return Env(fdes, maria[i][1], maria[i][0], maria[i + 1][1], maria[i + 1][0])


def decode(dec: Decoder, type_code: int, body: bytes, *, pos: int = POS, flags: int = 0,
           next_pos: int | None = None, server_id: int = SID) -> E.Event:
    """Encode with the checksum the decoder's FDE announced, decode, and check the header echo."""
    crc = dec.checksum_alg == 1
    raw = event(type_code, body, crc=crc, pos=pos, flags=flags, next_pos=next_pos, server_id=server_id)
    ev = dec.decode(raw, pos)
    h = ev.header
    assert (h.timestamp, h.type_code, h.server_id, h.event_length, h.flags, h.pos) == (
        TS, type_code, server_id, len(raw), flags, pos)
    assert h.next_position == (pos + len(raw) if next_pos is None else next_pos)
    return ev


# --------------------------------------------------------------------------- LOAD DATA events


@pytest.mark.parametrize("flavor", ["mysql50", "mysql56"])
@pytest.mark.parametrize("type_code", [ET.LOAD, ET.NEW_LOAD])
def test_load_and_new_load(env, flavor, type_code):
    dec = env.decoder(flavor)
    assert dec.post_header_len(type_code) == 18  # what the real FDE says (LOAD_HEADER_LEN)
    ev = decode(dec, type_code, legacy_load_body(type_code))
    assert isinstance(ev, E.LegacyLoadEvent)
    assert (ev.thread_id, ev.exec_time, ev.skip_lines) == (4242, 9, 1)
    assert (ev.schema, ev.table, ev.file_name) == ("shop", "items", "/tmp/items.txt")
    assert ev.fields == ("id", "name", "price")
    assert ev.file_id is None


@pytest.mark.parametrize("flavor", ["mysql50", "mysql56"])
def test_create_file(env, flavor):
    """CREATE_FILE = LOAD's 18-byte post-header + its own 4-byte one (file_id), new sql_ex,
    ..., file name NUL, then the first block of the file (Create_file_log_event::write_data_*)."""
    dec = env.decoder(flavor)
    assert (dec.post_header_len(ET.LOAD), dec.post_header_len(ET.CREATE_FILE)) == (18, 4)
    ev = decode(dec, ET.CREATE_FILE, legacy_load_body(ET.CREATE_FILE, file_id=31337, block=b"1\tapple\t0.5\n"))
    assert isinstance(ev, E.LegacyLoadEvent)
    assert ev.file_id == 31337
    assert (ev.thread_id, ev.exec_time, ev.skip_lines) == (4242, 9, 1)
    assert (ev.schema, ev.table, ev.fields) == ("shop", "items", ("id", "name", "price"))
    assert ev.file_name == "/tmp/items.txt"


@pytest.mark.parametrize("type_code", [ET.APPEND_BLOCK, ET.BEGIN_LOAD_QUERY])
def test_append_block_and_begin_load_query(env, type_code):
    dec = env.decoder("mysql57")
    ev = decode(dec, type_code, u32(0xDEADBEEF) + b"1,apple\n2,pear\n\0\xff")
    assert isinstance(ev, E.LoadBlockEvent)
    assert (ev.file_id, ev.data) == (0xDEADBEEF, b"1,apple\n2,pear\n\0\xff")
    empty = decode(dec, type_code, u32(7))
    assert (empty.file_id, empty.data) == (7, b"")


@pytest.mark.parametrize("type_code", [ET.EXEC_LOAD, ET.DELETE_FILE])
def test_exec_load_and_delete_file(env, type_code):
    ev = decode(env.decoder("mysql56"), type_code, u32(0x01020304))
    assert isinstance(ev, E.LoadFileEvent) and ev.file_id == 0x01020304


ELQ_SQL = b"LOAD DATA INFILE '../tmp/SQL_LOAD-1-2-3.data' REPLACE INTO TABLE `t1` FIELDS TERMINATED BY ','"


def elq_body() -> bytes:
    start = ELQ_SQL.index(b"'")
    end = ELQ_SQL.index(b"'", start + 1) + 1
    status = b"\x00" + u32(0x4000) + b"\x04" + u16(33) + u16(33) + u16(8)
    return query_body(ELQ_SQL, schema=b"db1", status=status, thread_id=5, exec_time=1,
                      extra_post=u32(99) + u32(start) + u32(end) + u8(2))


@pytest.mark.parametrize("flavor", ["mysql50", "mysql56", "mysql57"])
def test_execute_load_query(env, flavor):
    dec = env.decoder(flavor)
    assert dec.post_header_len(ET.EXECUTE_LOAD_QUERY) == 26
    ev = decode(dec, ET.EXECUTE_LOAD_QUERY, elq_body())
    assert isinstance(ev, E.ExecuteLoadQueryEvent)
    assert (ev.file_id, ev.dup_handling) == (99, 2)  # LOAD_DUP_REPLACE
    assert ELQ_SQL[ev.start_pos:ev.end_pos] == b"'../tmp/SQL_LOAD-1-2-3.data'"
    assert (ev.start_pos, ev.end_pos) == (17, 45)
    assert (ev.thread_id, ev.exec_time, ev.error_code, ev.schema) == (5, 1, 0, "db1")
    assert ev.query == ELQ_SQL.decode()
    assert ev.status == {"flags2": 0x4000, "charset": {"client": 33, "connection": 33, "server": 8}}


# --------------------------------------------------------------------------- small MySQL events


def test_intvar(env):
    dec = env.decoder("mysql57")
    ev = decode(dec, ET.INTVAR, u8(2) + u64(2**63 + 5))
    assert isinstance(ev, E.IntvarEvent) and (ev.kind, ev.value) == (2, 2**63 + 5)
    ev = decode(dec, ET.INTVAR, u8(1) + u64(17))
    assert (ev.kind, ev.value) == (1, 17)


def test_rand(env):
    ev = decode(env.decoder("mysql56"), ET.RAND, u64(0x0123456789ABCDEF) + u64(987654321))
    assert isinstance(ev, E.RandEvent) and (ev.seed1, ev.seed2) == (0x0123456789ABCDEF, 987654321)


def user_var(name: bytes, vtype: int, charset: int, value: bytes, flags: bytes = b"") -> bytes:
    """USER_VAR: name_len u32, name, is_null u8, type u8, charset u32, value_len u32, value[, flags u8]."""
    return u32(len(name)) + name + u8(0) + u8(vtype) + u32(charset) + u32(len(value)) + value + flags


USER_VARS = {
    # id: (body, name, value, value_type, charset, is_unsigned)
    "string_utf8": (user_var(b"greeting", 0, 33, "héllo wörld".encode()), "greeting", "héllo wörld", 0, 33, False),
    "string_latin1": (user_var(b"s", 0, 8, b"caf\xe9", b"\x00"), "s", "café", 0, 8, False),
    "real": (user_var(b"pi", 1, 63, struct.pack("<d", -3.25e100)), "pi", -3.25e100, 1, 63, False),
    "int_signed_no_flags": (user_var(b"n", 2, 63, struct.pack("<q", -42)), "n", -42, 2, 63, False),
    "int_signed_flags0": (user_var(b"n", 2, 63, struct.pack("<q", -1), b"\x00"), "n", -1, 2, 63, False),
    "int_unsigned": (user_var(b"u", 2, 63, b"\xff" * 8, b"\x01"), "u", 2**64 - 1, 2, 63, True),
    "decimal": (user_var(b"d", 4, 63, u8(10) + u8(4) + bin_decimal("-123.4500", 10, 4)),
                "d", "-123.4500", 4, 63, False),
    "decimal_wide": (user_var(b"dw", 4, 63, u8(20) + u8(10) + bin_decimal("1234567890.0123456789", 20, 10)),
                     "dw", "1234567890.0123456789", 4, 63, False),
    "decimal_fraction": (user_var(b"df", 4, 63, u8(5) + u8(5) + bin_decimal("0.00042", 5, 5)),
                         "df", "0.00042", 4, 63, False),
}


@pytest.mark.parametrize("case", list(USER_VARS))
def test_user_var(env, case):
    body, name, value, vtype, charset, unsigned = USER_VARS[case]
    ev = decode(env.decoder("mysql57"), ET.USER_VAR, body)
    assert isinstance(ev, E.UserVarEvent)
    assert (ev.name, ev.value, ev.value_type, ev.charset, ev.is_unsigned) == (name, value, vtype, charset, unsigned)


def test_user_var_null(env):
    ev = decode(env.decoder("mysql56"), ET.USER_VAR, u32(7) + b"nothing" + u8(1))
    assert isinstance(ev, E.UserVarEvent) and ev.name == "nothing" and ev.value is None


@pytest.mark.parametrize("flavor", ["mysql56", "mysql57"])
def test_incident(env, flavor):
    dec = env.decoder(flavor)
    ev = decode(dec, ET.INCIDENT, u16(1) + pstr(b"error writing to the binary log"))
    assert isinstance(ev, E.IncidentEvent) and (ev.incident, ev.message) == (1, "error writing to the binary log")
    bare = decode(dec, ET.INCIDENT, u16(1))  # no message at all
    assert (bare.incident, bare.message) == (1, "")
    empty = decode(dec, ET.INCIDENT, u16(2) + pstr(b""))  # what the server writes for an empty message
    assert (empty.incident, empty.message) == (2, "")


def test_heartbeat(env):
    ev = decode(env.decoder("mysql57"), ET.HEARTBEAT, b"binlog.000042", next_pos=0xFEDCBA98,
                flags=LOG_EVENT_ARTIFICIAL_F)
    assert isinstance(ev, E.HeartbeatEvent) and (ev.log_file, ev.position) == ("binlog.000042", 0xFEDCBA98)


def heartbeat_v2_body(name: bytes, position: int) -> bytes:
    """Type/length/value fields with length-encoded type and length: 1 = file name, 2 = position
    (itself a length-encoded int), 0 = end mark."""
    enc = lenc(position)
    return lenc(1) + lenc(len(name)) + name + lenc(2) + lenc(len(enc)) + enc + lenc(0)


@pytest.mark.parametrize("position", [4, 300, 70_000, 2**32 + 7, 2**63 + 1])
def test_heartbeat_v2(env, position):
    ev = decode(env.decoder("mysql57"), ET.HEARTBEAT_V2, heartbeat_v2_body(b"binlog.000123", position),
                next_pos=0, flags=LOG_EVENT_ARTIFICIAL_F)
    assert isinstance(ev, E.HeartbeatEvent)
    assert (ev.log_file, ev.position) == ("binlog.000123", position)


def test_heartbeat_v2_long_file_name(env):
    name = b"/var/lib/mysql/" + b"x" * 300 + b".000001"  # field length needs a 3-byte length-encoded int
    ev = decode(env.decoder("mysql57"), ET.HEARTBEAT_V2, heartbeat_v2_body(name, 5 * 2**32), next_pos=0)
    assert (ev.log_file, ev.position) == (name.decode(), 5 * 2**32)


def test_ignorable(env):
    body = b"\x01\x02future-thing\xff"
    ev = decode(env.decoder("mysql57"), ET.IGNORABLE, body, flags=LOG_EVENT_IGNORABLE_F)
    assert isinstance(ev, E.IgnorableEvent) and ev.body == body


@pytest.mark.parametrize("sql", [b"INSERT INTO t VALUES (1)", b"UPDATE t SET c = '" + b"z" * 300 + b"' WHERE id = 1"])
def test_rows_query(env, sql):
    # The length byte holds the length cut to 8 bits; readers ignore it and take the rest of the event.
    ev = decode(env.decoder("mysql57"), ET.ROWS_QUERY, u8(len(sql) & 0xFF) + sql, flags=LOG_EVENT_IGNORABLE_F)
    assert isinstance(ev, E.RowsQueryEvent) and ev.query == sql.decode()


@pytest.mark.parametrize("one_phase", [0, 1])
def test_xa_prepare(env, one_phase):
    body = u8(one_phase) + u32(0x1234) + u32(6) + u32(3) + b"gtrid1" + b"bq\0"
    ev = decode(env.decoder("mysql57"), ET.XA_PREPARE, body)
    assert isinstance(ev, E.XaPrepareEvent)
    assert (ev.one_phase, ev.format_id, ev.gtrid, ev.bqual) == (bool(one_phase), 0x1234, b"gtrid1", b"bq\0")


SERVER_UUID = b"3e11fa47-71ca-11e1-9e33-c80aa9429562"


def transaction_context_body() -> bytes:
    """Transaction_context_event (control_events.h): post-header TRANSACTION_CONTEXT_HEADER_LEN = 18:
    server_uuid_len u8 @0, thread_id u32 @1, gtid_specified u8 @5, snapshot_version_len u32 @6,
    write_set items u32 @10, read_set items u32 @14; then server_uuid, snapshot version, and each
    write/read set item as a 2-byte length + bytes."""
    snapshot = b"\x01\x02\x03\x04\x05"
    writes = [b"PRIMARY\xac\xedshop\x04items\x011", b"k2"]
    reads = [b"r1"]
    post = u8(len(SERVER_UUID)) + u32(123456) + u8(1) + u32(len(snapshot)) + u32(len(writes)) + u32(len(reads))
    assert len(post) == 18
    return post + SERVER_UUID + snapshot + b"".join(u16(len(w)) + w for w in writes + reads)


def test_transaction_context(env):
    dec = env.decoder("mysql57")
    assert dec.post_header_len(ET.TRANSACTION_CONTEXT) == 18  # the real 5.7 FDE agrees
    body = transaction_context_body()
    ev = decode(dec, ET.TRANSACTION_CONTEXT, body)
    assert isinstance(ev, E.TransactionContextEvent)
    assert (ev.server_uuid, ev.thread_id, ev.gtid_specified) == (SERVER_UUID.decode(), 123456, True)
    assert ev.body == body


def view_change_body() -> bytes:
    """View_change_event: view_id char[40] @0, seq_number u64 @40, cert_info_size u32 @48
    (VIEW_CHANGE_HEADER_LEN 52), then per entry key (u16 length) and value (u32 length)."""
    cert = u16(4) + b"key1" + u32(6) + b"value1"
    return b"15870466427012285:1".ljust(40, b"\0") + u64(2**40 + 3) + u32(1) + cert


def test_view_change(env):
    dec = env.decoder("mysql57")
    assert dec.post_header_len(ET.VIEW_CHANGE) == 52
    body = view_change_body()
    ev = decode(dec, ET.VIEW_CHANGE, body)
    assert isinstance(ev, E.ViewChangeEvent)
    assert (ev.view_id, ev.seq_number, ev.body) == ("15870466427012285:1", 2**40 + 3, body)


# --------------------------------------------------------------------------- QUERY status variables

MYSQL_STATUS = {
    # id: (status bytes, expected decoded items)
    "flags2": (b"\x00" + u32(0x0C084000), {"flags2": 0x0C084000}),
    "sql_mode": (b"\x01" + u64(0x8000_0000_4000_0021), {"sql_mode": 0x8000_0000_4000_0021}),
    "catalog_code2": (b"\x02" + pstr(b"std") + b"\0", {"catalog": "std"}),
    "auto_increment": (b"\x03" + u16(5) + u16(3), {"auto_increment": (5, 3)}),
    "charset": (b"\x04" + u16(33) + u16(8) + u16(255), {"charset": {"client": 33, "connection": 8, "server": 255}}),
    "time_zone": (b"\x05" + pstr(b"Europe/Paris"), {"time_zone": "Europe/Paris"}),
    "catalog_nz": (b"\x06" + pstr(b"std"), {"catalog": "std"}),
    "lc_time_names": (b"\x07" + u16(9), {"lc_time_names": 9}),
    "charset_database": (b"\x08" + u16(224), {"charset_database": 224}),
    "table_map_for_update": (b"\x09" + u64(0x1_0000_0001), {"table_map_for_update": 0x1_0000_0001}),
    "invoker": (b"\x0b" + pstr(b"admin") + pstr(b"%.example.com"), {"invoker": "admin@%.example.com"}),
    "updated_db_names": (b"\x0c" + u8(3) + b"db1\0shop\0x\0", {"updated_db_names": ["db1", "shop", "x"]}),
    "updated_db_names_too_many": (b"\x0c" + u8(254), {"updated_db_names": []}),
    "microseconds": (b"\x0d" + (999_999).to_bytes(3, "little"), {"microseconds": 999_999}),
    "explicit_defaults_for_timestamp": (b"\x10" + u8(1), {"explicit_defaults_for_timestamp": 1}),
    "ddl_xid": (b"\x11" + u64(2**56 + 77), {"ddl_xid": 2**56 + 77}),
    "default_collation_for_utf8mb4": (b"\x12" + u16(255), {"default_collation_for_utf8mb4": 255}),
    "sql_require_primary_key": (b"\x13" + u8(1), {"sql_require_primary_key": 1}),
    "default_table_encryption": (b"\x14" + u8(1), {"default_table_encryption": 1}),
}
MARIADB_STATUS = {
    "hrnow": (b"\x80" + (123_456).to_bytes(3, "little"), {"microseconds": 123_456}),
    "xid": (b"\x81" + u64(2**62 + 11), {"xid": 2**62 + 11}),
    "gtid_flags3": (b"\x82" + u8(0x03), {"gtid_flags3": 0x03}),
}
SQL = b"CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(10)) -- \xe2\x9c\x93"


@pytest.mark.parametrize("flavor,case",
                         [("mysql57", c) for c in MYSQL_STATUS] + [("mariadb", c) for c in MARIADB_STATUS])
def test_query_status_variable(env, flavor, case):
    status, expected = (MYSQL_STATUS | MARIADB_STATUS)[case]
    ev = decode(env.decoder(flavor), ET.QUERY, query_body(SQL, status=status, error_code=1050))
    assert isinstance(ev, E.QueryEvent)
    assert (ev.thread_id, ev.exec_time, ev.error_code, ev.schema) == (77, 3, 1050, "shop")
    assert ev.query == SQL.decode()
    assert ev.status == expected


def test_query_all_status_variables_together(env):
    order = ["flags2", "sql_mode", "catalog_nz", "auto_increment", "charset", "time_zone", "lc_time_names",
             "charset_database", "table_map_for_update", "invoker", "updated_db_names", "microseconds",
             "explicit_defaults_for_timestamp", "ddl_xid", "default_collation_for_utf8mb4",
             "sql_require_primary_key", "default_table_encryption"]
    status = b"".join(MYSQL_STATUS[k][0] for k in order)
    latin1 = b"\x04" + u16(8) + u16(8) + u16(8)
    status = status.replace(MYSQL_STATUS["charset"][0], latin1)
    status = status[:5] + b"\x0a" + u32(1234) + status[5:]  # Q_MASTER_DATA_WRITTEN_CODE: skipped, 4 bytes
    expected = {}
    for k in order:
        expected |= MYSQL_STATUS[k][1]
    expected["charset"] = {"client": 8, "connection": 8, "server": 8}
    ev = decode(env.decoder("mysql57"), ET.QUERY, query_body(b"caf\xe9", schema=b"", status=status))
    assert ev.status == expected
    assert ev.schema == "" and ev.query == "café"  # character_set_client 8 = latin1


def test_query_catalog_code2_is_skipped_correctly(env):
    status = b"\x02" + pstr(b"std") + b"\0" + b"\x05" + pstr(b"UTC")
    ev = decode(env.decoder("mysql50"), ET.QUERY, query_body(b"SELECT 1", status=status))
    assert ev.status.get("time_zone") == "UTC" and ev.query == "SELECT 1"


def test_query_mariadb_status_variables_together(env):
    status = b"".join(v[0] for v in MARIADB_STATUS.values()) + MYSQL_STATUS["charset"][0]
    ev = decode(env.decoder("mariadb"), ET.QUERY, query_body(SQL, status=status))
    assert ev.status == {"microseconds": 123_456, "xid": 2**62 + 11, "gtid_flags3": 3,
                         "charset": {"client": 33, "connection": 8, "server": 255}}
    assert ev.query == SQL.decode()


@pytest.mark.parametrize("flavor", ["mysql56", "mariadb"])
def test_query_unknown_status_code_stops_parsing_but_keeps_the_statement(env, flavor):
    status = b"\x00" + u32(7) + b"\x63" + b"\x01\x02\x03" + b"\x01" + u64(1)
    ev = decode(env.decoder(flavor), ET.QUERY, query_body(SQL, status=status))
    assert ev.status == {"flags2": 7, "unparsed_status_code": 0x63}
    assert (ev.schema, ev.query) == ("shop", SQL.decode())


# --------------------------------------------------------------------------- MariaDB events


def test_annotate_rows(env):
    sql = "INSERT INTO outbox (topic) VALUES ('ünïcode')"
    ev = decode(env.decoder("mariadb"), ET.ANNOTATE_ROWS, sql.encode())
    assert isinstance(ev, E.RowsQueryEvent) and ev.query == sql


def test_binlog_checkpoint(env):
    ev = decode(env.decoder("mariadb"), ET.BINLOG_CHECKPOINT, u32(18) + b"mariadb-bin.000017")
    assert isinstance(ev, E.BinlogCheckpointEvent) and ev.checkpoint_file == "mariadb-bin.000017"


def mariadb_gtid(seq: int, domain: int, flags: int, tail: bytes = b"") -> bytes:
    """GTID_EVENT: seq_no u64, domain_id u32, flags u8; FL_GROUP_COMMIT_ID (2): commit_id u64;
    FL_PREPARED_XA (0x40) / FL_COMPLETED_XA (0x80): format_id u32, gtrid_len u8, bqual_len u8, data;
    padded with zeros to GTID_HEADER_LEN (19)."""
    body = u64(seq) + u32(domain) + u8(flags) + tail
    return body.ljust(19, b"\0")


XID_RAW = u32(1) + u8(5) + u8(2) + b"gtridbq"


def test_mariadb_gtid_standalone(env):
    dec = env.decoder("mariadb")
    assert dec.post_header_len(ET.MARIADB_GTID) == 19
    ev = decode(dec, ET.MARIADB_GTID, mariadb_gtid(2**63 + 9, 7, 0x01 | 0x08), server_id=42)
    assert isinstance(ev, E.MariadbGtidEvent)
    assert (ev.seq_no, ev.domain_id, ev.flags, ev.commit_id, ev.xa_xid) == (2**63 + 9, 7, 0x09, None, None)
    assert ev.standalone and ev.gtid == f"7-42-{2**63 + 9}"


def test_mariadb_gtid_group_commit_id(env):
    ev = decode(env.decoder("mariadb"), ET.MARIADB_GTID, mariadb_gtid(100, 0, 0x02 | 0x04, u64(2**40 + 1)))
    assert (ev.seq_no, ev.domain_id, ev.flags, ev.commit_id, ev.xa_xid) == (100, 0, 0x06, 2**40 + 1, None)
    assert not ev.standalone and ev.gtid == f"0-{SID}-100"


@pytest.mark.parametrize("xa_flag", [0x40, 0x80])
def test_mariadb_gtid_xa(env, xa_flag):
    ev = decode(env.decoder("mariadb"), ET.MARIADB_GTID, mariadb_gtid(5, 1, xa_flag | 0x04, XID_RAW))
    assert (ev.seq_no, ev.domain_id, ev.flags, ev.commit_id, ev.xa_xid) == (5, 1, xa_flag | 0x04, None, XID_RAW)


def test_mariadb_gtid_group_commit_id_and_xa(env):
    """The server reads commit_id and then the XA id: the two flags are independent (log_event.cc)."""
    ev = decode(env.decoder("mariadb"), ET.MARIADB_GTID, mariadb_gtid(6, 1, 0x02 | 0x40, u64(77) + XID_RAW))
    assert (ev.commit_id, ev.xa_xid) == (77, XID_RAW)


def test_mariadb_gtid_list(env):
    entries = [(0, 1, 100), (1, 2, 5), (2**32 - 1, 7, 2**64 - 1)]
    body = u32(len(entries) | 0x1 << 28) + b"".join(u32(d) + u32(s) + u64(q) for d, s, q in entries)
    ev = decode(env.decoder("mariadb"), ET.MARIADB_GTID_LIST, body)
    assert isinstance(ev, E.MariadbGtidListEvent)
    assert ev.gtids == ("0-1-100", "1-2-5", f"{2**32 - 1}-7-{2**64 - 1}") and ev.flags == 1
    empty = decode(env.decoder("mariadb"), ET.MARIADB_GTID_LIST, u32(0 | 0x2 << 28))
    assert (empty.gtids, empty.flags) == ((), 2)


def start_encryption_body() -> bytes:
    """START_ENCRYPTION_EVENT: crypto scheme u8, key version u32, nonce 12 bytes."""
    return u8(1) + u32(0x0A0B0C0D) + bytes(range(100, 112))


def test_start_encryption_then_everything_is_refused(env):
    dec = env.decoder("mariadb")
    ev = decode(dec, ET.START_ENCRYPTION, start_encryption_body())
    assert isinstance(ev, E.StartEncryptionEvent)
    assert (ev.scheme, ev.key_version, ev.nonce) == (1, 0x0A0B0C0D, bytes(range(100, 112)))
    after = POS + ev.header.event_length
    for k, (tc, body) in enumerate([(ET.XID, u64(1)), (ET.QUERY, query_body(b"COMMIT")),
                                    (ET.MARIADB_GTID, mariadb_gtid(1, 0, 0)), (99, b"x")]):
        pos = after + 1000 * k
        with pytest.raises(EventDecodeError) as err:
            dec.decode(event(tc, body, crc=True, pos=pos), pos)
        assert "encrypted" in str(err.value) and err.value.offset == pos


def test_query_compressed(env):
    sql = ("INSERT INTO t VALUES " + ",".join(f"({i}, 'row {i}')" for i in range(60))).encode()
    status = b"\x00" + u32(0) + b"\x04" + u16(33) + u16(33) + u16(8)
    ev = decode(env.decoder("mariadb"), ET.QUERY_COMPRESSED, query_body(mariadb_compress(sql), status=status))
    assert isinstance(ev, E.QueryEvent)
    assert (ev.schema, ev.thread_id, ev.query) == ("shop", 77, sql.decode())
    small = decode(env.decoder("mariadb"), ET.QUERY_COMPRESSED, query_body(mariadb_compress(b"BEGIN")))
    assert small.query == "BEGIN"


@pytest.mark.parametrize("cut", [1, 4])
def test_mariadb_compressed_payload_must_be_a_whole_zlib_stream(env, cut):
    """MariaDB inflates with zlib's uncompress(), which fails on a stream missing its end (Adler-32 trailer)."""
    sql = SQL * 3
    payload = mariadb_compress(sql)[:-cut]
    with pytest.raises(EventDecodeError) as err:
        decode(env.decoder("mariadb"), ET.QUERY_COMPRESSED, query_body(payload))
    assert err.value.offset == POS


def compressed_rows_event(env: Env, pos: int = POS) -> bytes:
    """WRITE_ROWS_COMPRESSED_V1 from the real WRITE_ROWS_V1: post-header (table id 6, flags 2),
    column count, present bitmap as they were; the row images compressed; length and CRC redone."""
    raw = env.write_rows
    body = raw[19:-4]
    width = body[8]
    assert width < 251
    head = 9 + (width + 7) // 8
    new_body = body[:head] + mariadb_compress(body[head:])
    return event(ET.WRITE_ROWS_COMPRESSED_V1, new_body, crc=True, pos=pos,
                 ts=struct.unpack_from("<I", raw)[0], server_id=struct.unpack_from("<I", raw, 5)[0])


def test_write_rows_compressed_v1(env):
    dec = env.decoder("mariadb")
    dec.decode(env.table_map, env.table_map_pos)
    original = dec.decode(env.write_rows, env.write_rows_pos)
    expected = original.rows
    assert expected and expected[0]["topic"] == "foo"
    ev = dec.decode(compressed_rows_event(env), POS)
    assert isinstance(ev, E.RowsEvent) and ev.header.type_code == ET.WRITE_ROWS_COMPRESSED_V1
    assert (ev.kind, ev.table_id, ev.flags, ev.schema, ev.table) == (
        "insert", original.table_id, original.flags, "toddy_test", "outbox")
    assert ev.columns == original.columns
    assert ev.rows == expected


# --------------------------------------------------------------------------- unknown types


@pytest.mark.parametrize("flavor", ["mysql56", "mysql57", "mariadb"])
@pytest.mark.parametrize("flags", [0, LOG_EVENT_IGNORABLE_F])
def test_unknown_type(env, flavor, flags):
    body = b"\x00\x01opaque body\xff"
    ev = decode(env.decoder(flavor), 99, body, flags=flags)
    assert isinstance(ev, E.UnknownEvent) and ev.body == body
    assert ev.header.type_name == "UNKNOWN_99"


# --------------------------------------------------------------------------- every case: CRC and truncation


@dataclass
class Case:
    flavor: str
    type_code: int
    body: bytes
    may_decode: Callable[[int], bool] = lambda n: False  # truncated body lengths allowed to decode
    flags: int = 0
    rows: bool = False  # needs the real TABLE_MAP first


def _from(start: int) -> Callable[[int], bool]:
    return lambda n: n >= start


def _one_of(*lengths: int) -> Callable[[int], bool]:
    return lambda n: n in lengths


def _stmt_start(body: bytes, sql: bytes) -> int:
    return len(body) - len(sql)


def _cases() -> dict[str, Case]:
    c: dict[str, Case] = {}
    for tc in (ET.LOAD, ET.NEW_LOAD):
        body = legacy_load_body(tc)
        c[f"legacy_{tc.name}"] = Case("mysql50", tc, body, _from(len(body) - len(b"/tmp/items.txt")))
    body = legacy_load_body(ET.CREATE_FILE, file_id=3, block=b"1\tapple\n")
    tail = len(b"/tmp/items.txt\0" + b"1\tapple\n")
    c["CREATE_FILE"] = Case("mysql50", ET.CREATE_FILE, body, _from(len(body) - tail))
    c["APPEND_BLOCK"] = Case("mysql56", ET.APPEND_BLOCK, u32(1) + b"data", _from(4))
    c["BEGIN_LOAD_QUERY"] = Case("mysql56", ET.BEGIN_LOAD_QUERY, u32(1) + b"data", _from(4))
    c["EXEC_LOAD"] = Case("mysql56", ET.EXEC_LOAD, u32(1))
    c["DELETE_FILE"] = Case("mysql56", ET.DELETE_FILE, u32(1))
    body = elq_body()
    c["EXECUTE_LOAD_QUERY"] = Case("mysql56", ET.EXECUTE_LOAD_QUERY, body, _from(_stmt_start(body, ELQ_SQL) - 1))
    c["INTVAR"] = Case("mysql56", ET.INTVAR, u8(2) + u64(5))
    c["RAND"] = Case("mysql56", ET.RAND, u64(1) + u64(2))
    for k, (body, *_) in USER_VARS.items():
        flags_byte = k in ("string_latin1", "int_signed_flags0", "int_unsigned")
        c[f"USER_VAR_{k}"] = Case("mysql56", ET.USER_VAR, body, _from(len(body) - flags_byte))
    c["USER_VAR_null"] = Case("mysql56", ET.USER_VAR, u32(7) + b"nothing" + u8(1))
    c["INCIDENT"] = Case("mysql56", ET.INCIDENT, u16(1) + pstr(b"lost events"), lambda n: n == 2)
    c["INCIDENT_bare"] = Case("mysql56", ET.INCIDENT, u16(1))
    c["HEARTBEAT"] = Case("mysql57", ET.HEARTBEAT, b"binlog.000042", lambda n: True)
    body = heartbeat_v2_body(b"binlog.000123", 2**40)
    name_end = 2 + len(b"binlog.000123")
    # empty, just the name, or all but the end mark: still whole
    c["HEARTBEAT_V2"] = Case("mysql57", ET.HEARTBEAT_V2, body, _one_of(0, name_end, len(body) - 1))
    c["IGNORABLE"] = Case("mysql57", ET.IGNORABLE, b"abc", lambda n: True, flags=LOG_EVENT_IGNORABLE_F)
    c["ROWS_QUERY"] = Case("mysql57", ET.ROWS_QUERY, pstr(b"INSERT INTO t VALUES (1)"), lambda n: True,
                           flags=LOG_EVENT_IGNORABLE_F)
    c["XA_PREPARE"] = Case("mysql57", ET.XA_PREPARE, u8(0) + u32(1) + u32(3) + u32(2) + b"abcde")
    body = transaction_context_body()
    c["TRANSACTION_CONTEXT"] = Case("mysql57", ET.TRANSACTION_CONTEXT, body, _from(18 + len(SERVER_UUID)))
    c["VIEW_CHANGE"] = Case("mysql57", ET.VIEW_CHANGE, view_change_body(), _from(48))
    for name, status in (("QUERY_mysql", b"".join(v[0] for v in MYSQL_STATUS.values())),
                         ("QUERY_mariadb", b"".join(v[0] for v in MARIADB_STATUS.values()))):
        body = query_body(SQL, status=status)
        c[name] = Case("mysql57" if name == "QUERY_mysql" else "mariadb", ET.QUERY, body,
                       _from(_stmt_start(body, SQL) - 1))
    c["QUERY_COMPRESSED"] = Case("mariadb", ET.QUERY_COMPRESSED, query_body(mariadb_compress(SQL * 3)))
    c["ANNOTATE_ROWS"] = Case("mariadb", ET.ANNOTATE_ROWS, b"INSERT INTO t VALUES (1)", lambda n: True)
    c["BINLOG_CHECKPOINT"] = Case("mariadb", ET.BINLOG_CHECKPOINT, u32(18) + b"mariadb-bin.000017")
    c["MARIADB_GTID_standalone"] = Case("mariadb", ET.MARIADB_GTID, mariadb_gtid(1, 2, 1), _from(13))
    c["MARIADB_GTID_commit_id"] = Case("mariadb", ET.MARIADB_GTID, mariadb_gtid(1, 2, 2, u64(9)))
    c["MARIADB_GTID_xa"] = Case("mariadb", ET.MARIADB_GTID, mariadb_gtid(1, 2, 0x40, XID_RAW))
    c["MARIADB_GTID_LIST"] = Case("mariadb", ET.MARIADB_GTID_LIST,
                                  u32(2) + u32(0) + u32(1) + u64(10) + u32(1) + u32(1) + u64(20))
    c["START_ENCRYPTION"] = Case("mariadb", ET.START_ENCRYPTION, start_encryption_body())
    c["WRITE_ROWS_COMPRESSED_V1"] = Case("mariadb", ET.WRITE_ROWS_COMPRESSED_V1, b"", rows=True)
    c["UNKNOWN_99"] = Case("mysql56", 99, b"whatever", lambda n: True)
    c["UNKNOWN_99_ignorable"] = Case("mariadb", 99, b"whatever", lambda n: True, flags=LOG_EVENT_IGNORABLE_F)
    return c


CASES = _cases()


def _prepared(env: Env, case: Case, flavor: str) -> tuple[Decoder, bytes]:
    """A decoder in the case's state and the case's body (the compressed rows event comes from the corpus)."""
    dec = env.decoder(flavor)
    body = case.body
    if case.rows:
        dec.decode(env.table_map, env.table_map_pos)
        body = compressed_rows_event(env)[19:-4]
    return dec, body


def _touch(ev: E.Event) -> None:
    if isinstance(ev, E.RowsEvent):
        ev.rows  # rows decode lazily: errors must surface as EventDecodeError too  # noqa: B018


@pytest.mark.parametrize("name", list(CASES))
def test_crc_mismatch(env, name):
    case = CASES[name]
    flavor = CRC_FLAVOR[case.flavor]
    dec, body = _prepared(env, case, flavor)
    raw = event(case.type_code, body, crc=True, flags=case.flags)
    for at in sorted({4, 19 + len(body) // 2, len(raw) - 1}):  # header, body, the stored CRC itself
        broken = bytearray(raw)
        broken[at] ^= 0x10
        with pytest.raises(ChecksumError) as err:
            dec.decode(bytes(broken), POS)
        assert err.value.offset == POS, at


@pytest.mark.parametrize("variant", ["native", "crc"])
@pytest.mark.parametrize("name", list(CASES))
def test_truncated_body(env, name, variant):
    case = CASES[name]
    flavor = case.flavor if variant == "native" else CRC_FLAVOR[case.flavor]
    _, body = _prepared(env, case, flavor)
    assert body
    for n in range(len(body) - 1, -1, -1):
        dec, _ = _prepared(env, case, flavor)
        raw = event(case.type_code, body[:n], crc=dec.checksum_alg == 1, flags=case.flags)
        try:
            _touch(dec.decode(raw, POS))
        except BinlogError as exc:
            assert isinstance(exc, EventDecodeError), f"{n} bytes: {exc!r}"
            assert exc.offset == POS, f"{n} bytes: {exc!r}"
            assert exc.type_code == case.type_code
        except Exception as exc:  # IndexError, struct.error, ... escaping the decoder
            pytest.fail(f"body cut to {n} of {len(body)} bytes raised {exc!r}")
        else:
            assert case.may_decode(n), f"body cut to {n} of {len(body)} bytes decoded without error"
