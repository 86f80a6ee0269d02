"""Prometheus metrics for the daemon (ARCHITECTURE.md, "Metrics"); daemon/operations/http.py serves them.

:class:`Metrics` owns its own :class:`prometheus_client.CollectorRegistry` (never the global
one), so a process or a test may hold many. Its methods are called by the daemon's single
consumer and are cheap: every figure is kept in plain Python objects and moved into its metric
by :meth:`Metrics.flush`, which runs before every collection of the registry; the registry and
its metrics are made at the first collection (:attr:`Metrics.registry`), so prometheus_client
(tens of milliseconds to import) is not loaded on the daemon's way to its first event, nor at all
while nothing scrapes. The time-derived gauges (lag, seconds since last event, checkpoint age) are
computed at scrape time from the injected ``clock`` (wall seconds, ``time.time`` by default), not
on every event.

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
- High availability (``[ha]``): ``binlogd_ha_active`` is 1 on the active instance and 0 on a standby (with
  ``mode = "off"`` 1 once started: the one instance is the active one); ``binlogd_ha_epoch`` the lease's epoch
  held (0 while standing by). A standby is ready while it can reach the broker holding the lease: it is doing
  its job, and a rolling update must not wait for it to become the active one.
- Each figure has one writer thread at a time (the consumer's, or the archive uploader's for
  ``upload_*``); a collection reads them from any thread.

Nothing passed to these methods should be secret; only names, counts and positions are kept.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

__all__ = ["Metrics", "file_index"]

_FILE_INDEX = re.compile(r"\.(\d+)$")
_COUNTER, _GAUGE, _CLOCKED = "counter", "gauge", "clocked"
# (kind, key, name, help, label names), in the order the registry lists them. A counter's or gauge's
# figures are kept under its key in Metrics._counts / Metrics._series; a clocked gauge is a method's value.
_METRICS = (
    (_COUNTER, "events", "binlogd_events_total", "Binlog events received, by event type", ("type",)),
    (_COUNTER, "rows", "binlogd_rows_total", "Rows decoded, by schema, table (opt-in) and op",
     ("schema", "table", "op")),
    (_COUNTER, "bytes", "binlogd_bytes_received_total", "Bytes of binlog events received", ()),
    (_COUNTER, "transactions", "binlogd_transactions_total", "Transactions committed in the stream", ()),
    (_COUNTER, "reconnects", "binlogd_reconnects_total", "Reconnects to the primary", ()),
    (_COUNTER, "errors", "binlogd_errors_total", "Errors, by kind", ("kind",)),
    (_COUNTER, "schema_mismatch", "binlogd_schema_mismatch_total", "TABLE_MAPs whose columns stay positional: no "
     "definition of the table (schema history, then the server) agrees with them", ("schema", "table")),
    (_COUNTER, "unnamed", "binlogd_columns_unnamed_total", "Row events whose columns had to be named @1, @2, ...", ()),
    (_COUNTER, "sink_commits", "binlogd_sink_commits_total", "Durable syncs of the sink, each followed by a checkpoint "
     "save; one sync covers every transaction flushed since the last (not a transaction count)", ()),
    (_CLOCKED, "lag", "binlogd_lag_seconds", "Now minus the timestamp of the last real event; 0 when caught up", ()),
    (_CLOCKED, "seconds_since_last_event", "binlogd_seconds_since_last_event",
     "Seconds since the last real event was received", ()),
    (_CLOCKED, "checkpoint_age", "binlogd_checkpoint_age_seconds", "Seconds since the checkpoint was last saved", ()),
    (_GAUGE, "heartbeat", "binlogd_last_heartbeat_timestamp_seconds",
     "Wall-clock time of the last heartbeat received (0 before any)", ()),
    (_GAUGE, "position", "binlogd_position", "Next position in the current binlog file", ("file",)),
    (_GAUGE, "file_index", "binlogd_binlog_file_index", "Numeric suffix of the current binlog file name", ()),
    (_GAUGE, "queue_depth", "binlogd_queue_depth", "Events waiting between reader and consumer", ()),
    (_GAUGE, "up", "binlogd_up", "1 while streaming from the primary, else 0", ()),
    (_GAUGE, "source_info", "binlogd_source_info", "1 for the server binlogd streams from now",
     ("host", "server_id", "server_uuid", "version")),
    (_COUNTER, "failovers", "binlogd_failovers_total", "Switches from one source server to another", ()),
    (_COUNTER, "sink_gaps", "binlogd_sink_gaps_total", "Times a sink's broker held less than binlogd had delivered "
     "to it (it lost data): binlogd sent again from the broker's committed position", ()),
    (_GAUGE, "upload_pending", "binlogd_upload_pending_files",
     "Closed archive files not yet uploaded and verified", ()),
    (_COUNTER, "upload_bytes", "binlogd_upload_bytes_total", "Bytes of archive files uploaded and verified", ()),
    (_COUNTER, "upload_errors", "binlogd_upload_errors_total",
     "Failed uploads or verifications of archive files (each retried)", ()),
    (_COUNTER, "snapshot_rows", "binlogd_snapshot_rows_total", "Rows read by the snapshot, by schema.table",
     ("table",)),
    (_GAUGE, "snapshot_chunks_done", "binlogd_snapshot_chunks_done", "Snapshot chunks committed, by schema.table",
     ("table",)),
    (_GAUGE, "snapshot_chunks_total", "binlogd_snapshot_chunks_total",
     "Snapshot chunks of a table, estimated from information_schema's row count / chunk_rows", ("table",)),
    (_GAUGE, "snapshot_state", "binlogd_snapshot_state", "Snapshot: 0 none, 1 running, 2 done", ()),
    (_GAUGE, "ha_active", "binlogd_ha_active", "1 while this instance is the active one (with ha.mode off: once "
     "started), 0 while it stands by", ()),
    (_GAUGE, "ha_epoch", "binlogd_ha_epoch", "The [ha] lease's fencing epoch this instance holds (0: none)", ()),
    (_COUNTER, "ha_takeovers", "binlogd_ha_takeovers_total", "Times this instance took the [ha] lease", ()),
)


def file_index(name: str) -> int | None:
    """Return the numeric suffix of a binlog file name (``mysql-bin.000042`` → 42), or None."""
    m = _FILE_INDEX.search(name)
    return int(m.group(1)) if m else None


class _Figure:
    """One unlabelled figure of a :class:`Metrics`, for a writer that holds it (the archive uploader):
    ``inc`` adds to a counter, ``set`` sets a gauge."""

    __slots__ = ("_values", "_key")

    def __init__(self, values: dict, key: str) -> None:
        self._values, self._key = values, key

    def inc(self, amount: float = 1) -> None:
        series = self._values[self._key]
        series[()] = series.get((), 0) + amount

    def set(self, value: float) -> None:
        self._values[self._key][()] = value


class Metrics:
    """The daemon's metrics, in a private registry made at the first collection.

    Fields:
        registry: the :class:`CollectorRegistry` holding every ``binlogd_*`` metric (made, and
            prometheus_client imported, when first read).
        table_labels: whether ``binlogd_rows_total`` is split by schema and table.
        clock: callable returning wall-clock seconds (injected so tests control time).
        upload_pending, upload_bytes, upload_errors: the archive uploader's gauge and counters (``set`` and
            ``inc`` by :class:`binlogd.daemon.sinks.upload.Uploader` directly).
    """

    def __init__(self, *, table_labels: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.table_labels = table_labels
        self.clock = clock
        self._registry = None
        self._metrics: dict[str, object] = {}   # key -> its prometheus metric, once the registry is made
        # Running totals of the counters and current series of the gauges: key -> {label values: value}.
        self._counts: dict[str, dict[tuple, float]] = {k: {} for kind, k, *_ in _METRICS if kind == _COUNTER}
        self._series: dict[str, dict[tuple, float]] = {k: {} for kind, k, *_ in _METRICS if kind == _GAUGE}
        self._flushed: dict[str, dict[tuple, float]] = {k: {} for k in (*self._counts, *self._series)}
        self._series["file_index"][()] = -1
        self.upload_pending = _Figure(self._series, "upload_pending")
        self.upload_bytes = _Figure(self._counts, "upload_bytes")
        self.upload_errors = _Figure(self._counts, "upload_errors")
        # The per-event figures, in their own fields (the consumer's hot path): running totals and one tuple.
        self._event_counts: dict[str, int] = {}   # type name -> events counted (running total)
        self._rows_counts = self._counts["rows"]
        self._bytes_count = 0
        self._transaction_count = 0
        self._where: tuple[str, int] | None = None  # (file, pos) last set by position()
        self._flush_lock = threading.Lock()
        start = clock()
        # (binlog timestamp of the last real event, caught up?) in one tuple so a scrape sees both at once.
        self._lag_state: tuple[int, bool] = (0, True)
        self._last_event_at = start
        self._checkpoint_at = start
        self._pending = 0
        self._is_up = False
        self._standby: str | None = None  # while standing by ([ha]): why not ready ("" when ready)

    @property
    def registry(self):
        """The :class:`prometheus_client.CollectorRegistry`; made at the first read."""
        if self._registry is None:
            with self._flush_lock:
                if self._registry is None:
                    self._registry = self._make_registry()
        return self._registry

    def _make_registry(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        r = CollectorRegistry(auto_describe=True)
        # Registered first, so every collection (scrape, exposition, get_sample_value) flushes the
        # figures into the metrics below before they are read.
        r.register(_FlushFirst(self.flush))
        for kind, key, name, text, labels in _METRICS:
            if kind == _CLOCKED:
                Gauge(name, text, registry=r).set_function(getattr(self, key))
            else:
                self._metrics[key] = (Counter if kind == _COUNTER else Gauge)(name, text, labels, registry=r)
        return r

    # -- called by the consumer ------------------------------------------------------------

    def event(self, type_name: str, timestamp: int, nbytes: int, artificial: bool) -> None:
        """Count one event of ``nbytes`` bytes; a real one (not artificial, timestamp > 0) sets lag's base."""
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
        self._series["heartbeat"][()] = self.clock()

    def rows(self, schema: str, table: str, op: str, n: int) -> None:
        """Count ``n`` rows of ``op`` (insert/update/delete); schema/table kept only with table_labels."""
        key = (schema, table, op) if self.table_labels else ("", "", op)
        counts = self._rows_counts
        counts[key] = counts.get(key, 0) + n

    def transaction(self) -> None:
        """Count one committed transaction; it stays pending for readiness until the next checkpoint save."""
        self._transaction_count += 1
        self._pending += 1

    def _count(self, key: str, labels: tuple = ()) -> None:
        counts = self._counts[key]
        counts[labels] = counts.get(labels, 0) + 1

    def sink_commit(self) -> None:
        """Count one durable sync of the sink (it covers one or more transactions)."""
        self._count("sink_commits")

    def position(self, file: str, pos: int) -> None:
        """Set the current position; on a new file the old file's series is removed."""
        self._where = (file, pos)

    def flush(self) -> None:
        """Move every figure into its prometheus metric (nothing to do before the registry is made).

        Called before every collection of the registry; safe from any thread.
        """
        if self._registry is None:
            return
        with self._flush_lock:
            self._counts["events"].update({(k,): v for k, v in list(self._event_counts.items())})
            self._counts["bytes"][()] = self._bytes_count
            self._counts["transactions"][()] = self._transaction_count
            where = self._where
            if where is not None:
                idx = file_index(where[0])
                self._series["position"] = {(where[0],): where[1]}
                self._series["file_index"][()] = -1 if idx is None else idx
            for key, counts in self._counts.items():
                metric, flushed = self._metrics[key], self._flushed[key]
                for labels, total in list(counts.items()):
                    delta = total - flushed.get(labels, 0)
                    if delta:
                        (metric.labels(*labels) if labels else metric).inc(delta)
                        flushed[labels] = total
            for key, series in self._series.items():
                metric, flushed, now = self._metrics[key], self._flushed[key], dict(series)
                for labels in flushed.keys() - now.keys():
                    metric.remove(*labels)
                for labels, value in now.items():
                    if flushed.get(labels) != value:
                        (metric.labels(*labels) if labels else metric).set(value)
                self._flushed[key] = now

    def checkpoint_saved(self) -> None:
        """Record a checkpoint save now; no transaction is pending after it."""
        self._checkpoint_at = self.clock()
        self._pending = 0

    def reconnect(self) -> None:
        """Count one reconnect."""
        self._count("reconnects")

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (a short fixed word such as "network", "decode", "sink")."""
        self._count("errors", (kind,))

    def queue_depth(self, n: int) -> None:
        """Set the number of events waiting in the reader → consumer queue."""
        self._series["queue_depth"][()] = n

    def set_up(self, up: bool) -> None:
        """Set whether the daemon is streaming (binlogd_up 1) or not (0)."""
        self._is_up = bool(up)
        self._series["up"][()] = 1 if up else 0

    def schema_mismatch(self, schema: str, table: str) -> None:
        """Count a TABLE_MAP left with positional names although the table was looked up."""
        self._count("schema_mismatch", (schema, table))

    def unnamed_columns(self) -> None:
        """Count one row event whose columns had to be named @1, @2, ..."""
        self._count("unnamed")

    def source(self, host: str, server_id: int, server_uuid: str, version: str) -> None:
        """Set the server streamed from (``host:port``): its ``binlogd_source_info`` series is 1, the previous
        source's series is removed."""
        self._series["source_info"] = {(host, str(server_id), server_uuid, version): 1}

    def snapshot_state(self, state: int) -> None:
        """Set the snapshot's state: 0 none, 1 running, 2 done."""
        self._series["snapshot_state"][()] = state

    def snapshot_chunk(self, table: str, rows: int, done: int, total: int) -> None:
        """One snapshot chunk of ``table`` (``schema.table``) committed: ``rows`` more rows read, ``done`` chunks
        of an estimated ``total``."""
        counts = self._counts["snapshot_rows"]
        counts[(table,)] = counts.get((table,), 0) + rows
        self._series["snapshot_chunks_done"][(table,)] = done
        self._series["snapshot_chunks_total"][(table,)] = max(total, done)

    def failover(self) -> None:
        """Count one switch to another source server."""
        self._count("failovers")

    def sink_gap(self) -> None:
        """Count one broker found behind what was delivered to it."""
        self._count("sink_gaps")

    def ha_active(self, epoch: int) -> None:
        """This instance is the active one, holding the lease's ``epoch`` (0: no lease, ha.mode off)."""
        self._standby = None
        self._series["ha_active"][()] = 1
        self._series["ha_epoch"][()] = epoch

    def ha_standby(self, unreachable: str = "") -> None:
        """This instance stands by; ``unreachable`` says why it cannot reach the broker holding the lease ("": it
        can, and is ready)."""
        self._standby = unreachable
        self._series["ha_active"][()] = 0
        self._series["ha_epoch"][()] = 0

    def ha_takeover(self) -> None:
        """Count one taking of the lease."""
        self._count("ha_takeovers")

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
        """Return (ready, reason): ready when streaming and the checkpoint is fresh, or when standing by
        (``[ha]``) and the broker holding the lease is reachable.

        Fresh means saved within ``max_checkpoint_age`` seconds, or no transaction pending since
        the last save. The reason is "ready" or says what is wrong.
        """
        if self._standby is not None:
            if self._standby:
                return False, f"standby, and the broker holding the lease is unreachable: {self._standby}"
            return True, "standby: ready to take over"
        if not self._is_up:
            return False, "not streaming"
        age = self.checkpoint_age()
        if self._pending and age > max_checkpoint_age:
            return False, (f"checkpoint stale: saved {age:.1f}s ago (max {max_checkpoint_age:g}s) "
                           f"with {self._pending} transaction(s) pending")
        return True, "ready"

    def exposition(self) -> bytes:
        """Return the registry in the Prometheus text format."""
        from prometheus_client import generate_latest

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
