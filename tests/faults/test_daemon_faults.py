"""Fault suite for ``binlogd run`` (issue 6): nothing lost, nothing duplicated, whatever fails.

Every test runs a writer that commits small multi-table transactions, each identified by a marker
``mk``: 1-3 INSERTs into ``a`` (now and then one over 64 KiB), an INSERT into ``b`` (``b.id = mk``),
an upsert of one of ten counter rows in ``c`` (an INSERT the first time, an UPDATE whose before image
chains every transaction to the previous one), and every third transaction a DELETE of an older
``a`` row. The sink is then checked by :func:`check_exactly_once`:

* the changes are grouped by transaction (``source.gtid``): each group holds exactly one ``b`` insert
  (its marker), and has exactly the changes the writer made;
* no marker in two groups, no ``(file, pos, row)`` twice;
* the markers in the sink are exactly those in ``b`` (a commit whose reply was lost in a server crash
  counts when the server has it);
* the replay of the changes (strict: an insert of a present key, or an update/delete whose before
  image is not the current row, fails) equals ``SELECT *`` of the three tables.

Tests (short versions run by default; ``--runslow`` runs the long ones, whose counts come from the
environment and default to the issue's numbers):

1. daemon crashes: SIGKILL ``binlogd run`` at random points (also during its start), restart;
   ``BINLOGD_FAULT_CRASH_TX`` (100000) transactions, ``BINLOGD_FAULT_CRASH_KILLS`` (20) kills.
2. primary crashes: SIGKILL the server and start it again (a new binlog file each time) during the
   load; the daemon backs off (delays logged and growing) and resumes; ``BINLOGD_FAULT_SERVER_TX``
   (100000), ``BINLOGD_FAULT_SERVER_KILLS`` (5).
3. network (``tests/faults/proxy.py``): connections cut mid-event, mid-packet and between two events
   (``BINLOGD_FAULT_DROPS``, 50); stalls longer than the heartbeat period, detected within 2× the
   period (``BINLOGD_FAULT_STALLS``, 5); server bytes delivered one at a time; a slow link that takes
   longer than 2× the heartbeat period to deliver one large event.
4. sink faults: a real full tmpfs (root only, skipped elsewhere) and, in-process, ENOSPC from the
   sink's writes and EIO from its fsync: the checkpoint does not move, ``binlogd_errors_total{kind="sink"}``
   counts, the log says so, and after healing every transaction arrives once.
6. security: TLS with a self-signed CA to a MariaDB with ``require_secure_transport=ON``
   (verify_identity works; a wrong CA or host name fails with a clear TLS error); the password never
   in logs, /metrics or exceptions; the metrics listener binds only the configured address.

(5, bad input, is tests/integration/test_daemon_errors.py and tests/faults/test_fuzz_decoder.py; one case
the million-case fuzz run found is pinned here: test_fuzz_found_zstd_frame_size_is_bounded.)
Each test starts its own LocalServer when it kills or reconfigures it; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import traceback
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import pymysql
import pytest

from binlogd.localserver import LocalServer, _run_sql, free_port
from tests.faults.proxy import FaultProxy
from tests.integration.daemon_helpers import (
    DaemonProcess,
    InProcessDaemon,
    assert_sink_matches,
    base_overrides,
    metric,
    parse_metrics,
    read_changes,
    read_checkpoint,
    replay,
    scrape,
    wait_caught_up,
    wait_until,
)

pytestmark = pytest.mark.server


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


SLOW_CRASH_TX = _env_int("BINLOGD_FAULT_CRASH_TX", 100_000)
SLOW_CRASH_KILLS = _env_int("BINLOGD_FAULT_CRASH_KILLS", 20)
SLOW_SERVER_TX = _env_int("BINLOGD_FAULT_SERVER_TX", 100_000)
SLOW_SERVER_KILLS = _env_int("BINLOGD_FAULT_SERVER_KILLS", 5)
SLOW_DROPS = _env_int("BINLOGD_FAULT_DROPS", 50)
SLOW_STALLS = _env_int("BINLOGD_FAULT_STALLS", 5)

SCHEMA = "f"
TABLES = ("a", "b", "c")
PK = {(SCHEMA, "a"): ("id",), (SCHEMA, "b"): ("id",), (SCHEMA, "c"): ("id",)}
METRICS_PORT = re.compile(r"metrics on http://[^:]+:(\d+)/metrics")


# =========================================================================== the load


def create_tables(server) -> None:
    server.sql(f"CREATE DATABASE IF NOT EXISTS {SCHEMA} CHARACTER SET utf8mb4")
    server.sql(f"CREATE TABLE {SCHEMA}.a (id BIGINT PRIMARY KEY, mk INT NOT NULL, v VARCHAR(64), big MEDIUMTEXT)")
    server.sql(f"CREATE TABLE {SCHEMA}.b (id INT PRIMARY KEY, mk INT NOT NULL, note VARCHAR(64))")
    server.sql(f"CREATE TABLE {SCHEMA}.c (id INT PRIMARY KEY, n BIGINT NOT NULL, last_mk INT NOT NULL)")


class Writer(threading.Thread):
    """Commits marked transactions (see the module docstring) until ``total`` or ``stop()``.

    Rides over a server that is down: a transaction that fails before COMMIT is rolled back (the marker
    is not reused: the next one is taken); one whose COMMIT got no reply is *in doubt* and settled from
    the table afterwards. ``rate`` caps transactions per second; ``big_every`` makes every n-th
    transaction carry a 120 KB value (a rows event over 64 KiB).
    """

    def __init__(self, server, total: int | None = None, rate: float | None = None, big_every: int = 0,
                 seed: int = 1, connect=None):
        super().__init__(daemon=True, name="fault-writer")
        self.server, self.total, self.rate, self.big_every = server, total, rate, big_every
        self.rng = random.Random(seed)
        self._connect = connect or (lambda: server.connect(database=SCHEMA, autocommit=False, connect_timeout=3,
                                                           read_timeout=10, write_timeout=10))
        self.stop_flag = threading.Event()
        self.committed: dict[int, int] = {}   # marker -> changes written (acknowledged commits)
        self.in_doubt: dict[int, int] = {}    # COMMIT sent, no reply
        self.failed = 0                       # transactions that failed before COMMIT
        self.error: BaseException | None = None
        self.next_mk = 1

    @property
    def count(self) -> int:
        return len(self.committed)

    def stop(self, timeout: float = 60.0) -> None:
        self.stop_flag.set()
        self.join(timeout)
        assert not self.is_alive(), "the writer did not stop"
        assert self.error is None, f"writer failed: {self.error!r}"

    def halt(self) -> None:
        """Stop without checks (cleanup paths; the thread may never have started)."""
        self.stop_flag.set()
        if self.ident is not None:
            self.join(30)

    def wait_count(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count < n:
            assert self.error is None, f"writer failed: {self.error!r}"
            if not self.is_alive():
                return
            assert time.monotonic() < deadline, f"writer at {self.count} transactions, not {n}, after {timeout}s"
            time.sleep(0.01)

    def run(self) -> None:
        conn = None
        t0 = time.monotonic()
        try:
            while not self.stop_flag.is_set() and (self.total is None or self.count < self.total):
                if self.rate:
                    ahead = (len(self.committed) + self.failed) / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        self.stop_flag.wait(ahead)
                if conn is None:
                    try:
                        conn = self._connect()
                    except (pymysql.err.Error, OSError):
                        self.stop_flag.wait(0.1)
                        continue
                mk = self.next_mk
                self.next_mk += 1
                stage = "body"
                try:
                    cur = conn.cursor()
                    n_a = self.rng.randint(1, 3)
                    big = "y" * 120_000 if self.big_every and mk % self.big_every == 0 else None
                    for i in range(n_a):
                        cur.execute("INSERT INTO a (id, mk, v, big) VALUES (%s, %s, %s, %s)",
                                    (mk * 4 + i, mk, f"v{mk}.{i}", big if i == 0 else None))
                    cur.execute("INSERT INTO b (id, mk, note) VALUES (%s, %s, %s)", (mk, mk, f"tx {mk}"))
                    cur.execute("INSERT INTO c (id, n, last_mk) VALUES (%s, 1, %s) "
                                "ON DUPLICATE KEY UPDATE n = n + 1, last_mk = VALUES(last_mk)", (mk % 10, mk))
                    deleted = 0
                    if mk % 3 == 0 and mk > 6:
                        deleted = cur.execute("DELETE FROM a WHERE id = %s", ((mk - 6) * 4,))
                    changes = n_a + 2 + deleted
                    stage = "commit"
                    conn.commit()
                    self.committed[mk] = changes
                except (pymysql.err.Error, OSError):
                    if stage == "commit":
                        self.in_doubt[mk] = changes
                    else:
                        self.failed += 1
                    with contextlib.suppress(Exception):
                        conn.close()
                    conn = None
        except BaseException as exc:  # noqa: BLE001 (reported by stop())
            self.error = exc
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


def check_exactly_once(server, sink_dir: Path, writer: Writer, label: str) -> dict:
    """The checks of the module docstring; returns the counts (also printed)."""
    changes = [c for c in read_changes(sink_dir) if c["schema"] == SCHEMA]
    groups: dict[str, list[dict]] = defaultdict(list)
    for c in changes:
        assert c["source"]["gtid"], f"a change without a GTID: {c}"
        groups[c["source"]["gtid"]].append(c)
    markers_of: dict[int, list[str]] = defaultdict(list)
    bad_groups = []
    for gtid, group in groups.items():
        b_inserts = [c for c in group if c["table"] == "b" and c["op"] == "insert"]
        if len(b_inserts) != 1:
            bad_groups.append((gtid, len(group), len(b_inserts)))
            continue
        markers_of[b_inserts[0]["after"]["mk"]].append(gtid)
    in_table = {int(r[0]) for r in server.sql(f"SELECT id FROM {SCHEMA}.b")}
    expected = dict(writer.in_doubt)
    expected.update(writer.committed)
    in_sink = set(markers_of)
    twice = sorted(m for m, gs in markers_of.items() if len(gs) > 1)
    missing = sorted(in_table - in_sink)
    extra = sorted(in_sink - in_table)
    unknown = sorted(in_table - set(expected))
    wrong = {m: (len(groups[markers_of[m][0]]), expected[m]) for m in in_sink & set(expected)
             if len(markers_of[m]) == 1 and len(groups[markers_of[m][0]]) != expected[m]}
    acked_lost = sorted(set(writer.committed) - in_table)
    positions = Counter((c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in changes)
    dup_positions = [p for p, n in positions.items() if n > 1]
    files = sorted({c["source"]["file"] for c in changes})
    stats = {"acked": len(writer.committed), "in_doubt": len(writer.in_doubt),
             "in_doubt_committed": len(set(writer.in_doubt) & in_table), "failed_before_commit": writer.failed,
             "in_table": len(in_table), "in_sink": len(in_sink), "changes": len(changes),
             "binlog_files": len(files), "missing": len(missing), "twice": len(twice), "extra": len(extra),
             "wrong_counts": len(wrong), "dup_positions": len(dup_positions), "acked_lost_by_server": len(acked_lost)}
    print(f"\n[{label}] " + ", ".join(f"{k}={v}" for k, v in stats.items()))
    assert not bad_groups, f"transactions without exactly one b insert (gtid, changes, b inserts): {bad_groups[:10]}"
    assert not missing, f"{len(missing)} committed transactions missing from the sink: {missing[:20]}"
    assert not twice, f"{len(twice)} transactions twice in the sink (under two GTIDs): {twice[:20]}"
    assert not extra, f"{len(extra)} markers in the sink that the server does not have: {extra[:20]}"
    assert not unknown, f"markers in the table the writer never wrote: {unknown[:20]}"
    assert not wrong, f"transactions with the wrong number of changes (sink, written): {dict(list(wrong.items())[:10])}"
    assert not dup_positions, f"(file, pos, row) twice: {dup_positions[:10]}"
    state = replay(changes, pk=PK, schemas=[SCHEMA])
    assert_sink_matches(server, SCHEMA, TABLES, state)
    return stats


# =========================================================================== helpers


@contextlib.contextmanager
def local_server(extra_args=(), cls=LocalServer):
    srv = cls(extra_args=["--binlog-row-metadata=FULL", *extra_args])
    try:
        srv.start()
        yield srv
    finally:
        srv.cleanup()


def metrics_port(daemon: DaemonProcess, timeout: float = 30.0) -> int:
    return int(METRICS_PORT.search(daemon.wait_for_line(METRICS_PORT, timeout)).group(1))


def scrape_metric(port: int, name: str, **labels) -> float:
    status, body = scrape(port)
    assert status == 200, body
    return metric(parse_metrics(body), name, **labels) or 0.0


def _file_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class LoggedDaemon(InProcessDaemon):
    """An :class:`InProcessDaemon` whose log lines are kept in :attr:`lines`; ``start()`` returns once it streams."""

    def __init__(self, config):
        self.handler = ListHandler()
        log = logging.getLogger(f"binlogd.faults.{id(self)}")
        log.handlers[:] = [self.handler]
        log.setLevel(logging.INFO)
        log.propagate = False
        super().__init__(config, log=log)

    @property
    def lines(self) -> list[str]:
        return list(self.handler.lines)

    def count(self, pattern: str) -> int:
        rx = re.compile(pattern)
        return sum(1 for ln in self.lines if rx.search(ln))

    def start(self) -> LoggedDaemon:
        super().start()
        wait_until(lambda: self.count("streaming from") or not self.thread.is_alive(), 30, what="streaming")
        assert self.thread.is_alive(), f"daemon ended rc={self.rc} error={self.error!r}:\n" + "\n".join(self.lines)
        return self


def in_process_config(server, workdir: Path, **extra):
    from binlogd.daemon.config import load_config

    return load_config(None, env={}, overrides=base_overrides(server, workdir, **extra))


# =========================================================================== 1. daemon crashes


def run_daemon_crashes(tmp_path: Path, total: int, kills: int, mode: str, rate: float | None, seed: int) -> dict:
    rng = random.Random(seed)
    with local_server() as srv:
        create_tables(srv)
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        o = base_overrides(srv, tmp_path, **{"source.start": start, "filters.include_schemas": SCHEMA})
        cp_path = tmp_path / "checkpoint.json"
        daemon = DaemonProcess(o)
        writer = Writer(srv, total=total, rate=rate, big_every=25, seed=seed)
        early = before_streaming = tails = 0
        try:
            daemon.wait_streaming()
            writer.start()
            marks = sorted(rng.sample(range(max(1, total // 20), max(2, total * 19 // 20)), kills))
            early_next = False
            for i, mark in enumerate(marks):
                if early_next:
                    # a kill during the start: checkpoint load, sink truncation, connect, first events
                    time.sleep(rng.uniform(0.0, 0.4))
                    early += 1
                    before_streaming += daemon.count("streaming from") == 0
                else:
                    writer.wait_count(mark, timeout=600)
                    time.sleep(rng.uniform(0.0, 0.2))
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                daemon.kill()
                cp = read_checkpoint(cp_path)
                if cp is not None and cp["sink"]:
                    f = tmp_path / "sink" / cp["sink"]["file"]
                    if f.exists() and f.stat().st_size > cp["sink"]["offset"]:
                        tails += 1  # rows written past the checkpoint: a transaction cut by the kill
                assert writer.error is None, writer.error
                daemon = DaemonProcess(o)
                early_next = i < len(marks) - 1 and rng.random() < 0.25
                if not early_next:
                    daemon.wait_streaming(timeout=60)
            writer.wait_count(total, timeout=900)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=120, daemon=daemon)
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            stats = check_exactly_once(srv, tmp_path / "sink", writer, f"daemon crashes, {mode}")
            stats.update(kills=kills, kills_during_start=early, kills_before_streaming=before_streaming,
                         kills_with_uncommitted_tail=tails)
            print(f"[daemon crashes, {mode}] {kills} SIGKILLs ({early} within 0.4 s of a restart, {before_streaming} "
                  f"of them before it streamed; {tails} with an uncommitted sink tail) over "
                  f"{len(writer.committed)} transactions")
            return stats
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()


def test_daemon_sigkill_random_points(tmp_path):
    run_daemon_crashes(tmp_path, total=3000, kills=5, mode="gtid", rate=600, seed=70)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_daemon_sigkill_random_points_slow(tmp_path, mode):
    run_daemon_crashes(tmp_path, total=SLOW_CRASH_TX, kills=SLOW_CRASH_KILLS, mode=mode, rate=None,
                       seed=620 + (mode == "file"))


# =========================================================================== 2. primary crashes

_BACKOFF = re.compile(r"reconnecting in (\d+(?:\.\d+)?)s")


def run_primary_crashes(tmp_path: Path, total: int | None, kills: int, mode: str, seed: int) -> dict:
    rng = random.Random(seed)
    with local_server() as srv:
        create_tables(srv)
        start = "current" if mode == "gtid" else f"file:{srv.binlog_files()[0].name}:4"
        o = base_overrides(srv, tmp_path, **{"source.start": start, "filters.include_schemas": SCHEMA,
                                             "reconnect.initial_seconds": "0.1", "reconnect.max_seconds": "0.8"})
        cp_path = tmp_path / "checkpoint.json"
        daemon = DaemonProcess(o)
        writer = Writer(srv, total=total, rate=None if total else 300, big_every=40, seed=seed)
        backoffs: list[list[float]] = []
        try:
            daemon.wait_streaming()
            port = metrics_port(daemon)
            writer.start()
            per_kill = (total or 0) // (kills + 1)
            for i in range(kills):
                if total:
                    writer.wait_count(per_kill * (i + 1), timeout=900)
                else:
                    time.sleep(rng.uniform(0.8, 1.5))
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                before = srv.binlog_files()[-1].name
                mark = len(daemon.lines)
                srv.kill()  # a crash: the daemon's socket closes mid-stream
                time.sleep(rng.uniform(1.0, 1.6))  # down: the daemon retries with a growing delay
                srv.restart()  # same port, same data: crash recovery
                after = srv.binlog_files()[-1].name
                assert _file_index(after) > _file_index(before), f"no new binlog after the restart: {after}"
                daemon.wait_streaming(timeout=60, nth=i + 2)
                delays = [float(m.group(1)) for ln in daemon.lines[mark:] if (m := _BACKOFF.search(ln))]
                backoffs.append(delays)
                # A daemon that lags notices the crash only when it has consumed what it had received,
                # maybe after the server is back: then it reconnects at once, with no retries to check.
                # (The first logged delay of an outage is checked by test_backoff_delays_as_logged.)
                assert all(b >= a for a, b in zip(delays[1:], delays[2:])), f"backoff not growing: {delays}"
                assert max(delays, default=0) <= 0.8, f"backoff over reconnect.max_seconds: {delays}"
            assert any(len(d) >= 3 for d in backoffs), f"no outage saw several retries: {backoffs}\n{daemon.stderr}"
            if total:
                writer.wait_count(total, timeout=900)
            else:
                time.sleep(1.0)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=120, daemon=daemon)
            reconnects = scrape_metric(port, "binlogd_reconnects_total")
            assert reconnects >= kills, f"binlogd_reconnects_total = {reconnects}"
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            stats = check_exactly_once(srv, tmp_path / "sink", writer, f"primary crashes, {mode}")
            assert stats["binlog_files"] >= kills + 1, f"the sink's changes come from {stats['binlog_files']} files"
            stats.update(server_kills=kills, reconnects=reconnects, backoffs=backoffs)
            print(f"[primary crashes, {mode}] {kills} server SIGKILLs, reconnects_total={reconnects:g}, "
                  f"backoff delays per outage {backoffs}")
            return stats
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()


def test_primary_sigkill_restart_new_binlog(tmp_path):
    run_primary_crashes(tmp_path, total=None, kills=2, mode="file", seed=71)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gtid", "file"])
def test_primary_sigkill_restart_new_binlog_slow(tmp_path, mode):
    run_primary_crashes(tmp_path, total=SLOW_SERVER_TX, kills=SLOW_SERVER_KILLS, mode=mode,
                        seed=720 + (mode == "file"))


def test_backoff_delays_as_logged(mariadb, tmp_path):
    """Reconnect delays double up to the cap, start over after a session that streamed, and the
    "reconnecting in Xs" line states the delay really waited (jitter 0; attempts timed at the proxy)."""
    with FaultProxy(mariadb.host, mariadb.port) as proxy:
        o = base_overrides(mariadb, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                 "reconnect.initial_seconds": "0.1", "reconnect.max_seconds": "0.8",
                                                 "reconnect.jitter": "0"})
        daemon = DaemonProcess(o)
        report = []
        try:
            daemon.wait_streaming()
            for outage in range(2):
                mark, first = len(daemon.lines), len(proxy.conns)
                streaming = proxy.wait_dump(count=outage + 1)
                refused0 = proxy.counters.refused
                proxy.refuse = True
                proxy.close_all()
                proxy.wait_for(lambda p, r=refused0: p.counters.refused >= r + 5, 30, "five refused attempts")
                proxy.refuse = False
                daemon.wait_streaming(nth=outage + 2)
                logged = [float(m.group(1)) for ln in daemon.lines[mark:] if (m := _BACKOFF.search(ln))]
                attempts = proxy.conns[first:]
                failed_at = [streaming.closed_at] + [c.closed_at for c in attempts[:-1]]
                actual = [round(c.opened_at - f, 2) for c, f in zip(attempts, failed_at)]
                report.append((logged, actual))
            print(f"\n[backoff] (logged, waited) per outage: {report}")
            for _logged, actual in report:  # the backoff itself
                for want, got in zip([0.1, 0.2, 0.4, 0.8, 0.8], actual):
                    assert want - 0.05 <= got <= want + 0.25, \
                        f"the delays waited do not double from 0.1 s to the 0.8 s cap: (logged, waited) {report}"
            for logged, actual in report:  # what the log says about it
                for i, (want, got) in enumerate(zip(logged, actual)):
                    assert want - 0.05 <= got <= want + 0.25, (
                        f"retry #{i + 1}: logged 'reconnecting in {want}s' but waited {got}s; "
                        f"(logged, waited) per outage: {report}")
        finally:
            if daemon.running:
                daemon.kill()


# =========================================================================== 3. network faults


@contextlib.contextmanager
def proxied(server, tmp_path: Path, **extra):
    """A FaultProxy in front of ``server`` and a ``binlogd run`` connected through it (TLS off)."""
    with FaultProxy(server.host, server.port) as proxy:
        o = base_overrides(server, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                "filters.include_schemas": SCHEMA, **extra})
        daemon = DaemonProcess(o)
        try:
            daemon.wait_streaming()
            yield proxy, daemon
        finally:
            if daemon.running:
                daemon.kill()


def run_drops(tmp_path: Path, drops: int, seed: int) -> dict:
    rng = random.Random(seed)
    with local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, rate=250, big_every=6, seed=seed)
        with proxied(srv, tmp_path) as (proxy, daemon):
            try:
                writer.start()
                kinds = Counter()
                for i in range(drops):
                    conn = proxy.wait_dump(count=i + 1, timeout=60)
                    r = rng.random()
                    n = rng.randint(1, 300) if r < 0.3 else rng.randint(300, 20_000) if r < 0.8 \
                        else rng.randint(20_000, 400_000)
                    align = "packet" if rng.random() < 0.25 else "byte"
                    proxy.drop_after(n, align=align, reset=rng.random() < 0.3)
                    proxy.wait_for(lambda p, c=conn: not c.open, 60, f"drop #{i + 1} after {n} bytes")
                    kinds[conn.cut or conn.closed_by] += 1
                    assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                proxy.wait_dump(count=drops + 1, timeout=60)
                time.sleep(0.5)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon, fail_on=None)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
            c = proxy.counters
            print(f"\n[network drops] {c.drops} cuts: {c.drops_mid_event} inside an event, "
                  f"{c.drops_mid_packet - c.drops_mid_event} inside another packet, {c.drops_at_boundary} between "
                  f"packets; {c.resets} by RST; {c.dumps} dumps over {c.accepted} connections; by cut {dict(kinds)}")
            assert c.drops == drops, c
            assert c.drops_mid_event >= drops // 3, f"too few cuts inside events: {c}"
            assert c.dumps >= drops + 1, c
        stats = check_exactly_once(srv, tmp_path / "sink", writer, "network drops")
        stats.update(drops=c.drops, mid_event=c.drops_mid_event, at_boundary=c.drops_at_boundary, resets=c.resets)
        return stats


def test_proxy_drops_mid_event(tmp_path):
    run_drops(tmp_path, drops=10, seed=81)


@pytest.mark.slow
def test_proxy_drops_mid_event_slow(tmp_path):
    run_drops(tmp_path, drops=SLOW_DROPS, seed=82)


def run_stalls(tmp_path: Path, stalls: int, heartbeat: float) -> list[float]:
    with local_server() as srv:
        create_tables(srv)
        writer = Writer(srv, rate=30, seed=9)
        with proxied(srv, tmp_path, **{"source.heartbeat_seconds": str(heartbeat)}) as (proxy, daemon):
            port = metrics_port(daemon)
            detections, reconnects = [], []
            try:
                for i in range(stalls):
                    if i % 2 == 1 and not writer.is_alive():
                        writer.start()  # odd stalls under load, even ones while idle (heartbeats only)
                    conn = proxy.wait_dump(count=i + 1, timeout=60)
                    time.sleep(0.6 * heartbeat)
                    t_stall = time.monotonic()
                    proxy.stall(3 * heartbeat + 2)
                    proxy.wait_for(lambda p, c=conn: not c.open, 3 * heartbeat + 5, f"stall #{i + 1}: no reconnect")
                    assert conn.closed_by == "client", f"stalled connection closed by {conn.closed_by}"
                    detected = conn.closed_at - max(conn.last_s2c_at or t_stall, conn.dump_at)
                    new = proxy.wait_dump(count=i + 2, timeout=30)
                    detections.append(detected)
                    reconnects.append(new.dump_at - t_stall)
                    assert detected <= 2 * heartbeat + 0.35, \
                        f"stall #{i + 1} detected {detected:.2f}s after the last byte (heartbeat {heartbeat}s)"
                    assert detected >= heartbeat, f"closed after {detected:.2f}s: not the heartbeat timeout?"
                if not writer.is_alive():
                    writer.start()
                time.sleep(0.5)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon, fail_on=None)
                timeouts = scrape_metric(port, "binlogd_errors_total", kind="timeout")
                assert timeouts >= stalls, f"binlogd_errors_total{{kind=timeout}} = {timeouts}"
                assert daemon.count(rf"no packet from the primary for {2 * heartbeat:g}s") >= stalls, daemon.stderr
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
        print(f"\n[stalls] heartbeat {heartbeat}s: silence detected after "
              f"{', '.join(f'{d:.2f}s' for d in detections)} (limit {2 * heartbeat:g}s); streaming again "
              f"{', '.join(f'{r:.2f}s' for r in reconnects)} after the stall began")
        check_exactly_once(srv, tmp_path / "sink", writer, "stalls")
        return detections


def test_proxy_stall_detected_within_two_heartbeats(tmp_path):
    run_stalls(tmp_path, stalls=2, heartbeat=1.0)


@pytest.mark.slow
def test_proxy_stall_detected_within_two_heartbeats_slow(tmp_path):
    run_stalls(tmp_path, stalls=SLOW_STALLS, heartbeat=1.0)


def test_proxy_bytes_one_at_a_time(tmp_path):
    with local_server() as srv:
        create_tables(srv)
        with FaultProxy(srv.host, srv.port) as proxy:
            proxy.one_byte = True  # from the handshake on
            o = base_overrides(srv, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                 "filters.include_schemas": SCHEMA})
            writer = Writer(srv, total=60, rate=40, seed=5)
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming(timeout=60)
                writer.start()
                writer.wait_count(30, timeout=60)
                rc = daemon.terminate()  # and resume, still one byte at a time
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
                daemon = DaemonProcess(o)
                daemon.wait_streaming(timeout=60)
                writer.wait_count(60, timeout=60)
                writer.stop()
                wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=60, daemon=daemon)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                writer.halt()
                if daemon.running:
                    daemon.kill()
            c = proxy.counters
            print(f"\n[one byte at a time] {c.bytes_s2c} server bytes in {c.s2c_sends} sends, "
                  f"{c.s2c_packets} packets, {c.dumps} dumps")
            assert c.s2c_sends == c.bytes_s2c and c.bytes_s2c > 10_000, c
            assert daemon.count(r"reconnect") == 0, f"one-byte delivery caused reconnects:\n{daemon.stderr}"
        check_exactly_once(srv, tmp_path / "sink", writer, "one byte at a time")


def test_proxy_slow_link_large_event(tmp_path):
    """Bytes keep coming, but one event takes longer than 2 × heartbeat to arrive.

    The connection is alive (MySQL's own replica applies slave_net_timeout to each socket read, not to a
    whole packet), so the daemon must not give up on it and start over, which would repeat forever.
    """
    heartbeat = 0.5
    with local_server() as srv:
        create_tables(srv)
        with FaultProxy(srv.host, srv.port) as proxy:
            o = base_overrides(srv, tmp_path, **{"source.port": str(proxy.port), "source.tls.mode": "disabled",
                                                 "filters.include_schemas": SCHEMA,
                                                 "source.heartbeat_seconds": str(heartbeat)})
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming()
                proxy.s2c_rate = 50_000  # bytes/s: each ~120 KB row event below takes ~2.4 s > 2 × 0.5 s
                conn = srv.connect(database=SCHEMA)
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO b (id, mk, note) VALUES (1, 1, 'big')")
                    cur.execute("INSERT INTO a (id, mk, v, big) VALUES (4, 1, 'x', %s), (5, 1, 'y', %s)",
                                ("p" * 120_000, "q" * 120_000))
                conn.close()
                caught_up = None
                try:
                    wait_caught_up(srv, tmp_path / "checkpoint.json", timeout=15, daemon=daemon, fail_on=None)
                except AssertionError as exc:
                    caught_up = exc
                timeouts = daemon.count("no packet from the primary")
                print(f"\n[slow link] {proxy.counters.dumps} dumps, {timeouts} heartbeat timeouts, "
                      f"{proxy.counters.bytes_s2c} bytes delivered, caught up: {caught_up is None}")
                assert timeouts == 0 and caught_up is None, (
                    f"a live but slow connection was declared dead {timeouts} times over {proxy.counters.dumps} "
                    f"dumps ({proxy.counters.bytes_s2c} bytes delivered); caught up: {caught_up or 'yes'}\n"
                    + "\n".join(daemon.lines[-6:]))
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
            finally:
                if daemon.running:
                    daemon.kill()


# =========================================================================== 4. sink faults


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "16m"):
    """A real tmpfs of ``size`` mounted at ``path`` (root only); skips the test when it cannot mount."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real tmpfs needs root (the in-process ENOSPC/EIO test covers the rest)")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "binlogd-faults", str(path)],
                       capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill_disk(path: Path) -> int:
    """Write ``path`` until not even one byte fits; returns the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as fh:
        for chunk in (1 << 20, 1 << 16, 4096, 1):
            block = b"\0" * chunk
            while True:
                try:
                    n = fh.write(block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
                written += n
                if n < chunk:
                    break
    return written


class Refiller(threading.Thread):
    """Keeps the full disk full: grabs any space freed (the daemon truncating its uncommitted tail)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True, name="refiller")
        self.path, self.stop_flag, self.grabbed = path, threading.Event(), 0

    def run(self) -> None:
        with open(self.path, "ab", buffering=0) as fh:
            while not self.stop_flag.wait(0.005):
                for chunk in (65536, 4096, 1):
                    try:
                        self.grabbed += fh.write(b"\0" * chunk)
                    except OSError:
                        continue


def _checkpoint_position(path: Path):
    cp = read_checkpoint(path)
    return (cp["position"]["file"], cp["position"]["pos"], cp["sink"].get("file"), cp["sink"].get("offset"))


def _hold_during_fault(cp_path: Path, seconds: float, sink_dir: Path) -> tuple:
    """The checkpoint must not move for ``seconds``; it never claims more sink bytes than exist."""
    first = _checkpoint_position(cp_path)
    deadline = time.monotonic() + seconds
    samples = 0
    while time.monotonic() < deadline:
        now = _checkpoint_position(cp_path)
        assert now == first, f"the checkpoint moved during the sink fault: {first} -> {now}"
        f = sink_dir / now[2]
        assert f.stat().st_size >= now[3], f"checkpoint offset {now[3]} past the end of {f}"
        samples += 1
        time.sleep(0.1)
    return first, samples


def test_sink_disk_full_real_tmpfs(tmp_path):
    with local_server() as srv:
        create_tables(srv)
        fs = tmp_path / "fs"
        with small_tmpfs(fs):
            cp_path = fs / "checkpoint.json"
            o = base_overrides(srv, fs, **{"filters.include_schemas": SCHEMA, "reconnect.max_seconds": "0.5"})
            writer = Writer(srv, rate=150, seed=11)
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming()
                port = metrics_port(daemon)
                writer.start()
                writer.wait_count(100, timeout=30)
                errors0 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                filler = fs / "filler"
                filled = fill_disk(filler)
                refiller = Refiller(filler)
                refiller.start()
                daemon.wait_for_line(r"ERROR .*No space left on device.*checkpoint stays at", timeout=30)
                held, samples = _hold_during_fault(cp_path, 2.0, fs / "sink")
                errors1 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                assert errors1 > errors0, f"binlogd_errors_total{{kind=sink}} {errors0} -> {errors1}"
                assert daemon.running, f"binlogd exited {daemon.proc.returncode} on a full disk:\n{daemon.stderr}"
                refiller.stop_flag.set()
                refiller.join(10)
                filler.unlink()  # the disk has room again
                wait_until(lambda: _checkpoint_position(cp_path) != held, 30, what="the checkpoint moving again")
                writer.wait_count(writer.count + 100, timeout=30)
                writer.stop()
                wait_caught_up(srv, cp_path, timeout=60, daemon=daemon, fail_on=None)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
                n_err = daemon.count(r"No space left on device")
                print(f"\n[tmpfs full] filled {filled} bytes; {n_err} ENOSPC log lines; checkpoint held at {held} "
                      f"over {samples} samples; binlogd_errors_total{{kind=sink}} {errors0:g} -> {errors1:g}")
            finally:
                writer.halt()
                if daemon.running:
                    daemon.kill()
            check_exactly_once(srv, fs / "sink", writer, "tmpfs full")


class _Faults:
    """What the patched sink I/O does now: None, "enospc" (writes/flushes) or "eio" (fsync)."""

    def __init__(self):
        self.mode: str | None = None
        self.hits = Counter()


class _FaultyFile:
    """The sink's file object, whose write/flush/close fail with ENOSPC while ``faults.mode == "enospc"``
    (half of a failing write reaches the file first, as on a disk that fills up mid-write)."""

    def __init__(self, real, faults: _Faults):
        self._real, self._faults = real, faults

    def _enospc(self, what: str) -> OSError:
        self._faults.hits[what] += 1
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, data):
        if self._faults.mode == "enospc":
            self._real.write(data[: len(data) // 2])
            raise self._enospc("write")
        return self._real.write(data)

    def flush(self):
        if self._faults.mode == "enospc":
            raise self._enospc("flush")
        return self._real.flush()

    def close(self):
        try:
            self._real.close()
        finally:
            if self._faults.mode == "enospc":
                raise self._enospc("close")

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


class _FaultyOs:
    """``os`` for the sink module: fsync fails with EIO while ``faults.mode == "eio"``."""

    def __init__(self, faults: _Faults):
        self._faults = faults

    def fsync(self, fd):
        if self._faults.mode == "eio":
            self._faults.hits["fsync"] += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.fsync(fd)

    def __getattr__(self, name):
        return getattr(os, name)


def test_sink_write_and_fsync_failures_in_process(tmp_path, monkeypatch):
    import builtins

    import binlogd.daemon.sinks.base as base
    import binlogd.daemon.sinks.jsonl as jsonl

    faults = _Faults()
    monkeypatch.setattr(jsonl, "open", lambda *a, **k: _FaultyFile(builtins.open(*a, **k), faults), raising=False)
    monkeypatch.setattr(jsonl, "os", _FaultyOs(faults))
    monkeypatch.setattr(base, "os", _FaultyOs(faults))  # the sink's fsync (sync_all) lives there
    with local_server() as srv:
        create_tables(srv)
        cfg = in_process_config(srv, tmp_path, **{"filters.include_schemas": SCHEMA,
                                                  "reconnect.max_seconds": "0.5"})
        cp_path = tmp_path / "checkpoint.json"
        d = LoggedDaemon(cfg).start()
        writer = Writer(srv, rate=150, big_every=20, seed=13)
        report = []
        try:
            port = d.daemon.metrics_server.port
            writer.start()
            for mode, text in (("enospc", "No space left on device"), ("eio", "Input/output error")):
                writer.wait_count(writer.count + 40, timeout=30)
                errors0 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                logged0 = d.count(text)
                faults.mode = mode
                wait_until(lambda t=text, n=logged0: d.count(rf"ERROR .*{t}.*checkpoint stays at") > n, 30,
                           what=f"an ERROR line about {mode}")
                held, samples = _hold_during_fault(cp_path, 1.5, tmp_path / "sink")
                errors1 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                assert errors1 > errors0, f"binlogd_errors_total{{kind=sink}} {errors0} -> {errors1}"
                assert d.thread.is_alive(), f"the daemon stopped (rc={d.rc}):\n" + "\n".join(d.lines)
                faults.mode = None  # healed
                wait_until(lambda h=held: _checkpoint_position(cp_path) != h, 30, what="the checkpoint moving again")
                report.append(f"{mode}: {d.count(text) - logged0} ERROR lines, checkpoint held at {held[:2]} over "
                              f"{samples} samples, errors_total{{kind=sink}} {errors0:g} -> {errors1:g}")
            writer.wait_count(writer.count + 30, timeout=30)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=60)
            rc = d.stop()
            assert rc == 0, f"rc {rc}:\n" + "\n".join(d.lines)
        finally:
            faults.mode = None
            writer.halt()
            if d.thread.is_alive():
                d.stop()
        print(f"\n[sink faults in-process] {'; '.join(report)}; patched calls failed: {dict(faults.hits)}")
        assert faults.hits["fsync"] and (faults.hits["write"] or faults.hits["flush"]), faults.hits
        check_exactly_once(srv, tmp_path / "sink", writer, "sink faults in-process")


# =========================================================================== 5. bad input (found by the fuzz run)


def test_fuzz_found_zstd_frame_size_is_bounded(corpus):
    """Found by the one-million-case run of ``test_damaged_file_same_through_both_readers_slow``
    (``tests/faults/test_fuzz_decoder.py``; pinned here because that file is not this suite's to edit).

    Bit 7 of byte 273 of ``mysql-bin.compressed`` is bit 7 of the zstd Frame_Header_Descriptor inside
    the TRANSACTION_PAYLOAD at 236. Flipped, the frame declares a 4-byte content size read from the
    bytes that follow (0xa6000dbc, 2.6 GB). The payload's own uncompressed-size field still says 960.
    The decoder must fail with its own error, without allocating what a corrupt header claims.
    """
    from tests.faults.test_fuzz_decoder import run_damaged_case

    run_damaged_case("mysql-binlog-connector-java/mysql-bin.compressed", ((273, 128),), 0)


# =========================================================================== 6. security

SECRET = "Zq9-TLS-s3cr3t-Pw!x7"
TLS_USER = "tlsrepl"


def make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate it signs (SAN IP 127.0.0.1, CN binlogd-test-server), and an unrelated CA."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        return _certs_cryptography(d)
    except ImportError:
        pass
    if shutil.which("openssl") is None:
        pytest.skip("neither the cryptography package nor the openssl CLI is available")
    return _certs_openssl(d)


def _certs_cryptography(d: Path) -> dict[str, Path]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                               critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return key, cert

    def pem(cert):
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key, ca_cert = ca("binlogd test CA")
    _, other_cert = ca("some other CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("binlogd-test-server")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = {"ca": d / "ca.pem", "other_ca": d / "other-ca.pem", "cert": d / "server.pem", "key": d / "server.key"}
    out["ca"].write_bytes(pem(ca_cert))
    out["other_ca"].write_bytes(pem(other_cert))
    out["cert"].write_bytes(pem(cert))
    out["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return out


def _certs_openssl(d: Path) -> dict[str, Path]:
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
            "-subj", f"/CN=binlogd {ca}", "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=binlogd-test-server",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-days", "30", "-extfile", str(d / "ext.cnf"), "-out", str(d / "server.pem"))
    return {"ca": d / "ca.pem", "other_ca": d / "other-ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


class SocketServer(LocalServer):
    """A LocalServer whose own admin and writer connections use the Unix socket (TCP needs TLS there)."""

    def sql(self, statement: str, *, database: str | None = None, timeout: float = 60.0) -> list[tuple]:
        return _run_sql(self.binaries, statement, unix_socket=self.socket, user=self.user, password=self.password,
                        database=database, timeout=timeout)

    def connect(self, *, repl: bool = False, **overrides):
        overrides.setdefault("autocommit", True)
        kw = dict(unix_socket=str(self.socket), user=self.user, password=self.password)
        kw.update(overrides)
        return pymysql.connect(**kw)


def _listening(pid: int) -> list[tuple[str, int]]:
    """The TCP sockets process ``pid`` listens on, as (address, port)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = []
    for table, fam in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] != "0A" or f[9] not in inodes:  # 0A = LISTEN
                    continue
                addr, port = f[1].split(":")
                raw = bytes.fromhex(addr)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.append((socket.inet_ntop(fam, raw), int(port, 16)))
    return out


def _chain_text(exc: BaseException) -> str:
    """str/repr/traceback of an exception and everything it chains to (suppressed context included)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts += [str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(getattr(exc, "args", ()))]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def test_tls_verify_identity_and_secrets(tmp_path):
    certs = make_certs(tmp_path / "certs")
    tls_args = [f"--ssl-ca={certs['ca']}", f"--ssl-cert={certs['cert']}", f"--ssl-key={certs['key']}",
                "--require-secure-transport=ON"]
    with local_server(tls_args, cls=SocketServer) as srv:
        assert srv.sql("SELECT @@have_ssl")[0][0] == "YES", srv.sql("SHOW VARIABLES LIKE '%ssl%'")
        create_tables(srv)
        srv.sql(f"CREATE USER '{TLS_USER}'@'%' IDENTIFIED BY '{SECRET}' REQUIRE SSL")
        srv.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{TLS_USER}'@'%'")
        env = {"BINLOGD_SOURCE__PASSWORD": SECRET}  # not on the command line, where ps would show it

        def overrides(workdir, **extra):
            o = base_overrides(srv, workdir, **{"source.user": TLS_USER, "filters.include_schemas": SCHEMA,
                                                "source.tls.mode": "verify_identity",
                                                "source.tls.ca_file": str(certs["ca"]), **extra})
            del o["source.password"]
            return o

        captured: list[str] = []
        results = {}
        problems: list[str] = []  # checked last, so that every case runs and is reported

        # -- verify_identity with the right CA: streams; metrics only on the configured address
        mport = free_port()
        o = overrides(tmp_path / "ok", **{"metrics.listen": f"127.0.0.2:{mport}"})
        writer = Writer(srv, total=40, rate=100, seed=3)
        daemon = DaemonProcess(o, env=env)
        try:
            daemon.wait_streaming(timeout=60)
            writer.start()
            writer.wait_count(40, timeout=60)
            writer.stop()
            wait_caught_up(srv, tmp_path / "ok" / "checkpoint.json", timeout=60, daemon=daemon)
            with urllib.request.urlopen(f"http://127.0.0.2:{mport}/metrics", timeout=5) as resp:
                body = resp.read().decode()
            for path in ("/healthz", "/readyz"):
                with contextlib.suppress(Exception), urllib.request.urlopen(f"http://127.0.0.2:{mport}{path}",
                                                                          timeout=5) as resp:
                    captured.append(resp.read().decode())
            captured.append(body)
            assert "binlogd_transactions_total" in body
            listening = _listening(daemon.pid)
            assert listening == [("127.0.0.2", mport)], f"the daemon listens on {listening}"
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", mport), timeout=2):
                pass
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc}:\n{daemon.stderr}"
            results["verify_identity"] = f"streamed {len(writer.committed)} transactions, exit {rc}"
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()
            captured.append(daemon.stderr)
        check_exactly_once(srv, tmp_path / "ok" / "sink", writer, "TLS verify_identity")

        # -- failures, fatal at once (README's exit codes): (what, overrides, expected text, exit code)
        cases = [
            ("wrong CA", {"source.tls.ca_file": str(certs["other_ca"])}, r"certificate verify failed", 6),
            ("wrong host name", {"source.host": "localhost"}, r"certificate verify failed|match|mismatch", 6),
            # the user is REQUIRE SSL and the server require_secure_transport=ON: refused as an auth failure
            ("TLS off", {"source.tls.mode": "disabled"}, r"authentication failed|insecure transport", 3),
        ]
        for what, extra, pattern, code in cases:
            o = overrides(tmp_path / what.replace(" ", "_"), **{"reconnect.max_attempts": "3",
                                                              "reconnect.initial_seconds": "0.1", **extra})
            d = DaemonProcess(o, env=env)
            try:
                rc = d.wait(60)
            finally:
                if d.running:
                    d.kill()
            captured.append(d.stderr)
            errors = [ln for ln in d.stderr.splitlines() if re.search(r" (ERROR|WARNING) ", ln)]
            results[what] = f"exit {rc}; first message: {errors[0] if errors else d.stderr[:300]}"
            assert "streaming from" not in d.stderr, f"{what}: it streamed:\n{d.stderr}"
            assert "Traceback" not in d.stderr, d.stderr
            assert rc == code, f"{what}: exit {rc}, documented {code}:\n{d.stderr}"
            if not (errors and re.search(pattern, errors[0], re.I)):
                problems.append(f"{what}: no clear TLS error (wanted /{pattern}/), exit {rc}:\n{d.stderr}")

        # -- verify_ca checks the chain only: "localhost" is fine there
        o = overrides(tmp_path / "verify_ca", **{"source.host": "localhost", "source.tls.mode": "verify_ca"})
        d = DaemonProcess(o, env=env)
        try:
            d.wait_streaming(timeout=60)
            assert d.terminate() == 0
        finally:
            if d.running:
                d.kill()
            captured.append(d.stderr)
        results["verify_ca + localhost"] = "streamed"

        # -- exceptions raised in-process (wrong CA; wrong password over TLS) and config reprs never hold it
        from binlogd.daemon.config import load_config
        from binlogd.daemon.source import SourceConnection

        def attempt(**extra):
            cfg = load_config(None, env={"BINLOGD_SOURCE__PASSWORD": SECRET}, overrides=overrides(tmp_path / "x",
                                                                                                   **extra))
            captured.extend([repr(cfg), str(cfg), repr(cfg.source), str(cfg.source.password)])

            async def go():
                conn = SourceConnection(cfg.source)
                try:
                    await conn.open()
                finally:
                    await conn.close()

            with pytest.raises(Exception) as info:
                asyncio.run(go())
            captured.append(_chain_text(info.value))
            return info.value

        exc = attempt(**{"source.tls.ca_file": str(certs["other_ca"])})
        results["in-process wrong CA"] = f"{type(exc).__name__}(kind={getattr(exc, 'kind', None)}): {exc}"
        if not re.search(r"certificate verify failed", str(exc), re.I):
            problems.append(f"in-process wrong CA: the exception does not say why: {exc!r}")
        srv.sql(f"ALTER USER '{TLS_USER}'@'%' IDENTIFIED BY 'other-{SECRET}'")
        exc = attempt()
        results["in-process wrong password"] = f"{type(exc).__name__}(kind={getattr(exc, 'kind', None)}): {exc}"
        assert getattr(exc, "kind", None) == "auth", exc

        print("\n[TLS] " + "\n[TLS] ".join(f"{k}: {v}" for k, v in results.items()))
        leaks = [text[:200] for text in captured if SECRET in text]
        assert not leaks, f"the password appears in captured output: {leaks}"
        assert not problems, "\n\n".join(problems)
