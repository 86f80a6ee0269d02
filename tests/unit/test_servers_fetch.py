"""Fetching MariaDB 11.8 and MySQL 9.7 for the suite (tests/support/servers.py), without a network: a fake ``apt-get``.

The fetch must use a private deb822 sources list (name ending in ``.sources``, suite trixie) and private
index and cache directories, never the machine's apt configuration; when it fails, the error names the
command and apt's own message (the 11.8 tests skip with it), and nothing half-made is left in the cache.
"""

from __future__ import annotations

import os
import re
import stat

import pytest

from binlogd.cli.serverbins import ServerSetupError
from tests.support import servers

FAKE_APT = """#!/bin/sh
echo "$@" >> "{log}"
for arg in "$@"; do
  case "$arg" in -oDir::Etc::sourcelist=*) cat "${{arg#-oDir::Etc::sourcelist=}}" >> "{log}";; esac
done
echo "E: Failed to fetch http://deb.debian.org/debian/dists/trixie/InRelease  Temporary failure resolving" >&2
exit 100
"""


@pytest.fixture
def fake_apt(tmp_path, monkeypatch):
    bindir, log = tmp_path / "bin", tmp_path / "apt.log"
    bindir.mkdir()
    script = bindir / "apt-get"
    script.write_text(FAKE_APT.format(log=log))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_failed_download_names_the_command_and_apts_message(tmp_path, fake_apt):
    if not servers.shutil.which("dpkg"):
        pytest.skip("dpkg not installed")
    root = tmp_path / "cache" / "mariadb-11.8"
    with pytest.raises(ServerSetupError) as info:
        servers.fetch_mariadb(root)
    message = str(info.value)
    assert message.startswith("cannot fetch MariaDB 11.8: `apt-get update (")
    assert "failed (100): E: Failed to fetch" in message and "trixie" in message
    assert not root.exists() and [p.name for p in root.parent.iterdir()] == ["mariadb-11.8.lock"]
    log = fake_apt.read_text()
    assert "-oDir::Etc::sourceparts=-" in log and "Dir::State::Lists=" + str(root.parent) in log
    assert "Dir::Cache=" + str(root.parent) in log
    assert re.search(r"-oDir::Etc::sourcelist=\S+\.sources\s", log)  # apt reads deb822 only from *.sources
    assert "Suites: trixie" in log and "Types: deb" in log and "Components: main" in log


def test_without_apt_get_the_reason_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerSetupError, match="apt-get not found"):
        servers.fetch_mariadb(tmp_path / "mariadb-11.8")


def test_an_unknown_server_id_is_unavailable():
    with pytest.raises(servers.Unavailable, match="no MariaDB/MySQL server for '9.9'"):
        servers.binaries("9.9")


def test_mysql_is_fetched_from_sid_the_same_way(tmp_path, fake_apt):
    if not servers.shutil.which("dpkg"):
        pytest.skip("dpkg not installed")
    root = tmp_path / "cache" / "mysql-9.7"
    with pytest.raises(ServerSetupError) as info:
        servers.fetch_mysql(root)
    assert str(info.value).startswith("cannot fetch MySQL 9.7: `apt-get update (")
    assert not root.exists() and [p.name for p in root.parent.iterdir()] == ["mysql-9.7.lock"]
    log = fake_apt.read_text()
    assert "Suites: sid" in log and "-oDir::Etc::sourceparts=-" in log and "Dir::Cache=" + str(root.parent) in log
    assert servers.flavour("mysql-9.7") == "mysql"
