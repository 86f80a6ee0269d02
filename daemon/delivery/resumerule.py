"""The one resume rule: every session resumes where the sink's own store ends.

A bus sink commits the checkpoint with its data (Redis, PostgreSQL, NATS). Each time it is opened, at start
and after any error, it reads that checkpoint back (:meth:`Sink.remote_checkpoint`), and the session resumes
from it, whatever the daemon remembers or its local file says: :func:`adopt`. A broker behind the daemon
lost data (a failover to a replica that had not caught up, a restart from an older AOF): it is sent again
from there, with one warning that names the gap. A broker ahead of the daemon committed what the daemon had
not yet seen confirmed: it is not sent again.

A checkpoint names the server its position is on (``source``); :func:`check_source` refuses one of another
source, so two daemons of different sources sharing one broker key never take each other's positions.
"""

from __future__ import annotations

import logging

from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.replication.connection import ServerInfo
from binlogd.daemon.sinks import Sink, SinkError
from binlogd.daemon.state import ResumeState
from binlogd.library.identity import boundary_key
from binlogd.library.schema.identity import Source, basename, same_server, stream_holds


def adopt(sink: Sink, memory: ResumeState | None, log: logging.Logger, metrics: Metrics) -> ResumeState | None:
    """Where to resume after ``sink`` was opened: the broker's checkpoint when it keeps one, else ``memory``
    (the daemon's last durable state, or the local checkpoint at start). A broker that differs from ``memory`` is
    named in a warning; one behind it (or holding none) is also counted in ``binlogd_sink_gaps_total``."""
    remote, name = sink.remote_checkpoint(), getattr(sink, "name", "the sink")
    if remote is None:
        if memory is not None and sink.commits_position:
            metrics.sink_gap()
            log.warning("%s holds no checkpoint, though binlogd had delivered up to %s to it: what it held is "
                        "gone; going on from there", name, _where(memory))
        return memory
    broker = ResumeState.from_checkpoint(remote)
    if memory is None or _same(broker, memory):
        return broker if memory is None else memory
    was, now = _where(memory), _where(broker)
    if _progress(broker) < _progress(memory):
        metrics.sink_gap()
        log.warning("%s holds less than was delivered to it: its committed position is %s, binlogd had delivered "
                    "up to %s; sending again from %s", name, now, was, now)
    else:
        log.warning("%s: the sink's committed position %s wins over the local checkpoint's %s", name, now, was)
    return broker


def _same(a: ResumeState, b: ResumeState) -> bool:
    return (a.position.file, a.position.pos, a.snapshot, a.incremental) == \
        (b.position.file, b.position.pos, b.snapshot, b.incremental)


def _where(state: ResumeState) -> str:
    at = f"{state.position.file}:{state.position.pos}"
    snap = state.snapshot
    if snap:
        return f"{at} (snapshot: {snap.get('done', 0)} of {len(snap.get('tables', []))} tables done, " \
               f"{snap.get('rows', 0)} rows of the next)"
    return at


def _progress(state: ResumeState) -> tuple:
    """An order of states along one stream: a snapshot's before its stream's, then by position and rows."""
    snap = state.snapshot
    head = (0, snap.get("done", 0), snap.get("rows", 0)) if snap else (1, 0, 0)
    return head + boundary_key(state.position.file or "", state.position.pos)


def check_source(resume: ResumeState, info: ServerInfo, server_file: str, gtid_state: str, where: str) -> None:
    """Refuse a checkpoint (``where`` it came from) whose source is another server than ``info`` (whose binlog
    is now ``server_file``) and not of its replication stream (the server's ``gtid_state`` lacks the
    checkpoint's GTIDs).

    Raises:
        SinkError: (fatal, exit 8) one line naming both servers.
    """
    src = resume.source
    if not src.get("flavor"):
        return
    theirs = Source(src["flavor"], int(src.get("server_id") or 0), src.get("server_uuid") or "",
                    basename(resume.position.file or ""))
    ours = Source(info.flavor, int(info.server_id), info.server_uuid or "", basename(server_file))
    if same_server(theirs, ours):
        return
    position = resume.position
    gtids = (position.gtid_list if info.flavor == "mariadb" else position.gtid_set) or ""
    if resume.by_gtid and stream_holds(info.flavor, [gtids], gtid_state):
        return
    raise SinkError(f"{where} is of another source: its position {position.file}:{position.pos} is on "
                    f"{_name(src)}, but this session's server is {_name(ours.to_obj())} (GTID state "
                    f"{gtid_state or 'empty'}); use another checkpoint key, stream or table for this source, "
                    "or move that checkpoint away to start over", fatal=True)


def _name(src: dict) -> str:
    uuid = src.get("server_uuid")
    return f"{src.get('flavor')} server_id {src.get('server_id')}" + (f" (server_uuid {uuid})" if uuid else "")
