"""How every long-running command stops: SIGTERM (what Kubernetes and `docker stop` send) and
SIGINT (Ctrl-C) alike set one event, and the command finishes or abandons the work under way,
flushes what it holds and returns normally, exit status 0.

`ragpulse run`, `ragpulse probe` and `ragpulse canary` share it, so they stop the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals() -> asyncio.Event:
    """An event set at the first SIGTERM or SIGINT, handled on the running loop. The handlers go
    with the loop (`asyncio.run` removes them when it closes the loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    return stop


async def unless_stopped(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """`work`'s result; None when `stop` is set first, once `work` has been cancelled and has
    unwound. An exception of `work` is raised here."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` (the pause between scheduled rounds); True when `stop` was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
    return stop.is_set()
