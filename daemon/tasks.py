"""Closing the tasks an object owns: :func:`close_tasks`, the one way the daemon does it."""

from __future__ import annotations

import asyncio


async def close_tasks(*tasks: asyncio.Task | None) -> list[BaseException | None]:
    """Cancel ``tasks`` (None entries are skipped) and wait until every one of them has ended.

    What a closed task raised (its cancellation included) is its own: it is returned, not raised. The
    caller's own cancellation is never swallowed: if the caller is cancelled while it waits, it still
    waits for the tasks to end, then raises CancelledError.

    Returns:
        For each task given (None ones left out), in order: the exception it ended with
        (CancelledError when it was cancelled), or None when it returned.
    """
    owned = [task for task in tasks if task is not None]
    for task in owned:
        task.cancel()
    pending, cancelled = set(owned), False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True  # ours: raised once the tasks have ended
    if cancelled:
        raise asyncio.CancelledError
    return [asyncio.CancelledError() if task.cancelled() else task.exception() for task in owned]
