"""The daemon's checkpoint file and its JSON-lines file names, as values: pure, for every reader.

The daemon writes them (:mod:`binlogd.daemon.delivery.checkpoint`, :mod:`binlogd.daemon.sinks.jsonl`); Spark
reads them to leave out what the daemon has not committed. A checkpoint file is one JSON object::

    {"version": 1, "position": {"file", "pos", "gtid_set", "gtid_list"}, "sink": {...},
     "source": {...}, "saved_at": <unix seconds>, "snapshot"?: {...}, "incremental"?: {...}}

``snapshot`` is there only while an initial snapshot runs (daemon/snapshot/initial.py: the tables, how many are
done, the current table's last key, the read view); a checkpoint without it has none to finish.
``incremental`` is there only while an incremental snapshot runs (daemon/snapshot/incremental.py: the tables to go,
the current table's last key written, its rows and chunks written, when it started).

The JSON-lines sink names its files ``changes-NNNNNN.jsonl`` (six digits, from 1) and its state in
``sink`` is ``{"file": <that name>, "offset": <bytes committed in it>}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from binlogd.protocol.position import Position

FORMAT_VERSION = 1
_JSONL_NAME = re.compile(r"changes-(\d{6})\.jsonl")


@dataclass
class Checkpoint:
    """What a checkpoint file holds.

    Fields:
        position: the end of the last transaction the sink committed.
        sink: the sink's own state at that moment (file, offset…).
        source: facts about the primary (flavor, server id/uuid) for sanity checks, the resume mode, and
            ``skip_before`` (unix time) while a datetime start has not reached its first transaction.
        saved_at: unix time of the save.
        snapshot: the state of an unfinished initial snapshot (``position`` is then its consistent point),
            else None.
        incremental: the state of a running incremental snapshot (``position`` is the stream's), else None.
    """

    position: Position
    sink: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    saved_at: float = 0.0
    snapshot: dict | None = None
    incremental: dict | None = None

    def to_bytes(self) -> bytes:
        """The file's content (keys sorted)."""
        data = {"version": FORMAT_VERSION, "position": self.position.to_dict(), "sink": self.sink,
                "source": self.source, "saved_at": self.saved_at}
        if self.snapshot is not None:
            data["snapshot"] = self.snapshot
        if self.incremental is not None:
            data["incremental"] = self.incremental
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def parse(cls, raw: bytes | str) -> Checkpoint:
        """A checkpoint file's content.

        Raises:
            ValueError: not JSON, another format version, or a field of the wrong shape (says which).
        """
        try:
            data = json.loads(raw)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            snapshot, incremental = data.get("snapshot"), data.get("incremental")
            return cls(Position.from_dict(data["position"]), dict(data.get("sink", {})),
                       dict(data.get("source", {})), float(data.get("saved_at", 0)),
                       None if snapshot is None else dict(snapshot),
                       None if incremental is None else dict(incremental))
        except KeyError as exc:
            raise ValueError(f"no {exc} in it") from exc
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"a field of the wrong type ({exc})") from exc


def jsonl_name(index: int) -> str:
    """The JSON-lines sink's ``index``-th file name (``changes-000001.jsonl`` for 1)."""
    return f"changes-{index:06d}.jsonl"


def jsonl_index(name: str) -> int | None:
    """The index of a JSON-lines sink's file name, or None for any other name."""
    m = _JSONL_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def jsonl_committed(sink: dict) -> tuple[int, int] | None:
    """(file index, committed offset) from a JSON-lines sink's state, or None when ``sink`` is not one's."""
    index = jsonl_index(str(sink.get("file", "")))
    offset = sink.get("offset")
    if index is None or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return None
    return index, offset
