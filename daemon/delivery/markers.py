"""The events beyond rows as the consumer reads the stream: a transaction's begin and commit around its selected
changes, a schema change per selected table a DDL changed, a heartbeat when nothing was written for a while
(``[sink] transaction_events``, ``schema_events``, ``heartbeat_seconds``; :mod:`binlogd.library.metaevents`).

Each goes to the sink in stream order with the changes (the bus sinks: to a stream, subject or table of its kind),
and is committed with them: a crash cuts the sink back to a transaction boundary (NATS: skips what its stream
holds), so a begin is never delivered without its commit, and an event is never delivered twice (its id,
:mod:`binlogd.library.identity`, is the same when it is written again).
"""

from __future__ import annotations

import time

from binlogd.library import identity, metaevents


class Markers:
    """What the consumer tells of the stream, turned into events beyond rows for ``sink``.

    Fields:
        transactions, schemas: write begin/commit events, schema-change events.
        heartbeat_seconds: write a heartbeat after that many seconds without a write (0: never).
        debezium: the sink writes the Debezium format (each change carries its transaction block).
    """

    def __init__(self, sink_config, sink, server_id: int | None):
        self.transactions, self.schemas = sink_config.transaction_events, sink_config.schema_events
        self.heartbeat_seconds = sink_config.heartbeat_seconds
        self.debezium = sink_config.format == "debezium"
        self.sink, self.server_id = sink, server_id
        self._opener: tuple | None = None    # (file, pos, ts) of the last event read outside a transaction
        self._open: tuple | None = None      # (transaction id, opener) once its begin is written
        self._tables: dict[str, int] = {}
        self._last_write = time.monotonic()

    def outside(self, file: str, pos: int, ts: int) -> None:
        """The event at ``file``:``pos`` is read outside a transaction: it may open the next one."""
        self._opener = (file, pos, ts)

    def rows(self, schema: str, table: str, file: str, gtid: str | None) -> tuple | None:
        """Selected changes of ``schema.table`` are about to be written: the begin first if it is due. Returns
        the Debezium transaction block's ``order`` for :meth:`Sink.rows`, or None."""
        self._last_write = time.monotonic()
        if not self.transactions:
            return None
        if self._open is None:
            opener = self._opener or (file, 0, 0)
            tx = metaevents.transaction_id(gtid, opener[0], opener[1])
            self.sink.meta(metaevents.begin(tx, self._source(opener[0], opener[1], gtid,
                                                             identity.begin_id(opener[0], opener[1])), opener[2]))
            self._open, self._tables = (tx, opener), {}
        name = f"{schema}.{table}"
        return (self._open[0], sum(self._tables.values()), self._tables.get(name, 0)) if self.debezium else None

    def written(self, schema: str, table: str, n: int) -> None:
        """``n`` changes of ``schema.table`` were written (after :meth:`rows`)."""
        if self._open is not None and n:
            name = f"{schema}.{table}"
            self._tables[name] = self._tables.get(name, 0) + n

    def ended(self, file: str, pos: int, inner: int, ts: int, gtid: str | None) -> None:
        """The event at ``file``:``pos`` (``inner`` in its payload) ended a transaction: its commit event, when
        its begin was written."""
        if self._open is not None:
            tx = self._open[0]
            source = self._source(file, pos, gtid, identity.commit_id(file, pos, inner))
            self.sink.meta(metaevents.commit(tx, source, ts, self._tables))
            self._open, self._tables = None, {}
        self._opener = None

    def ddl(self, statement: str, entries, selected, file: str, pos: int, ts: int, gtid: str | None) -> None:
        """The schema history's ``entries`` made by the DDL ``statement`` at ``file``:``pos``: one event per
        selected table (``selected(schema, table)``)."""
        tables = [e for e in entries if e.table is not None and selected(e.schema, e.table)]
        for index, entry in enumerate(tables):
            definition = entry.state if not isinstance(entry.state, str) else None
            source = self._source(file, pos, gtid, identity.ddl_id(file, pos, index))
            self.sink.meta(metaevents.ddl(entry.schema, entry.table, statement, source, ts, definition))
        if tables:
            self._last_write = time.monotonic()

    def heartbeat_due(self) -> bool:
        """Whether a heartbeat is due now (nothing written for ``heartbeat_seconds``)."""
        return bool(self.heartbeat_seconds) and time.monotonic() - self._last_write >= self.heartbeat_seconds

    def heartbeat(self, file: str, pos: int, gtid: str | None) -> None:
        """Write a heartbeat carrying the committed position ``file``:``pos`` (``gtid``: its GTID set or list)."""
        now = time.time()
        source = self._source(file, pos, gtid, identity.heartbeat_id(file, pos, int(now * 1000)))
        self.sink.meta(metaevents.heartbeat(source, int(now)))
        self._last_write = time.monotonic()

    def _source(self, file: str, pos: int, gtid: str | None, event_id: str) -> dict:
        return {"server_id": self.server_id, "file": file, "pos": pos, "gtid": gtid, "id": event_id}
