"""The fault suites' shared load and checks (tests/faults/test_faults_*.py).

Fault suite for ``binlogd run`` (issue 6): nothing lost, nothing duplicated, whatever fails.

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
3. network (``tests/support/proxy.py``): connections cut mid-event, mid-packet and between two events
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

import contextlib
import errno
import logging
import os
import random
import re
import shutil
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pymysql
import pytest

from binlogd.cli.localserver import LocalServer
from tests.support.daemon import (
    DaemonProcess,
    InProcessDaemon,
    assert_sink_matches,
    base_overrides,
    metric,
    parse_metrics,
    read_changes,
    replay,
    scrape,
    wait_until,
)


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
    positions = Counter(c["source"]["id"] for c in changes)
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
    assert not dup_positions, f"a change id (source.id) twice: {dup_positions[:10]}"
    state = replay(changes, pk=PK, schemas=[SCHEMA])
    assert_sink_matches(server, SCHEMA, TABLES, state)
    return stats


# =========================================================================== helpers


@contextlib.contextmanager
def local_server(extra_args=(), cls=LocalServer, binaries=None):
    """A started ``cls`` with FULL row metadata on ``binaries`` (default: the machine's server), cleaned up after."""
    srv = cls(extra_args=["--binlog-row-metadata=FULL", *extra_args], binaries=binaries)
    try:
        srv.start()
        yield srv
    finally:
        srv.cleanup()


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


