"""The lifecycle every component of the agent shares, and the one background-task helper.

`Lifecycle` is the Collector's component contract (and OTel's `force_flush` / `shutdown`):
`start()` once before use, `flush()` to hand on what is held, `shutdown(timeout)` to flush and
stop; shutdown is idempotent. The agent holds its components in one ordered list, starts them in
that order and shuts them down in reverse (agent/pipeline.py, `Agent`).

`Periodic` is the background loop several components run (the judge budget's refresh, drift state
saving, the event-loop lag monitor): call a coroutine every `interval` seconds from `start()`
until `shutdown()` cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol


class Lifecycle(Protocol):
    async def start(self) -> None:
        """Connect or start background work; called once, before first use."""
        ...

    async def flush(self) -> None:
        """Hand on (save, send) what is held now; the component keeps running."""
        ...

    async def shutdown(self, timeout: float) -> None:
        """Flush what is held within `timeout` seconds and stop; idempotent."""
        ...


class Periodic:
    """Runs `tick()` every `interval` seconds in a task of its own, from `start()` to `shutdown()`.

    A `tick` that raises ends the loop, so ticks that must survive failures catch them (they are
    stage boundaries).
    """

    def __init__(self, name: str, interval: float, tick: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.interval = interval
        self._tick = tick
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._tick()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it (a tick in progress is cancelled); idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
