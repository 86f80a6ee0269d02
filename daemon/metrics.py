"""Prometheus metrics for the daemon (ARCHITECTURE.md, "Metrics"); daemon/http.py serves them.

:class:`Metrics` owns its own :class:`prometheus_client.CollectorRegistry` (never the global
one), so a process or a test may hold many. Its methods are called by the daemon's single
consumer and are cheap: labelled children are cached in dicts; the per-event figures (events
and bytes received, the position) are kept in plain ints and moved into their metrics by
:meth:`Metrics.flush`, which runs before every collection of the registry; and the time-derived
gauges (lag, seconds since last event, checkpoint age) are computed at scrape time from the
injected ``clock`` (wall seconds, ``time.time`` by default), not on every event.

Choices, stated once:

- ``binlogd_rows_total`` always carries ``schema``, ``table`` and ``op``. Without
  ``table_labels=True`` the schema and table values are ``""`` (Prometheus treats an empty
  label as absent), so the series count stays at one per op.
- Lag is ``now - timestamp`` of the last real event (non-artificial, timestamp > 0), never
  negative. It is 0 before any real event and after a heartbeat that came after the last
  real event (the primary only sends heartbeats when it has nothing else to send), until the
  next real event.
- ``binlogd_seconds_since_last_event`` is the time since the last real event was received,
  and ``binlogd_checkpoint_age_seconds`` the time since the last checkpoint save; before the
  first one both count from the creation of :class:`Metrics`.
- ``binlogd_binlog_file_index`` is the numeric suffix of the file name (``mysql-bin.000042``
  gives 42), -1 when the name has none.
- Readiness: up (streaming) and the checkpoint fresh, meaning saved within the allowed age or
  no transaction counted by :meth:`Metrics.transaction` since the last save.

Nothing passed to these methods should be secret; only names, counts and positions are kept.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

__all__ = ["Metrics", "file_index"]

_FILE_INDEX = re.compile(r"\.(\d+)$")


def file_index(name: str) -> int | None:
    """Return the numeric suffix of a binlog file name (``mysql-bin.000042`` → 42), or None."""
    m = _FILE_INDEX.search(name)
    return int(m.group(1)) if m else None


class Metrics:
    """The daemon's metrics, in a private registry.

    Fields:
        registry: the :class:`CollectorRegistry` holding every ``binlogd_*`` metric.
        table_labels: whether ``binlogd_rows_total`` is split by schema and table.
        clock: callable returning wall-clock seconds (injected so tests control time).
        upload_pending, upload_bytes, upload_errors: the archive uploader's gauge and counters (set and
            incremented by :class:`binlogd.daemon.sinks.upload.Uploader` directly).
    """

    def __init__(self, *, table_labels: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.table_labels = table_labels
        self.clock = clock
        r = self.registry
        # Registered first, so every collection (scrape, exposition, get_sample_value) flushes the
        # per-event counts into the metrics below before they are read.
        r.register(_FlushFirst(self.flush))
        self._events = Counter("binlogd_events_total", "Binlog events received, by event type", ["type"], registry=r)
        self._rows = Counter("binlogd_rows_total", "Rows decoded, by schema, table (opt-in) and op",
                             ["schema", "table", "op"], registry=r)
        self._bytes = Counter("binlogd_bytes_received_total", "Bytes of binlog events received", registry=r)
        self._transactions = Counter("binlogd_transactions_total", "Transactions committed in the stream",
                                     registry=r)
        self._reconnects = Counter("binlogd_reconnects_total", "Reconnects to the primary", registry=r)
        self._errors = Counter("binlogd_errors_total", "Errors, by kind", ["kind"], registry=r)
        self._schema_mismatch = Counter(
            "binlogd_schema_mismatch_total", "TABLE_MAPs whose columns stay positional: no definition of the table "
            "(schema history, then the server) agrees with them", ["schema", "table"], registry=r)
        self._unnamed = Counter("binlogd_columns_unnamed_total",
                                "Row events whose columns had to be named @1, @2, ...", registry=r)
        self._sink_commits = Counter("binlogd_sink_commits_total",
                                     "Durable syncs of the sink, each followed by a checkpoint save; one sync "
                                     "covers every transaction flushed since the last (not a transaction count)",
                                     registry=r)
        Gauge("binlogd_lag_seconds", "Now minus the timestamp of the last real event; 0 when caught up",
              registry=r).set_function(self.lag)
        Gauge("binlogd_seconds_since_last_event", "Seconds since the last real event was received",
              registry=r).set_function(self.seconds_since_last_event)
        Gauge("binlogd_checkpoint_age_seconds", "Seconds since the checkpoint was last saved",
              registry=r).set_function(self.checkpoint_age)
        self._heartbeat_ts = Gauge("binlogd_last_heartbeat_timestamp_seconds",
                                   "Wall-clock time of the last heartbeat received (0 before any)", registry=r)
        self._position = Gauge("binlogd_position", "Next position in the current binlog file", ["file"], registry=r)
        self._file_index = Gauge("binlogd_binlog_file_index", "Numeric suffix of the current binlog file name",
                                 registry=r)
        self._queue_depth = Gauge("binlogd_queue_depth", "Events waiting between reader and consumer", registry=r)
        self._up = Gauge("binlogd_up", "1 while streaming from the primary, else 0", registry=r)
        self._source_info = Gauge("binlogd_source_info", "1 for the server binlogd streams from now",
                                  ["host", "server_id", "server_uuid", "version"], registry=r)
        self._failovers = Counter("binlogd_failovers_total", "Switches from one source server to another",
                                  registry=r)
        self._source_labels: tuple[str, str, str, str] | None = None
        self._file_index.set(-1)
        # The archive's uploads (daemon/sinks/upload.py, its worker thread): prometheus_client is thread-safe.
        self.upload_pending = Gauge("binlogd_upload_pending_files", "Closed archive files not yet uploaded and "
                                    "verified", registry=r)
        self.upload_bytes = Counter("binlogd_upload_bytes_total", "Bytes of archive files uploaded and verified",
                                    registry=r)
        self.upload_errors = Counter("binlogd_upload_errors_total", "Failed uploads or verifications of archive "
                                     "files (each retried)", registry=r)

        self._event_children: dict[str, object] = {}
        self._row_children: dict[tuple[str, str, str], object] = {}
        self._error_children: dict[str, object] = {}
        self._file: str | None = None
        self._file_child = None
        # Per-event figures in plain Python objects, moved into the prometheus metrics by flush().
        # Only the consumer writes them (running totals and one tuple, each assignment atomic);
        # flush(), from the consumer or a scrape thread, pushes what changed since its last run.
        self._event_counts: dict[str, int] = {}   # type name -> events counted (running total)
        self._event_flushed: dict[str, int] = {}  # type name -> total already added to the counter
        self._bytes_count = 0
        self._bytes_flushed = 0
        self._transaction_count = 0
        self._transaction_flushed = 0
        self._where: tuple[str, int] | None = None  # (file, pos) last set by position()
        self._flush_lock = threading.Lock()
        start = clock()
        # (binlog timestamp of the last real event, caught up?) in one tuple so a scrape sees both at once.
        self._lag_state: tuple[int, bool] = (0, True)
        self._last_event_at = start
        self._checkpoint_at = start
        self._pending = 0
        self._is_up = False

    # -- called by the consumer ------------------------------------------------------------

    def event(self, type_name: str, timestamp: int, nbytes: int, artificial: bool) -> None:
        """Count one event of ``nbytes`` bytes; a real one (not artificial, timestamp > 0) sets lag's base.

        The counts reach ``binlogd_events_total`` and ``binlogd_bytes_received_total`` at the next
        :meth:`flush` (every collection of the registry runs one first).
        """
        counts = self._event_counts
        counts[type_name] = counts.get(type_name, 0) + 1
        self._bytes_count += nbytes
        if not artificial and timestamp > 0:
            self._lag_state = (timestamp, False)
            self._last_event_at = self.clock()

    def events(self, counts: dict[str, int], timestamp: int, nbytes: int) -> None:
        """:meth:`event` for a run of real events: ``counts`` by type name, the last one's timestamp."""
        totals = self._event_counts
        for type_name, n in counts.items():
            totals[type_name] = totals.get(type_name, 0) + n
        self._bytes_count += nbytes
        self._lag_state = (timestamp, False)
        self._last_event_at = self.clock()

    def heartbeat(self) -> None:
        """Mark the stream caught up (lag 0 until the next real event) and stamp the heartbeat time."""
        self._lag_state = (self._lag_state[0], True)
        self._heartbeat_ts.set(self.clock())

    def rows(self, schema: str, table: str, op: str, n: int) -> None:
        """Count ``n`` rows of ``op`` (insert/update/delete); schema/table kept only with table_labels."""
        key = (schema, table, op) if self.table_labels else ("", "", op)
        child = self._row_children.get(key)
        if child is None:
            child = self._row_children[key] = self._rows.labels(*key)
        child.inc(n)

    def transaction(self) -> None:
        """Count one committed transaction (in ``binlogd_transactions_total`` from the next :meth:`flush`);
        it stays pending for readiness until the next checkpoint save."""
        self._transaction_count += 1
        self._pending += 1

    def sink_commit(self) -> None:
        """Count one durable sync of the sink (it covers one or more transactions)."""
        self._sink_commits.inc()

    def position(self, file: str, pos: int) -> None:
        """Set the current position (shown at the next :meth:`flush`); on a new file the old file's
        series is removed."""
        self._where = (file, pos)

    def flush(self) -> None:
        """Move the event, byte and transaction counts and the position into their prometheus metrics.

        Called before every collection of the registry; safe from any thread.
        """
        with self._flush_lock:
            for type_name, total in list(self._event_counts.items()):
                delta = total - self._event_flushed.get(type_name, 0)
                if delta:
                    child = self._event_children.get(type_name)
                    if child is None:
                        child = self._event_children[type_name] = self._events.labels(type_name)
                    child.inc(delta)
                    self._event_flushed[type_name] = total
            total = self._bytes_count
            if total != self._bytes_flushed:
                self._bytes.inc(total - self._bytes_flushed)
                self._bytes_flushed = total
            total = self._transaction_count
            if total != self._transaction_flushed:
                self._transactions.inc(total - self._transaction_flushed)
                self._transaction_flushed = total
            where = self._where
            if where is not None:
                file, pos = where
                if file != self._file:
                    if self._file is not None:
                        self._position.remove(self._file)
                    self._file = file
                    self._file_child = self._position.labels(file)
                    idx = file_index(file)
                    self._file_index.set(-1 if idx is None else idx)
                self._file_child.set(pos)

    def checkpoint_saved(self) -> None:
        """Record a checkpoint save now; no transaction is pending after it."""
        self._checkpoint_at = self.clock()
        self._pending = 0

    def reconnect(self) -> None:
        """Count one reconnect."""
        self._reconnects.inc()

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (a short fixed word such as "network", "decode", "sink")."""
        child = self._error_children.get(kind)
        if child is None:
            child = self._error_children[kind] = self._errors.labels(kind)
        child.inc()

    def queue_depth(self, n: int) -> None:
        """Set the number of events waiting in the reader → consumer queue."""
        self._queue_depth.set(n)

    def set_up(self, up: bool) -> None:
        """Set whether the daemon is streaming (binlogd_up 1) or not (0)."""
        self._is_up = bool(up)
        self._up.set(1 if up else 0)

    def schema_mismatch(self, schema: str, table: str) -> None:
        """Count a TABLE_MAP left with positional names although the table was looked up."""
        self._schema_mismatch.labels(schema, table).inc()

    def unnamed_columns(self) -> None:
        """Count one row event whose columns had to be named @1, @2, ..."""
        self._unnamed.inc()

    def source(self, host: str, server_id: int, server_uuid: str, version: str) -> None:
        """Set the server streamed from (``host:port``): its ``binlogd_source_info`` series is 1, the previous
        source's series is removed."""
        labels = (host, str(server_id), server_uuid, version)
        if labels != self._source_labels:
            if self._source_labels is not None:
                self._source_info.remove(*self._source_labels)
            self._source_info.labels(*labels).set(1)
            self._source_labels = labels

    def failover(self) -> None:
        """Count one switch to another source server."""
        self._failovers.inc()

    # -- read at scrape time -----------------------------------------------------------------

    def lag(self) -> float:
        """Return seconds behind the primary: 0 when caught up or before any real event, never negative."""
        ts, caught_up = self._lag_state
        if caught_up or ts <= 0:
            return 0.0
        return max(0.0, self.clock() - ts)

    def seconds_since_last_event(self) -> float:
        """Return seconds since the last real event was received (since creation before any)."""
        return max(0.0, self.clock() - self._last_event_at)

    def checkpoint_age(self) -> float:
        """Return seconds since the last checkpoint save (since creation before any)."""
        return max(0.0, self.clock() - self._checkpoint_at)

    @property
    def pending(self) -> int:
        """Transactions counted since the last checkpoint save."""
        return self._pending

    def readiness(self, max_checkpoint_age: float) -> tuple[bool, str]:
        """Return (ready, reason): ready when streaming and the checkpoint is fresh.

        Fresh means saved within ``max_checkpoint_age`` seconds, or no transaction pending since
        the last save. The reason is "ready" or says what is wrong.
        """
        if not self._is_up:
            return False, "not streaming"
        age = self.checkpoint_age()
        if self._pending and age > max_checkpoint_age:
            return False, (f"checkpoint stale: saved {age:.1f}s ago (max {max_checkpoint_age:g}s) "
                           f"with {self._pending} transaction(s) pending")
        return True, "ready"

    def exposition(self) -> bytes:
        """Return the registry in the Prometheus text format."""
        return generate_latest(self.registry)


class _FlushFirst:
    """A collector with no metrics of its own: collecting it runs ``flush`` (see Metrics.flush)."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        self._flush()
        return []
