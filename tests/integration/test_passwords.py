"""Passwords that are not ASCII (issue 19): binlogd sends the password's UTF-8 bytes, as the mariadb and
mysql clients do, with every authentication plugin, and no message ever shows a character of it.

- ``mysql_native_password`` on the suite's real MariaDB: a password with a character outside Latin-1
  (before the fix: ``UnicodeEncodeError`` naming the character and its position, exit 1) and a
  Latin-1-only one (before: exit 3, "authentication failed", although the password is right);
- on MySQL 9.7 the same two accounts use its default, ``caching_sha2_password`` (a full authentication: the
  server's cache is emptied before the daemon logs in);
- ``ed25519`` on MariaDB (``INSTALL SONAME 'auth_ed25519'``; binlogd signs with PyNaCl);
- ``caching_sha2_password`` against the fake primary: full authentication with the server's RSA key,
  then the fast path after a reconnect (the fake caches the user as a real server does);
- the schema connection (information_schema lookups on a server without row metadata);
- a wrong password: exit 3, one line, and no character of it in the log.

A login is proven by the data: a row written after the daemon streams arrives in the sink. The server
side of every account is created by SQL the ``mariadb`` client would run, and checked with PyMySQL
(which takes the password as UTF-8 bytes) before binlogd is tried.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pymysql
import pytest

from tests.support.daemon import DaemonProcess, base_overrides, read_changes, wait_until
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import FENUM, UENUM, Running, binlog, config, gtid_reaches
from tests.support.flavour import skip_unless_flavour

UTF8_PW = "xyzzy-€-pässwörd"      # '€' is outside Latin-1
LATIN1_PW = "xyzzy-pässwörd"      # Latin-1 only: its Latin-1 and UTF-8 bytes differ
WRONG_PW = "wrong-€-ÿ-pässwörd"
SECRET_CHARS = {c for pw in (UTF8_PW, LATIN1_PW, WRONG_PW) for c in pw if not c.isascii()}


def _assert_no_secret(text: str, *passwords: str) -> None:
    """No password, no non-ASCII character of one, no encoder message pointing into one."""
    for pw in passwords:
        assert pw not in text, f"a password appears in:\n{text}"
    leaked = sorted(c for c in SECRET_CHARS if c in text)
    assert not leaked, f"password characters {leaked} appear in:\n{text}"
    for marker in ("UnicodeEncodeError", "codec can't encode", "Traceback", "\\u20ac", "\\xe4"):
        assert marker not in text, f"{marker!r} appears in:\n{text}"


def _accounts(server) -> dict[str, tuple[str, str]]:
    """Create the test accounts on ``server``: {case: (user, password)}; ed25519 only where the plugin loads."""
    accounts = {"native-utf8": ("pw_u8", UTF8_PW), "native-latin1": ("pw_l1", LATIN1_PW)}
    for user, pw in accounts.values():
        server.sql(f"DROP USER IF EXISTS '{user}'@'%'")  # MySQL has no CREATE OR REPLACE USER
        server.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'")
    if server.flavor == "mysql":
        server.sql("FLUSH PRIVILEGES")  # caching_sha2_password's cache emptied: the daemon's login is a full one
    try:
        if server.flavor == "mysql":
            raise RuntimeError("ed25519 is MariaDB's plugin: MySQL has none")
        if not server.sql("SELECT 1 FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'ed25519'"):
            server.sql("INSTALL SONAME 'auth_ed25519'")
        server.sql(f"CREATE OR REPLACE USER 'pw_ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('{UTF8_PW}')")
        accounts["ed25519-utf8"] = ("pw_ed", UTF8_PW)
    except Exception as exc:  # noqa: BLE001 (the plugin is not shipped with every server build)
        print(f"\n[passwords] ed25519 not available on {server.version}: {exc}")
    for user, _ in accounts.values():
        server.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{user}'@'%'")
    for user, pw in accounts.values():
        pymysql.connect(host=server.host, port=server.port, user=user, password=pw.encode("utf-8")).close()
    if server.flavor == "mysql":
        server.sql("FLUSH PRIVILEGES")
    return accounts


@pytest.fixture(scope="module")
def accounts(mariadb):
    made = _accounts(mariadb)
    yield made
    for user, _ in made.values():
        mariadb.sql(f"DROP USER IF EXISTS '{user}'@'%'")


def _overrides(server, tmp_path: Path, user: str, password: str, schema: str, **extra) -> dict[str, str]:
    """The daemon's settings; the password goes through ``source.password_file`` (written as UTF-8)."""
    secret = tmp_path / "password"
    secret.write_text(password + "\n", encoding="utf-8")
    o = base_overrides(server, tmp_path, **{"filters.include_schemas": schema, **extra})
    del o["source.password"]
    o.update({"source.user": user, "source.password_file": str(secret)})
    return o


def _streams_a_row(server, tmp_path: Path, user: str, password: str, schema: str, **extra) -> list[dict]:
    """Run ``binlogd run`` as ``user``; write one row once it streams; return the changes it delivered."""
    d = DaemonProcess(_overrides(server, tmp_path, user, password, schema, **extra))
    try:
        d.wait_streaming()
        server.sql(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, note VARCHAR(40)) CHARACTER SET utf8mb4")
        server.sql(f"INSERT INTO `{schema}`.t VALUES (1, 'grüße')")
        wait_until(lambda: read_changes(tmp_path / "sink", strict=False), 30, what="the row in the sink")
        assert d.terminate() == 0, d.stderr
    finally:
        if d.running:
            d.kill()
    _assert_no_secret(d.stderr, password)
    return read_changes(tmp_path / "sink")


@pytest.mark.parametrize("case", ["native-utf8", "native-latin1", "ed25519-utf8"])
def test_password_as_utf8_bytes(mariadb, fresh_db, accounts, tmp_path, case):
    if case not in accounts:
        skip_unless_flavour(mariadb, "mariadb", "the ed25519 authentication plugin")
        pytest.skip(f"this server ({mariadb.version}) has no auth_ed25519 plugin")
    user, password = accounts[case]
    changes = _streams_a_row(mariadb, tmp_path, user, password, fresh_db)
    assert [(c["op"], c["table"], c["after"]) for c in changes] == [("insert", "t", {"id": 1, "note": "grüße"})]


def test_schema_connection_uses_the_same_password(mariadb_minimal, tmp_path):
    """Without row metadata the column names come from information_schema, on a second connection that
    authenticates like the first (a failed one would leave the columns as @1, @2)."""
    server = mariadb_minimal
    user, password = _accounts(server)["native-utf8"]
    server.sql("CREATE DATABASE IF NOT EXISTS pw_schema CHARACTER SET utf8mb4")
    server.sql("DROP TABLE IF EXISTS pw_schema.t")
    try:
        changes = _streams_a_row(server, tmp_path, user, password, "pw_schema",
                                 **{"schema.source": "information_schema"})
    finally:
        server.sql("DROP DATABASE IF EXISTS pw_schema")
        server.sql(f"DROP USER IF EXISTS '{user}'@'%'")
    assert [c["after"] for c in changes] == [{"id": 1, "note": "grüße"}]


def test_wrong_password_exits_3_and_shows_no_character_of_it(mariadb, accounts, tmp_path):
    user, _ = accounts["native-utf8"]
    d = DaemonProcess(_overrides(mariadb, tmp_path, user, WRONG_PW, "none"))
    rc = d.wait(60)
    assert rc == 3, d.stderr
    errors = [line for line in d.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "authentication failed" in errors[0] and user in errors[0], d.stderr
    _assert_no_secret(d.stderr, WRONG_PW, UTF8_PW)


@pytest.mark.usefixtures("corpus")
async def test_caching_sha2_password_full_then_fast_path(tmp_path, caplog):
    """The fake primary asks for full authentication first (RSA: no TLS), and takes the fast path once the
    user is cached: the first dump is cut after 4 packets, so the daemon logs in twice."""
    caplog.set_level(logging.INFO)

    async def main():
        async with FakePrimary(binlog(FENUM), password=UTF8_PW, auth_plugin="caching_sha2_password",
                               close_after=4) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2", password=UTF8_PW), primary) as d:
            await d.wait(gtid_reaches(tmp_path, f"{UENUM}:1-5"), 20, "GTIDs :3 to :5 committed")
            assert await d.stop() == 0
            return [(c.auth_plugin, c.auth_path, c.authenticated) for c in primary.connections]

    logins = await asyncio.wait_for(main(), 60)
    assert logins[:2] == [("caching_sha2_password", "full", True), ("caching_sha2_password", "fast", True)]
    _assert_no_secret("\n".join(r.getMessage() for r in caplog.records), UTF8_PW)


@pytest.mark.usefixtures("corpus")
async def test_caching_sha2_wrong_password_exits_3(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def main():
        async with FakePrimary(binlog(FENUM), password=UTF8_PW, auth_plugin="caching_sha2_password") as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2", password=WRONG_PW), primary) as d:
            return await d.exit_code(10), primary.connections

    rc, connections = await asyncio.wait_for(main(), 30)
    assert rc == 3 and [c.authenticated for c in connections] == [False]
    _assert_no_secret("\n".join(r.getMessage() for r in caplog.records), WRONG_PW, UTF8_PW)
