"""``binlogd.cli.signals.run_loop``: the daemon's coroutine on an event loop that no Ctrl-C finds half made (a
Ctrl-C while ``asyncio.run`` built its loop left an object whose cleanup printed a traceback)."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from binlogd.cli.signals import run_loop


def test_runs_the_coroutine_and_returns_its_result():
    async def main():
        await asyncio.sleep(0)
        return 7

    assert run_loop(main) == 7


def test_a_ctrl_c_while_the_loop_is_made_lands_once_it_is_whole(monkeypatch):
    made, real = [], asyncio.new_event_loop

    def interrupted_maker():
        # comes while the loop is being made; to this thread, as a Ctrl-C comes to the CLI's only thread then
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        made.append(real())
        return made[-1]

    monkeypatch.setattr(asyncio.events, "new_event_loop", interrupted_maker)
    called = []
    with pytest.raises(KeyboardInterrupt):
        run_loop(lambda: called.append(1))
    assert len(made) == 1 and made[0].is_closed(), "the loop was not made whole, or not closed"
    assert called == [], "the coroutine function was called after the Ctrl-C"
