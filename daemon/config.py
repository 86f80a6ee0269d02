"""The daemon's configuration: TOML file < ``BINLOGD_SECTION__KEY`` environment < CLI overrides.

Env/CLI values are text converted by the field's type (lists comma-separated; booleans
true/false/1/0/yes/no/on/off); nested tables use more ``__`` (``BINLOGD_SOURCE__TLS__MODE``). Env names
without ``__`` after ``BINLOGD_`` (``BINLOGD_CONFIG``) are ignored. ``source.password_file`` wins over
``source.password`` (TOML, ``BINLOGD_SOURCE__PASSWORD`` or CLI); the password is a :class:`Secret` and
never appears in a repr, ``redacted()`` or :class:`ConfigError`. Every problem raises ConfigError, one line
naming the key and the value's origin. The dataclasses validate themselves on construction.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import ssl
import typing
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from typing import ClassVar

from binlogd.daemon.configbase import (
    ConfigError,
    Secret,
    Section,
    error_reason,
    expected_text,
    setting,
    shown_value,
    type_kind,
)
from binlogd.daemon.sinkconfig import SinkConfig
from binlogd.protocol.constants import EventType
from binlogd.protocol.gtid import GtidSyntaxError, MariadbGtidList, MysqlGtidSet
from binlogd.protocol.records import record


@record
class StartSpec:
    """Parsed ``source.start``. Fields: kind (``current`` = the primary's end of log, ``file``, ``gtid``,
    ``datetime``); file, pos (kind file); gtid (MysqlGtidSet or MariadbGtidList); timestamp (unix seconds)."""

    kind: str
    file: str | None = None
    pos: int | None = None
    gtid: MysqlGtidSet | MariadbGtidList | None = None
    timestamp: float | None = None


_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


def parse_start(text: str) -> StartSpec:
    """Parse a ``source.start`` value.

    Forms: ``current``; ``file:<name>:<pos>`` or ``<name>:<pos>`` (pos >= 4); ``gtid:<set>`` with a MySQL
    set (``uuid:1-5,…``) or a MariaDB list (``0-1-100,…``); ``datetime:YYYY-MM-DD HH:MM:SS`` (UTC unless
    an offset such as ``+02:00`` or ``Z`` is given). Raises ConfigError (key ``source.start``).
    """
    def bad(why: str) -> ConfigError:
        return ConfigError("source.start", f"{why}, got {text!r}")

    s = text.strip()
    if s.lower() == "current":
        return StartSpec("current")
    if s.lower().startswith("gtid:"):
        body = s[5:].strip()
        if not body:
            raise bad("empty GTID set")
        try:
            gtid = MysqlGtidSet.parse(body) if ":" in body else MariadbGtidList.parse(body)
        except GtidSyntaxError as e:
            raise bad(f"bad GTID set ({e})")
        return StartSpec("gtid", gtid=gtid)
    if s.lower().startswith("datetime:"):
        body = s[9:].strip()
        try:
            dt = datetime.fromisoformat(body[:-1] + "+00:00" if body.endswith(("Z", "z")) else body)
        except ValueError:
            raise bad("datetime must be 'YYYY-MM-DD HH:MM:SS' (UTC unless an offset is given)")
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return StartSpec("datetime", timestamp=dt.timestamp())
    body = s[5:] if s.lower().startswith("file:") else s
    name, sep, pos = body.rpartition(":")
    if not sep or not name or not re.fullmatch(r"\d+", pos.strip()):
        raise bad("must be 'current', 'file:<name>:<pos>', 'gtid:<set>' or 'datetime:YYYY-MM-DD HH:MM:SS'")
    if _UUID_RE.fullmatch(name.strip()):
        raise bad("looks like a GTID; write it as 'gtid:<set>'")
    if "/" in name or "\\" in name or "\0" in name or name != name.strip():
        raise bad("binlog file must be a bare file name")
    if not 4 <= int(pos) < 2**64:
        raise bad("binlog position must be 4 or more")
    return StartSpec("file", file=name, pos=int(pos))


def parse_endpoint(text: str) -> tuple[str, int]:
    """Parse one ``source.hosts`` entry: ``host:port``, ``host`` (port 3306) or ``[v6 address]:port``.

    Returns ``(host, port)``. Raises ConfigError (key ``source.hosts``) on an empty host or a port outside 1-65535.
    """
    s = text.strip()
    host, port = s, "3306"
    if m := re.fullmatch(r"\[([^\]]*)\](?::(.*))?", s):
        host, port = m.group(1), m.group(2) or "3306"
    elif s.count(":") == 1:
        host, port = s.split(":")
    host = host.strip()
    if not host or any(c.isspace() or c in "/[]" for c in host) or not re.fullmatch(r"\d{1,5}", port.strip()) \
            or not 1 <= int(port) <= 65535:
        raise ConfigError("source.hosts", f"entries must be 'host:port' (port 1-65535), got {text!r}")
    return host, int(port)


@record
class TlsConfig(Section):
    """``[source.tls]``. Fields: mode (preferred, required, verify_ca, verify_identity, disabled; see
    :meth:`ssl_context`); ca_file (PEM CAs for the verify modes, None: the system's); cert_file, key_file
    (PEM client certificate and key; key_file needs cert_file). Files must be readable."""

    SECTION: ClassVar[str] = "source.tls"
    mode: str = setting("preferred", choices=("preferred", "required", "verify_ca", "verify_identity", "disabled"))
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def _check(self) -> None:
        if self.key_file and not self.cert_file:
            raise ConfigError("source.tls.key_file", "needs source.tls.cert_file")
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise ConfigError(f"source.tls.{name}", f"cannot read file {path!r}")

    def ssl_context(self) -> ssl.SSLContext | None:
        """Return the client SSLContext, None when disabled. required/preferred: no verification (the caller
        falls back to plain text for preferred); verify_ca: CERT_REQUIRED without host name check;
        verify_identity: both. Raises ConfigError naming the file when a CA, cert or key fails to load."""
        if self.mode == "disabled":
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = self.mode == "verify_identity"
        if self.mode in ("verify_ca", "verify_identity"):
            ctx.verify_mode = ssl.CERT_REQUIRED
            try:
                if self.ca_file:
                    ctx.load_verify_locations(cafile=self.ca_file)
                else:
                    ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError("source.tls.ca_file", f"cannot load CA file {self.ca_file!r}: {error_reason(e)}")
        else:
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError("source.tls.cert_file",
                                  f"cannot load certificate/key {self.cert_file!r}: {error_reason(e)}")
        return ctx


@record
class SourceConfig(Section):
    """``[source]``. Fields: host, port (one server), or hosts (several, ``"db1:3306"``, in order of
    preference: failover by GTID, see :attr:`endpoints`); user; password (Secret); password_file (read by
    load_config); server_id (1..2**32-1, unique among replicas); start (see :func:`parse_start`,
    :attr:`start_spec`); heartbeat_seconds (0 < x <= 4294967); connect_timeout; failover_timeout_seconds
    (how long to look for a usable server before exit 9); tls (:class:`TlsConfig`)."""

    SECTION: ClassVar[str] = "source"
    host: str = setting("127.0.0.1", nonempty=True)
    port: int = setting(3306, lo=1, hi=65535)
    user: str = setting("repl", nonempty=True)
    password: Secret = setting(factory=Secret)
    password_file: str | None = None
    server_id: int = setting(4201, lo=1, hi=2**32 - 1)
    start: str = "current"
    heartbeat_seconds: float = setting(5.0, lo=0.0, hi=4294967.0, lo_open=True)
    connect_timeout: float = setting(10.0, lo=0.0, hi=86400.0, lo_open=True)
    hosts: tuple[str, ...] = ()
    failover_timeout_seconds: float = setting(60.0, lo=0.0, hi=86400.0, lo_open=True)
    tls: TlsConfig = field(default_factory=TlsConfig)

    def _check(self) -> None:
        spec = parse_start(self.start)
        endpoints = [parse_endpoint(text) for text in self.hosts]
        if twice := {e for e in endpoints if endpoints.count(e) > 1}:
            raise ConfigError("source.hosts", f"lists {'%s:%d' % min(twice)} twice")
        if len(endpoints) == 1:  # one server: the same as host and port
            object.__setattr__(self, "host", endpoints[0][0])
            object.__setattr__(self, "port", endpoints[0][1])
        if len(endpoints) > 1 and spec.kind in ("file", "datetime"):
            raise ConfigError("source.start", f"{self.start!r} resumes by binlog file and position, and positions "
                              "differ between servers: failover across several source.hosts needs GTID resume "
                              "('current' or 'gtid:<set>')")

    @property
    def endpoints(self) -> tuple[tuple[str, int], ...]:
        """The servers to follow as ``(host, port)``, in order of preference: ``hosts``, else host and port."""
        return tuple(parse_endpoint(text) for text in self.hosts) or ((self.host, self.port),)

    @property
    def start_spec(self) -> StartSpec:
        """``start`` parsed into a :class:`StartSpec`."""
        return parse_start(self.start)


@record
class CheckpointConfig(Section):
    """``[checkpoint]``. Fields: path (the checkpoint JSON file); lock (hold an exclusive lock on
    ``<path>.lock`` so two daemons cannot share one checkpoint)."""

    SECTION: ClassVar[str] = "checkpoint"
    path: str = setting("/var/lib/binlogd/checkpoint.json", nonempty=True)
    lock: bool = True


@record
class FilterConfig(Section):
    """``[filters]``, fnmatch patterns, case-sensitive. Fields: include/exclude_schemas; include/exclude_tables
    (``schema.table``); event_types (names as ``protocol.constants.event_name`` gives, case-insensitive).
    Excludes win; an empty include list means everything; both include lists must pass."""

    SECTION: ClassVar[str] = "filters"
    include_schemas: tuple[str, ...] = ()
    exclude_schemas: tuple[str, ...] = ()
    include_tables: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    event_types: tuple[str, ...] = ()

    def _check(self) -> None:
        for name in ("include_tables", "exclude_tables"):
            if bad := [p for p in getattr(self, name) if "." not in p]:
                raise ConfigError(f"filters.{name}", f"patterns must be 'schema.table', got {bad[0]!r}")
        upper = tuple(p.upper() for p in self.event_types)
        for p in upper:
            if not any(fnmatchcase(e.name, p) for e in EventType) and not re.fullmatch(r"UNKNOWN_\d+", p):
                raise ConfigError("filters.event_types", f"{p!r} matches no event type")
        object.__setattr__(self, "event_types", upper)

    def schema_selected(self, schema: str) -> bool:
        """True unless the schema is excluded or include_schemas is set and does not match it."""
        if any(fnmatchcase(schema, p) for p in self.exclude_schemas):
            return False
        return not self.include_schemas or any(fnmatchcase(schema, p) for p in self.include_schemas)

    def table_selected(self, schema: str, table: str) -> bool:
        """True when ``schema.table`` passes the schema and table lists (excludes win)."""
        qualified = f"{schema}.{table}"
        if not self.schema_selected(schema) or any(fnmatchcase(qualified, p) for p in self.exclude_tables):
            return False
        return not self.include_tables or any(fnmatchcase(qualified, p) for p in self.include_tables)

    def event_selected(self, type_name: str) -> bool:
        """True when ``event_types`` is empty or one of its patterns matches ``type_name``."""
        name = type_name.upper()
        return not self.event_types or any(fnmatchcase(name, p) for p in self.event_types)


@record
class SchemaConfig(Section):
    """``[schema]``. Fields: source — where column names come from when TABLE_MAP lacks them: ``auto``
    (TABLE_MAP metadata when present, else the schema history, seeded and repaired from the server),
    ``information_schema`` (the same), ``none`` (positional, no history); history_path — the schema
    history file (``""``: ``<checkpoint stem>.schema-history.jsonl`` beside the checkpoint; one source's, locked)."""

    SECTION: ClassVar[str] = "schema"
    source: str = setting("auto", choices=("auto", "information_schema", "none"))
    history_path: str = ""


@record
class SnapshotConfig(Section):
    """``[snapshot]`` (README "Snapshots"). Fields: mode (``never``; ``initial``: on a start with no checkpoint,
    read the tables ``[filters]`` selects, then stream from the position they are consistent with);
    chunk_rows (rows per chunk, each committed like a transaction); readers (connections that read one
    table's key ranges at once in the initial snapshot); signal_table (``db.table`` of a Debezium-style signal
    table for incremental snapshots, ``""``: none)."""

    SECTION: ClassVar[str] = "snapshot"
    mode: str = setting("never", choices=("never", "initial"))
    chunk_rows: int = setting(10000, lo=1, hi=10**7)
    readers: int = setting(4, lo=1, hi=16)
    signal_table: str = ""

    def _check(self) -> None:
        parts = self.signal_table.split(".")
        if self.signal_table and (len(parts) != 2 or not all(p.strip() and p == p.strip() for p in parts)):
            raise ConfigError("snapshot.signal_table", f"must be 'database.table' or '', got {self.signal_table!r}")


@record
class MetricsConfig(Section):
    """``[metrics]``. Fields: listen (``host:port`` for /metrics, /healthz, /readyz; ``""`` disables;
    IPv6 as ``[::1]:9108``); table_labels (label row counters by schema/table; high cardinality)."""

    SECTION: ClassVar[str] = "metrics"
    listen: str = "127.0.0.1:9108"
    table_labels: bool = False

    def _check(self) -> None:
        self.address  # noqa: B018 (validates)

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` to bind, or None when disabled. Raises ConfigError on a malformed value."""
        if not self.listen.strip():
            return None
        host, sep, port = self.listen.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not re.fullmatch(r"\d{1,5}", port) or int(port) > 65535:
            raise ConfigError("metrics.listen", f"must be 'host:port' (port 0-65535) or '', got {self.listen!r}")
        return host, int(port)


@record
class ReconnectConfig(Section):
    """``[reconnect]``: exponential backoff. Fields: initial_seconds (first delay), max_seconds (cap,
    >= initial_seconds), jitter (0..1, the fraction of each delay randomised), max_attempts (0: forever)."""

    SECTION: ClassVar[str] = "reconnect"
    initial_seconds: float = setting(0.5, lo=0.0, lo_open=True)
    max_seconds: float = setting(30.0, lo=0.0, lo_open=True)
    jitter: float = setting(0.2, lo=0.0, hi=1.0)
    max_attempts: int = setting(0, lo=0)

    def _check(self) -> None:
        if self.max_seconds < self.initial_seconds:
            raise ConfigError("reconnect.max_seconds",
                              f"must be >= reconnect.initial_seconds ({self.initial_seconds:g}), "
                              f"got {self.max_seconds!r}")


@record
class LogConfig(Section):
    """``[log]``: stderr logging. Fields: format (``plain`` or ``json``), level (debug … critical)."""

    SECTION: ClassVar[str] = "log"
    format: str = setting("plain", choices=("plain", "json"))
    level: str = setting("info", choices=("debug", "info", "warning", "error", "critical"))


@record
class DaemonConfig(Section):
    """``[daemon]``. Fields: unknown_events (``error`` stops on an event type the decoder does not know,
    ``skip`` passes it by); shutdown_seconds (time allowed to commit and checkpoint on SIGTERM);
    queue_events (events buffered between the reader and the sink)."""

    SECTION: ClassVar[str] = "daemon"
    unknown_events: str = setting("error", choices=("error", "skip"))
    shutdown_seconds: float = setting(10.0, lo=0.0, lo_open=True)
    queue_events: int = setting(10000, lo=1, hi=10**9)


@record
class HaConfig(Section):
    """``[ha]``: high availability of binlogd itself (README, "High availability"). Fields: mode (``off``, or
    ``lease``: one instance is active, the others wait as standbys; bus sinks only); lease_seconds (a standby
    takes over about this long after the active stopped renewing); name (shown in logs and metrics; default
    ``<host name>:<pid>``, see :attr:`holder`)."""

    SECTION: ClassVar[str] = "ha"
    mode: str = setting("off", choices=("off", "lease"))
    lease_seconds: float = setting(5.0, lo=0.5, hi=3600.0)
    name: str = ""

    @property
    def holder(self) -> str:
        """This instance's name in the lease: ``name``, else ``<host name>:<pid>``."""
        import socket

        return self.name.strip() or f"{socket.gethostname()}:{os.getpid()}"


BUS_KINDS = ("redis", "nats", "postgres", "mirror")  # the sinks whose broker holds the checkpoint (and a lease)


@record
class Config:
    """The whole configuration: one field per TOML section."""

    SECTION: ClassVar[str] = ""
    source: SourceConfig = field(default_factory=SourceConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    schema: SchemaConfig = field(default_factory=SchemaConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    log: LogConfig = field(default_factory=LogConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    ha: HaConfig = field(default_factory=HaConfig)

    def __post_init__(self):
        if self.ha.mode == "lease" and self.sink.kind not in BUS_KINDS:
            raise ConfigError("ha.mode", f"'lease' needs a sink whose broker holds the lease and the checkpoint "
                                         f"({', '.join(BUS_KINDS)}); sink.kind {self.sink.kind!r} keeps its "
                                         "position in a local checkpoint file only one instance can own")

    def redacted(self) -> dict:
        """A nested plain dict of every value, safe to log: the password is ``"***"`` (``""`` if unset)."""
        def plain(v):
            if dataclasses.is_dataclass(v):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return ("***" if v else "") if isinstance(v, Secret) else list(v) if isinstance(v, tuple) else v
        return plain(self)


def _leaves(cls, prefix: str = "") -> dict[str, tuple[str, Mapping]]:
    """Every settable dotted key of ``cls`` -> (kind, field metadata); sections map to kind "section" (and
    their class to :data:`_SECTIONS`)."""
    out: dict[str, tuple[str, Mapping]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, kind = prefix + f.name, type_kind(hints[f.name])
        out[key] = (kind, f.metadata)
        if kind == "section":
            _SECTIONS[key] = hints[f.name]
            out.update(_leaves(hints[f.name], key + "."))
    return out


_SECTIONS: dict[str, type] = {}   # dotted key of a section -> its class (type hints are read once, here)
_KEYS = _leaves(Config)
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def _unknown(key: str, origin: str) -> ConfigError:
    """The error for a dotted key that is not in the schema: names the first unknown part."""
    parts = key.split(".")
    for i in range(1, len(parts) + 1):
        head = ".".join(parts[:i])
        if head not in _KEYS:
            break
        if _KEYS[head][0] != "section":
            return ConfigError(head, "is not a table", origin)
    parent, _, name = head.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in _KEYS if k.rpartition(".")[0] == parent]
    near = difflib.get_close_matches(name, siblings, n=1)
    what = "unknown key" if parent else "unknown section"
    return ConfigError(head, what + (f" (did you mean {near[0]!r}?)" if near else ""), origin)


def _from_text(key: str, text: str, origin: str):
    """Convert env/CLI text to the field's Python type; raise ConfigError on text that is not one."""
    kind, meta = _KEYS[key]
    bad = ConfigError(key, f"must be {expected_text(kind, meta)}, got {shown_value(kind, text)}", origin)
    s = text.strip()
    try:
        if kind in ("int", "float"):
            return int(s, 10) if kind == "int" else float(s)
    except ValueError:
        raise bad
    if kind == "section" or kind == "bool" and s.lower() not in _TRUE | _FALSE:
        raise bad
    if kind == "bool":
        return s.lower() in _TRUE
    return tuple(p.strip() for p in text.split(",") if p.strip()) if kind in ("strs", "strmap") else text


def _read_toml(path: str, values: dict) -> None:
    """Read the TOML file at ``path`` into ``values`` (dotted key -> (value, origin))."""
    import tomllib  # only with a file: --set and the environment need no TOML

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as e:
        raise ConfigError("", f"cannot read config file {path!r}: {error_reason(e)}")
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"{path}: invalid TOML: {e}")

    def walk(table: dict, prefix: str) -> None:
        for name, value in table.items():
            key = prefix + name
            if key not in _KEYS:
                raise _unknown(key, path)
            kind, meta = _KEYS[key]
            if (kind == "section") != isinstance(value, dict) and kind != "strmap":
                raise ConfigError(key, f"must be {expected_text(kind, meta)}, got {shown_value(kind, value)}", path)
            if kind == "section":
                walk(value, key + ".")
            else:
                values[key] = (value, path)

    walk(data, "")


def _build(cls, prefix: str, values: Mapping[str, tuple[object, str]]):
    """Construct ``cls`` from the dotted ``values``, re-raising validation errors with the value's origin."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if _KEYS[key][0] == "section":
            kwargs[f.name] = _build(_SECTIONS[key], key + ".", values)
        elif key in values:
            kwargs[f.name] = values[key][0]
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if e.origin is None and e.key in values:
            raise ConfigError(e.key, e.message, values[e.key][1]) from None
        raise


def load_config(path: str | None = None, env: Mapping[str, str] = os.environ,
                overrides: Mapping[str, str] = {}) -> Config:  # noqa: B006 (never mutated)
    """Load ``path`` (TOML; None: defaults only), then ``env`` (``BINLOGD_<SECTION>__<KEY>``), then
    ``overrides`` (``"section.key" -> text``, CLI flags). Returns a validated :class:`Config` with
    ``password_file`` read and the TLS context built once as a check. Raises ConfigError (unreadable file,
    TOML syntax, unknown section or key, wrong type, out of range, unreadable password_file or TLS file)."""
    values: dict[str, tuple[object, str]] = {}
    if path is not None:
        _read_toml(path, values)
    layers = [(k[8:].lower().replace("__", "."), t, k) for k, t in sorted(env.items())
              if k.upper().startswith("BINLOGD_") and "__" in k[8:]]
    layers += [(k.strip().lower(), t, "command line") for k, t in overrides.items()]
    for key, text, origin in layers:
        if key not in _KEYS:
            raise _unknown(key, origin)
        values[key] = (_from_text(key, text, origin), origin)
    both = [key for key in ("source.host", "source.port") if key in values]
    if both and values.get("source.hosts", ((), ""))[0]:
        given = " and ".join(f"{key} (from {values[key][1]})" for key in both)
        raise ConfigError("source.hosts", f"set either source.hosts or {given}, not both", values["source.hosts"][1])
    cfg = _build(Config, "", values)
    if cfg.sink.schema_events and cfg.schema.source == "none":
        raise ConfigError("sink.schema_events", "lists each DDL's table as the schema history holds it: needs "
                          "schema.source 'auto' or 'information_schema', not 'none'",
                          values.get("sink.schema_events", (None, None))[1])
    src = cfg.source
    if src.password_file:
        try:
            with open(src.password_file, encoding="utf-8") as fh:
                secret = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            origin = values.get("source.password_file", (None, None))[1]
            raise ConfigError("source.password_file", f"cannot read {src.password_file!r}: {error_reason(e)}", origin)
        secret = secret[:-2] if secret.endswith("\r\n") else secret[:-1] if secret.endswith("\n") else secret
        cfg = dataclasses.replace(cfg, source=dataclasses.replace(src, password=Secret(secret)))
    try:
        cfg.source.tls.ssl_context()
    except ConfigError as e:
        raise ConfigError(e.key, e.message, values.get(e.key, (None, None))[1]) from None
    return cfg
