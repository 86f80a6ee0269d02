"""The one place binlogd depends on aiomysql's (and asyncio's stream) internals.

aiomysql does the handshake, authentication and TLS; then binlogd takes the connection's transport
over and reads raw replication packets itself (:mod:`binlogd.daemon.replication.connection`). Everything here is
checked against the installed aiomysql by ``tests/integration/test_aiomysql_seam.py`` (pyproject allows
``aiomysql>=0.2,<0.4``; tested with 0.3.2).

- Passwords: MySQL's and MariaDB's clients send a password's UTF-8 bytes; aiomysql encodes it with
  Latin-1 in every plugin. :func:`connect` hands it the UTF-8 bytes decoded as Latin-1 (one code point
  per byte), so aiomysql's encoding gives those bytes back. This uses only the public ``password``.
- MariaDB's ``client_ed25519``, which aiomysql lacks: :class:`_Connection` answers its
  AuthSwitchRequest (private: ``Connection._process_auth``, ``_read_packet``, ``_password``,
  ``_connect``). The signature is made with PyNaCl.
- :func:`transport` and :func:`take_over`: the connection's transport (``Connection._writer``), and
  what its StreamReader already holds (``StreamReader._buffer``, ``_exception``, ``_eof``).
- :func:`send_query`: a ``COM_QUERY`` sent without reading its result (``Connection._execute_command``), for the
  snapshot's reader of result sets (:mod:`binlogd.daemon.snapshot.wire`).
- Server warnings: aiomysql's cursor runs ``SHOW WARNINGS`` after a statement the server warned about and
  turns each warning into a Python ``warnings.warn`` (printed as two lines of aiomysql's source on stderr).
  :class:`_Cursor`, every connection's default cursor, overrides that private ``_show_warnings``: the
  warnings of binlogd's own statements (MySQL 9: a deprecated variable read) are not the user's to act on.
"""

from __future__ import annotations

import asyncio
import hashlib

from aiomysql.connection import Connection
from aiomysql.cursors import Cursor
from pymysql.err import OperationalError

from binlogd.protocol.records import record

ER_NOT_SUPPORTED_AUTH_MODE = 1251
COM_QUERY = 3


def ed25519_response(password: bytes, scramble: bytes) -> bytes:
    """MariaDB's ``client_ed25519``: an Ed25519 signature of ``scramble`` whose secret scalar and nonce come
    from SHA-512 of the password (any length), not of a 32-byte seed.

    Raises:
        OperationalError(1251): PyNaCl is not installed (the message says what to install).
    """
    try:
        from nacl.bindings import (
            crypto_core_ed25519_scalar_add,
            crypto_core_ed25519_scalar_mul,
            crypto_core_ed25519_scalar_reduce,
            crypto_scalarmult_ed25519_base_noclamp,
        )
    except ImportError:
        raise OperationalError(ER_NOT_SUPPORTED_AUTH_MODE, "the account authenticates with ed25519, which needs "
                               "PyNaCl: pip install 'binlogd[daemon]'") from None
    digest = hashlib.sha512(password).digest()
    secret = bytearray(digest[:32])
    secret[0] &= 248
    secret[31] = (secret[31] & 127) | 64
    scalar = crypto_core_ed25519_scalar_reduce(bytes(secret) + bytes(32))
    public = crypto_scalarmult_ed25519_base_noclamp(scalar)
    nonce = crypto_core_ed25519_scalar_reduce(hashlib.sha512(digest[32:] + scramble).digest())
    point = crypto_scalarmult_ed25519_base_noclamp(nonce)
    k = crypto_core_ed25519_scalar_reduce(hashlib.sha512(point + public + scramble).digest())
    return point + crypto_core_ed25519_scalar_add(crypto_core_ed25519_scalar_mul(k, scalar), nonce)


class _Cursor(Cursor):
    """aiomysql's cursor, without reading the server's warnings: no ``SHOW WARNINGS`` round trip, no Python
    warning. The statement's warning count stays on its result (``cursor._result.warning_count``)."""

    async def _show_warnings(self, conn) -> None:
        return None


class _Connection(Connection):
    """aiomysql's connection, plus MariaDB's ed25519 authentication."""

    async def _process_auth(self, plugin_name, auth_packet):
        if plugin_name != b"client_ed25519":
            return await super()._process_auth(plugin_name, auth_packet)
        self.write_packet(ed25519_response(self._password.encode("latin-1"), auth_packet.read_all()))
        reply = await self._read_packet()
        reply.check_error()
        self._auth_plugin_used = "client_ed25519"
        return reply


async def connect(*, host: str, port: int, user: str, password: str, ssl, connect_timeout: float,
                  program_name: str = "binlogd") -> Connection:
    """An authenticated aiomysql connection (autocommit), the password sent as UTF-8 bytes, whose cursors
    (:class:`_Cursor`) never turn the server's warnings into Python warnings.

    Raises:
        pymysql.err.OperationalError, OSError, asyncio.TimeoutError: as ``aiomysql.connect``.
    """
    conn = _Connection(host=host, port=port, user=user, password=password.encode("utf-8").decode("latin-1"),
                       ssl=ssl, connect_timeout=connect_timeout, autocommit=True, program_name=program_name,
                       cursorclass=_Cursor)
    try:
        await conn._connect()
    except BaseException:  # aiomysql closes on an Exception only: a cancel mid-handshake would leave it open
        conn.close()
        raise
    return conn


def transport(conn: Connection) -> asyncio.Transport | None:
    """The connection's transport (None once closed)."""
    writer = conn._writer
    return writer.transport if writer is not None else None


@record
class Held:
    """What aiomysql's StreamReader had received when the transport was taken over.

    Fields: data (bytes not yet read), error (the exception the connection was lost with, or None),
    eof (the peer closed its side).
    """

    data: bytes
    error: BaseException | None
    eof: bool


def take_over(conn: Connection) -> Held:
    """Empty the connection's StreamReader, for a new protocol on its transport to go on from there."""
    reader = conn._reader
    data = bytes(reader._buffer)
    reader._buffer.clear()
    return Held(data, reader._exception, reader.at_eof() or reader._eof)


async def send_query(conn: Connection, sql: str) -> None:
    """Send ``sql`` as a ``COM_QUERY`` and return without reading anything of its result: the caller reads it
    off the transport (:func:`take_over` first).

    Raises:
        pymysql.err.InterfaceError: the connection is closed; OperationalError 2013 when the write fails.
    """
    await conn._execute_command(COM_QUERY, sql)
