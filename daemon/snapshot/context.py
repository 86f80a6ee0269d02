"""What the snapshots get from the daemon: :class:`SnapshotContext`, built by the daemon for each session."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from binlogd.daemon.snapshot.tables import raw_connection

if TYPE_CHECKING:
    from binlogd.daemon.config import SnapshotConfig
    from binlogd.daemon.delivery.committer import Committer
    from binlogd.daemon.operations.metrics import Metrics
    from binlogd.daemon.replication.serverschema import DaemonSchema
    from binlogd.daemon.sinks.base import Sink


@dataclasses.dataclass
class SnapshotContext:
    """The parts of the daemon a snapshot uses (the initial one, an incremental one).

    Fields:
        connect: opens a new admin connection to the session's source (an awaitable of an aiomysql connection).
        sink, committer, metrics, log: the daemon's sink, commit pipeline, metrics and logger.
        schema: the schema history (seeded at the initial snapshot's position), None when there is none.
        config: the ``[snapshot]`` section; selected(schema, table): whether ``[filters]`` selects a table.
        sink_kind: ``[sink] kind``, for the log; binlogd_format: ``[sink] format`` is "binlogd" (rows go from
            the wire to JSON lines).
        start_kind: the kind of ``source.start`` (a snapshot starts where it is consistent: other kinds are
            warned about).
        checkpointed: called once a durable checkpoint exists (the snapshot's first commit, or a resumed
            snapshot's): from then on a new session resumes from it and reopens the sink at it.
    """

    connect: Callable[[], Awaitable]
    sink: Sink
    committer: Committer
    metrics: Metrics
    log: logging.Logger
    schema: DaemonSchema | None
    config: SnapshotConfig
    selected: Callable[[str, str], bool]
    sink_kind: str
    binlogd_format: bool
    start_kind: str
    checkpointed: Callable[[], None]

    async def raw_connection(self):
        """A new connection to the source that returns raw text-protocol values
        (:func:`binlogd.daemon.snapshot.tables.raw_connection`).

        Raises:
            pymysql.err.Error, OSError: it could not be had (nothing is left open).
        """
        conn = await self.connect()
        try:
            await raw_connection(conn)
        except BaseException:
            conn.close()
            raise
        return conn
