"""The fake primary's own wire and binlog building blocks, written independently of ``binlogd.protocol``.

Packet framing, length-encoded integers, OK/ERR/EOF packets, native-password tokens, GTID interval
sets, event headers with CRC32 footers, and :class:`BinlogFile`, a corpus file cut into events.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from binlogd.protocol.decoder import version_tuple

MAX_CHUNK = 0xFFFFFF
HEADER_LEN = 19
MAGIC = b"\xfebin"

# event types
QUERY, STOP, ROTATE, XID, FORMAT_DESCRIPTION = 2, 3, 4, 16, 15
HEARTBEAT, GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 27, 33, 34, 35
TRANSACTION_PAYLOAD, HEARTBEAT_V2, GTID_TAGGED = 40, 41, 42
_GROUP_STARTS = (GTID, ANONYMOUS_GTID, GTID_TAGGED)

LOG_EVENT_BINLOG_IN_USE_F = 0x0001
LOG_EVENT_ARTIFICIAL_F = 0x0020

# commands
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
BINLOG_DUMP_NON_BLOCK, BINLOG_THROUGH_POSITION, BINLOG_THROUGH_GTID = 0x01, 0x02, 0x04

# capabilities
CLIENT_LONG_PASSWORD, CLIENT_FOUND_ROWS, CLIENT_LONG_FLAG, CLIENT_CONNECT_WITH_DB = 0x1, 0x2, 0x4, 0x8
CLIENT_PROTOCOL_41, CLIENT_SSL, CLIENT_TRANSACTIONS = 0x200, 0x800, 0x2000
CLIENT_SECURE_CONNECTION, CLIENT_MULTI_STATEMENTS, CLIENT_MULTI_RESULTS = 0x8000, 0x10000, 0x20000
CLIENT_PLUGIN_AUTH, CLIENT_CONNECT_ATTRS, CLIENT_PLUGIN_AUTH_LENENC = 0x80000, 0x100000, 0x200000
SERVER_CAPABILITIES = (CLIENT_LONG_PASSWORD | CLIENT_FOUND_ROWS | CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB
                       | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION
                       | CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH
                       | CLIENT_CONNECT_ATTRS)
SERVER_STATUS_AUTOCOMMIT = 0x0002

# column types of the text result sets
TYPE_LONGLONG, TYPE_VAR_STRING = 8, 253

ER_ACCESS_DENIED = 1045
ER_PARSE = 1064
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
ER_SOURCE_FATAL_READING_BINLOG = 1236
MSG_NO_FIRST_FILE = "Could not find first log file name in binary log index file"


# ----------------------------------------------------------------------------- wire helpers


def lenenc(value: int) -> bytes:
    """A MySQL length-encoded integer."""
    if value < 0xFB:
        return bytes([value])
    if value <= 0xFFFF:
        return b"\xfc" + value.to_bytes(2, "little")
    if value <= 0xFFFFFF:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def lenenc_str(raw: bytes) -> bytes:
    return lenenc(len(raw)) + raw


def frame(payload: bytes, seq: int) -> tuple[bytes, int]:
    """Frame ``payload`` from sequence id ``seq``; return (wire bytes, next sequence id).

    A payload of 0xFFFFFF bytes or more goes out in 0xFFFFFF-byte chunks, each with the next
    sequence id, and ends with a shorter chunk (empty when the length is a multiple).
    """
    out = bytearray()
    pos = 0
    while True:
        n = min(len(payload) - pos, MAX_CHUNK)
        out += n.to_bytes(3, "little") + bytes([seq & 0xFF])
        out += payload[pos:pos + n]
        pos += n
        seq = (seq + 1) & 0xFF
        if n < MAX_CHUNK:
            return bytes(out), seq


def ok_packet(affected: int = 0, insert_id: int = 0, status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\x00" + lenenc(affected) + lenenc(insert_id) + struct.pack("<HH", status, 0)


def err_packet(code: int, message: str, sqlstate: str = "HY000") -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + sqlstate.encode("ascii") + message.encode("utf-8")


def eof_packet(status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, status)


def native_password_token(password: str, salt: bytes) -> bytes:
    """mysql_native_password: SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw))); empty for an empty password."""
    if not password:
        return b""
    stage1 = hashlib.sha1(password.encode("utf-8")).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mix = hashlib.sha1(salt + stage2).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def caching_sha2_token(password: str, salt: bytes) -> bytes:
    """caching_sha2_password's fast-auth token: SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + salt), over the
    password's UTF-8 bytes; empty for an empty password."""
    if not password:
        return b""
    stage1 = hashlib.sha256(password.encode("utf-8")).digest()
    mix = hashlib.sha256(hashlib.sha256(stage1).digest() + salt).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


class Sha2Keys:
    """The RSA key pair of caching_sha2_password's full authentication on a connection without TLS.

    Fields: public_pem (what the server sends for the client's public-key request, 0x02).
    """

    def __init__(self):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_pem = self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def password(self, ciphertext: bytes, salt: bytes) -> bytes | None:
        """The password bytes the client encrypted (RSA-OAEP/SHA1 of ``password + NUL`` XOR the salt, cycled),
        or None when it does not decrypt or lacks its NUL."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            plain = self._key.decrypt(ciphertext, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()),
                                                              algorithm=hashes.SHA1(), label=None))
        except ValueError:
            return None
        clear = bytes(b ^ salt[i % len(salt)] for i, b in enumerate(plain))
        return clear[:-1] if clear.endswith(b"\0") else None


# ----------------------------------------------------------------------------- GTID intervals


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _varlen(buf: bytes, pos: int) -> tuple[int, int]:
    """MySQL serialization library unsigned varlen integer (trailing 1-bits of byte 0 = extra bytes)."""
    first = buf[pos]
    extra = 0
    while extra < 8 and (first >> extra) & 1:
        extra += 1
    if extra == 8:
        return int.from_bytes(buf[pos + 1:pos + 9], "little"), pos + 9
    return int.from_bytes(buf[pos:pos + extra + 1], "little") >> (extra + 1), pos + extra + 1


GtidKey = tuple[str, str]  # (uuid, tag; "" untagged)


class Intervals:
    """A GTID set kept as ``{(uuid, tag): [(start, stop), ...]}`` (stop exclusive, merged, sorted)."""

    def __init__(self, data: dict[GtidKey, list[tuple[int, int]]] | None = None):
        self.data: dict[GtidKey, list[tuple[int, int]]] = {}
        for (sid, tag), ivs in (data or {}).items():
            for a, b in ivs:
                self.add(sid, tag, a, b)

    def add(self, sid: str, tag: str, start: int, stop: int) -> None:
        ivs = self.data.setdefault((sid.lower(), tag.lower()), [])
        ivs.append((start, stop))
        ivs.sort()
        merged: list[tuple[int, int]] = []
        for a, b in ivs:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.data[(sid.lower(), tag.lower())] = merged

    def update(self, other: Intervals) -> None:
        for (sid, tag), ivs in other.data.items():
            for a, b in ivs:
                self.add(sid, tag, a, b)

    def contains(self, sid: str, tag: str, gno: int) -> bool:
        return any(a <= gno < b for a, b in self.data.get((sid.lower(), tag.lower()), ()))

    def missing_from(self, other: Intervals) -> Intervals:
        """The GTIDs of self that ``other`` lacks."""
        out = Intervals()
        for (sid, tag), ivs in self.data.items():
            have = other.data.get((sid, tag), [])
            for a, b in ivs:
                cur = a
                for c, d in have:
                    if d <= cur or c >= b:
                        continue
                    if c > cur:
                        out.add(sid, tag, cur, c)
                    cur = max(cur, d)
                if cur < b:
                    out.add(sid, tag, cur, b)
        return out

    def __bool__(self) -> bool:
        return any(self.data.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Intervals) and {k: v for k, v in self.data.items() if v} == {
            k: v for k, v in other.data.items() if v}

    def text(self, sep: str = ",") -> str:
        """MySQL's text form: ``uuid:1-5:7:tag:1-2`` per uuid, untagged ranges first."""
        by_sid: dict[str, list[str]] = {}
        for (sid, tag), ivs in sorted(self.data.items()):
            if not ivs:
                continue
            ranges = ":".join(str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in ivs)
            by_sid.setdefault(sid, []).append(f"{tag}:{ranges}" if tag else ranges)
        return sep.join(f"{sid}:" + ":".join(parts) for sid, parts in by_sid.items())

    __str__ = text

    def __repr__(self) -> str:
        return f"Intervals({self.text()!r})"

    @classmethod
    def parse(cls, text: str) -> Intervals:
        """Parse MySQL's text form (``uuid:1-5:7:tag:1-2,uuid2:3``; whitespace and newlines ignored)."""
        out = cls()
        for part in "".join(text.split()).split(","):
            if not part:
                continue
            sid, *rest = part.split(":")
            if not rest or not re.fullmatch(r"[0-9a-fA-F-]{32,36}", sid):
                raise ValueError(f"not a GTID set entry: {part!r}")
            tag = ""
            for item in rest:
                if m := re.fullmatch(r"(\d+)(?:-(\d+))?", item):
                    out.add(sid, tag, int(m.group(1)), int(m.group(2) or m.group(1)) + 1)
                elif re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,31}", item):
                    tag = item
                else:
                    raise ValueError(f"not a GTID set entry: {part!r}")
        return out

    @classmethod
    def decode(cls, raw: bytes) -> Intervals:
        """Decode the binary set of COM_BINLOG_DUMP_GTID / PREVIOUS_GTIDS (untagged or tagged format)."""
        (head,) = struct.unpack_from("<Q", raw, 0)
        tagged = head >> 56 == 1
        if tagged:
            if head & 0xFF != 1:
                raise ValueError(f"tagged GTID set with mismatched format bytes {head:#x}")
            n_sids = (head >> 8) & ((1 << 48) - 1)
        elif head >> 56 == 0:
            n_sids = head
        else:
            raise ValueError(f"unknown GTID set format {head >> 56}")
        pos, out = 8, cls()
        for _ in range(n_sids):
            sid = _uuid_text(raw[pos:pos + 16])
            pos += 16
            tag = ""
            if tagged:
                n, pos = _varlen(raw, pos)
                tag = raw[pos:pos + n].decode("ascii")
                pos += n
            (n_iv,) = struct.unpack_from("<Q", raw, pos)
            pos += 8
            out.data.setdefault((sid, tag), [])
            for _ in range(n_iv):
                a, b = struct.unpack_from("<QQ", raw, pos)
                pos += 16
                if not 1 <= a < b:
                    raise ValueError(f"bad interval [{a}, {b})")
                out.add(sid, tag, a, b)
        if pos != len(raw):
            raise ValueError(f"{len(raw) - pos} trailing bytes after the GTID set")
        return out


# ----------------------------------------------------------------------------- events and files


def event_header(type_code: int, length: int, log_pos: int, *, timestamp: int = 0, server_id: int = 1,
                 flags: int = 0) -> bytes:
    return struct.pack("<IBIIIH", timestamp, type_code, server_id, length, log_pos, flags)


def build_event(type_code: int, body: bytes, *, log_pos: int, timestamp: int = 0, server_id: int = 1,
                flags: int = 0, checksum: bool = True) -> bytes:
    """One v4 event: header, body and (``checksum``) its CRC32 footer."""
    length = HEADER_LEN + len(body) + (4 if checksum else 0)
    raw = event_header(type_code, length, log_pos, timestamp=timestamp, server_id=server_id, flags=flags) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if checksum else raw


def rotate_event(file: str, position: int, *, checksum: bool, server_id: int = 1) -> bytes:
    """The artificial ROTATE a primary sends first: timestamp 0, LOG_EVENT_ARTIFICIAL_F, log_pos 0."""
    return build_event(ROTATE, struct.pack("<Q", position) + file.encode(), log_pos=0, timestamp=0,
                       server_id=server_id, flags=LOG_EVENT_ARTIFICIAL_F, checksum=checksum)


def heartbeat_v2_event(file: str, position: int, *, checksum: bool, server_id: int = 1) -> bytes:
    """HEARTBEAT_V2: type/length/value fields (1 = file name, 2 = position as a length-encoded int, 0 = end)."""
    name = file.encode()
    pos_field = lenenc(position)
    body = lenenc(1) + lenenc(len(name)) + name + lenenc(2) + lenenc(len(pos_field)) + pos_field + lenenc(0)
    return build_event(HEARTBEAT_V2, body, log_pos=0, timestamp=0, server_id=server_id, checksum=checksum)


def query_event_body(query: str | bytes, db: str = "", *, thread_id: int = 7, exec_time: int = 0,
                     error_code: int = 0, status_vars: bytes = b"") -> bytes:
    """QUERY body: 13-byte post-header, status variables, db NUL, statement."""
    q = query.encode() if isinstance(query, str) else query
    return (struct.pack("<IIBHH", thread_id, exec_time, len(db.encode()), error_code, len(status_vars))
            + status_vars + db.encode() + b"\x00" + q)


def gtid_event_body(sid: str, gno: int, *, last_committed: int = 0, sequence_number: int = 1) -> bytes:
    """An untagged GTID body (commit flag, uuid, gno, logical timestamps: the 42-byte post-header)."""
    return (b"\x01" + bytes.fromhex(sid.replace("-", "")) + struct.pack("<q", gno) + b"\x02"
            + struct.pack("<qq", last_committed, sequence_number))


@dataclass(frozen=True)
class FileEvent:
    """One event of a binlog file: its offset, exact bytes, type and (GTID events) GTID."""

    offset: int
    raw: bytes
    type_code: int
    timestamp: int
    gtid: tuple[str, str, int] | None = None   # (uuid, tag, gno)

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)


def _parse_gtid(type_code: int, body: bytes) -> tuple[str, str, int] | None:
    if type_code == GTID:
        return _uuid_text(body[1:17]), "", struct.unpack_from("<q", body, 17)[0]
    if type_code != GTID_TAGGED:
        return None
    # serialization library message: version/size/last-required-field, then (field id, value) pairs
    _size, pos = _varlen(body, 1)
    _last, pos = _varlen(body, pos)
    sid, tag, gno = "", "", 0
    while pos < len(body):
        fid, pos = _varlen(body, pos)
        if fid == 1:
            raw = bytearray()
            for _ in range(16):
                b, pos = _varlen(body, pos)
                raw.append(b & 0xFF)
            sid = _uuid_text(bytes(raw))
        elif fid == 2:
            z, pos = _varlen(body, pos)
            gno = -(z >> 1) - 1 if z & 1 else z >> 1
        elif fid == 3:
            n, pos = _varlen(body, pos)
            tag = body[pos:pos + n].decode("ascii")
            pos += n
        elif fid == 0:
            _flags, pos = _varlen(body, pos)
        else:
            break
    return sid, tag, gno


class BinlogFile:
    """A binlog file held in memory, split into events; knows its checksum and GTIDs.

    Fields: name, data, events (:class:`FileEvent` list), checksum ("CRC32" or "NONE"),
    previous_gtids and gtids (:class:`Intervals`: the file's PREVIOUS_GTIDS and its own GTIDs).
    """

    def __init__(self, name: str, data: bytes):
        if data[:4] != MAGIC:
            raise ValueError(f"{name}: not a binlog file")
        self.name, self.data = name, bytes(data)
        self.events: list[FileEvent] = []
        self.checksum = "NONE"
        self.previous_gtids, self.gtids = Intervals(), Intervals()
        pos = 4
        while pos + HEADER_LEN <= len(data):
            ts, tc, _sid, length, _next, _flags = struct.unpack_from("<IBIIIH", data, pos)
            if length < HEADER_LEN or pos + length > len(data):
                break
            raw = self.data[pos:pos + length]
            if tc == FORMAT_DESCRIPTION:
                version = raw[HEADER_LEN + 2:HEADER_LEN + 52].split(b"\0")[0].decode("latin-1")
                has_alg = version_tuple(version) >= (5, 6, 1)  # the fake's own rule (MySQL's), not the decoder's
                self.checksum = "CRC32" if has_alg and raw[-5] == 1 else "NONE"
            crc = 4 if self.checksum == "CRC32" else 0
            body = raw[HEADER_LEN:len(raw) - crc]
            gtid = _parse_gtid(tc, body)
            if gtid is not None:
                self.gtids.add(gtid[0], gtid[1], gtid[2], gtid[2] + 1)
            if tc == PREVIOUS_GTIDS:
                self.previous_gtids = Intervals.decode(body)
            self.events.append(FileEvent(pos, raw, tc, ts, gtid))
            pos += length
        if pos != len(data):
            raise ValueError(f"{name}: {len(data) - pos} bytes after the last whole event")

    @classmethod
    def from_path(cls, path: str | os.PathLike, name: str | None = None) -> BinlogFile:
        p = Path(path)
        return cls(name or p.name, p.read_bytes())

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def crc(self) -> bool:
        return self.checksum == "CRC32"

    def appended(self, *events: tuple[int, bytes] | tuple[int, bytes, dict], name: str | None = None) -> BinlogFile:
        """A copy with events ``(type_code, body[, header kwargs])`` appended (log_pos and CRC computed)."""
        data = bytearray(self.data)
        last_ts = self.events[-1].timestamp if self.events else 0
        for item in events:
            type_code, body = item[0], item[1]
            kw = {"timestamp": last_ts, **(item[2] if len(item) > 2 else {})}
            length = HEADER_LEN + len(body) + (4 if self.crc else 0)
            data += build_event(type_code, body, log_pos=len(data) + length, checksum=self.crc, **kw)
        return BinlogFile(name or self.name, bytes(data))


def _patch(raw: bytes, crc: bool, *, flags_clear: int = 0, log_pos: int | None = None,
           created_zero: bool = False) -> bytes:
    """Change header fields of an event (and the FDE's create timestamp); recompute its CRC32."""
    b = bytearray(raw)
    if flags_clear:
        flags = struct.unpack_from("<H", b, 17)[0] & ~flags_clear
        struct.pack_into("<H", b, 17, flags)
    if log_pos is not None:
        struct.pack_into("<I", b, 13, log_pos)
    if created_zero:
        struct.pack_into("<I", b, HEADER_LEN + 2 + 50, 0)
    if crc:
        struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
    return bytes(b)


# ----------------------------------------------------------------------------- SELECT lists


def select_values(items: str, variables: dict[str, int | str]) -> list | ValueError | None:
    """Evaluate a SELECT list of ``@@[global.]<name>`` from ``variables``, string literals, ``GTID_SUBSET(a, b)``
    and ``GTID_SUBTRACT(a, b)`` (as MySQL does, on :class:`Intervals`). Returns the row, None when an item is
    something else, or the ValueError of a malformed GTID set."""
    try:
        row = [_select_value(item, variables) for item in top_level(items)]
    except ValueError as exc:
        return exc
    return None if None in row else row


def _select_value(expr: str, variables: dict[str, int | str]) -> int | str | None:
    e = expr.strip()
    if m := re.fullmatch(r"(?is)GTID_(SUBSET|SUBTRACT)\s*\((.*)\)", e):
        args = [_select_value(a, variables) for a in top_level(m.group(2))]
        if len(args) != 2 or not all(isinstance(a, str) for a in args):
            return None
        missing = Intervals.parse(args[0]).missing_from(Intervals.parse(args[1]))
        return int(not missing) if m.group(1).upper() == "SUBSET" else missing.text()
    if m := re.fullmatch(r"(?i)@@(?:global\.)?(\w+)", e):
        return variables.get(m.group(1).lower())
    if len(e) >= 2 and e[0] == e[-1] == "'":
        return e[1:-1]
    return None


def top_level(text: str) -> list[str]:
    """Split ``text`` at the commas outside parentheses and quotes."""
    parts, cur, depth, quote = [], "", 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return [*parts, cur.strip()]
