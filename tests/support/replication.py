"""A primary and a GTID replica, both throwaway :class:`LocalServer` s, for the failover tests.

MariaDB: both servers log row events with ``log_slave_updates`` and ``gtid_strict_mode=ON``; the replica
follows the primary with ``CHANGE MASTER TO … MASTER_USE_GTID=slave_pos``. MySQL: GTIDs on, ``log_replica_updates``,
``CHANGE REPLICATION SOURCE TO … SOURCE_AUTO_POSITION=1`` (``GET_SOURCE_PUBLIC_KEY=1``: caching_sha2_password
without TLS). The replica is read-only. A :class:`Pair` knows which server is the primary *now*; every method
works on the current roles::

    with Pair(server_binaries) as pair:
        pair.primary.sql("CREATE DATABASE d")
        pair.wait_replica()          # the replica has everything the primary logged
        pair.primary.kill()          # a crash
        pair.promote()               # STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=OFF; roles swap
                                     # (MySQL: STOP REPLICA; RESET REPLICA ALL)

Methods: :meth:`Pair.wait_replica` (catch up to the primary, or to a given GTID list), :meth:`Pair.promote`
(the replica becomes the primary; the old one is left as it is: dead, or to be re-pointed), :meth:`Pair.switchover`
(planned: old primary read-only, replica caught up and promoted, old primary a replica of the new one),
:meth:`Pair.diverge` (the replica's IO thread stops: what the primary commits next never reaches it),
:meth:`Pair.follow` (make a server a replica of the current primary). For the daemon: :func:`hosts_overrides`
(``--set`` values with ``source.hosts``) and :func:`wait_gtids` (the checkpoint covers a server's GTID position).
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

from binlogd.cli.localserver import LocalServer
from binlogd.cli.serverbins import ServerBinaries
from binlogd.protocol.gtid import MariadbGtidList, MysqlGtidSet
from tests.support.daemon import following_overrides, read_checkpoint
from tests.support.flavour import gtid_position, is_mysql

MINIMAL = "--binlog-row-metadata=MINIMAL"
FAILOVER = re.compile(r"failover from (\S+) to (\S+) at GTID")  # the daemon's log line of a failover
ROW_ARGS = ("--binlog-row-metadata=FULL", "--gtid-strict-mode=ON", "--log-slave-updates")
MYSQL_ROW_ARGS = ("--binlog-row-metadata=FULL",)  # GTIDs and log_replica_updates are every MySQL server's
APP_USER, APP_PASSWORD = "app", "apppass"


def gtid_pos(server: LocalServer) -> str:
    """What ``server``'s binlog holds: ``@@global.gtid_binlog_pos`` (MariaDB: one GTID per domain) or
    ``@@global.gtid_executed`` (MySQL: a GTID set)."""
    return gtid_position(server)


class Pair:
    """A MariaDB primary (server id 1) and its GTID replica (server id 2), started on free ports.

    Args:
        binaries: the server installation both run (the ``server_binaries`` fixture: 10.11, 11.8 or MySQL 9.7);
            None: the machine's.
        extra_args: more server options for both.

    Fields:
        servers: both :class:`LocalServer` s, in start order (the first primary first).
        primary, replica: the servers in their current roles (swapped by :meth:`promote`).

    Raises (from the constructor's :meth:`start`): RuntimeError when a server does not start or the
    replica does not connect.
    """

    def __init__(self, binaries: ServerBinaries | None = None, extra_args: tuple[str, ...] = ()) -> None:
        # Binlog names differ (db1-bin.*, db2-bin.*): a sink's (file, pos) never names two servers' events.
        row_args = MYSQL_ROW_ARGS if binaries is not None and binaries.flavor == "mysql" else ROW_ARGS
        self.servers = [LocalServer(extra_args=[*row_args, f"--server-id={i}", *extra_args], binaries=binaries,
                                    binlog_basename=f"db{i}-bin") for i in (1, 2)]
        self.primary, self.replica = self.servers

    def start(self) -> Pair:
        """Start both servers and replication; the replica is read-only. The primary gets the user
        :data:`APP_USER` (replicated), which ``read_only`` stops, as it stops applications (root bypasses it)."""
        for server in self.servers:
            server.start()
        self.primary.sql(f"CREATE USER '{APP_USER}'@'127.0.0.1' IDENTIFIED BY '{APP_PASSWORD}'")
        self.primary.sql(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX ON *.* "
                         f"TO '{APP_USER}'@'127.0.0.1'")
        self.replica.sql("SET GLOBAL read_only = ON")
        self.follow(self.replica)
        return self

    def app_connect(self, **kw):
        """A PyMySQL connection to the current primary as :data:`APP_USER` (an application's rights)."""
        return self.primary.connect(user=APP_USER, password=APP_PASSWORD, **kw)

    def cleanup(self) -> None:
        """Stop both servers and remove their directories."""
        for server in self.servers:
            server.cleanup()

    def __enter__(self) -> Pair:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # ------------------------------------------------------------------ roles
    def follow(self, server: LocalServer, timeout: float = 30.0) -> None:
        """Make ``server`` a GTID replica of the current primary and wait until both threads run.

        A server that has logged transactions of its own (an old primary) starts from its binlog's GTID
        position, so it asks the new primary only for what it lacks.
        """
        p = self.primary
        if is_mysql(server):
            server.sql("STOP REPLICA")
            server.sql(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='{p.host}', SOURCE_PORT={p.port}, "
                       f"SOURCE_USER='{p.repl_user}', SOURCE_PASSWORD='{p.repl_password}', SOURCE_AUTO_POSITION=1, "
                       "SOURCE_CONNECT_RETRY=1, GET_SOURCE_PUBLIC_KEY=1")
            server.sql("START REPLICA")
        else:
            server.sql("STOP SLAVE")
            server.sql("SET GLOBAL gtid_slave_pos = @@global.gtid_binlog_pos")
            server.sql(f"CHANGE MASTER TO MASTER_HOST='{p.host}', MASTER_PORT={p.port}, MASTER_USER='{p.repl_user}', "
                       f"MASTER_PASSWORD='{p.repl_password}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1")
            server.sql("START SLAVE")
        deadline = time.monotonic() + timeout
        while True:
            status = slave_status(server)
            if status.get("Slave_IO_Running") == "Yes" and status.get("Slave_SQL_Running") == "Yes":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {server.port} did not start replicating from {p.port}: "
                                   f"IO {status.get('Last_IO_Error')!r}, SQL {status.get('Last_SQL_Error')!r}")
            time.sleep(0.05)

    def wait_replica(self, gtids: str | None = None, timeout: float = 60.0) -> None:
        """Wait until the replica has applied ``gtids`` (a MariaDB GTID list or a MySQL GTID set; default:
        everything the primary has logged). Raises AssertionError naming both positions on timeout."""
        target = gtid_pos(self.primary) if gtids is None else gtids
        wait = "WAIT_FOR_EXECUTED_GTID_SET" if is_mysql(self.replica) else "MASTER_GTID_WAIT"
        waited = self.replica.sql(f"SELECT {wait}('{target}', {timeout:g})", timeout=timeout + 30)[0][0]
        if int(waited) != 0:
            raise AssertionError(f"replica at {gtid_pos(self.replica)!r}, not {target!r}, after {timeout:g}s; "
                                 f"IO error {slave_status(self.replica).get('Last_IO_Error')!r}")

    def promote(self) -> LocalServer:
        """The replica stops replicating and becomes the writable primary (``STOP SLAVE; RESET SLAVE ALL;
        SET GLOBAL read_only=OFF``, MySQL's REPLICA forms); the roles swap. Returns the new primary."""
        new = self.replica
        word = "REPLICA" if is_mysql(new) else "SLAVE"
        new.sql(f"STOP {word}")
        new.sql(f"RESET {word} ALL")
        new.sql("SET GLOBAL read_only = OFF")
        self.primary, self.replica = new, self.primary
        return new

    def switchover(self, between=None) -> LocalServer:
        """A planned switchover: the primary turns read-only, the replica catches up and is promoted, then
        the old primary becomes a replica of the new one (read-only). ``between()``, when given, runs after
        the promotion and before the old primary is re-pointed. Returns the new primary."""
        self.primary.sql("SET GLOBAL read_only = ON")
        self.wait_replica()
        new = self.promote()
        if between is not None:
            between()
        self.follow(self.replica)
        return new

    def diverge(self) -> None:
        """Stop the replica's IO thread: whatever the primary commits from now on never reaches it."""
        self.replica.sql("STOP REPLICA IO_THREAD" if is_mysql(self.replica) else "STOP SLAVE IO_THREAD")


def slave_status(server: LocalServer) -> dict:
    """``SHOW SLAVE STATUS`` of ``server`` as a dict ({} when it is no replica). MySQL's ``SHOW REPLICA STATUS``
    names its columns Replica_*/Source_*: they are given MariaDB's names (Slave_IO_Running, Master_Port, …)."""
    mysql = is_mysql(server)
    with contextlib.closing(server.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW REPLICA STATUS" if mysql else "SHOW SLAVE STATUS")
        row = cur.fetchone()
        names = [d[0] for d in cur.description] if row else []
    if mysql:
        names = [re.sub(r"^Source_", "Master_", re.sub(r"^Replica_", "Slave_", n)) for n in names]
    return dict(zip(names, row)) if row else {}


def hosts_overrides(ports, workdir, **extra) -> dict[str, str]:
    """``--set`` values for a daemon following the servers on 127.0.0.1:``ports`` (in that order) by GTID,
    with its checkpoint and sink in ``workdir`` (see :func:`tests.support.daemon.following_overrides`)."""
    return following_overrides(list(ports), workdir, **extra)


def wait_gtids(server: LocalServer, checkpoint: Path, timeout: float = 60.0, daemon=None) -> dict:
    """Wait until the checkpoint's GTID list covers ``server``'s ``@@gtid_binlog_pos`` (every domain at or past
    the server's sequence number; MySQL: its GTID set holds ``@@gtid_executed``); the checkpoint is returned. With ``daemon`` (a DaemonProcess), fail at once
    when it exits. AssertionError on timeout, naming both positions."""
    mysql = is_mysql(server)
    if mysql:
        want = MysqlGtidSet.parse(gtid_pos(server))
    else:
        target = {g.domain_id: g.seq_no for g in MariadbGtidList.parse(gtid_pos(server)).gtids()}
    deadline = time.monotonic() + timeout
    while True:
        cp = read_checkpoint(checkpoint)
        if mysql:
            have = MysqlGtidSet.parse(cp["position"]["gtid_set"] or "") if cp else MysqlGtidSet()
            if have.union(want) == have:
                return cp
        else:
            have = MariadbGtidList.parse(cp["position"]["gtid_list"]) if cp else MariadbGtidList()
            if all(have.get(d) is not None and have.get(d).seq_no >= n for d, n in target.items()):
                return cp
        if daemon is not None and not daemon.running:
            raise AssertionError(f"binlogd exited (rc={daemon.proc.returncode}) before reaching {gtid_pos(server)}; "
                                 f"stderr:\n{daemon.stderr}")
        if time.monotonic() > deadline:
            raise AssertionError(f"checkpoint at {have} did not reach {gtid_pos(server)} within {timeout:g}s"
                                 + (f"; stderr:\n{daemon.stderr}" if daemon else ""))
        time.sleep(0.05)
