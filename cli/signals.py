"""The process's signals while a daemon runs (``binlogd run``, ``binlogd demo``): the CLI's, not the Daemon's.

- SIGTERM, SIGINT: the first one stops the daemon (``daemon.stop()``: it commits at a transaction boundary,
  within ``daemon.shutdown_seconds``); a second one exits at once with 128 + the signal's number.
- SIGHUP: logged and ignored (binlogd reloads nothing).

The handlers are removed when the daemon has ended. :func:`run_loop` runs the daemon's coroutine on a loop that
no Ctrl-C finds half made; :func:`signals_held` holds SIGINT and SIGTERM back for such steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (blocked) inside the block and delivered when it ends: for steps that
    must not be cut in two, such as creating a temp dir and registering it, or removing it."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_loop(main: Callable[[], Coroutine]):
    """``asyncio.run(main())``, the event loop made whole first with the signals held: a Ctrl-C that comes
    while it is made lands once it is (in the runner, which closes it), never in a half-made loop, whose
    cleanup prints a traceback. Returns what ``main()`` returns.

    Raises:
        KeyboardInterrupt: a Ctrl-C before ``main()`` ran (it is then never called).
    """
    runner = asyncio.Runner()
    try:
        with signals_held():
            runner.get_loop()
        return runner.run(main())
    finally:
        runner.close()


async def run_with_signals(daemon, log: logging.Logger) -> int:
    """``await daemon.run()`` with the handlers above installed on the running loop (where it can: only the
    main thread's loop takes signal handlers).

    Args:
        daemon: a :class:`binlogd.daemon.service.Daemon`.
        log: where the signals are logged.
    Returns:
        The daemon's exit code.
    Raises:
        SystemExit: 128 + n on a second SIGTERM or SIGINT.
    """
    loop = asyncio.get_running_loop()

    def on_stop(signum: int) -> None:
        name = signal.Signals(signum).name
        if daemon.stopping.is_set():
            log.warning("second %s: exiting now", name)
            sys.unraisablehook = _quiet_closed_loop  # connections left open are collected after the loop closed
            raise SystemExit(128 + signum)
        log.info("%s: finishing the current transaction, then stopping", name)
        daemon.stop()

    def on_hangup() -> None:
        log.info("SIGHUP: ignored (binlogd reloads nothing; restart it to apply a new configuration)")

    installed = []
    for sig, handler, args in ((signal.SIGTERM, on_stop, (signal.SIGTERM,)),
                               (signal.SIGINT, on_stop, (signal.SIGINT,)), (signal.SIGHUP, on_hangup, ())):
        try:
            loop.add_signal_handler(sig, handler, *args)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread: daemon.stop() is the way
    try:
        return await daemon.run()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _quiet_closed_loop(unraisable) -> None:
    """After a forced exit, drop the "Event loop is closed" of transports collected late; report anything else."""
    if not (isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(unraisable.exc_value)):
        sys.__unraisablehook__(unraisable)
