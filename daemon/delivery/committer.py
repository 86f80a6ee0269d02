"""How a commit becomes durable: the sink first, then the checkpoint; one sync at a time.

A commit has two steps. :meth:`Committer.flush` runs on the consumer, at a transaction boundary:
the sink hands everything written so far on (the transactions are readable now) and the returned
token records the :class:`ResumeState` that covers them. :meth:`Committer.sync` makes a token
durable in a worker thread: the sink's ``sync`` (fsync), then the checkpoint save. The consumer
goes on with later transactions meanwhile.

The rules, each kept by one piece of state:

- one sync in flight (``_running``). A token synced while one runs waits (``_waiting``); a later
  one replaces it, since the sink's next sync covers every flush before it;
- ``durable`` moves only when a sync ended well, to the token that sync carried;
- a failed sync is raised once, by :meth:`settle`; what waited behind it is dropped (the daemon
  reopens the sink at ``durable``, so those transactions are written again, once).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.sinks import Sink, SinkError
from binlogd.daemon.state import CheckpointError, ResumeState
from binlogd.protocol.records import record


@record(eq=False)
class Flushed:
    """What one :meth:`Committer.flush` made readable; :meth:`Committer.sync` takes it once.

    Fields:
        resume: the state a checkpoint saved for it holds (its ``sink`` is the flush's sink state).
    """

    resume: ResumeState


class Committer:
    """Owns the sink's flush/sync and the checkpoint saves.

    Args:
        sink: the open sink.
        store: the checkpoint store (locked by the caller).
        metrics: counts ``binlogd_sink_commits_total`` and the checkpoint's age.
        durable: the state of the checkpoint loaded at start, or None when there is none.
    Fields:
        durable: the ResumeState of the last checkpoint saved (or loaded): where a new session resumes.
    """

    def __init__(self, sink: Sink, store: CheckpointStore, metrics: Metrics, durable: ResumeState | None):
        self.sink, self.store, self.metrics = sink, store, metrics
        self.durable = durable
        self._flushed: Flushed | None = None         # the last flush, until sync() takes it
        self._running: asyncio.Future | None = None  # the sync in flight (sink sync + checkpoint save)
        self._waiting: Flushed | None = None         # flushed while it runs: the next one to make durable

    def flush(self, resume: ResumeState) -> Flushed:
        """Hand the sink's writes on (readable, not yet durable); ``resume`` is the state they reach.

        Returns:
            The token for :meth:`sync`.
        Raises:
            SinkError: nothing was handed on.
        """
        self._flushed = Flushed(replace(resume, sink=self.sink.flush()))
        self.sink.flushed(self._flushed.resume.checkpoint())
        return self._flushed

    def sync(self, token: Flushed) -> None:
        """Make ``token`` durable in a worker thread: now, or after the sync in flight (which it then
        waits for, replacing any token waiting before it).

        Raises:
            ValueError: ``token`` is not the last :meth:`flush`'s, or was synced already.
        """
        if token is not self._flushed:
            raise ValueError("Committer.sync takes the token of the last flush, once")
        self._flushed = None
        if self._running is None:
            self._start(token)
        else:
            self._waiting = token

    @property
    def failed(self) -> bool:
        """A sync ended with an error that :meth:`settle` has not raised yet."""
        job = self._running
        return job is not None and job.done() and (job.cancelled() or job.exception() is not None)

    async def settle(self) -> None:
        """Wait until every synced token is durable.

        Raises:
            SinkError, CheckpointError: a sync or save failed; ``durable`` stays before it, and the
                token waiting behind it is dropped.
        """
        while self._running is not None:
            job = self._running
            try:
                await asyncio.shield(job)  # a cancelled caller leaves the sync running: drain() still waits for it
            except BaseException:
                if job.done() and self._running is job:
                    self._running = self._waiting = None
                raise
            if self._running is job:  # done, but its callback (_ended) has not run yet
                await asyncio.sleep(0)

    async def drain(self) -> None:
        """:meth:`settle`, for before the sink is reopened or closed: a failed sync just leaves
        ``durable`` where it was."""
        try:
            await self.settle()
        except (SinkError, CheckpointError):
            pass

    def _start(self, token: Flushed) -> None:
        self.sink.begin_sync()
        checkpoint = token.resume.checkpoint()
        job = self._running = asyncio.ensure_future(asyncio.to_thread(self._make_durable, checkpoint))
        job.add_done_callback(lambda done: self._ended(done, token))

    def _make_durable(self, checkpoint) -> None:
        """In the worker thread: the sink's sync, then the checkpoint save."""
        self.sink.sync()
        self.store.save(checkpoint)

    def _ended(self, job: asyncio.Future, token: Flushed) -> None:
        """On the loop, as a sync ends (before anyone awaiting it resumes): move ``durable``, and start
        the token waiting, if any. A failed sync stays in ``_running`` for :meth:`settle` to raise."""
        if job.cancelled() or job.exception() is not None:
            return
        self.durable = token.resume
        self.metrics.sink_commit()
        self.metrics.checkpoint_saved()
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            self._start(waiting)
        else:
            self._running = None
