"""Failover by GTID: which configured server may the daemon stream from next (ARCHITECTURE.md "Failover").

Two halves, kept apart:

- The decisions, pure functions of what the servers answered: :func:`judge` turns one server's
  :class:`Facts` and the checkpoint's position into a :class:`Verdict`; :func:`choose` picks the server to
  use; :func:`give_up` says when looking further is pointless; :func:`no_source` writes the exit message.
- The probe (:func:`probe`): connect to one server and collect its :class:`Facts` by SQL and, on MariaDB, a
  GTID dump under strict semantics that is closed after its first packet.
- :class:`OneHost` and :class:`Failover`, the daemon's side (:func:`hosts_for` makes the one that fits): which
  server each session uses. One host is always used, never probed. With several, the current one is retried
  :data:`RETRIES` times after a loss, then every host is probed and the best usable one taken; the
  "failover from A to B at GTID …" line and metric, and the watch that leaves a source that turned read-only
  and stopped advancing for a writable one.

A server is usable when it is reachable, authenticates, logs row events, and its binlog holds every
transaction already delivered. On MySQL ``GTID_SUBSET(<checkpoint set>, @@gtid_executed)`` must hold and
``@@gtid_purged`` must hold nothing the checkpoint lacks (else the server cannot send it: purged). On MariaDB
the server must accept ``@slave_connect_state`` = the checkpoint's GTID list with
``@slave_gtid_strict_mode = 1`` ("… which is not in the master's binlog" is divergence, any other refusal a
purge), and its ``@@gtid_binlog_state`` must know every delivered GTID: MariaDB accepts a position in a
domain it has never seen (a multi-master rule), and that would be a silent loss here. A server that lacks
delivered transactions is *diverged* and never used.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.connection import ServerInfo, SourceConnection, SourceError
from binlogd.daemon.tasks import close_tasks
from binlogd.protocol.gtid import MariadbGtid, MariadbGtidList, MysqlGtidSet
from binlogd.protocol.position import Position

USABLE, UNREACHABLE, REFUSED, DIVERGED, PURGED = "usable", "unreachable", "refused", "diverged", "purged"
RETRIES = 2  # attempts on the source just lost before the other hosts are probed too
_UNREACHABLE_KINDS = frozenset({"connection", "unreachable", "timeout", "stream_ended"})
_DIVERGED_REFUSALS = ("not in the master's binlog", "is missing the GTID", "more GTIDs than the master")
# the SourceError kind (binlogd_errors_total{kind}, the exit code) that stands for a verdict
_ERROR_KINDS = {UNREACHABLE: "connection", REFUSED: "misconfigured", DIVERGED: "diverged", PURGED: "binlog_missing"}
_MARIADB_GTID = re.compile(r"\b\d+-\d+-\d+\b")


@dataclass(frozen=True)
class Facts:
    """What one server answered to :func:`probe`.

    Fields:
        endpoint: ``host:port`` as configured.
        failure: why it could not be asked (cannot connect, authentication, binlog off, not ROW…), or None.
        info: what it said about itself on connect (None when ``failure`` came first).
        read_only: ``@@global.read_only``.
        subset: MySQL ``GTID_SUBSET(<checkpoint set>, @@global.gtid_executed)``.
        lacking: MySQL ``GTID_SUBTRACT(<checkpoint set>, @@global.gtid_executed)``: delivered, not executed there.
        purged_unsent: MySQL ``GTID_SUBTRACT(@@global.gtid_purged, <checkpoint set>)``: purged, never delivered.
        binlog_state: MariaDB ``@@global.gtid_binlog_state`` (every domain-server pair its binlog has seen).
        refusal: MariaDB: the error the strict GTID dump was refused with ("" when it was accepted).
    """

    endpoint: str
    failure: SourceError | None = None
    info: ServerInfo | None = None
    read_only: bool = False
    subset: bool = True
    lacking: str = ""
    purged_unsent: str = ""
    binlog_state: str = ""
    refusal: str = ""


@dataclass(frozen=True)
class Verdict:
    """Whether a server may be streamed from.

    Fields:
        endpoint: ``host:port``.
        kind: ``usable``; ``unreachable`` (may come back); ``refused`` (reachable but cannot serve: auth, TLS,
            binlog off, not ROW, no GTIDs, another flavour); ``diverged`` (lacks delivered transactions);
            ``purged`` (cannot send transactions not yet delivered).
        reason: one line saying why (the server's own words where it gave some).
        info: the server's identity (None when it could not be asked).
        writable: ``read_only`` is OFF.
        missing: for ``diverged``, the delivered GTIDs it lacks (text).
        error_kind: the SourceError kind it stands for (the failure's own kind when it could not be asked).
    """

    endpoint: str
    kind: str
    reason: str
    info: ServerInfo | None = None
    writable: bool = False
    missing: str = ""
    error_kind: str = ""

    @property
    def usable(self) -> bool:
        return self.kind == USABLE


# ---------------------------------------------------------------------------------------------- decisions
def judge(facts: Facts, delivered: Position | None) -> Verdict:
    """The verdict on one server given what it answered and the checkpoint's ``delivered`` position (whose
    ``gtid_set`` (MySQL) or ``gtid_list`` (MariaDB) holds every transaction already delivered; None when
    nothing is delivered yet and no GTID start was given: any server that can serve will do)."""
    where = facts.endpoint
    if facts.failure is not None:
        kind = UNREACHABLE if facts.failure.kind in _UNREACHABLE_KINDS else REFUSED
        return Verdict(where, kind, str(facts.failure), error_kind=facts.failure.kind)
    verdict = _judge_mysql(facts, delivered) if facts.info.flavor == "mysql" else _judge_mariadb(facts, delivered)
    return dataclasses.replace(verdict, info=facts.info, writable=not facts.read_only,
                               error_kind=_ERROR_KINDS.get(verdict.kind, ""))


def _judge_mysql(facts: Facts, delivered: Position | None) -> Verdict:
    where = facts.endpoint
    if not facts.info.gtid_mode:
        return Verdict(where, REFUSED, "gtid_mode is OFF: failover needs GTIDs")
    if delivered is None:
        return Verdict(where, USABLE, "can serve (nothing delivered yet)")
    if delivered.gtid_list:
        return Verdict(where, REFUSED, "a MySQL server cannot continue a MariaDB GTID position")
    if not facts.subset:
        return Verdict(where, DIVERGED, f"diverged: lacks {facts.lacking} (GTID_SUBSET of the checkpoint's set "
                       "and @@gtid_executed is false)", missing=facts.lacking)
    if facts.purged_unsent:
        return Verdict(where, PURGED, f"has purged {facts.purged_unsent}, which binlogd has not delivered")
    return Verdict(where, USABLE, "has every delivered transaction")


def _judge_mariadb(facts: Facts, delivered: Position | None) -> Verdict:
    where = facts.endpoint
    if delivered is None:
        return Verdict(where, USABLE, "can serve (nothing delivered yet)")
    if delivered.gtid_set:
        return Verdict(where, REFUSED, "a MariaDB server cannot continue a MySQL GTID set")
    lacking = mariadb_lacking(delivered.gtid_list, facts.binlog_state)
    refused_as_diverged = any(text in facts.refusal for text in _DIVERGED_REFUSALS)
    if lacking or refused_as_diverged:
        missing = ", ".join(lacking) or ", ".join(_MARIADB_GTID.findall(facts.refusal))
        said = f" (the server: {facts.refusal})" if facts.refusal else ""
        return Verdict(where, DIVERGED, f"diverged: lacks {missing}{said}", missing=missing)
    if facts.refusal:
        return Verdict(where, PURGED, f"cannot send from {delivered.gtid_list}: {facts.refusal}")
    return Verdict(where, USABLE, "has every delivered transaction")


def mariadb_lacking(delivered: str, binlog_state: str) -> list[str]:
    """The delivered GTIDs (a MariaDB GTID list) that a binlog with ``binlog_state`` (``@@gtid_binlog_state``:
    the last GTID of every domain-server pair) does not reach, each as ``d-s-n (has d-s-m)`` or
    ``d-s-n (nothing from server s in domain d)``. Raises GtidSyntaxError on malformed text."""
    have: dict[tuple[int, int], int] = {}
    for part in binlog_state.split(","):
        if part.strip():
            g = MariadbGtid.parse(part)
            have[(g.domain_id, g.server_id)] = max(g.seq_no, have.get((g.domain_id, g.server_id), 0))
    out = []
    for g in MariadbGtidList.parse(delivered).gtids():
        seq = have.get((g.domain_id, g.server_id))
        if seq is None:
            out.append(f"{g} (nothing from server {g.server_id} in domain {g.domain_id})")
        elif seq < g.seq_no:
            out.append(f"{g} (has {g.domain_id}-{g.server_id}-{seq})")
    return out


def choose(verdicts: list[Verdict]) -> Verdict | None:
    """The server to stream from: the first usable writable one in ``verdicts`` order (the current source
    first, then the configured order), else the first usable one, else None."""
    usable = [v for v in verdicts if v.usable]
    return next((v for v in usable if v.writable), usable[0] if usable else None)


def give_up(verdicts: list[Verdict], waited: float, timeout: float) -> str | None:
    """Whether to stop looking for a source, when none of ``verdicts`` (every host) is usable after ``waited``
    seconds.

    Returns ``"purged"`` when every server refused the position as purged (exit 5, ERR 1236 everywhere),
    ``"refused"`` when every server refuses to serve (authentication, binlog off…: its own exit code),
    ``"diverged"`` when ``timeout`` has passed and a reachable server lacks delivered transactions (exit 9),
    else None: try again (servers that are down may come back).
    """
    kinds = {v.kind for v in verdicts}
    if kinds in ({PURGED}, {REFUSED}):
        return kinds.pop()
    if waited >= timeout and DIVERGED in kinds:
        return DIVERGED
    return None


def no_source(verdicts: list[Verdict], waited: float) -> str:
    """The exit message: how long no server was usable, then each server and why (the GTIDs it lacks)."""
    return f"no usable source after {waited:.0f}s: " + "; ".join(f"{v.endpoint} {v.reason}" for v in verdicts)


# ---------------------------------------------------------------------------------------------- the probe
async def probe(source, endpoint: tuple[str, int], delivered: Position | None, server_id: int) -> Facts:
    """Ask the server at ``endpoint`` what :func:`judge` needs; never raises for the server's sake.

    Args:
        source: the :class:`daemon.config.SourceConfig` (user, password, TLS, timeouts).
        delivered: the checkpoint's position (its GTID set or list is checked); None: only whether it can serve.
        server_id: the replica id registered for the MariaDB probe dump (the daemon's own: its stream is not
            running against this server while it is probed).
    """
    host, port = endpoint
    where = f"{host}:{port}"
    conn = SourceConnection(dataclasses.replace(source, host=host, port=port, hosts=()))
    try:
        info = await conn.open()
        read_only = bool(int((await conn.query("SELECT @@global.read_only"))[0][0]))
        facts = Facts(where, info=info, read_only=read_only)
        if delivered is None:
            return facts
        if info.flavor == "mysql" and info.gtid_mode and not delivered.gtid_list:
            mine = str(MysqlGtidSet.parse(delivered.gtid_set))  # normalised: nothing to quote
            subset, lacking, purged = (await conn.query(
                f"SELECT GTID_SUBSET('{mine}', @@global.gtid_executed), "
                f"GTID_SUBTRACT('{mine}', @@global.gtid_executed), "
                f"GTID_SUBTRACT(@@global.gtid_purged, '{mine}')"))[0]
            return dataclasses.replace(facts, subset=bool(int(subset)), lacking=_one_line(lacking),
                                       purged_unsent=_one_line(purged))
        if info.flavor == "mariadb" and not delivered.gtid_set:
            state = str((await conn.query("SELECT @@global.gtid_binlog_state"))[0][0] or "")
            return dataclasses.replace(facts, binlog_state=state,
                                       refusal=await _strict_dump(conn, delivered, server_id, source))
        return facts
    except SourceError as exc:
        return Facts(where, failure=exc)
    finally:
        await conn.close()


async def _strict_dump(conn: SourceConnection, delivered: Position, server_id: int, source) -> str:
    """Start a non-blocking GTID dump from ``delivered.gtid_list`` with strict semantics and read its first
    packet: "" when the server accepted the position, else its refusal (ERR 1236)."""
    start = Position("", 4, gtid_list=str(MariadbGtidList.parse(delivered.gtid_list)))
    try:
        await conn.start_dump(server_id, start, True, source.heartbeat_seconds, non_blocking=True, strict=True)
        await asyncio.wait_for(conn.read_event(), source.connect_timeout)
    except SourceError as exc:
        if exc.kind != "binlog_missing":
            raise
        return str(exc)
    except asyncio.TimeoutError:
        raise SourceError("timeout", f"no answer to a GTID dump within {source.connect_timeout:g}s") from None
    return ""


def _one_line(text) -> str:
    return str(text or "").replace("\n", "")


# ---------------------------------------------------------------------------------------------- the daemon's side
def hosts_for(source, log: logging.Logger, metrics: Metrics, last_host: str | None = None) -> OneHost | Failover:
    """The daemon's choice of server for ``source``: :class:`OneHost` for one endpoint, else :class:`Failover`
    (``last_host``: the ``host:port`` the checkpoint names as the last source, or None)."""
    if len(source.endpoints) == 1:
        return OneHost(source)
    return Failover(source, log, metrics, last_host)


class OneHost:
    """The failover of one host: every session streams from it, without a probe; what it refuses keeps its own
    meaning (ERR 1236 stays fatal, exit 5), and its sessions may resume by binlog file and position.

    The same steps as :class:`Failover`'s, for :meth:`Daemon._session <binlogd.daemon.service.Daemon._session>`.

    Args:
        source: the :class:`daemon.config.SourceConfig`.
    Fields:
        current: ``host:port`` of the host.
        by_gtid: False (a resume keeps the checkpoint's own kind).
    """

    by_gtid = False

    def __init__(self, source):
        self.source = source
        self.current = f"{source.host}:{source.port}"

    def config(self, endpoint: str):
        """The SourceConfig of the host (``endpoint`` is always :attr:`current`)."""
        return self.source

    def delivered(self, durable) -> Position | None:
        """None: one host is never probed, so nothing is checked against it."""
        return None

    async def pick(self, delivered: Position | None) -> Verdict:
        """The host itself (nothing is asked: the session's connect says whether it can serve)."""
        return Verdict(self.current, USABLE, "the only host", writable=True)

    def refused(self, endpoint: str, error: SourceError) -> SourceError:
        """A dump refused with ERR 1236: ``error`` itself (no other host can serve it)."""
        return error

    def streaming(self, endpoint: str, position: Position) -> bool:
        """False: the source never changes (the first commit already names it)."""
        return False

    async def run(self, consumer, session, stopping: asyncio.Event, ending: asyncio.Event) -> None:
        """``consumer.run(session)``: until it fails (raised) or ``ending`` (the consumer's stop event) is set."""
        await consumer.run(session)


class Failover:
    """Which of ``source.hosts`` each session streams from.

    Args:
        source: the :class:`daemon.config.SourceConfig` (endpoints, failover_timeout_seconds, credentials).
        log, metrics: the daemon's.
        last_host: the ``host:port`` the checkpoint names as the last source (None: none, or not a host now).
    Fields:
        current: ``host:port`` of the source streamed from last (None before the first session).
        by_gtid: True: positions differ between servers, so every session resumes by GTID (a MariaDB without
            any GTID yet too).
    """

    by_gtid = True

    def __init__(self, source, log: logging.Logger, metrics: Metrics, last_host: str | None = None):
        self.source, self.log, self.metrics = source, log, metrics
        self.endpoints = {f"{host}:{port}": (host, port) for host, port in source.endpoints}
        self.current = last_host if last_host in self.endpoints else None
        self._attempts = 0                  # picks since a session last streamed
        self._lost_at: float | None = None  # when the source was lost (monotonic)
        self._refused: dict[str, tuple[Position | None, str]] = {}  # host -> (position, its ERR 1236 to a dump)
        self._picked_at: Position | None = None  # the delivered position of the last pick

    def config(self, endpoint: str):
        """The SourceConfig that connects to ``endpoint`` (``host:port``)."""
        host, port = self.endpoints[endpoint]
        return dataclasses.replace(self.source, host=host, port=port)

    def delivered(self, durable) -> Position | None:
        """What a server must hold to be used: the position of ``durable`` (the last durable ResumeState, or
        the start resolved for the first session); without one the GTIDs of a ``gtid:`` start; else None."""
        if durable is not None:
            return durable.position
        spec = self.source.start_spec
        if spec.kind != "gtid":
            return None
        mysql = isinstance(spec.gtid, MysqlGtidSet)
        return Position("", 4, gtid_set=str(spec.gtid) if mysql else "", gtid_list="" if mysql else str(spec.gtid))

    async def pick(self, delivered: Position | None) -> Verdict:
        """The usable server the next session streams from: the current one (first :data:`RETRIES` attempts
        after a loss), then the best of every host (:func:`choose`).

        Args:
            delivered: the last durable position (None: nothing delivered and no GTID start).
        Raises:
            SourceError: none usable now: retried (kind of the current one's verdict, or ``no_source``) unless
                fatal: every host purged the position (``binlog_missing``, exit 5), refuses to serve (its
                kind), or only diverged ones answered for failover_timeout_seconds (``diverged``, exit 9).
        """
        now = time.monotonic()
        self._lost_at, self._picked_at = self._lost_at or now, delivered
        self._attempts += 1
        names = list(self.endpoints)
        if self.current is not None:
            names.remove(self.current)
            names.insert(0, self.current)
        if self.current is not None and self._attempts <= RETRIES:
            names = names[:1]
        facts = await asyncio.gather(*(probe(self.source, self.endpoints[name], delivered, self.source.server_id)
                                       for name in names))
        verdicts = [self._refusal(name, delivered) or judge(f, delivered) for name, f in zip(names, facts)]
        for v in verdicts:
            if not v.usable:
                self.log.warning("source %s skipped: %s", v.endpoint, v.reason)
        chosen = choose(verdicts)
        if chosen is not None:
            return chosen
        if len(names) < len(self.endpoints):
            v = verdicts[0]
            raise SourceError(v.error_kind, f"source {v.endpoint} {v.reason}")
        waited = now - self._lost_at
        message = no_source(verdicts, waited)
        outcome = give_up(verdicts, waited, self.source.failover_timeout_seconds)
        if outcome == PURGED:
            raise SourceError("binlog_missing", f"{message}: see README 'After ERR 1236'", fatal=True)
        if outcome == REFUSED:
            raise SourceError(verdicts[0].error_kind, message, fatal=True)
        if outcome == DIVERGED:
            raise SourceError("diverged", f"{message}: see README 'Failover'", fatal=True)
        raise SourceError("no_source", message)

    def _refusal(self, name: str, delivered: Position | None) -> Verdict | None:
        """The verdict on a host that refused a dump from ``delivered`` with ERR 1236, else None."""
        at, said = self._refused.get(name, (None, None))
        if said is None or at != delivered:
            return None
        kind = DIVERGED if any(text in said for text in _DIVERGED_REFUSALS) else PURGED
        gtids = delivered and (delivered.gtid_set or delivered.gtid_list)
        return Verdict(name, kind, f"{kind}: refused a dump from {gtids or 'the start'}: {said}",
                       error_kind=_ERROR_KINDS[kind])

    def refused(self, endpoint: str, error: SourceError) -> SourceError:
        """A dump from ``endpoint`` failed with ERR 1236: the host counts as purged (or diverged, by the
        server's words) while the delivered position stays where it was picked from. Returns the retryable
        error to raise instead."""
        self._refused[endpoint] = (self._picked_at, str(error))
        return SourceError(error.kind, f"source {endpoint} {error}")

    def streaming(self, endpoint: str, position: Position) -> bool:
        """A session on ``endpoint`` is streaming from ``position``. Returns True when the source changed (the
        first session included); a change from a known source is logged and counted as a failover."""
        changed = endpoint != self.current
        if changed and self.current is not None:
            self.log.warning("failover from %s to %s at GTID %s", self.current, endpoint,
                             position.gtid_set or position.gtid_list or "(none)")
            self.metrics.failover()
        self.current, self._attempts, self._lost_at = endpoint, 0, None
        return changed

    async def run(self, consumer, session, stopping: asyncio.Event, ending: asyncio.Event) -> None:
        """``consumer.run(session)`` with :meth:`watch` beside it (``ending`` is the consumer's stop event).

        Raises:
            SourceError("read_only"): the watch ended the session to move to a writable host (not fatal).
            What ``consumer.run`` raises; ERR 1236 (kind ``binlog_missing``) not fatal: see :meth:`refused`.
        """
        watch = asyncio.create_task(self.watch(lambda: consumer.tracker.committed, stopping, ending))
        try:
            await consumer.run(session)
        except SourceError as exc:
            if exc.kind != "binlog_missing":
                raise
            raise self.refused(self.current, exc) from None
        finally:
            await close_tasks(watch)
        if not stopping.is_set():
            raise SourceError("read_only", f"source {self.current} turned read-only and stopped advancing")

    async def watch(self, committed: Callable[[], Position], stopping: asyncio.Event, ending: asyncio.Event) -> None:
        """While a session streams from :attr:`current`: set ``ending`` (the consumer stops at the next
        transaction boundary) when ``stopping`` is set, or when the source is read-only, has committed nothing
        for a check period (2 x heartbeat), and another host is usable and writable; then the next
        :meth:`pick` probes every host at once."""
        last = None
        try:
            while True:
                try:
                    await asyncio.wait_for(stopping.wait(), 2 * self.source.heartbeat_seconds)
                    return
                except asyncio.TimeoutError:
                    pass
                at = committed()
                if at != last:
                    last = at
                elif await self._writable_elsewhere(at):
                    self._attempts = RETRIES
                    return
        finally:
            ending.set()

    async def _writable_elsewhere(self, delivered: Position) -> bool:
        """True when the current source is read-only and another host is usable and writable (logged)."""
        current = judge(await probe(self.source, self.endpoints[self.current], None, self.source.server_id), None)
        if not current.usable or current.writable:
            return False
        others = [name for name in self.endpoints if name != self.current]
        facts = await asyncio.gather(*(probe(self.source, self.endpoints[name], delivered, self.source.server_id)
                                       for name in others))
        better = [v for v in (judge(f, delivered) for f in facts) if v.usable and v.writable]
        if better:
            self.log.info("source %s is read-only and idle; %s is writable and has every delivered transaction: "
                          "leaving it", self.current, better[0].endpoint)
        return bool(better)
