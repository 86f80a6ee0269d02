"""Shared fixtures.

Servers (each its own throwaway process, port and temp dir; never the system MariaDB). Every fixture
below but ``mysql84`` and ``corpus`` runs once per real server, test ids ``[10.11]``, ``[11.8]`` and
``[mysql-9.7]`` (:func:`tests.support.servers.versions`): the machine's MariaDB (Debian 12's 10.11), MariaDB
11.8 fetched from Debian trixie and Oracle MySQL 9.7 fetched from Debian sid into ~/.cache/binlogd. A fetched
server skips, naming why, when it cannot be fetched (a download is outside our control, so even under
CI=true); the machine's server is required under CI. A module whose ``pytestmark`` is
:func:`tests.support.servers.cross_compression` also runs on ``[mysql-9.7-compressed]``: every server its tests
start compresses transactions (binlog_transaction_compression=ON). MariaDB-only features skip on MySQL
through :mod:`tests.support.flavour`. For CI time only the modules in :data:`MARIADB_118_MODULES` run their
server tests on 11.8 and those in :data:`MYSQL_MODULES` on MySQL 9.7 (``--all-servers``: every module on every
server).
- ``server_binaries``  session: the :class:`binlogd.cli.serverbins.ServerBinaries` of that server, for tests
                       that start their own ``LocalServer(binaries=server_binaries, ...)``.
- ``mariadb``          session: MariaDB (or MySQL: GTIDs on) with ROW binlog, FULL row image,
                       binlog_row_metadata=FULL.
- ``mariadb_minimal``  session, started only when a test asks: binlog_row_metadata=MINIMAL and
                       compressed binlog events (log_bin_compress=ON, log_bin_compress_min_len=10).
- ``fresh_db``         function: a uniquely named schema on ``mariadb`` (its name, a str), dropped after.
- ``mysql84``          session: MySQL 8.4 in Docker via testcontainers; skipped without a Docker engine.
- ``corpus``           session: Path of the shared real-binlog corpus (CORPUS); skipped when absent.
- ``spark``            session: the one local SparkSession (pipeline and schema-history tests).

Tests using a server fixture get the ``server`` marker automatically (``-m "not server"`` skips them);
tests marked ``slow`` run only with ``--runslow``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from binlogd.cli.localserver import LocalServer
from binlogd.cli.serverbins import ServerBinaries
from tests.support import servers
from tests.support.paths import CORPUS

_SERVER_FIXTURES = {"server_binaries", "mariadb", "mariadb_minimal", "fresh_db", "mysql84"}


# For CI time a server test runs on the machine's MariaDB, and on the other servers only where they differ: on
# MariaDB 11.8 the modules of MARIADB_118_MODULES (row values, types, VECTOR, DDL and the schema history, server
# queries, SQL replay, positions, authentication), on MySQL 9.7 those of MYSQL_MODULES (every server test on it
# would add about 22 minutes) and the test_mysql97_* modules. --all-servers runs every server test on every server.
MARIADB_118_MODULES = frozenset({
    "test_row_values", "test_localserver", "test_sql_replay", "test_schema_history", "test_positions_files",
    "test_sql_corpus", "test_snapshot", "test_vector_mariadb", "test_schema_identity", "test_sql_runs_server",
    "test_snapshot_rows", "test_passwords", "test_sql_flashback", "test_server_queries", "test_sql_native_every_type",
    "test_rowimage_every_type", "test_jsonrows_every_type", "test_daemon_roundtrip", "test_daemon_resume",
    "test_info_open_binlog", "test_daemon_schema_filters", "test_schema_history_daemon", "test_events_beyond_rows",
    "test_mirror", "test_snapshot_locked_view", "test_snapshot_incremental",
})
MYSQL_MODULES = frozenset({
    "test_localserver", "test_daemon_roundtrip", "test_daemon_resume", "test_daemon_archive", "test_passwords",
    "test_snapshot", "test_snapshot_locked_view", "test_snapshot_incremental", "test_failover_daemon",
    "test_sql_replay", "test_schema_history", "test_positions_files", "test_snapshot_source_unchanged",
    "test_snapshot_rows", "test_faults_snapshot_sinks", "test_events_beyond_rows", "test_mirror", "test_mirror_keyless",
    "test_faults_snapshot_ranges",
})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (long fault/fuzz runs)")
    parser.addoption("--all-servers", action="store_true", default=False,
                     help="run every server test on every server, not only the modules of tests/conftest.py's "
                          "MARIADB_118_MODULES on MariaDB 11.8 and MYSQL_MODULES on MySQL 9.7")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    runslow = config.getoption("--runslow")
    skip_slow = pytest.mark.skip(reason="slow test: run with --runslow")
    if not config.getoption("--all-servers"):
        fetched_118 = servers.machine_version() != "11.8"  # the machine's own server runs every test
        elsewhere = [i for i in items if not _runs_here(i, fetched_118)]
        if elsewhere:
            config.hook.pytest_deselected(items=elsewhere)
            items[:] = [i for i in items if _runs_here(i, fetched_118)]
    for item in items:
        if _SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
        if not runslow and "slow" in item.keywords:
            item.add_marker(skip_slow)


def _runs_here(item: pytest.Item, fetched_118: bool) -> bool:
    """Whether ``item`` runs without --all-servers: a test on MySQL 9.7, or on MariaDB 11.8 when that is the
    fetched one (``fetched_118``), only in its modules."""
    callspec = getattr(item, "callspec", None)
    server = str(callspec.params.get("server_binaries", "")) if callspec is not None else ""
    if server.startswith(servers.MYSQL):
        return item.path.stem in MYSQL_MODULES or item.path.stem.startswith("test_mysql97_")
    if server == "11.8" and fetched_118:
        return item.path.stem in MARIADB_118_MODULES
    return True


def _skip_or_fail(reason: str) -> None:
    """Skip on a developer machine; fail under CI (CI=true), where the server and corpus must be there."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI=true: required here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", params=servers.versions())
def server_binaries(request: pytest.FixtureRequest) -> ServerBinaries:
    """The installation of one real server (parametrized: the machine's, then 11.8, then MySQL 9.7)."""
    try:
        return servers.binaries(request.param)
    except servers.Unavailable as exc:
        if request.param in ("11.8", servers.MYSQL, servers.MYSQL_COMPRESSED):
            name = "MySQL 9.7" if servers.flavour(request.param) == "mysql" else f"MariaDB {request.param}"
            pytest.skip(f"{name} unavailable (fetching it from Debian is outside our control, so this "
                        f"skips even under CI): {exc}")
        _skip_or_fail(f"no local MariaDB/MySQL server: {exc}")


def _start_local(request: pytest.FixtureRequest, bins: ServerBinaries, extra_args: list[str]) -> LocalServer:
    server = LocalServer(extra_args=extra_args, binaries=bins)
    request.addfinalizer(server.cleanup)
    server.start()
    return server


@pytest.fixture(scope="session")
def mariadb(request: pytest.FixtureRequest, server_binaries: ServerBinaries) -> LocalServer:
    """A started LocalServer with binlog_row_metadata=FULL (shared by the whole session, per server)."""
    return _start_local(request, server_binaries, ["--binlog-row-metadata=FULL"])


@pytest.fixture(scope="session")
def mariadb_minimal(request: pytest.FixtureRequest, server_binaries: ServerBinaries) -> LocalServer:
    """A started LocalServer with binlog_row_metadata=MINIMAL and compressed binlog events.

    On MariaDB ``--log-bin-compress`` makes QUERY and row events *_COMPRESSED_EVENT variants;
    the min length is lowered from 256 to 10 bytes so that small test rows are compressed too.
    (MySQL has no such option: there it is binlog_transaction_compression, TRANSACTION_PAYLOAD.)
    """
    if server_binaries.flavor == "mysql":
        extra = ["--binlog-row-metadata=MINIMAL", "--binlog-transaction-compression=ON"]
    else:
        extra = ["--binlog-row-metadata=MINIMAL", "--log-bin-compress=ON",
                 "--log-bin-compress-min-len=10"]
    return _start_local(request, server_binaries, extra)


@pytest.fixture
def fresh_db(mariadb: LocalServer, request: pytest.FixtureRequest):
    """Name of a new, empty schema on ``mariadb`` (utf8mb4), dropped after the test."""
    base = re.sub(r"[^0-9a-zA-Z_]", "_", request.node.name)[:40]
    name = f"t_{base}_{uuid.uuid4().hex[:8]}"
    mariadb.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb.sql(f"DROP DATABASE IF EXISTS `{name}`")


# --------------------------------------------------------------------------- MySQL 8.4 (Docker)


@dataclass
class ContainerServer:
    """Connection details of a server in a container, shaped like LocalServer's."""

    host: str
    port: int
    user: str
    password: str
    flavor: str = "mysql"
    version: str = ""
    repl_user: str = "repl"
    repl_password: str = "replpass"
    container: object = field(default=None, repr=False)

    def connect_kwargs(self, *, repl: bool = False, **overrides) -> dict:
        import ssl

        # MySQL 8.4 users authenticate with caching_sha2_password; its full-auth path needs TLS
        # (or RSA via `cryptography`), and the server has a self-signed certificate.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        kw = dict(host=self.host, port=self.port, ssl=ctx,
                  user=self.repl_user if repl else self.user,
                  password=self.repl_password if repl else self.password)
        kw.update(overrides)
        return kw

    def connect(self, *, repl: bool = False, **overrides):
        import pymysql

        overrides.setdefault("autocommit", True)
        return pymysql.connect(**self.connect_kwargs(repl=repl, **overrides))

    def sql(self, statement: str, *, database: str | None = None) -> list[tuple]:
        conn = self.connect(database=database)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return [tuple(r) for r in cur.fetchall() or ()]
        finally:
            conn.close()


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def mysql84():
    """MySQL 8.4 in Docker (testcontainers), ROW binlog with FULL row metadata and GTIDs on."""
    if not _docker_ok():
        pytest.skip("no Docker engine: MySQL 8.4 tests skipped (`docker info` failed)")
    try:
        from testcontainers.mysql import MySqlContainer
    except ImportError:
        pytest.skip("testcontainers not installed: MySQL 8.4 tests skipped "
                    "(pip install 'testcontainers[mysql]')")
    container = MySqlContainer("mysql:8.4", root_password="rootpass")
    container.with_command(
        "--server-id=1 --log-bin=binlog --binlog-format=ROW --binlog-row-image=FULL "
        "--binlog-row-metadata=FULL --gtid-mode=ON --enforce-gtid-consistency=ON"
    )
    container.start()
    try:
        server = ContainerServer(
            host=container.get_container_host_ip(),
            port=int(container.get_exposed_port(3306)),
            user="root",
            password="rootpass",
            container=container,
        )
        server.version = server.sql("SELECT VERSION()")[0][0]
        server.sql("CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'replpass'")
        server.sql("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%'")
        yield server
    finally:
        container.stop()


# --------------------------------------------------------------------------- corpus


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The shared corpus of real binlog files (../shared/binlogs from the repo root)."""
    if not CORPUS.is_dir():
        _skip_or_fail(f"binlog corpus not found at {CORPUS}: conformance tests skipped")
    return CORPUS


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one local SparkSession of the run (``local[2]``, UI off, UTC; the "binlog" source registered),
    skipped with the reason when PySpark >= 4.2, pyarrow or Java is missing; its JVM is shut down at the end."""
    from tests.support.spark import spark_missing

    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkContext

    from binlogd.pipeline.jobs import session

    scratch = tmp_path_factory.mktemp("spark")
    session_ = session("binlogd-tests", "local[2]", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.sql.streaming.minBatchesToRetain": "100",
    })
    session_.sparkContext.setLogLevel("ERROR")
    yield session_
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    session_.stop()
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait(timeout=10)
