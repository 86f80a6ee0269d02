"""One replication connection to the primary.

aiomysql (PyMySQL's protocol code) does the handshake, authentication
(mysql_native_password, caching_sha2_password, ed25519) and TLS, through
:mod:`binlogd.daemon.replication._aiomysql`, the one module that knows its internals (the password goes
as UTF-8 bytes, as the MySQL and MariaDB clients send it). We then run a few admin
statements; from COM_REGISTER_SLAVE on, the transport delivers straight into the sans-I/O
:class:`protocol.packet.BufferedPacketReader`'s buffers (an :class:`asyncio.BufferedProtocol`
replaces aiomysql's stream protocol), we write command packets to it ourselves, and events
are memoryviews of those buffers: no copy from the socket to the sink.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

from binlogd.protocol.commands import com_binlog_dump, com_binlog_dump_gtid, com_register_slave
from binlogd.protocol.decoder import version_tuple
from binlogd.protocol.errors import BinlogError, ProtocolError, ServerError, TruncatedError
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.packet import BufferedPacketReader, encode_packet, is_eof, is_err, parse_err
from binlogd.protocol.position import Position
from binlogd.protocol.records import record

ER_ACCESS_DENIED = {1045, 1044, 1227, 1698, 1251}
CR_AUTH_PLUGIN_CANNOT_LOAD = 2059  # the client does not know the account's authentication plugin
ER_MASTER_FATAL_READING_BINLOG = 1236
ER_ERROR_WHEN_EXECUTING_COMMAND = 1220   # SHOW BINLOG EVENTS FROM an offset where no event starts
_WALK_PAGE, _WALK_EVENTS = 1000, 200_000   # SHOW BINLOG EVENTS rows per query, and at most, to find boundaries
_REFUSED = object()                        # a query the account may not run
_PAUSE_ABOVE = 8 << 20  # unparsed bytes at which the receiver stops reading the socket for a while
# Bytes per receive buffer: one socket read takes at most the free space of one, and a read returns
# what the kernel holds, up to a few MiB while the primary sends faster than we take.
RECEIVE_BUFFER = 1 << 20
# ... for a consumer that decodes no rows (the archive): it keeps up with the socket, and 4 MiB need a
# quarter of the reads, event-loop passes and hand-offs of 1 MiB (bench/README "raw"). A consumer
# that decodes rows is the slower side: larger buffers would only hold more memory.
RAW_RECEIVE_BUFFER = 4 << 20


_IMPOSSIBLE = ("impossible position", "replication from position", "bogus data", "truncated in the middle of event")
_PURGED = ("could not find first log file", "purged", "too old")


def why_1236(message: str) -> str:
    """What an ERR 1236 text most likely means, to append to it: an impossible position, a purged binlog
    (see README), or nothing when the server's words say it all (diverged GTIDs, a checksum refused)."""
    text = message.lower()
    if any(marker in text for marker in _IMPOSSIBLE):
        return "; the position is impossible: no event starts there in that file"
    if any(marker in text for marker in _PURGED):
        return "; it was probably purged: see README 'After ERR 1236'"
    return ""


def connect_reason(exc: BaseException, timeout: float) -> str:
    """Why a connect failed, in words: "Connection refused", "no answer within 5s (source.connect_timeout)",
    the OS's text for its errno, or the exception's own text."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"no answer within {timeout:g}s (source.connect_timeout)"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


class SourceError(BinlogError):
    """The primary cannot serve us. ``fatal`` errors end the daemon; others are retried.

    Fields:
        kind: "auth", "tls", "unreachable", "binlog_missing", "misconfigured", "server", "stream_ended",
            "timeout" or "connection" (also the label of ``binlogd_errors_total``).
        fatal: retrying cannot help (wrong password, purged binlog, binlog off…).
    """

    def __init__(self, kind: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.kind, self.fatal = kind, fatal


@record
class ServerInfo:
    """What the primary told us about itself on connect."""

    flavor: str            # "mysql" or "mariadb"
    version: tuple[int, int, int]
    version_text: str
    server_id: int
    server_uuid: str       # MySQL only ("" on MariaDB)
    gtid_mode: bool        # MySQL gtid_mode=ON, or MariaDB (always has GTIDs)
    checksum: str          # "CRC32" or "NONE"

    @property
    def admin_show_status(self) -> str:
        """The statement for the current binlog file and position on this version."""
        if self.flavor == "mysql" and self.version >= (8, 2, 0):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"


def binlog_status_sql(handshake_version: str) -> str:
    """The statement for the binlog's end on a server whose handshake gave ``handshake_version``: ``SHOW MASTER
    STATUS``, but on MySQL 8.2+ (deprecated there, gone from 8.4) ``SHOW BINARY LOG STATUS``."""
    if "mariadb" not in handshake_version.lower() and version_tuple(handshake_version) >= (8, 2, 0):
        return "SHOW BINARY LOG STATUS"
    return "SHOW MASTER STATUS"


def binlog_format_read(handshake_version: str) -> str:
    """The SQL that reads ``binlog_format`` on a server whose handshake gave ``handshake_version``: ``@@binlog_format``,
    but on MySQL 8.0.34+ (which deprecates the variable and warns of every ``@@`` read) its value as data from
    performance_schema.global_variables (there whether or not the Performance Schema is on; NULL once it is gone)."""
    if "mariadb" in handshake_version.lower() or version_tuple(handshake_version) < (8, 0, 34):
        return "@@binlog_format"
    return "(SELECT VARIABLE_VALUE FROM performance_schema.global_variables WHERE VARIABLE_NAME = 'binlog_format')"


def require_tls(conn, cfg) -> None:
    """Refuse a plain-text connection when ``source.tls.mode`` demands TLS.

    aiomysql quietly stays in plain text when the server does not offer TLS; a replica that was
    told to encrypt (or to verify the server) must not stream unencrypted.

    Raises:
        SourceError("tls", fatal): the connection is not encrypted.
    """
    from binlogd.daemon.replication import _aiomysql

    if cfg.tls.mode in ("required", "verify_ca", "verify_identity"):
        transport = _aiomysql.transport(conn)
        if transport is None or transport.get_extra_info("ssl_object") is None:
            conn.close()
            raise SourceError("tls", f"{cfg.host}:{cfg.port} does not offer TLS, and source.tls.mode is "
                              f"{cfg.tls.mode!r}: refusing to replicate in plain text", fatal=True)


async def admin_connection(source):
    """A plain client connection for queries beside the stream (the schema cache's lookups).

    Args:
        source: the :class:`binlogd.daemon.config.SourceConfig`.
    Raises:
        SourceError("tls", fatal): TLS is required and the server does not offer it.
        pymysql.err.OperationalError, OSError: the connection failed.
    """
    from binlogd.daemon.replication import _aiomysql

    conn = await _aiomysql.connect(host=source.host, port=source.port, user=source.user,
                                   password=source.password.reveal(), ssl=source.tls.ssl_context(),
                                   connect_timeout=source.connect_timeout)
    require_tls(conn, source)
    return conn


class SourceConnection:
    """A replica's connection: connect, inspect, register, dump, then read event packets.

    Args:
        source: the :class:`daemon.config.SourceConfig`.
        receive_buffer: bytes per receive buffer (RECEIVE_BUFFER, or RAW_RECEIVE_BUFFER).
    Fields:
        receive_buffer: the bytes of each buffer the socket writes event packets into.
    """

    def __init__(self, source, receive_buffer: int = RECEIVE_BUFFER):
        self.cfg = source
        self.conn = None
        self.info: ServerInfo | None = None
        self.receive_buffer = receive_buffer
        self._packets = BufferedPacketReader(buffer_size=receive_buffer)
        self._receiver: _Receiver | None = None  # the transport's protocol from COM_REGISTER_SLAVE on
        self._pending: bytes | memoryview | None = None  # an ERR/EOF packet seen while batching
        self.bytes_received = 0
        self.idle_timeout: float | None = None  # seconds of silence that mean the link is dead

    async def open(self) -> ServerInfo:
        """Connect and authenticate; learn flavor, version, GTID mode, checksum.

        Raises:
            SourceError: auth (fatal), unreachable, misconfigured (binlog off / not ROW, fatal).
        """
        import pymysql

        from binlogd.daemon.replication import _aiomysql

        cfg = self.cfg
        try:
            async with asyncio.timeout(cfg.connect_timeout):  # aiomysql bounds the TCP connect only, not the handshake
                self.conn = await _aiomysql.connect(
                    host=cfg.host, port=cfg.port, user=cfg.user, password=cfg.password.reveal(),
                    ssl=cfg.tls.ssl_context(), connect_timeout=cfg.connect_timeout)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in ER_ACCESS_DENIED or code == CR_AUTH_PLUGIN_CANNOT_LOAD:
                raise SourceError("auth", f"authentication failed for user {cfg.user!r} at {cfg.host}:{cfg.port}: "
                                  f"{exc.args[-1]} (error {code})", fatal=True) from None
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ssl.SSLError):  # retrying cannot fix a certificate
                if isinstance(cause, ssl.SSLCertVerificationError):
                    reason = f"certificate verify failed: {cause.verify_message}"
                else:
                    reason = getattr(cause, "reason", None) or str(cause)
                raise SourceError("tls", f"TLS to {cfg.host}:{cfg.port} failed: {reason} "
                                  f"(source.tls.mode = {cfg.tls.mode!r})", fatal=True) from None
            if isinstance(cause, socket.gaierror):
                raise SourceError("unreachable", f"unknown host {cfg.host!r}: {cause.strerror}") from None
            raise SourceError("connection", f"cannot connect to {cfg.host}:{cfg.port}: "
                              f"{connect_reason(cause, cfg.connect_timeout) if cause else exc.args[-1]}") from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise SourceError("connection", f"cannot connect to {cfg.host}:{cfg.port}: "
                              f"{connect_reason(exc, cfg.connect_timeout)}") from None
        require_tls(self.conn, cfg)
        rows = await self.query("SELECT VERSION(), @@version_comment, @@server_id, @@log_bin, "
                                f"{binlog_format_read(self.conn.get_server_info())}, @@global.binlog_checksum")
        version_text, comment, server_id, log_bin, fmt, checksum = rows[0]
        fmt = "ROW" if fmt is None else fmt  # a MySQL without the variable has row-based logging only
        flavor = "mariadb" if "mariadb" in f"{version_text} {comment}".lower() else "mysql"
        if not int(log_bin):
            raise SourceError("misconfigured", f"{cfg.host}:{cfg.port} has binary logging off (log_bin=0)", True)
        if str(fmt).upper() != "ROW":
            raise SourceError("misconfigured", f"{cfg.host}:{cfg.port} has binlog_format={fmt}; binlogd needs ROW "
                              "(SET GLOBAL binlog_format=ROW and restart writers)", True)
        uuid, gtid_mode = "", flavor == "mariadb"
        if flavor == "mysql":
            uuid, mode = (await self.query("SELECT @@server_uuid, @@gtid_mode"))[0]
            gtid_mode = str(mode).upper() == "ON"
        self.info = ServerInfo(flavor, version_tuple(version_text), version_text, int(server_id), str(uuid), gtid_mode,
                               str(checksum).upper())
        return self.info

    async def query(self, sql: str) -> list[tuple]:
        """Run one admin statement; rows as tuples.

        Raises:
            SourceError: the server refused it (with its error number).
        """
        import pymysql

        try:
            async with self.conn.cursor() as cur:
                await cur.execute(sql)
                return list(await cur.fetchall() or [])
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else 0
            kind = "auth" if code in ER_ACCESS_DENIED else "server"
            raise SourceError(kind, f"{sql.split()[0]} failed: server error {code}: {exc.args[-1]}",
                              fatal=kind == "auth") from None

    async def current_position(self) -> Position:
        """The primary's current end of log: file, position and GTID state."""
        rows = await self.query(self.info.admin_show_status)
        if not rows:
            raise SourceError("misconfigured", "the primary reports no binlog status (is log_bin on?)", True)
        file, pos = rows[0][0], int(rows[0][1])
        if self.info.flavor == "mariadb":
            gtid_list = (await self.query("SELECT @@global.gtid_binlog_pos"))[0][0] or ""
            return Position(file, pos, gtid_list=str(gtid_list))
        executed = str(rows[0][4]).replace("\n", "") if len(rows[0]) > 4 and self.info.gtid_mode else ""
        return Position(file, pos, gtid_set=executed)

    async def binlog_files(self) -> list[str]:
        """``SHOW BINARY LOGS``: the primary's files, oldest first."""
        return [r[0] for r in await self.query("SHOW BINARY LOGS")]

    async def off_boundary(self, file: str, pos: int, size: int) -> str | None:
        """Why no event of ``file`` (``size`` bytes, as ``SHOW BINARY LOGS`` says) starts at ``pos``, naming the
        nearest event boundaries (from ``SHOW BINLOG EVENTS``); None when one does or the file ends there, or when
        the server would not say (a privilege refused).

        Raises:
            SourceError("connection"): the connection failed.
        """
        if pos >= size:
            return None if pos == size else f"it is past the end of the file ({size} bytes)"
        rows = await self._events(file, pos, 0, 1)
        if rows is _REFUSED or rows and int(rows[0][1]) == pos:
            return None
        before, at, skip, seen = None, 4, 0, 0
        while seen < _WALK_EVENTS:
            rows = await self._events(file, at, skip, _WALK_PAGE)
            if not isinstance(rows, list):
                return None
            for row in rows:
                if int(row[1]) > pos:
                    return f"the nearest event boundaries are {before} (before) and {int(row[1])} (after)"
                before = int(row[1])
            seen += len(rows)
            if len(rows) < _WALK_PAGE:   # the last event holds it
                return f"the nearest event boundaries are {before} (before) and {size} (after, the file's end)"
            at, skip = int(rows[-1][1]), 1
        return "it is not where an event starts (SHOW BINLOG EVENTS lists them)"

    async def binlog_sizes(self) -> dict[str, int]:
        """``SHOW BINARY LOGS``: each of the primary's files and its size in bytes, oldest first."""
        return {str(r[0]): int(r[1]) for r in await self.query("SHOW BINARY LOGS")}

    async def _events(self, file: str, pos: int, skip: int, limit: int) -> list[tuple] | object | None:
        """``SHOW BINLOG EVENTS IN file FROM pos LIMIT skip, limit`` rows; None when the server refuses the offset
        (error 1220: no event there, or past the file's end), :data:`_REFUSED` when it refuses the statement
        otherwise (the account lacks a privilege, a server without it): the dump's own check is left.

        Raises:
            SourceError("connection"): the connection failed.
        """
        import pymysql

        try:
            async with self.conn.cursor() as cur:
                await cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT {int(skip)}, {int(limit)}",
                                  (file,))
                return list(await cur.fetchall() or [])
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            if code == ER_ERROR_WHEN_EXECUTING_COMMAND:
                return None
            if 1000 <= code < 2000:   # the server's refusal
                return _REFUSED
            raise SourceError("connection", f"SHOW BINLOG EVENTS failed: {exc.args[-1]}") from None

    async def start_dump(self, server_id: int, position: Position, use_gtid: bool, heartbeat: float,
                         non_blocking: bool = False, strict: bool = False) -> None:
        """Negotiate checksum and heartbeat, register as a replica, send the dump command.

        Args:
            use_gtid: resume by GTID (MySQL COM_BINLOG_DUMP_GTID with ``gtid_set``; MariaDB
                ``@slave_connect_state`` = ``gtid_list``) instead of file/pos.
            strict: MariaDB ``@slave_gtid_strict_mode = 1``: the server refuses a GTID position its binlog
                does not hold (failover's check that a server has every delivered transaction).
        """
        info = self.info
        period = int(heartbeat * 1_000_000_000)
        await self.query("SET @master_binlog_checksum = @@global.binlog_checksum, "
                         "@source_binlog_checksum = @@global.binlog_checksum, "
                         f"@master_heartbeat_period = {period}, @source_heartbeat_period = {period}")
        if info.flavor == "mariadb":
            await self.query("SET @mariadb_slave_capability = 4")
            if use_gtid:
                gtids = position.gtid_list.replace("'", "")
                await self.query(f"SET @slave_connect_state = '{gtids}', @slave_gtid_strict_mode = {int(strict)}, "
                                 "@slave_gtid_ignore_duplicates = 0")
        self._receive_directly()  # after the admin statements: raw packets both ways
        self._command(com_register_slave(server_id, port=0))
        reply = await self._packet()
        if is_err(reply):
            raise self._server_error(parse_err(reply), "COM_REGISTER_SLAVE")
        flags = 1 if non_blocking else 0  # BINLOG_DUMP_NON_BLOCK: EOF at the end instead of waiting
        if info.flavor == "mariadb":
            flags |= 2  # BINLOG_SEND_ANNOTATE_ROWS_EVENT: else MariaDB leaves them out (the archive needs all)
        if use_gtid and info.flavor == "mysql":
            cmd = com_binlog_dump_gtid(server_id, "", 4, MysqlGtidSet.parse(position.gtid_set), flags)
        elif use_gtid:
            cmd = com_binlog_dump("", 4, server_id, flags)
        else:
            cmd = com_binlog_dump(position.file, position.pos, server_id, flags)
        self._command(cmd)

    def _receive_directly(self) -> None:
        """From now on the transport writes into the packet reader's buffers (aiomysql runs no more
        statements on this connection); whatever its StreamReader already holds moves over first."""
        from binlogd.daemon.replication import _aiomysql

        held = _aiomysql.take_over(self.conn)
        transport = _aiomysql.transport(self.conn)
        receiver = _Receiver(self._packets, transport)
        if held.data:
            self.bytes_received += len(held.data)
            self._packets.feed(held.data)
        receiver.error, receiver.eof = held.error, held.error is None and held.eof
        transport.set_protocol(receiver)
        self._receiver = receiver
        if not transport.is_reading():
            transport.resume_reading()  # the StreamReader may have paused it (flow control)

    def _command(self, payload: bytes) -> None:
        """Send one command packet (the transport buffers it; a lost connection shows on the next read)."""
        self._receiver.transport.write(encode_packet(payload, 0))

    async def _packet(self) -> bytes | memoryview:
        if self._pending is not None:
            payload, self._pending = self._pending, None
            return payload
        while True:
            payload = self._packets.next_payload()
            if payload is not None:
                return payload
            await self._receive()

    async def _receive(self) -> None:
        """Wait for the receiver to deliver bytes. The deadline is per delivery: a slow link that keeps
        sending is alive, only silence (no byte at all) for ``idle_timeout`` seconds means a dead one."""
        receiver = self._receiver
        if receiver.error is not None:
            raise self._lost(receiver.error)
        if receiver.eof:
            self._closed()
        receiver.resume()  # the reader needs more bytes: never stay paused then
        before = receiver.received
        try:
            async with asyncio.timeout(self.idle_timeout):
                await receiver.wait()
        except TimeoutError:
            raise self._timeout() from None
        self.bytes_received += receiver.received - before
        if receiver.error is not None and receiver.received == before:
            raise self._lost(receiver.error)

    @staticmethod
    def _lost(error: BaseException) -> SourceError:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        return SourceError("connection", f"the connection to the primary was lost: {reason}")

    def _timeout(self) -> SourceError:
        return SourceError("timeout", f"no packet from the primary for {self.idle_timeout:g}s "
                           "(2 × heartbeat): not a byte arrived")

    def _closed(self) -> None:
        """The primary closed the connection: raise the matching SourceError."""
        self._packets.feed_eof()
        try:
            if self._packets.next_payload() is None:
                raise SourceError("connection", "the primary closed the connection")
        except TruncatedError:
            raise SourceError("connection", "the primary closed the connection inside a packet") from None
        raise ProtocolError("data fed after end of stream")

    async def read_event(self) -> bytes | memoryview:
        """The next event's bytes (the OK byte stripped; a read-only memoryview once streaming).

        Raises:
            ServerError-derived SourceError: an ERR packet (1236 = binlog purged/missing, fatal).
            SourceError("stream_ended"): an EOF packet (non-blocking dump reached the end).
        """
        return self._event(await self._packet())

    async def read_events(self, limit: int = 1024) -> list[bytes | memoryview]:
        """Every complete event already received (at most ``limit``), waiting for the socket only
        when none is; raises like :meth:`read_event` (events before an ERR/EOF are returned first)."""
        out = [await self.read_event()]
        out += self._packets.next_ok_payloads(limit - 1)
        if len(out) < limit:
            payload = self._packets.next_payload()  # what stopped the run: nothing yet, or another packet
            if payload is not None:
                if payload[:1] == b"\x00":
                    out.append(payload[1:])  # one joined from 16 MiB chunks
                else:
                    self._pending = payload  # ERR/EOF: raised on the next call
        return out

    def _event(self, payload: bytes | memoryview) -> bytes | memoryview:
        if payload[:1] == b"\x00":
            return payload[1:]
        if is_err(payload):
            raise self._server_error(parse_err(payload), "binlog dump")
        if is_eof(payload):
            raise SourceError("stream_ended", "the primary ended the binlog stream (EOF packet)")
        raise ProtocolError(f"unexpected packet 0x{payload[0]:02x} in the binlog stream")

    def _server_error(self, err: ServerError, during: str) -> SourceError:
        if err.code == ER_MASTER_FATAL_READING_BINLOG:
            return SourceError("binlog_missing", f"{during}: the primary cannot send the requested binlog "
                               f"(error 1236: {err.message}){why_1236(err.message)}", fatal=True)
        if err.code in ER_ACCESS_DENIED:
            return SourceError("auth", f"{during}: {err} (grant REPLICATION SLAVE and REPLICATION CLIENT)", True)
        return SourceError("server", f"{during}: {err}", fatal=err.code in (1236, 1371))

    async def close(self) -> None:
        self._receiver = None
        if self.conn is not None:
            self.conn.close()  # aiomysql: closes the transport without a COM_QUIT round trip
            self.conn = None


class _Receiver(asyncio.BufferedProtocol):
    """The transport's protocol while streaming: bytes go straight into the packet reader.

    Fields:
        received: bytes delivered so far.
        eof: the primary closed its side.
        error: the exception the connection was lost with, or None.
    """

    def __init__(self, packets: BufferedPacketReader, transport: asyncio.BaseTransport):
        self.packets = packets
        self.transport = transport
        self.received = 0
        self.eof = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._paused = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.packets.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.packets.buffer_updated(nbytes)
        self.received += nbytes
        if self.packets.buffered > _PAUSE_ABOVE and not self._paused:
            # The consumer is behind: stop reading until the reader asks for more (resume()).
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.error = exc
        else:
            self.eof = True
        self._wake()

    def resume(self) -> None:
        """Read the socket again if it was paused."""
        if self._paused:
            self._paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    async def wait(self) -> None:
        """Until bytes arrive, the stream ends or the connection is lost."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
