"""``[ha] mode = "lease"``: standing by until the lease is ours, and keeping it while active.

:class:`~binlogd.daemon.service.Daemon` calls :func:`wait_for_lease` before its sessions (a standby holds no
replication connection and opens no sink meanwhile: only the lease's own connection to the broker), runs
:func:`keep_lease` beside them, and asks :func:`renewed` before each session opens the sink and after a sink
error (a fenced commit shows up as one). The epoch, not these loops' timing, keeps a former active from
committing (:mod:`binlogd.daemon.sinks.lease`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from binlogd.daemon.operations import systemd
from binlogd.daemon.operations.metrics import Metrics
from binlogd.daemon.sinks.lease import Lease


def _timeout(lease: Lease) -> float:
    return max(1.0, lease.seconds / 2)


async def wait_for_lease(lease: Lease, stopping: asyncio.Event, log: logging.Logger, metrics: Metrics,
                         polled: Callable[[], None] = lambda: None) -> bool:
    """Stand by until the lease is taken (True: ``lease.epoch`` is set, the metrics and the log say so) or
    ``stopping`` is set (False). Polls the broker a few times per ``lease.seconds`` (calling ``polled`` after each
    poll: the daemon's progress for systemd's watchdog); an unreachable broker is logged once per outage and
    retried. systemd hears READY=1 with the standby's status (a standby has started, and is doing its job).

    Raises:
        SinkError: (fatal, exit 3) the broker refused the credentials.
    """
    poll, said = min(0.5, lease.seconds / 5), None
    while not stopping.is_set():
        try:
            if await asyncio.wait_for(lease.take(), _timeout(lease)):
                metrics.ha_active(lease.epoch)
                metrics.ha_takeover()
                log.info("ha: %s is the active instance now (epoch %d in %s)", lease.holder, lease.epoch, lease.where)
                return True
            state, unreachable = f"held by {lease.other or 'another instance'}", ""
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (the broker's client errors: retried)
            fatal = lease.auth_error(exc)
            if fatal is not None:
                raise fatal from None
            unreachable = str(exc) or type(exc).__name__
            state = f"unreachable ({unreachable})"
        metrics.ha_standby(unreachable)
        polled()
        if state != said:
            log.log(logging.WARNING if unreachable else logging.INFO, "ha: %s stands by: %s is %s", lease.holder,
                    lease.where, state)
            systemd.notify(f"READY=1\nSTATUS=standby: {lease.where} is {state}")
            said = state
        try:
            await asyncio.wait_for(stopping.wait(), poll)
        except asyncio.TimeoutError:
            pass
    return False


async def keep_lease(lease: Lease, log: logging.Logger, on_lost: Callable[[], None]) -> None:
    """Renew the lease three times per ``lease.seconds`` until cancelled, or until another instance took it: then
    call ``on_lost`` and return. A failed renewal (the broker unreachable) is logged once per outage and retried:
    it proves nothing either way, and the commits' epoch check keeps the data safe meanwhile."""
    failing = False
    while True:
        await asyncio.sleep(lease.seconds / 3)
        try:
            held = await asyncio.wait_for(lease.renew(), _timeout(lease))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (retried)
            if not failing:
                log.warning("ha: cannot renew %s (%s); retrying", lease.where, str(exc) or type(exc).__name__)
            failing = True
            continue
        if failing:
            log.info("ha: %s renewed again", lease.where)
            failing = False
        if not held:
            on_lost()
            return


async def renewed(lease: Lease) -> bool | None:
    """Renew the lease now: True when still ours, False when another instance took it (asked after a sink error,
    since a fenced commit fails as one, and before the sink opens), None when the broker did not answer."""
    try:
        return await asyncio.wait_for(lease.renew(), _timeout(lease))
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001
        return None


async def give_up(lease: Lease, log: logging.Logger) -> None:
    """At the daemon's end: release the lease if it is still ours (a standby takes over at once), then close its
    connection. Errors are logged, never raised (the lease then expires)."""
    try:
        if lease.epoch is not None:
            epoch = lease.epoch
            await asyncio.wait_for(lease.release(), _timeout(lease))
            log.info("ha: %s released the lease (epoch %d)", lease.holder, epoch)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001
        log.warning("ha: could not release %s (%s): a standby takes over once it expires", lease.where, exc)
    finally:
        await lease.close()


__all__ = ["give_up", "keep_lease", "renewed", "wait_for_lease"]
