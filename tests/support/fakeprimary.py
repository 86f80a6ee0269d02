"""A protocol-level fake MySQL 8 primary that replays real binlog files to a replica.

It speaks just enough of the MySQL client/server protocol for aiomysql/PyMySQL and for
``daemon.connection.SourceConnection``:

- HandshakeV10 (no CLIENT_SSL, so TLS ``preferred`` falls back to plain text) and one configured
  user, with ``mysql_native_password`` or ``caching_sha2_password`` (``auth_plugin``: its fast path
  once the user is cached, else full authentication with the server's RSA key), the password's
  UTF-8 bytes checked (anything else: ERR 1045, with an AuthSwitchRequest first when the client
  proposed another plugin);
- COM_QUERY with text result sets for the admin statements the daemon sends (matched by
  regex: the version/checksum probe, ``@@server_uuid, @@gtid_mode``, SHOW MASTER STATUS /
  SHOW BINARY LOG STATUS (version-aware: 8.4+ rejects the first, < 8.2 the second), SHOW
  BINARY LOGS, information_schema column lookups, ``SET`` (assignments evaluated and kept
  as session variables); anything else is ERR 1064;
- COM_REGISTER_SLAVE, COM_BINLOG_DUMP and COM_BINLOG_DUMP_GTID, decoded and recorded, then
  a stream as a real primary sends it: an artificial ROTATE (timestamp 0,
  LOG_EVENT_ARTIFICIAL_F, log_pos 0), the FDE (in-use flag cleared; log_pos 0 when the dump
  starts after it), the file's events each in its own packet behind the 0x00 byte (split
  into 16 MB chunks when needed), skipping the transactions whose GTID the replica's set
  holds, into the next file after a ROTATE, then HEARTBEAT_V2 events at the replica's
  ``@source_heartbeat_period`` (or ``heartbeat_ms``), or EOF at the end for a
  BINLOG_DUMP_NON_BLOCK dump.

It checks what a real primary checks: ERR 1236 when the replica did not announce it can
take the binlog's checksum, when the GTID set lacks purged transactions (the first file's
PREVIOUS_GTIDS), when the file is unknown or the position is outside it.

Faults: ``err_1236`` (ERR 1236 instead of any event), ``stall_after`` (stop sending after N
event packets, heartbeats included, the connection left open), ``close_after`` (close the
connection after N event packets); both apply to the dumps listed in ``fault_dumps``.

Everything the fake does on the wire is written here independently of ``protocol/``
(packet framing, length-encoded integers, GTID set decoding, event headers, CRC32 footers),
so the daemon's code is checked against a second implementation. Only ``MysqlGtidSet.decode``
is used, in addition, to record the replica's set as the project's type.

Usage::

    primary = FakePrimary(BinlogFile.from_path(path), password="pw")
    await primary.start()          # primary.port
    ...
    await primary.close()
"""

from __future__ import annotations

import asyncio
import os
import re
import struct
import time
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

from binlogd.protocol.decoder import version_tuple
from binlogd.protocol.gtid import MysqlGtidSet
from tests.support.fakewire import (
    _GROUP_STARTS,
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_THROUGH_GTID,
    CLIENT_CONNECT_WITH_DB,
    CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC,
    CLIENT_SECURE_CONNECTION,
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_INIT_DB,
    COM_PING,
    COM_QUERY,
    COM_QUIT,
    COM_REGISTER_SLAVE,
    ER_ACCESS_DENIED,
    ER_PARSE,
    ER_SOURCE_FATAL_READING_BINLOG,
    ER_UNKNOWN_SYSTEM_VARIABLE,
    FORMAT_DESCRIPTION,
    HEADER_LEN,
    HEARTBEAT_V2,
    LOG_EVENT_BINLOG_IN_USE_F,
    MAX_CHUNK,
    MSG_NO_FIRST_FILE,
    ROTATE,
    SERVER_CAPABILITIES,
    SERVER_STATUS_AUTOCOMMIT,
    TYPE_LONGLONG,
    TYPE_VAR_STRING,
    BinlogFile,
    Intervals,
    Sha2Keys,
    _patch,
    caching_sha2_token,
    eof_packet,
    err_packet,
    frame,
    heartbeat_v2_event,
    lenenc,
    lenenc_str,
    native_password_token,
    ok_packet,
    rotate_event,
    select_values,
    top_level,
)

# ----------------------------------------------------------------------------- records


@dataclass
class DumpRequest:
    """A decoded COM_BINLOG_DUMP / COM_BINLOG_DUMP_GTID.

    ``gtid_data`` is the raw set; ``gtid_set`` its decoding by ``MysqlGtidSet.decode`` and
    ``gtid_intervals`` by this module's own decoder (both None for COM_BINLOG_DUMP).
    """

    command: str                 # "gtid" or "file"
    flags: int
    server_id: int
    file: str
    pos: int
    gtid_data: bytes = b""
    gtid_set: MysqlGtidSet | None = None
    gtid_intervals: Intervals | None = None
    received_at: float = 0.0

    @property
    def tagged_format(self) -> bool:
        return len(self.gtid_data) >= 8 and self.gtid_data[7] == 1


@dataclass
class ConnectionRecord:
    """What one client connection did. Times are ``time.monotonic()``."""

    index: int
    connected_at: float
    user: str | None = None
    auth_plugin: str | None = None
    auth_path: str | None = None    # caching_sha2_password: "fast" (cached) or "full" (RSA)
    authenticated: bool = False
    client_flags: int = 0
    queries: list[str] = field(default_factory=list)
    session_vars: dict[str, object] = field(default_factory=dict)
    log: list[tuple[str, object]] = field(default_factory=list)   # ("query", sql) / ("register", dict) / ("dump", req)
    register: dict | None = None
    dump: DumpRequest | None = None
    events_sent: list[tuple[int, str, int]] = field(default_factory=list)   # (type code, file, offset; -1 synthetic)
    heartbeats_sent: int = 0
    errors_sent: list[tuple[int, str]] = field(default_factory=list)
    last_send_at: float | None = None
    stalled_at: float | None = None
    closed_at: float | None = None
    closed_by: str | None = None    # "client", "server", "fault"

    def var(self, *names: str):
        """The first of the session variables ``names`` that is set (None if none)."""
        for n in names:
            if n.lower() in self.session_vars:
                return self.session_vars[n.lower()]
        return None


class _ClientGone(Exception):
    pass


# ----------------------------------------------------------------------------- the server


class FakePrimary:
    """An asyncio TCP server on 127.0.0.1:0 acting as a MySQL primary with the given binlog files.

    Args:
        files: the binlog files, oldest first (a single :class:`BinlogFile` is accepted).
        user, password: the one account.
        auth_plugin: ``"mysql_native_password"`` or ``"caching_sha2_password"`` (the user is cached after
            its first full authentication, as on a real server).
        server_version: the handshake version and ``VERSION()`` (``"8.0.31-fake"``).
        binlog_checksum: ``@@global.binlog_checksum``; by default the first file's.
        gtid_mode: ``@@gtid_mode`` ON/OFF.
        heartbeat_ms: heartbeat period forcing the replica's (None: use the replica's
            ``@source_heartbeat_period``/``@master_heartbeat_period``; none set: no heartbeats).
        err_1236: answer every dump with ERR 1236 (``MSG_NO_FIRST_FILE``).
        stall_after / close_after: after that many event packets (the artificial ROTATE and
            heartbeats included) on a faulty dump, send nothing more / close the connection.
        fault_dumps: indices (0-based, counting every dump command received) of the dumps the
            stall/close faults apply to; None: all.

    Set ``quiet = True`` at any time to hold heartbeats back (e.g. while a test stops its replica).
        check_purged: refuse (1236) a GTID set that lacks the first file's PREVIOUS_GTIDS.
        require_checksum_ack: refuse (1236) to stream checksummed events to a replica that did
            not set ``@source_binlog_checksum``/``@master_binlog_checksum`` to the algorithm.
        schemas: ``{(schema, table): [(COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, collation id), ...]}``
            for information_schema lookups (others return no rows).
        read_only: ``@@read_only`` (the attribute may be changed at any time).

    ``SELECT`` lists of ``@@read_only``, ``@@gtid_executed``, ``@@gtid_purged`` (the first file's
    PREVIOUS_GTIDS when ``check_purged``), string literals, ``GTID_SUBSET(a, b)`` and ``GTID_SUBTRACT(a, b)``
    are evaluated (the failover probe's questions).
    """

    def __init__(self, files: BinlogFile | Sequence[BinlogFile], *, user: str = "repl", password: str = "replpass",
                 server_version: str = "8.0.31-fake", version_comment: str = "MySQL Community Server - GPL",
                 server_id: int = 1, server_uuid: str = "6a1f0c3e-0000-11ee-8000-000000000001",
                 binlog_checksum: str | None = None, gtid_mode: bool = True, binlog_format: str = "ROW",
                 log_bin: int = 1, heartbeat_ms: float | None = None, err_1236: bool = False,
                 stall_after: int | None = None, close_after: int | None = None,
                 fault_dumps: Container[int] | None = (0,), check_purged: bool = True,
                 require_checksum_ack: bool = True, schemas: dict | None = None,
                 auth_plugin: str = "mysql_native_password", read_only: bool = False):
        self.files = [files] if isinstance(files, BinlogFile) else list(files)
        if not self.files:
            raise ValueError("at least one binlog file")
        self.user, self.password = user, password
        self.auth_plugin = auth_plugin
        self.sha2_keys = Sha2Keys() if auth_plugin == "caching_sha2_password" else None
        self.sha2_cache: set[str] = set()   # users whose caching_sha2 fast path works
        self.server_version, self.version_comment = server_version, version_comment
        self.server_id, self.server_uuid = server_id, server_uuid
        self.binlog_checksum = (binlog_checksum or self.files[0].checksum).upper()
        self.gtid_mode, self.binlog_format, self.log_bin = gtid_mode, binlog_format, log_bin
        self.heartbeat_ms = heartbeat_ms
        self.err_1236, self.stall_after, self.close_after = err_1236, stall_after, close_after
        self.fault_dumps = fault_dumps
        self.check_purged, self.require_checksum_ack = check_purged, require_checksum_ack
        self.schemas = schemas or {}
        self.read_only = read_only
        self.connections: list[ConnectionRecord] = []
        self.dumps: list[DumpRequest] = []
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.changed = asyncio.Event()   # set (and re-armed) whenever a record changes
        self.quiet = False               # True: heartbeats are not sent (the stream stays open)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> FakePrimary:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakePrimary:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ derived state
    @property
    def executed(self) -> Intervals:
        """``@@gtid_executed``: the first file's PREVIOUS_GTIDS and every file's GTIDs."""
        out = Intervals()
        out.update(self.files[0].previous_gtids)
        for f in self.files:
            out.update(f.gtids)
        return out

    @property
    def purged(self) -> Intervals:
        """``@@gtid_purged``: the first file's PREVIOUS_GTIDS when ``check_purged`` (else nothing)."""
        return self.files[0].previous_gtids if self.check_purged else Intervals()

    @property
    def version(self) -> tuple[int, int, int]:
        return version_tuple(self.server_version)

    def _touch(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_for(self, predicate, timeout: float, what: str = "condition"):
        """Wait until ``predicate()`` is truthy (checked on every record change and every 50 ms)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"fake primary: timed out after {timeout:g}s waiting for {what}")
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.05))
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ one connection
    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self._writers.add(writer)
        rec = ConnectionRecord(len(self.connections), time.monotonic())
        self.connections.append(rec)
        self._touch()
        conn = _Conn(self, rec, reader, writer)
        try:
            await conn.serve()
        except (_ClientGone, ConnectionError, asyncio.IncompleteReadError):
            rec.closed_by = rec.closed_by or "client"
        except asyncio.CancelledError:
            rec.closed_by = rec.closed_by or "server"
        finally:
            rec.closed_at = time.monotonic()
            self._writers.discard(writer)
            self._tasks.discard(task)
            try:
                writer.close()
            except Exception:
                pass
            self._touch()


class _Conn:
    def __init__(self, server: FakePrimary, rec: ConnectionRecord, reader, writer):
        self.server, self.rec, self.reader, self.writer = server, rec, reader, writer
        self.salt = bytes(0x21 + b % 0x5E for b in os.urandom(20))  # printable, no NUL

    # -- packets
    async def read_packet(self) -> tuple[bytes, int]:
        """One client packet (continuations joined): (payload, last sequence id)."""
        parts = []
        while True:
            try:
                head = await self.reader.readexactly(4)
            except asyncio.IncompleteReadError:
                raise _ClientGone() from None
            n = int.from_bytes(head[:3], "little")
            seq = head[3]
            parts.append(await self.reader.readexactly(n) if n else b"")
            if n < MAX_CHUNK:
                return b"".join(parts), seq

    async def send(self, payload: bytes, seq: int) -> int:
        wire, nxt = frame(payload, seq)
        self.writer.write(wire)
        await self.writer.drain()
        self.rec.last_send_at = time.monotonic()
        return nxt

    async def send_err(self, seq: int, code: int, message: str, sqlstate: str = "HY000") -> int:
        self.rec.errors_sent.append((code, message))
        self.server._touch()
        return await self.send(err_packet(code, message, sqlstate), seq)

    # -- connection phase
    async def serve(self) -> None:
        if not await self.handshake():
            return
        while True:
            payload, _seq = await self.read_packet()
            if not payload:
                continue
            cmd = payload[0]
            if cmd == COM_QUIT:
                self.rec.closed_by = "client"
                return
            if cmd == COM_QUERY:
                await self.query(payload[1:].decode("utf-8", "replace"))
            elif cmd in (COM_PING, COM_INIT_DB):
                await self.send(ok_packet(), 1)
            elif cmd == COM_REGISTER_SLAVE:
                await self.register(payload)
            elif cmd in (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID):
                await self.dump(payload)
                return
            else:
                await self.send_err(1, 1047, f"Unknown command {cmd:#x}", "08S01")

    async def handshake(self) -> bool:
        s = self.server
        caps = SERVER_CAPABILITIES
        greeting = (b"\x0a" + s.server_version.encode() + b"\0" + struct.pack("<I", 1000 + self.rec.index)
                    + self.salt[:8] + b"\0" + struct.pack("<H", caps & 0xFFFF) + bytes([255])
                    + struct.pack("<H", SERVER_STATUS_AUTOCOMMIT) + struct.pack("<H", caps >> 16)
                    + bytes([21]) + b"\0" * 10 + self.salt[8:] + b"\0" + s.auth_plugin.encode() + b"\0")
        await self.send(greeting, 0)
        payload, seq = await self.read_packet()
        client_flags = struct.unpack_from("<I", payload, 0)[0]
        self.rec.client_flags = client_flags
        flags = client_flags & caps
        if len(payload) <= 32:
            await self.send_err(seq + 1, 1043, "Bad handshake (SSL request to a server without CLIENT_SSL)", "08S01")
            return False
        pos = 32
        end = payload.index(b"\0", pos)
        user = payload[pos:end].decode("utf-8")
        pos = end + 1
        if flags & CLIENT_PLUGIN_AUTH_LENENC:
            n = payload[pos]
            pos += 1
        elif flags & CLIENT_SECURE_CONNECTION:
            n = payload[pos]
            pos += 1
        else:
            n = payload.index(b"\0", pos) - pos
        token = payload[pos:pos + n]
        pos += n
        if flags & CLIENT_CONNECT_WITH_DB and pos < len(payload):
            end = payload.index(b"\0", pos)
            pos = end + 1
        plugin = "mysql_native_password"
        if flags & CLIENT_PLUGIN_AUTH and pos < len(payload):
            end = payload.find(b"\0", pos)
            plugin = payload[pos:end if end >= 0 else len(payload)].decode("ascii", "replace")
        self.rec.user, self.rec.auth_plugin = user, plugin
        seq += 1
        if plugin != s.auth_plugin:
            seq = await self.send(b"\xfe" + s.auth_plugin.encode() + b"\0" + self.salt + b"\0", seq)
            token, last = await self.read_packet()
            seq = last + 1
        if s.auth_plugin == "caching_sha2_password":
            ok, seq = await self.caching_sha2(user, token, seq)
        else:
            ok = user == s.user and token == native_password_token(s.password, self.salt)
        if not ok:
            await self.send_err(seq, ER_ACCESS_DENIED, f"Access denied for user '{user}'@'127.0.0.1' "
                                f"(using password: {'YES' if token else 'NO'})", "28000")
            self.rec.closed_by = "server"
            return False
        self.rec.authenticated = True
        self.server._touch()
        await self.send(ok_packet(), seq)
        return True

    async def caching_sha2(self, user: str, token: bytes, seq: int) -> tuple[bool, int]:
        """caching_sha2_password after the client's token: (authenticated, next sequence id)."""
        s = self.server
        if user == s.user and user in s.sha2_cache:
            if token != caching_sha2_token(s.password, self.salt):
                return False, seq
            self.rec.auth_path = "fast"
            return True, await self.send(b"\x01\x03", seq)   # fast authentication succeeded
        seq = await self.send(b"\x01\x04", seq)             # perform full authentication
        reply, last = await self.read_packet()
        if reply == b"\x02":                                 # the client asks for the public key
            await self.send(b"\x01" + s.sha2_keys.public_pem, last + 1)
            reply, last = await self.read_packet()
        ok = user == s.user and s.sha2_keys.password(reply, self.salt) == s.password.encode("utf-8")
        if ok:
            s.sha2_cache.add(user)
            self.rec.auth_path = "full"
        return ok, last + 1

    # -- COM_QUERY
    async def result_set(self, columns: Sequence[tuple[str, int]], rows: Sequence[Sequence]) -> None:
        seq = await self.send(lenenc(len(columns)), 1)
        for name, ctype in columns:
            charset = 63 if ctype == TYPE_LONGLONG else 255
            col = (lenenc_str(b"def") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(b"")
                   + lenenc_str(name.encode()) + lenenc_str(name.encode()) + b"\x0c"
                   + struct.pack("<HIBHB", charset, 1024, ctype, 0, 0) + b"\0\0")
            seq = await self.send(col, seq)
        seq = await self.send(eof_packet(), seq)
        for row in rows:
            out = bytearray()
            for v in row:
                out += b"\xfb" if v is None else lenenc_str(str(v).encode())
            seq = await self.send(bytes(out), seq)
        await self.send(eof_packet(), seq)

    async def query(self, sql: str) -> None:
        s, rec = self.server, self.rec
        rec.queries.append(sql)
        rec.log.append(("query", sql))
        s._touch()
        text = sql.strip().rstrip(";").strip()
        if re.match(r"(?is)^SELECT\s+VERSION\(\)\s*,\s*@@version_comment\s*,\s*@@server_id\s*,\s*@@log_bin\s*,"
                    r"\s*(@@binlog_format|\(SELECT VARIABLE_VALUE FROM performance_schema\.global_variables "
                    r"WHERE VARIABLE_NAME = 'binlog_format'\))\s*,\s*@@global\.binlog_checksum$", text):
            await self.result_set(
                [("VERSION()", TYPE_VAR_STRING), ("@@version_comment", TYPE_VAR_STRING),
                 ("@@server_id", TYPE_LONGLONG), ("@@log_bin", TYPE_LONGLONG),
                 ("@@binlog_format", TYPE_VAR_STRING), ("@@global.binlog_checksum", TYPE_VAR_STRING)],
                [(s.server_version, s.version_comment, s.server_id, s.log_bin, s.binlog_format, s.binlog_checksum)])
        elif re.match(r"(?is)^SELECT\s+VERSION\(\)\s*,\s*@@version_comment$", text):
            await self.result_set([("VERSION()", TYPE_VAR_STRING), ("@@version_comment", TYPE_VAR_STRING)],
                                  [(s.server_version, s.version_comment)])
        elif re.match(r"(?is)^SELECT\s+@@server_uuid\s*,\s*@@gtid_mode$", text):
            await self.result_set([("@@server_uuid", TYPE_VAR_STRING), ("@@gtid_mode", TYPE_VAR_STRING)],
                                  [(s.server_uuid, "ON" if s.gtid_mode else "OFF")])
        elif m := re.match(r"(?is)^SHOW\s+(MASTER|BINARY\s+LOG)\s+STATUS$", text):
            old = m.group(1).upper() == "MASTER"
            if old and s.version >= (8, 4, 0) or not old and s.version < (8, 2, 0):
                await self.send_err(1, ER_PARSE, "You have an error in your SQL syntax; check the manual that "
                                    f"corresponds to your MySQL server version for the right syntax to use near "
                                    f"'{text.split()[1]}'", "42000")
                return
            last = s.files[-1]
            executed = s.executed.text(",\n") if s.gtid_mode else ""
            await self.result_set([("File", TYPE_VAR_STRING), ("Position", TYPE_LONGLONG),
                                   ("Binlog_Do_DB", TYPE_VAR_STRING), ("Binlog_Ignore_DB", TYPE_VAR_STRING),
                                   ("Executed_Gtid_Set", TYPE_VAR_STRING)],
                                  [(last.name, last.size, "", "", executed)])
        elif re.match(r"(?is)^SHOW\s+(BINARY|MASTER)\s+LOGS$", text):
            await self.result_set([("Log_name", TYPE_VAR_STRING), ("File_size", TYPE_LONGLONG),
                                   ("Encrypted", TYPE_VAR_STRING)],
                                  [(f.name, f.size, "No") for f in s.files])
        elif m := re.search(r"(?is)information_schema\.COLUMNS.*TABLE_SCHEMA\s*=\s*'((?:[^'\\]|\\.)*)'"
                            r".*TABLE_NAME\s*=\s*'((?:[^'\\]|\\.)*)'", text):
            rows = s.schemas.get((m.group(1), m.group(2)), [])
            await self.result_set([("COLUMN_NAME", TYPE_VAR_STRING), ("COLUMN_TYPE", TYPE_VAR_STRING),
                                   ("DATA_TYPE", TYPE_VAR_STRING), ("ID", TYPE_LONGLONG)], rows)
        elif re.match(r"(?is)^SELECT\s+1$", text):
            await self.result_set([("1", TYPE_LONGLONG)], [(1,)])
        elif re.match(r"(?is)^SELECT\s+@@global\.gtid_binlog_pos$", text):
            await self.send_err(1, ER_UNKNOWN_SYSTEM_VARIABLE, "Unknown system variable 'gtid_binlog_pos'")
        elif (m := re.match(r"(?is)^SELECT\s+(.+)$", text)) and (row := select_values(m.group(1), {
                "read_only": int(s.read_only), "gtid_executed": s.executed.text() if s.gtid_mode else "",
                "gtid_purged": s.purged.text()})) is not None:
            if isinstance(row, ValueError):
                await self.send_err(1, 1772, f"Malformed GTID set specification: {row}")
                return
            await self.result_set([(item, TYPE_LONGLONG if isinstance(v, int) else TYPE_VAR_STRING)
                                   for item, v in zip(top_level(m.group(1)), row)], [tuple(row)])
        elif re.match(r"(?is)^SET\s", text):
            try:
                self.assign(text[3:].strip())
            except ValueError as exc:
                await self.send_err(1, ER_PARSE, f"You have an error in your SQL syntax: {exc}", "42000")
                return
            s._touch()
            await self.send(ok_packet(), 1)
        else:
            await self.send_err(1, ER_PARSE, f"fake primary does not understand {text[:80]!r}", "42000")

    def assign(self, text: str) -> None:
        """Evaluate ``SET`` assignments into the session variables (names lowercased, ``@`` kept)."""
        parts, cur, quote = [], "", None
        for ch in text:
            if quote:
                cur += ch
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
                cur += ch
            elif ch == ",":
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            m = re.match(r"(?is)^\s*(NAMES)\s+(\S+)", part)
            if m:
                self.rec.session_vars["names"] = m.group(2).strip("'\"")
                continue
            m = re.match(r"(?is)^\s*((?:@@(?:session\.|global\.)?|@)?[A-Za-z_][\w.]*)\s*:?=\s*(.+?)\s*$", part)
            if not m:
                raise ValueError(f"near {part.strip()!r}")
            self.rec.session_vars[m.group(1).lower()] = self.evaluate(m.group(2))

    def evaluate(self, expr: str):
        s = self.server
        e = expr.strip()
        if re.fullmatch(r"(?i)@@(global\.)?binlog_checksum", e):
            return s.binlog_checksum
        if re.fullmatch(r"-?\d+", e):
            return int(e)
        if re.fullmatch(r"-?\d+\.\d*", e):
            return float(e)
        if len(e) >= 2 and e[0] == e[-1] and e[0] in "'\"":
            return e[1:-1]
        if e.upper() in ("NULL",):
            return None
        return e

    # -- replication commands
    async def register(self, payload: bytes) -> None:
        pos = 1
        server_id = struct.unpack_from("<I", payload, pos)[0]
        pos += 4
        strings = []
        for _ in range(3):
            n = payload[pos]
            strings.append(payload[pos + 1:pos + 1 + n].decode("utf-8", "replace"))
            pos += 1 + n
        port, rank, master_id = struct.unpack_from("<HII", payload, pos)
        self.rec.register = {"server_id": server_id, "host": strings[0], "user": strings[1],
                             "password": strings[2], "port": port, "rank": rank, "master_id": master_id}
        self.rec.log.append(("register", self.rec.register))
        self.server._touch()
        await self.send(ok_packet(), 1)

    def decode_dump(self, payload: bytes) -> DumpRequest:
        if payload[0] == COM_BINLOG_DUMP:
            pos, flags, server_id = struct.unpack_from("<IHI", payload, 1)
            return DumpRequest("file", flags, server_id, payload[11:].decode("utf-8"), pos)
        flags, server_id, name_len = struct.unpack_from("<HII", payload, 1)
        p = 11
        name = payload[p:p + name_len].decode("utf-8")
        p += name_len
        (pos,) = struct.unpack_from("<Q", payload, p)
        p += 8
        req = DumpRequest("gtid", flags, server_id, name, pos)
        if flags & BINLOG_THROUGH_GTID:
            (size,) = struct.unpack_from("<I", payload, p)
            p += 4
            req.gtid_data = payload[p:p + size]
            if len(req.gtid_data) != size or p + size != len(payload):
                raise ValueError(f"GTID data of {len(payload) - p} bytes, declared {size}")
            req.gtid_intervals = Intervals.decode(req.gtid_data)
            req.gtid_set = MysqlGtidSet.decode(req.gtid_data)
        return req

    async def dump(self, payload: bytes) -> None:
        s, rec = self.server, self.rec
        try:
            req = self.decode_dump(payload)
        except (ValueError, struct.error, IndexError) as exc:
            await self.send_err(1, ER_SOURCE_FATAL_READING_BINLOG, f"malformed dump command: {exc}")
            return
        req.received_at = time.monotonic()
        dump_index = len(s.dumps)
        s.dumps.append(req)
        rec.dump = req
        rec.log.append(("dump", req))
        s._touch()
        faulty = s.fault_dumps is None or dump_index in s.fault_dumps
        streamer = asyncio.ensure_future(self.stream(req, faulty))
        watcher = asyncio.ensure_future(self.reader.read(1))   # the replica only ever sends EOF now
        try:
            done, _ = await asyncio.wait({streamer, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if streamer in done:
                streamer.result()
                if rec.closed_by is None:
                    # stream over (EOF or error sent): wait for the replica to hang up
                    await watcher
                    rec.closed_by = "client"
            else:
                rec.closed_by = "client"
        finally:
            for t in (streamer, watcher):
                t.cancel()
            for t in (streamer, watcher):
                try:
                    await t
                except (asyncio.CancelledError, Exception):
                    pass

    async def stream(self, req: DumpRequest, faulty: bool) -> None:
        s, rec = self.server, self.rec
        seq = 1
        err = None
        first = s.files[0]
        if s.err_1236:
            err = MSG_NO_FIRST_FILE
        elif s.require_checksum_ack and first.crc:
            said = str(rec.var("@source_binlog_checksum", "@master_binlog_checksum") or "").upper()
            if said != "CRC32":
                err = (f"Replica can not handle replication events with the checksum that source is configured "
                       f"to log; the first event '{first.name}' at 4, the last event read from "
                       f"'./{first.name}' at 126, the last byte read from './{first.name}' at 126.")
        index, start = 0, 4
        skip_set = Intervals()
        if err is None and req.command == "gtid" and req.flags & BINLOG_THROUGH_GTID:
            skip_set = req.gtid_intervals
            if s.check_purged:
                missing = first.previous_gtids.missing_from(skip_set)
                if missing:
                    err = ("Cannot replicate because the source purged required binary logs. Replicate the missing "
                           "transactions from elsewhere, or provision a new replica from backup. Consider increasing "
                           "the source's binary log expiration period. The GTID set sent by the replica is "
                           f"'{skip_set.text()}', and the missing transactions are '{missing.text()}'")
        if err is None and (req.file or req.command == "file"):
            names = [f.name for f in s.files]
            if req.file == "":
                index = 0
            elif req.file in names:
                index = names.index(req.file)
            else:
                err = MSG_NO_FIRST_FILE
            if err is None:
                start = req.pos
                size = s.files[index].size
                if start < 4:
                    err = "Client requested source to start replication from position < 4."
                elif start > size:
                    err = "Client requested source to start replication from position > file size"
                elif start < size and not any(e.offset == start for e in s.files[index].events):
                    err = (f"bogus data in log event; the first event '{s.files[index].name}' at {start}, "
                           f"the last event read from '{s.files[index].name}' at 4")
        if err is not None:
            await self.send_err(seq, ER_SOURCE_FATAL_READING_BINLOG, err)
            return

        crc = s.files[index].crc
        sent = 0

        async def send_event(raw: bytes, type_code: int, file: str, offset: int) -> None:
            nonlocal seq, sent
            if faulty and s.stall_after is not None and sent >= s.stall_after:
                rec.stalled_at = time.monotonic()
                s._touch()
                await asyncio.Event().wait()   # until the replica hangs up
            if faulty and s.close_after is not None and sent >= s.close_after:
                rec.closed_by = "fault"
                s._touch()
                self.writer.close()
                raise _ClientGone()
            seq = await self.send(b"\x00" + raw, seq)
            sent += 1
            rec.events_sent.append((type_code, file, offset))
            s._touch()

        cur = s.files[index]
        await send_event(rotate_event(cur.name, start, checksum=crc, server_id=s.server_id), ROTATE, cur.name, -1)
        hb_file, hb_pos = cur.name, start
        while True:
            in_excluded = False
            if start > 4:
                fde = cur.events[0]
                await send_event(_patch(fde.raw, cur.crc, flags_clear=LOG_EVENT_BINLOG_IN_USE_F, log_pos=0,
                                        created_zero=True), fde.type_code, cur.name, -1)
            rotated_to = None
            for ev in cur.events:
                if ev.offset < start:
                    continue
                raw = ev.raw
                if ev.type_code == FORMAT_DESCRIPTION:
                    raw = _patch(raw, cur.crc, flags_clear=LOG_EVENT_BINLOG_IN_USE_F)
                if ev.type_code in _GROUP_STARTS:
                    in_excluded = ev.gtid is not None and skip_set.contains(*ev.gtid)
                hb_file, hb_pos = cur.name, ev.end
                if in_excluded and ev.type_code != ROTATE:
                    continue
                await send_event(raw, ev.type_code, cur.name, ev.offset)
                if ev.type_code == ROTATE:
                    body = ev.raw[HEADER_LEN:len(ev.raw) - (4 if cur.crc else 0)]
                    rotated_to = (body[8:].decode("utf-8"), struct.unpack_from("<Q", body, 0)[0])
                    hb_file, hb_pos = rotated_to
            nxt = [f for f in s.files if rotated_to and f.name == rotated_to[0]]
            if not nxt:
                break
            cur, start = nxt[0], 4
        if req.flags & BINLOG_DUMP_NON_BLOCK:
            if faulty and s.stall_after is not None and sent >= s.stall_after:
                await asyncio.Event().wait()
            seq = await self.send(eof_packet(), seq)
            rec.log.append(("eof", None))
            s._touch()
            return
        period = self.heartbeat_period()
        if not period:
            await asyncio.Event().wait()
        while True:
            await asyncio.sleep(period)
            if s.quiet:
                continue
            await send_event(heartbeat_v2_event(hb_file, hb_pos, checksum=crc, server_id=s.server_id),
                             HEARTBEAT_V2, hb_file, -1)
            rec.heartbeats_sent += 1

    def heartbeat_period(self) -> float:
        """Seconds between heartbeats: ``heartbeat_ms``, else the replica's period (ns), else 0 (none)."""
        if self.server.heartbeat_ms is not None:
            return self.server.heartbeat_ms / 1000
        ns = self.rec.var("@source_heartbeat_period", "@master_heartbeat_period")
        try:
            return max(0.0, float(ns or 0) / 1e9)
        except (TypeError, ValueError):
            return 0.0

