"""Sinks: where the daemon writes what it read, one transaction at a time.

A sink receives every event (``event``, or ``event_run`` for runs of rows events
when it takes no rows) and every row change that passed the filters (``change``)
of a transaction. At a commit, ``flush`` hands it on and returns the sink's
state; ``sync``, in a worker thread, makes it durable, and only then does the
daemon store that state in the checkpoint. On start, ``open`` receives the state
back and discards anything written after it, so a transaction the checkpoint
does not cover is written again exactly once. A new sink (Kafka, say) implements
``open``, ``event``, ``change``, ``flush``, ``sync`` and ``close``; see
:mod:`daemon.sinks.base`.
"""

from __future__ import annotations

from .base import Sink, SinkError


def make_sink(config) -> Sink:
    """The sink a :class:`daemon.config.SinkConfig` names."""
    if config.kind == "jsonl":
        from .jsonl import JsonLinesSink

        return JsonLinesSink(config.path, config.max_file_bytes, config.max_file_seconds, config.fsync)
    if config.kind == "archive":
        from .archive import ArchiveSink

        return ArchiveSink(config.path, config.fsync)
    if config.kind == "stdout":
        from .stdout import StdoutSink

        return StdoutSink()
    raise SinkError(f"unknown sink kind {config.kind!r}")


__all__ = ["Sink", "SinkError", "make_sink"]
