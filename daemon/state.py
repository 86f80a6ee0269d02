"""What one session hands the next: :class:`ResumeState` (where to resume, what to reopen), and
:class:`CheckpointError` (that state cannot be read or made durable)."""

from __future__ import annotations

from dataclasses import field

from binlogd.library.checkpointfile import Checkpoint
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.position import Position
from binlogd.protocol.records import record


class CheckpointError(BinlogError):
    """The checkpoint cannot be read, written or locked."""


@record
class ResumeState:
    """All the daemon carries from one session to the next: where to resume and what to reopen.

    A checkpoint file holds exactly this (:meth:`checkpoint`, :meth:`from_checkpoint`).

    Fields:
        position: the end of the last committed transaction (file/pos, GTID set or list).
        by_gtid: resume by GTID (MySQL COM_BINLOG_DUMP_GTID, MariaDB ``@slave_connect_state``), else by file/pos.
        sink: the sink's state at that commit (what :meth:`Sink.open` receives); None before the first commit.
        source: facts about the primary: flavor, server_id, server_uuid.
        skip_before: unix time while a ``datetime:`` start has not reached its first transaction (rows of
            earlier transactions are not delivered), else None.
        snapshot: an unfinished initial snapshot's state (:mod:`.snapshot`), else None.
        incremental: a running incremental snapshot's state (:mod:`.incremental`), else None.
    """

    position: Position
    by_gtid: bool = False
    sink: dict | None = None
    source: dict = field(default_factory=dict)
    skip_before: float | None = None
    snapshot: dict | None = None
    incremental: dict | None = None

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> ResumeState:
        """The state a saved checkpoint describes."""
        source = dict(checkpoint.source)
        by_gtid = source.pop("resume", "file") == "gtid"
        skip_before = source.pop("skip_before", None)
        return cls(checkpoint.position, by_gtid, dict(checkpoint.sink), source, skip_before, checkpoint.snapshot,
                   checkpoint.incremental)

    def checkpoint(self) -> Checkpoint:
        """The checkpoint that records this state."""
        source = {**self.source, "resume": "gtid" if self.by_gtid else "file"}
        if self.skip_before is not None:
            source["skip_before"] = self.skip_before
        return Checkpoint(self.position, dict(self.sink or {}), source, snapshot=self.snapshot,
                          incremental=self.incremental)
