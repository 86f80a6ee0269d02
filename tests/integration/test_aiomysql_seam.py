"""The aiomysql seam (``binlogd.daemon.replication._aiomysql``), checked against the installed aiomysql.

pyproject allows ``aiomysql>=0.2,<0.4``; this runs on whichever is installed (0.3.2 when written) and
prints it. The seam's private uses are each exercised for real against the fake primary: the connection
subclass's authentication, the transport, and the StreamReader's held bytes, EOF and error (``send_query``, the
snapshot's COM_QUERY, against real servers in tests/integration/test_snapshot_rows.py). The ed25519
signature is checked with PyNaCl's standard Ed25519 verification against the public key a real MariaDB
10.11 stored for the password (``CREATE USER … IDENTIFIED VIA ed25519 USING PASSWORD('xyzzy-€-pässwörd')``).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import aiomysql
import pytest
from aiomysql.connection import Connection
from pymysql.err import OperationalError

from binlogd.daemon.replication import _aiomysql
from binlogd.protocol.packet import encode_packet
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import F57, binlog
from tests.support.fakewire import frame, ok_packet

PASSWORD = "xyzzy-€-pässwörd"
# mysql.user.authentication_string of that password under ed25519, from MariaDB 10.11.19 (base64, unpadded).
ED25519_PUBLIC_KEY = "2M/vmZ7En7B67Da774fxj9QhV8T7pZhLGoEz89u7Irw"


def test_installed_aiomysql_is_in_the_range_and_has_what_the_seam_uses():
    version = tuple(int(x) for x in aiomysql.__version__.split(".")[:2])
    print(f"\n[seam] aiomysql {aiomysql.__version__}")
    assert (0, 2) <= version < (0, 4), aiomysql.__version__
    for name in ("_process_auth", "_read_packet", "_connect", "write_packet", "_execute_command"):
        assert callable(getattr(Connection, name, None)), f"aiomysql.Connection.{name} is gone"


def test_ed25519_signature_verifies_with_the_servers_public_key():
    from nacl.bindings import crypto_sign_open
    from nacl.exceptions import BadSignatureError

    public = base64.b64decode(ED25519_PUBLIC_KEY + "=")
    for _ in range(5):
        scramble = os.urandom(32)
        signature = _aiomysql.ed25519_response(PASSWORD.encode("utf-8"), scramble)
        assert len(signature) == 64
        assert crypto_sign_open(signature + scramble, public) == scramble
    wrong = _aiomysql.ed25519_response(PASSWORD.encode("latin-1", "replace"), scramble)
    with pytest.raises(BadSignatureError):
        crypto_sign_open(wrong + scramble, public)


def test_ed25519_without_pynacl_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nacl.bindings", None)
    with pytest.raises(OperationalError) as info:
        _aiomysql.ed25519_response(PASSWORD.encode(), bytes(32))
    assert info.value.args[0] == 1251 and "PyNaCl" in info.value.args[1]
    assert "€" not in str(info.value) and "ä" not in str(info.value)


async def _connect(primary: FakePrimary, password: str = PASSWORD) -> Connection:
    return await _aiomysql.connect(host="127.0.0.1", port=primary.port, user="repl", password=password, ssl=None,
                                   connect_timeout=5)


@pytest.mark.usefixtures("corpus")
@pytest.mark.parametrize("plugin", ["mysql_native_password", "caching_sha2_password"])
async def test_password_goes_as_utf8_and_a_wrong_one_is_refused(plugin):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD, auth_plugin=plugin) as primary:
            conn = await _connect(primary)
            conn.close()
            with pytest.raises(OperationalError) as info:
                await _connect(primary, PASSWORD.replace("€", "e"))
            return [c.authenticated for c in primary.connections], info.value

    logins, refused = await asyncio.wait_for(main(), 30)
    assert logins == [True, False] and refused.args[0] == 1045
    assert "€" not in str(refused) and "ä" not in str(refused)


@pytest.mark.usefixtures("corpus")
async def test_take_over_moves_what_the_stream_reader_holds_then_sees_the_close():
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary:
            conn = await _connect(primary)
            transport = _aiomysql.transport(conn)
            transport.write(encode_packet(b"\x0e", 0))  # COM_PING: the fake answers OK (sequence id 1)
            await asyncio.sleep(0.3)
            held = _aiomysql.take_over(conn)
            again = _aiomysql.take_over(conn)
            await primary.close()
            await asyncio.sleep(0.1)
            closed = _aiomysql.take_over(conn)
            conn.close()
            return held, again, closed, _aiomysql.transport(conn)

    held, again, closed, after_close = await asyncio.wait_for(main(), 30)
    assert held == _aiomysql.Held(frame(ok_packet(), 1)[0], None, False)
    assert again == _aiomysql.Held(b"", None, False)
    assert closed.data == b"" and (closed.eof or closed.error is not None)
    assert after_close is None
