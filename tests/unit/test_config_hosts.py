"""Tests for ``[source] hosts`` and ``failover_timeout_seconds`` (issue 14): the three ways to set them, the
conflicts with host/port and with file/pos resume, bad entries; the CLI exits 2 with one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from binlogd.daemon.config import ConfigError, SourceConfig, load_config, parse_endpoint

HOSTS_TOML = '[source]\nhosts = ["db1:3306", "db2:3307", "db3"]\n'
ENDPOINTS = (("db1", 3306), ("db2", 3307), ("db3", 3306))


def write(tmp_path, text: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_hosts_from_toml_env_and_command_line(tmp_path):
    assert load_config(write(tmp_path, HOSTS_TOML), env={}).source.endpoints == ENDPOINTS
    env = {"BINLOGD_SOURCE__HOSTS": "db1:3306, db2:3307,db3"}
    assert load_config(None, env=env).source.endpoints == ENDPOINTS
    cli = load_config(None, env=env, overrides={"source.hosts": "a:1,b:2"})
    assert cli.source.hosts == ("a:1", "b:2") and cli.source.endpoints == (("a", 1), ("b", 2))


def test_one_host_is_host_and_port():
    c = load_config(None, env={"BINLOGD_SOURCE__HOSTS": "db7:3317"})
    assert (c.source.host, c.source.port, c.source.endpoints) == ("db7", 3317, (("db7", 3317),))


def test_host_and_port_alone_are_one_endpoint():
    c = load_config(None, env={}, overrides={"source.host": "db9", "source.port": "3310"})
    assert c.source.hosts == () and c.source.endpoints == (("db9", 3310),)
    assert load_config(None, env={}).source.endpoints == (("127.0.0.1", 3306),)
    assert SourceConfig().failover_timeout_seconds == 60.0


@pytest.mark.parametrize("text,expect", [
    ("db1:3306", ("db1", 3306)), (" db1 : 3307 ", ("db1", 3307)), ("db1", ("db1", 3306)),
    ("10.0.0.5:3306", ("10.0.0.5", 3306)), ("[::1]:3307", ("::1", 3307)), ("[fe80::1]", ("fe80::1", 3306)),
    ("::1", ("::1", 3306)), ("db-1.example.com:65535", ("db-1.example.com", 65535)),
])
def test_endpoint_forms(text, expect):
    assert parse_endpoint(text) == expect


@pytest.mark.parametrize("text", [":3306", "db1:", "db1:0", "db1:65536", "db1:x", "db 1:3306", "[]:3306",
                                  "db1:33o6", "a/b:3306"])
def test_bad_endpoints_name_the_key_and_origin(text):
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={"BINLOGD_SOURCE__HOSTS": f"db0:3306,{text}"})
    assert ei.value.key == "source.hosts" and "host:port" in str(ei.value) and repr(text) in str(ei.value)
    assert str(ei.value).endswith("(from BINLOGD_SOURCE__HOSTS)")


def test_an_empty_entry(tmp_path):
    with pytest.raises(ConfigError, match=r"source\.hosts: entries must be 'host:port'.*got ''"):
        load_config(write(tmp_path, '[source]\nhosts = ["db1", ""]\n'), env={})


def test_a_host_listed_twice():
    with pytest.raises(ConfigError, match=r"source\.hosts: lists db1:3306 twice"):
        load_config(None, env={}, overrides={"source.hosts": "db1:3306,db2,db1"})


@pytest.mark.parametrize("given", [{"source.host": "db1"}, {"source.port": "3307"},
                                   {"source.host": "db1", "source.port": "3307"}])
def test_hosts_and_host_port_together_is_an_error_naming_the_keys(tmp_path, given):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, HOSTS_TOML), env={}, overrides=given)
    text = str(ei.value)
    assert ei.value.key == "source.hosts" and "\n" not in text
    for key in given:
        assert key in text
    assert "not both" in text and "(from command line)" in text and text.endswith(f"(from {tmp_path / 'c.toml'})")


def test_an_empty_hosts_list_leaves_host_and_port(tmp_path):
    c = load_config(write(tmp_path, '[source]\nhosts = []\nhost = "db1"\n'), env={})
    assert c.source.endpoints == (("db1", 3306),)


@pytest.mark.parametrize("start", ["file:mysql-bin.000042:4", "mysql-bin.000001:120", "datetime:2026-11-22 10:00:00"])
def test_several_hosts_with_file_position_resume_is_an_error_saying_why(start):
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={"BINLOGD_SOURCE__START": start}, overrides={"source.hosts": "db1,db2"})
    assert ei.value.key == "source.start" and "positions differ between servers" in str(ei.value)
    assert str(ei.value).endswith("(from BINLOGD_SOURCE__START)")
    assert load_config(None, env={"BINLOGD_SOURCE__START": start}, overrides={"source.hosts": "db1"})


@pytest.mark.parametrize("start", ["current", "gtid:0-1-100", "gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"])
def test_several_hosts_with_gtid_resume(start):
    c = load_config(None, env={}, overrides={"source.hosts": "db1,db2", "source.start": start})
    assert c.source.endpoints == (("db1", 3306), ("db2", 3306))


@pytest.mark.parametrize("value", ["0", "-1", "x", "86401"])
def test_bad_failover_timeout(value):
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={}, overrides={"source.failover_timeout_seconds": value})
    assert ei.value.key == "source.failover_timeout_seconds"
    assert load_config(None, env={"BINLOGD_SOURCE__FAILOVER_TIMEOUT_SECONDS": "5"}).source.failover_timeout_seconds == 5


def test_cli_exits_2_with_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "binlogd.cli", "run", "--config", write(tmp_path, HOSTS_TOML),
                          "--set", "source.port=3307"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "source.hosts" in run.stderr and "source.port" in run.stderr
    assert "Traceback" not in run.stderr
