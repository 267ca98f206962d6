"""Event-loop lag: how late a periodic timer wakes is how long the loop was blocked.

Everything the agent serves (intake, /healthz, /metrics, judge I/O) shares one event loop, so CPU
work that does not yield stalls all of it. This task sleeps `interval` seconds in a loop and records
how much later than asked it woke, as `ragpulse_event_loop_lag_seconds` (a histogram, for alerts)
and `ragpulse_event_loop_lag_max_seconds` (the longest stall since start, for benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from agent.telemetry import RuntimeTelemetry

log = logging.getLogger(__name__)

_STALL_WARNING_SECONDS = 1.0  # a stall this long is logged (at most once per _LOG_INTERVAL)
_LOG_INTERVAL = 60.0


class LoopLagMonitor:
    def __init__(self, telemetry: RuntimeTelemetry, interval: float = 0.1) -> None:
        self._histogram = telemetry.event_loop_lag
        self._max_gauge = telemetry.event_loop_lag_max
        self._interval = interval
        self._max = 0.0
        self._last_log = float("-inf")
        self._task: asyncio.Task[None] | None = None

    @property
    def longest(self) -> float:
        return self._max

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-loop-lag")

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(self._interval)
            self.record(time.monotonic() - started - self._interval)

    def record(self, lag: float) -> None:
        lag = max(0.0, lag)
        self._histogram.observe(lag)
        if lag > self._max:
            self._max = lag
            self._max_gauge.set(lag)
        if lag >= _STALL_WARNING_SECONDS:
            now = time.monotonic()
            if now - self._last_log >= _LOG_INTERVAL:
                self._last_log = now
                log.warning(
                    "event loop blocked for %.2fs: intake, health checks and /metrics waited; "
                    "see ragpulse_event_loop_lag_seconds and docs/limits.md",
                    lag,
                )

    async def shutdown(self, timeout: float) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
