"""Tests for daemon.config: defaults, the example file, layering, validation, secrets, start specs, filters, TLS."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest

from binlogd.daemon.config import (
    Config,
    ConfigError,
    FilterConfig,
    MetricsConfig,
    Secret,
    SourceConfig,
    StartSpec,
    TlsConfig,
    load_config,
    parse_start,
)
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.gtid import MariadbGtidList, MysqlGtidSet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
PASSWORD = "Zq9-s3cr3t-Pw-7741"
U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def write(tmp_path: Path, text: str, name: str = "c.toml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def leaf_keys(obj, prefix="") -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            out.update(leaf_keys(v, prefix + f.name + "."))
        else:
            out[prefix + f.name] = v
    return out


# -- defaults and the example file ------------------------------------------------------------------------

def test_defaults():
    c = load_config(None, env={})
    assert c == Config()
    s = c.source
    assert (s.host, s.port, s.user, s.password, s.password_file) == ("127.0.0.1", 3306, "repl", Secret(""), None)
    assert (s.server_id, s.start, s.heartbeat_seconds, s.connect_timeout) == (4201, "current", 5.0, 10.0)
    assert s.tls == TlsConfig("preferred", None, None, None)
    assert (c.checkpoint.path, c.checkpoint.lock) == ("/var/lib/binlogd/checkpoint.json", True)
    assert (c.sink.kind, c.sink.path, c.sink.max_file_bytes, c.sink.max_file_seconds, c.sink.fsync) == (
        "jsonl", "/var/lib/binlogd/changes", 256 * 1024 * 1024, 3600.0, True)
    assert c.filters == FilterConfig((), (), (), (), ())
    assert c.schema.source == "auto"
    assert (c.metrics.listen, c.metrics.table_labels, c.metrics.address) == ("127.0.0.1:9108", False,
                                                                             ("127.0.0.1", 9108))
    r = c.reconnect
    assert (r.initial_seconds, r.max_seconds, r.jitter, r.max_attempts) == (0.5, 30.0, 0.2, 0)
    assert (c.log.format, c.log.level) == ("plain", "info")
    assert (c.daemon.unknown_events, c.daemon.shutdown_seconds, c.daemon.queue_events) == ("error", 10.0, 10000)
    assert s.start_spec == StartSpec("current")


def test_example_file_is_the_defaults():
    c = load_config(str(EXAMPLE), env={})
    assert c == Config()
    assert leaf_keys(c) == leaf_keys(Config())
    assert all(type(a) is type(b) for a, b in zip(leaf_keys(c).values(), leaf_keys(Config()).values()))


def test_example_file_documents_every_key():
    section, seen = "", set()
    for line in EXAMPLE.read_text().splitlines():
        if m := re.match(r"\[([a-z_.]+)\]\s*$", line):
            section = m.group(1)
        elif m := re.match(r"#?\s?([a-z_]+)\s*=", line):
            seen.add(f"{section}.{m.group(1)}")
            assert "# default" in line, line
    assert seen == set(leaf_keys(Config()))


# -- layering ---------------------------------------------------------------------------------------------

def test_toml_env_override_precedence(tmp_path):
    path = write(tmp_path, '[source]\nport = 3307\nhost = "db1"\nuser = "u"\n[sink]\nkind = "archive"\n')
    env = {"BINLOGD_SOURCE__PORT": "3308", "BINLOGD_SOURCE__HOST": "db2", "PATH": "/bin", "BINLOGD_CONFIG": "x"}
    c = load_config(path, env=env, overrides={"source.port": "3309"})
    assert (c.source.port, c.source.host, c.source.user, c.sink.kind) == (3309, "db2", "u", "archive")
    assert load_config(path, env=env).source.port == 3308
    assert load_config(path, env={}).source.port == 3307


def test_env_type_conversion():
    env = {
        "BINLOGD_SINK__KIND": "stdout", "BINLOGD_SINK__FSYNC": "no", "BINLOGD_CHECKPOINT__LOCK": "0",
        "BINLOGD_METRICS__TABLE_LABELS": "Yes", "BINLOGD_SOURCE__HEARTBEAT_SECONDS": "2.5",
        "BINLOGD_FILTERS__INCLUDE_SCHEMAS": "shop, tenant_*,", "BINLOGD_SOURCE__TLS__MODE": "disabled",
        "BINLOGD_SOURCE__TLS__CA_FILE": "", "BINLOGD_LOG__LEVEL": "DEBUG", "BINLOGD_SINK__MAX_FILE_BYTES": "0",
    }
    c = load_config(None, env=env)
    assert (c.sink.kind, c.sink.fsync, c.checkpoint.lock, c.metrics.table_labels) == ("stdout", False, False, True)
    assert c.source.heartbeat_seconds == 2.5 and c.sink.max_file_bytes == 0
    assert c.filters.include_schemas == ("shop", "tenant_*")
    assert c.source.tls == TlsConfig("disabled") and c.log.level == "debug"


def test_toml_lists_and_ints_for_floats(tmp_path):
    path = write(tmp_path, '[filters]\nexclude_tables = ["*.tmp_*"]\n[daemon]\nshutdown_seconds = 3\n'
                           '[source.tls]\nmode = "required"\n')
    c = load_config(path, env={})
    assert c.filters.exclude_tables == ("*.tmp_*",)
    assert c.daemon.shutdown_seconds == 3.0 and isinstance(c.daemon.shutdown_seconds, float)
    assert c.source.tls.mode == "required"
    hash(c)


def test_redacted():
    c = load_config(None, env={"BINLOGD_SOURCE__PASSWORD": PASSWORD})
    d = c.redacted()
    assert d["source"]["password"] == "***" and d["source"]["tls"]["mode"] == "preferred"
    assert d["filters"]["include_tables"] == [] and PASSWORD not in repr(d)
    assert Config().redacted()["source"]["password"] == ""


# -- validation -------------------------------------------------------------------------------------------

BAD = [
    ("source.port", "abc"), ("source.port", "0"), ("source.port", "65536"), ("source.port", "-1"),
    ("source.port", "3306.5"), ("source.server_id", "0"), ("source.server_id", str(2**32)),
    ("source.heartbeat_seconds", "0"), ("source.heartbeat_seconds", "4294968"), ("source.heartbeat_seconds", "x"),
    ("source.heartbeat_seconds", "nan"), ("source.connect_timeout", "-1"), ("source.host", ""),
    ("source.user", " "), ("source.start", "bogus"), ("source.start", "file:mysql-bin.000001:3"),
    ("source.tls.mode", "on"), ("source.tls.ca_file", "/nonexistent/ca.pem"),
    ("source.tls.key_file", "/nonexistent/k.pem"), ("checkpoint.path", ""), ("checkpoint.lock", "maybe"),
    ("sink.kind", "kafka"), ("sink.path", ""), ("sink.max_file_bytes", "-1"), ("sink.max_file_seconds", "-5"),
    ("sink.fsync", "2"), ("filters.include_tables", "notable"), ("filters.exclude_tables", "a.b,c"),
    ("filters.event_types", "WRITE_ROWZ"), ("schema.source", "magic"), ("metrics.listen", "9108"),
    ("metrics.listen", "host:99999"), ("metrics.listen", "host:x"), ("metrics.listen", ":9108"),
    ("reconnect.initial_seconds", "0"), ("reconnect.max_seconds", "0.1"), ("reconnect.jitter", "1.5"),
    ("reconnect.max_attempts", "-1"), ("log.format", "xml"), ("log.level", "loud"),
    ("daemon.unknown_events", "ignore"), ("daemon.shutdown_seconds", "0"), ("daemon.queue_events", "0"),
    ("source.password_file", "/nonexistent/secret"), ("source.tls", "x"),
]


@pytest.mark.parametrize("key,value", BAD)
def test_bad_override_names_key(key, value):
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={}, overrides={key: value})
    e = ei.value
    assert isinstance(e, BinlogError) and e.key == key
    msg = str(e)
    assert "\n" not in msg and msg.startswith(f"config error: {key}: ") and msg.endswith("(from command line)")


@pytest.mark.parametrize("key,value", BAD)
def test_bad_env_names_key_and_variable(key, value):
    var = "BINLOGD_" + key.upper().replace(".", "__")
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={var: value})
    assert ei.value.key == key and f"(from {var})" in str(ei.value)


def test_message_example():
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={"BINLOGD_SOURCE__PORT": "abc"})
    assert str(ei.value) == (
        "config error: source.port: must be an integer 1-65535, got 'abc' (from BINLOGD_SOURCE__PORT)")


@pytest.mark.parametrize("toml,key", [
    ("[source]\nport = 70000\n", "source.port"),
    ('[source]\nport = "3306"\n', "source.port"),
    ("[source]\nport = true\n", "source.port"),
    ("[source]\nhost = 5\n", "source.host"),
    ("[source]\nheartbeat_seconds = false\n", "source.heartbeat_seconds"),
    ("[source]\nprot = 1\n", "source.prot"),
    ("[sourc]\nport = 1\n", "sourc"),
    ("port = 1\n", "port"),
    ("source = 1\n", "source"),
    ("[source]\ntls = 1\n", "source.tls"),
    ("[source.tls]\nmod = 'x'\n", "source.tls.mod"),
    ("[source.port]\nx = 1\n", "source.port"),
    ('[filters]\ninclude_schemas = "shop"\n', "filters.include_schemas"),
    ("[filters]\ninclude_schemas = [1]\n", "filters.include_schemas"),
    ("[sink]\nfsync = 1\n", "sink.fsync"),
    ("[checkpoint]\npath = 1979-05-27T07:32:00Z\n", "checkpoint.path"),
])
def test_bad_toml_names_key_and_file(tmp_path, toml, key):
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as ei:
        load_config(path, env={})
    assert ei.value.key == key and f"(from {path})" in str(ei.value) and "\n" not in str(ei.value)


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match=r"source\.prot: unknown key \(did you mean 'port'\?\)"):
        load_config(None, env={"BINLOGD_SOURCE__PROT": "1"})
    with pytest.raises(ConfigError, match=r"sinks: unknown section"):
        load_config(None, env={}, overrides={"sinks.kind": "jsonl"})


def test_toml_syntax_error_and_missing_file(tmp_path):
    path = write(tmp_path, '[source]\nport = = 3\n')
    with pytest.raises(ConfigError) as ei:
        load_config(path, env={})
    assert path in str(ei.value) and "line 2" in str(ei.value) and "\n" not in str(ei.value)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.toml"), env={})


def test_direct_construction_validates():
    with pytest.raises(ConfigError, match="source.port"):
        SourceConfig(port=0)
    with pytest.raises(ConfigError, match="metrics.listen"):
        MetricsConfig(listen="nope")
    assert MetricsConfig(listen="").address is None
    assert MetricsConfig(listen="[::1]:0").address == ("::1", 0)


# -- the password -----------------------------------------------------------------------------------------

def test_secret():
    s = Secret(PASSWORD)
    assert repr(s) == str(s) == f"{s}" == "%s" % s == "***" and s.reveal() == PASSWORD
    assert s == Secret(PASSWORD) and s != Secret("x") and bool(s) and not Secret("")
    with pytest.raises(AttributeError):
        s._value = "x"


def test_password_never_shown(tmp_path):
    path = write(tmp_path, f'[source]\npassword = "{PASSWORD}"\n')
    c = load_config(path, env={})
    assert c.source.password.reveal() == PASSWORD
    for text in (repr(c), str(c), repr(c.source), str(c.redacted())):
        assert PASSWORD not in text
    for env in ({"BINLOGD_SOURCE__PORT": "x"}, {"BINLOGD_SOURCE__PASSWORD_": PASSWORD}):
        with pytest.raises(ConfigError) as ei:
            load_config(path, env=env)
        assert PASSWORD not in str(ei.value) and PASSWORD not in repr(ei.value)
    bad = write(tmp_path, f"[source]\npassword = {PASSWORD.count('-')}\n", "bad.toml")
    with pytest.raises(ConfigError, match="source.password: must be a string, got a value of type int"):
        load_config(bad, env={})
    broken = write(tmp_path, f'[source]\npassword = "{PASSWORD}\n', "broken.toml")
    with pytest.raises(ConfigError) as ei:
        load_config(broken, env={})
    assert PASSWORD not in str(ei.value)


def test_password_sources(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n\n")
    path = write(tmp_path, f'[source]\npassword = "toml"\npassword_file = "{pw}"\n')
    env = {"BINLOGD_SOURCE__PASSWORD": "env"}
    assert load_config(path, env=env).source.password.reveal() == PASSWORD + "\n"
    pw.write_text(PASSWORD + "\r\n")
    assert load_config(path, env={}).source.password.reveal() == PASSWORD
    pw.write_text(PASSWORD)
    assert load_config(path, env={}).source.password.reveal() == PASSWORD
    c = load_config(None, env={"BINLOGD_SOURCE__PASSWORD_FILE": str(pw)})
    assert c.source.password.reveal() == PASSWORD and c.source.password_file == str(pw)
    assert load_config(None, env=env).source.password.reveal() == "env"
    plain = write(tmp_path, '[source]\npassword = "toml"\n', "p.toml")
    assert load_config(plain, env={}).source.password.reveal() == "toml"
    assert load_config(plain, env=env).source.password.reveal() == "env"  # env overrides the file
    assert load_config(None, env={}).source.password.reveal() == ""


def test_unreadable_password_file(tmp_path):
    missing = tmp_path / "nope"
    path = write(tmp_path, f'[source]\npassword_file = "{missing}"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(path, env={})
    msg = str(ei.value)
    assert msg.startswith("config error: source.password_file: cannot read") and str(missing) in msg
    assert f"(from {path})" in msg
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="source.password_file"):
        load_config(None, env={}, overrides={"source.password_file": str(tmp_path / "bin")})


# -- start specs ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expect", [
    ("current", StartSpec("current")),
    (" CURRENT ", StartSpec("current")),
    ("file:mysql-bin.000042:4", StartSpec("file", file="mysql-bin.000042", pos=4)),
    ("mysql-bin.000042:4", StartSpec("file", file="mysql-bin.000042", pos=4)),
    ("mariadb-bin.000001:123456789012", StartSpec("file", file="mariadb-bin.000001", pos=123456789012)),
    (f"gtid:{U1}:1-5:7", StartSpec("gtid", gtid=MysqlGtidSet.parse(f"{U1}:1-5:7"))),
    ("gtid:0-1-100,1-2-5", StartSpec("gtid", gtid=MariadbGtidList.parse("0-1-100,1-2-5"))),
    ("datetime:2026-11-22 10:00:00", StartSpec("datetime", timestamp=1795341600.0)),
    ("datetime:2026-11-22T12:00:00+02:00", StartSpec("datetime", timestamp=1795341600.0)),
    ("datetime:2026-11-22 10:00:00Z", StartSpec("datetime", timestamp=1795341600.0)),
])
def test_start_forms(text, expect):
    spec = parse_start(text)
    assert (spec.kind, spec.file, spec.pos, spec.timestamp) == (expect.kind, expect.file, expect.pos,
                                                                expect.timestamp)
    assert str(spec.gtid) == str(expect.gtid) and type(spec.gtid) is type(expect.gtid)
    assert SourceConfig(start=text).start_spec == spec or spec.kind == "gtid"


@pytest.mark.parametrize("text", [
    "", "now", "file:", "file:mysql-bin.000001", "file:mysql-bin.000001:x", "file::4", "mysql-bin.000001:0",
    "file:../etc/passwd:4", "file:mysql-bin.000001:" + str(2**64), f"{U1}:5", "gtid:", "gtid:zzz",
    f"gtid:{U1}:0", "gtid:0-1-1,0-2-2", "datetime:", "datetime:2026-13-01 00:00:00", "datetime:yesterday",
])
def test_bad_start(text):
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={}, overrides={"source.start": text})
    assert ei.value.key == "source.start" and "\n" not in str(ei.value)


# -- filters ----------------------------------------------------------------------------------------------

def test_filters():
    f = FilterConfig(include_schemas=("shop", "tenant_*"), exclude_schemas=("tenant_test",),
                     include_tables=("*.order*", "tenant_*.*"), exclude_tables=("shop.order_tmp",),
                     event_types=("write_rows", "*_ROWS_COMPRESSED*", "QUERY"))
    assert f.table_selected("shop", "orders")
    assert not f.table_selected("shop", "customers")      # not in include_tables
    assert not f.table_selected("shop", "order_tmp")      # excluded table wins
    assert f.table_selected("tenant_1", "anything")
    assert not f.table_selected("tenant_test", "orders")  # excluded schema wins
    assert not f.table_selected("other", "orders")        # schema not included
    assert not f.table_selected("Shop", "orders")         # case-sensitive
    assert f.schema_selected("shop") and not f.schema_selected("mysql")
    assert f.event_selected("WRITE_ROWS") and f.event_selected("query") and f.event_selected("UPDATE_ROWS_COMPRESSED")
    assert not f.event_selected("UPDATE_ROWS") and not f.event_selected("XID")
    everything = FilterConfig()
    assert everything.table_selected("a", "b") and everything.event_selected("XID")
    only_excl = FilterConfig(exclude_schemas=("mysql", "sys"))
    assert only_excl.table_selected("shop", "t") and not only_excl.table_selected("mysql", "user")


# -- TLS --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl CLI not installed: cannot make a test certificate")
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=binlogd-test", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    (d / "junk.pem").write_text("not a certificate\n")
    return d


@pytest.mark.parametrize("mode,check_hostname,verify_mode", [
    ("preferred", False, ssl.CERT_NONE), ("required", False, ssl.CERT_NONE),
    ("verify_ca", False, ssl.CERT_REQUIRED), ("verify_identity", True, ssl.CERT_REQUIRED),
])
def test_tls_contexts(mode, check_hostname, verify_mode):
    ctx = TlsConfig(mode=mode).ssl_context()
    assert isinstance(ctx, ssl.SSLContext)
    assert (ctx.check_hostname, ctx.verify_mode) == (check_hostname, verify_mode)


def test_tls_disabled():
    assert TlsConfig(mode="disabled").ssl_context() is None


def test_tls_files(pem):
    ctx = TlsConfig("verify_ca", ca_file=str(pem / "cert.pem"), cert_file=str(pem / "cert.pem"),
                    key_file=str(pem / "key.pem")).ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.get_ca_certs()[0]["subject"] == ((("commonName",
                                                                                          "binlogd-test"),),)
    c = load_config(None, env={"BINLOGD_SOURCE__TLS__MODE": "verify_identity",
                               "BINLOGD_SOURCE__TLS__CA_FILE": str(pem / "cert.pem")})
    assert c.source.tls.ssl_context().check_hostname
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={"BINLOGD_SOURCE__TLS__MODE": "verify_ca",
                               "BINLOGD_SOURCE__TLS__CA_FILE": str(pem / "junk.pem")})
    assert ei.value.key == "source.tls.ca_file" and "junk.pem" in str(ei.value)
    assert "BINLOGD_SOURCE__TLS__CA_FILE" in str(ei.value)
    with pytest.raises(ConfigError, match="source.tls.cert_file"):
        load_config(None, env={}, overrides={"source.tls.cert_file": str(pem / "junk.pem")})


def test_missing_ca_file():
    with pytest.raises(ConfigError) as ei:
        load_config(None, env={}, overrides={"source.tls.mode": "verify_ca", "source.tls.ca_file": "/no/ca.pem"})
    assert ei.value.key == "source.tls.ca_file" and "/no/ca.pem" in str(ei.value)
    with pytest.raises(ConfigError, match="source.tls.ca_file"):
        TlsConfig("verify_ca", ca_file="/no/ca.pem")


def test_unknown_nested_env_keys():
    with pytest.raises(ConfigError, match=r"^config error: source\.port: is not a table"):
        load_config(None, env={"BINLOGD_SOURCE__PORT__X": "1"})
    with pytest.raises(ConfigError, match=r"^config error: source\.tls\.mod: unknown key \(did you mean 'mode'"):
        load_config(None, env={"BINLOGD_SOURCE__TLS__MOD": "x"})


# -- [ha] ---------------------------------------------------------------------------------------------------

def test_ha_defaults_and_holder():
    c = load_config(None, env={})
    assert (c.ha.mode, c.ha.lease_seconds, c.ha.name) == ("off", 5.0, "")
    assert c.ha.holder == f"{socket.gethostname()}:{os.getpid()}"
    c = load_config(None, env={"BINLOGD_HA__NAME": "pod-1"}, overrides={"ha.mode": "lease", "sink.kind": "redis"})
    assert c.ha.holder == "pod-1" and c.ha.mode == "lease"


@pytest.mark.parametrize("kind", ["redis", "nats", "postgres", "mirror"])
def test_ha_lease_with_a_bus_sink(tmp_path, kind):
    path = write(tmp_path, f'[sink]\nkind = "{kind}"\n[ha]\nmode = "lease"\nlease_seconds = 2\n')
    c = load_config(path, env={})
    assert c.ha.mode == "lease" and c.ha.lease_seconds == 2.0


@pytest.mark.parametrize("kind", ["jsonl", "stdout", "archive"])
def test_ha_lease_with_a_file_sink_is_refused(tmp_path, kind):
    path = write(tmp_path, f'[sink]\nkind = "{kind}"\n[ha]\nmode = "lease"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith("config error: ha.mode: 'lease' needs a sink whose broker holds the lease")
    assert f"sink.kind '{kind}' keeps its position in a local checkpoint file" in str(err.value)
    assert "(redis, nats, postgres, mirror)" in str(err.value) and str(err.value).endswith(f"(from {path})")


@pytest.mark.parametrize("key,text", [("ha.mode", "active"), ("ha.lease_seconds", "0.1"), ("ha.lease_seconds", "x")])
def test_ha_bad_values(key, text):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, env={}, overrides={key: text, "sink.kind": "redis"})

