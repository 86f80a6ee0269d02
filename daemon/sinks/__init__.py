"""Sinks: where the daemon writes what it read, one transaction at a time.

A sink receives every event (``event``, or ``event_run`` for runs of rows events
when it takes no rows) and every row change that passed the filters (``change``)
of a transaction. At a commit, ``flush`` hands it on and returns the sink's
state; ``begin_sync`` hands what was flushed to ``sync``, which makes it durable in
a worker thread, and only then does the daemon store that state in the checkpoint
(:mod:`binlogd.daemon.delivery.committer`). On start, ``open`` receives the state back and
discards anything written after it, so a transaction the checkpoint does not
cover is written again exactly once. A new sink (Kafka, say) implements ``open``,
``event``, ``change``, ``flush``, ``begin_sync``, ``sync`` and ``close``; see
:mod:`binlogd.daemon.sinks.base`, then name it in :func:`make_sink`.
"""

from __future__ import annotations

from binlogd.daemon.sinks.base import Sink, SinkError


def make_sink(config, metrics=None, log=None) -> Sink:
    """The sink a :class:`daemon.sinkconfig.SinkConfig` names (``metrics``, ``log``: for the archive's uploads)."""
    if config.kind == "jsonl":
        from binlogd.daemon.sinks.jsonl import JsonLinesSink

        return JsonLinesSink(config.path, config.max_file_bytes, config.max_file_seconds, config.fsync,
                             format=config.format, server_name=config.server_name)
    if config.kind == "archive":
        from binlogd.daemon.sinks.archive import ArchiveSink

        return ArchiveSink(config.path, config.fsync, _uploader(config, metrics, log))
    if config.kind == "stdout":
        from binlogd.daemon.sinks.stdout import StdoutSink

        return StdoutSink(format=config.format, server_name=config.server_name)
    if config.kind == "mirror":
        from binlogd.daemon.sinks.mirror import MirrorSink

        return MirrorSink(config.mirror.url, config.mirror.schemas())
    if config.kind not in ("redis", "nats", "postgres"):
        raise SinkError(f"unknown sink kind {config.kind!r}")
    fmt = {"format": config.format, "server_name": config.server_name, "events": config.events()}
    if config.kind == "redis":
        from binlogd.daemon.sinks.redis import RedisSink

        r = config.redis
        return RedisSink(r.url, r.stream, r.checkpoint_key, r.max_change_bytes, **fmt)
    if config.kind == "nats":
        from binlogd.daemon.sinks.nats import NatsSink

        return NatsSink(config.nats.url, config.nats.stream, config.nats.subject, **fmt)
    from binlogd.daemon.sinks.postgres import PostgresSink

    return PostgresSink(config.postgres.url, config.postgres.table, config.postgres.max_change_bytes, **fmt)


def _uploader(config, metrics, log):
    """The archive's :class:`~.upload.Uploader` for ``[sink.upload]``, None without a url."""
    up = config.upload
    if not up.url:
        return None
    from binlogd.daemon.sinks.upload import Uploader
    from binlogd.library.storage import Options

    return Uploader(config.path, up.url, Options(up.endpoint, up.region, up.path_style),
                    delete_after_upload=up.delete_after_upload, part_size=up.part_size_mb << 20,
                    retry_seconds=up.retry_seconds, metrics=metrics, log=log)


__all__ = ["Sink", "SinkError", "make_sink"]
