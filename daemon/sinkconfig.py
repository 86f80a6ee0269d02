"""The ``[sink]`` section of the daemon's configuration and its subsections (see :mod:`binlogd.daemon.config`)."""

from __future__ import annotations

import re
from dataclasses import field
from typing import ClassVar

from binlogd.daemon.configbase import ConfigError, Section, StrMap, setting
from binlogd.protocol.records import record


@record
class UploadConfig(Section):
    """``[sink.upload]``, the archive's uploads of closed files (README, "Object storage"). Fields: url (``s3://bucket/
    prefix``, any :mod:`binlogd.library.storage` URI; unset: no uploads); endpoint, region, path_style (how to reach the
    store; endpoint defaults to AWS_ENDPOINT_URL); delete_after_upload (remove the local file once its upload is
    verified); part_size_mb (multipart part size, >= 5); retry_seconds (wait after a failed upload)."""

    SECTION: ClassVar[str] = "sink.upload"
    url: str | None = None
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    delete_after_upload: bool = False
    part_size_mb: int = setting(64, lo=5, hi=5120)
    retry_seconds: float = setting(5.0, lo=0.0, lo_open=True)

    def _check(self) -> None:
        from binlogd.library.storage import REMOTE_SCHEMES, scheme

        if self.url and scheme(self.url) not in REMOTE_SCHEMES | {"file"}:
            raise ConfigError("sink.upload.url", f"must be a URI (s3://bucket/prefix, gs://, abfs://, hdfs://, "
                                                 f"file://), got {self.url!r}")


@record
class RedisSinkConfig(Section):
    """``[sink.redis]`` (README, "Message buses"). Fields: url (``redis://[:password@]host:port/db``); stream
    (stream name template, ``{schema}`` and ``{table}`` filled in); checkpoint_key (the key holding the checkpoint,
    written in the same MULTI/EXEC as the entries); max_change_bytes (a bigger change stops the daemon, exit 7);
    transaction_stream, schema_stream, heartbeat_stream (the streams of the events beyond rows, README "Events
    beyond rows")."""

    SECTION: ClassVar[str] = "sink.redis"
    url: str = "redis://127.0.0.1:6379/0"
    stream: str = setting("binlogd:{schema}.{table}", nonempty=True)
    checkpoint_key: str = setting("binlogd:checkpoint:binlogd", nonempty=True)
    max_change_bytes: int = setting(512 << 20, lo=1, hi=512 << 20)
    transaction_stream: str = setting("binlogd.transaction", nonempty=True)
    schema_stream: str = setting("binlogd", nonempty=True)
    heartbeat_stream: str = setting("__debezium-heartbeat.binlogd", nonempty=True)


@record
class NatsSinkConfig(Section):
    """``[sink.nats]`` (README, "Message buses"). Fields: url (``nats://[user:password@]host:port``); stream (the
    JetStream stream, created with file storage when missing); subject (template, ``{schema}``/``{table}`` filled
    in; the stream's subjects are its literal prefix + ``>``); transaction_subject, schema_subject,
    heartbeat_subject (the subjects of the events beyond rows, in the same stream, README "Events beyond rows")."""

    SECTION: ClassVar[str] = "sink.nats"
    url: str = "nats://127.0.0.1:4222"
    stream: str = setting("BINLOGD", nonempty=True)
    subject: str = setting("binlogd.{schema}.{table}", nonempty=True)
    transaction_subject: str = setting("binlogd.transaction", nonempty=True)
    schema_subject: str = setting("binlogd", nonempty=True)
    heartbeat_subject: str = setting("__debezium-heartbeat.binlogd", nonempty=True)

    def _check(self) -> None:
        prefix = self.subject.split("{", 1)[0]
        if not prefix.endswith(".") or "*" in prefix or ">" in prefix:
            raise ConfigError("sink.nats.subject", f"must start with literal tokens then '.', like "
                                                   f"'binlogd.{{schema}}.{{table}}', got {self.subject!r}")
        for name in ("transaction_subject", "schema_subject", "heartbeat_subject"):
            value = getattr(self, name)
            if not re.fullmatch(r"[^\s.*>]+(\.[^\s.*>]+)*", value) or value.startswith("_binlogd."):
                raise ConfigError(f"sink.nats.{name}", f"must be a literal subject (tokens joined by '.', no "
                                                       f"'*', '>' or whitespace, not under '_binlogd.'), got {value!r}")


@record
class PostgresSinkConfig(Section):
    """``[sink.postgres]`` (README, "Message buses"). Fields: url (``postgresql://user[:password]@host:port/db``);
    table (created when missing, with ``<table>_checkpoint`` beside it; ``schema.table`` allowed);
    max_change_bytes (a bigger change stops the daemon, exit 7); transaction_table, schema_table, heartbeat_table
    (the tables of the events beyond rows, README "Events beyond rows")."""

    SECTION: ClassVar[str] = "sink.postgres"
    url: str = "postgresql://binlogd@127.0.0.1:5432/binlogd"
    table: str = setting("binlogd_changes", nonempty=True)
    max_change_bytes: int = setting(255 << 20, lo=1, hi=255 << 20)
    transaction_table: str = setting("binlogd_transaction", nonempty=True)
    schema_table: str = setting("binlogd", nonempty=True)
    heartbeat_table: str = setting("__debezium_heartbeat_binlogd", nonempty=True)

    def _check(self) -> None:
        for name in ("table", "transaction_table", "schema_table", "heartbeat_table"):
            value = getattr(self, name)
            if not re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]{0,48}", value):
                raise ConfigError(f"sink.postgres.{name}", f"must be [schema.]name of letters, digits and _, "
                                                           f"got {value!r}")
            if name != "table" and value == self.table:
                raise ConfigError(f"sink.postgres.{name}", f"must name a table other than sink.postgres.table "
                                                           f"({self.table!r}): the events have a shape of their own")


@record
class MirrorSinkConfig(Section):
    """``[sink.mirror]`` (README, "The PostgreSQL mirror"). Fields: url (``postgresql://user[:password]@host:port/db``);
    schema_map (MySQL schema → PostgreSQL schema, a TOML table ``{ shop = "shop_copy" }``; the list form
    ``["shop=shop_copy"]`` and the env's/command line's ``shop=shop_copy,a=b`` are read too; a schema not named
    keeps its name)."""

    SECTION: ClassVar[str] = "sink.mirror"
    url: str = "postgresql://binlogd@127.0.0.1:5432/binlogd"
    schema_map: StrMap = setting(factory=StrMap)

    def _check(self) -> None:
        for mysql, pg in self.schema_map.items():
            if not mysql or not pg.strip() or len(pg.encode()) > 63:
                raise ConfigError("sink.mirror.schema_map", f"must map a schema name to a PostgreSQL schema name "
                                                            f"of 1-63 bytes, got {mysql!r} = {pg!r}")

    def schemas(self) -> dict[str, str]:
        """MySQL schema → PostgreSQL schema."""
        return dict(self.schema_map)


@record
class SinkConfig(Section):
    """``[sink]``. Fields: kind (jsonl, archive, stdout); path (output directory for jsonl/archive);
    max_file_bytes, max_file_seconds (rotate jsonl files; 0: no limit); fsync (before the checkpoint moves);
    format (change events as ``binlogd`` writes them or in Debezium's envelope, ``debezium``; not for archive);
    server_name (Debezium's ``source.name``, the logical server name); transaction_events, schema_events,
    heartbeat_seconds (the events beyond rows: begin/commit around each transaction's changes, one per DDL on a
    selected table, a heartbeat after that many idle seconds, 0: none; not for the mirror and archive, whose
    destinations on the bus sinks :meth:`events` gives); upload (:class:`UploadConfig`, archive
    only); redis, nats, postgres (the bus sinks' subsections); mirror (the PostgreSQL mirror's)."""

    SECTION: ClassVar[str] = "sink"
    kind: str = setting("jsonl", choices=("jsonl", "archive", "stdout", "redis", "nats", "postgres",
                                                      "mirror"))
    path: str = "/var/lib/binlogd/changes"
    max_file_bytes: int = setting(256 * 1024 * 1024, lo=0, hi=2**63 - 1)
    max_file_seconds: float = setting(3600.0, lo=0.0)
    fsync: bool = True
    format: str = setting("binlogd", choices=("binlogd", "debezium"))
    server_name: str = setting("binlogd", nonempty=True)
    transaction_events: bool = False
    schema_events: bool = False
    heartbeat_seconds: float = setting(0.0, lo=0.0)
    upload: UploadConfig = field(default_factory=UploadConfig)
    redis: RedisSinkConfig = field(default_factory=RedisSinkConfig)
    nats: NatsSinkConfig = field(default_factory=NatsSinkConfig)
    postgres: PostgresSinkConfig = field(default_factory=PostgresSinkConfig)
    mirror: MirrorSinkConfig = field(default_factory=MirrorSinkConfig)

    def events(self) -> dict[str, str]:
        """Where a bus sink (kind redis, nats or postgres) writes the events beyond rows that are on: kind
        ("transaction", "schema", "heartbeat") -> its stream, subject or table (empty for other kinds)."""
        sub = {"redis": "stream", "nats": "subject", "postgres": "table"}.get(self.kind)
        if sub is None:
            return {}
        on = {"transaction": self.transaction_events, "schema": self.schema_events,
              "heartbeat": bool(self.heartbeat_seconds)}
        section = getattr(self, self.kind)
        return {kind: getattr(section, f"{kind}_{sub}") for kind, yes in on.items() if yes}

    def _check(self) -> None:
        if self.kind not in ("stdout", "redis", "nats", "postgres", "mirror") and not self.path.strip():
            raise ConfigError("sink.path", f"must be a directory for kind {self.kind!r}, got ''")
        if self.upload.url and self.kind != "archive":
            raise ConfigError("sink.upload.url", f"uploads closed archive files: needs sink.kind 'archive', "
                                                 f"not {self.kind!r}")
        extra = [name for name in ("transaction_events", "schema_events") if getattr(self, name)]
        extra += ["heartbeat_seconds"] if self.heartbeat_seconds else []
        if extra and self.kind not in ("jsonl", "stdout", "redis", "nats", "postgres"):
            raise ConfigError(f"sink.{extra[0]}", f"the events beyond rows are written by the change-event sinks "
                                                  f"(jsonl, stdout, redis, nats, postgres); the {self.kind} sink "
                                                  f"writes no events (turn it off)")
        if self.format != "binlogd" and self.kind == "archive":
            raise ConfigError("sink.format", f"{self.format!r} formats change events; the archive sink keeps the "
                                             "binlog events themselves (set it with a change-event sink kind)")
