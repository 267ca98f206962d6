"""The judge budget: a cap on judge calls per minute and/or USD per hour, shared by all replicas.

The judge reports each call and its price to a `SpendCounter` as it makes it; every judge call is
recorded in a ledger of per-minute buckets (in Redis when configured, so the
budget is global; in memory otherwise). A controller reads the recent spend rate every few
seconds and scales the sampling rate by a factor in (0, 1]: down in proportion when spend
exceeds the budget, back up (at most doubling per step) when it falls below. Spend is
proportional to the factor, so the proportional step settles in one or two rounds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.config import BudgetSettings
from agent.infra.lifecycle import Periodic
from agent.infra.throttled_log import ThrottledLog
from agent.model import Spend

log = logging.getLogger(__name__)


class SpendLedger(Protocol):
    async def add(self, minute: int, calls: int, usd: float) -> None:
        """Add spend to the bucket of an epoch minute."""
        ...

    async def read(self, minutes: tuple[int, int]) -> tuple[Spend, Spend]:
        """Spend in two minute buckets (previous, current)."""
        ...


class MemoryLedger:
    def __init__(self) -> None:
        self._buckets: dict[int, list[float]] = {}

    async def add(self, minute: int, calls: int, usd: float) -> None:
        bucket = self._buckets.setdefault(minute, [0.0, 0.0])
        bucket[0] += calls
        bucket[1] += usd
        for old in [m for m in self._buckets if m < minute - 2]:
            del self._buckets[old]

    async def read(self, minutes: tuple[int, int]) -> tuple[Spend, Spend]:
        spends = [Spend(*self._buckets.get(m, (0.0, 0.0))) for m in minutes]
        return spends[0], spends[1]


class RedisLedger:
    """Buckets `ragpulse:budget:<minute>` as hashes {calls, usd}, expiring after three minutes."""

    def __init__(self, client: Any, prefix: str = "ragpulse:budget:") -> None:
        self._client = client
        self._prefix = prefix

    async def add(self, minute: int, calls: int, usd: float) -> None:
        key = f"{self._prefix}{minute}"
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.hincrby(key, "calls", calls)
            pipe.hincrbyfloat(key, "usd", usd)
            pipe.expire(key, 180)
            await pipe.execute()

    async def read(self, minutes: tuple[int, int]) -> tuple[Spend, Spend]:
        async with self._client.pipeline(transaction=False) as pipe:
            for minute in minutes:
                pipe.hmget(f"{self._prefix}{minute}", "calls", "usd")
            rows = await pipe.execute()
        spends = [Spend(float(calls or 0), float(usd or 0)) for calls, usd in rows]
        return spends[0], spends[1]


class SpendMeter(Protocol):
    def total(self) -> Spend:
        """Cumulative judge calls and USD spent by this process."""
        ...


class SpendCounter:
    """This process's judge spend, fed by the judge as it calls (agent/judges: `SpendSink`).

    The instrumented judge adds one call for every question that reached a judge (a refused call,
    open breaker, is no spend); the LLM judge adds the USD litellm prices each response at. It is
    the budget's SpendMeter: the budget never reads Prometheus counters back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # judges may run in worker threads (offline eval)
        self._calls = 0.0
        self._usd = 0.0

    def add(self, calls: int, usd: float) -> None:
        with self._lock:
            self._calls += calls
            self._usd += usd

    def total(self) -> Spend:
        with self._lock:
            return Spend(self._calls, self._usd)


class BudgetController:
    """Implements the sampler's BudgetFactor from the ledger's recent spend.

    This replica's spend is read from a meter (a SpendCounter the judge feeds) and added to the
    shared ledger on every refresh, so no judge call waits on the ledger.
    """

    def __init__(
        self,
        ledger: SpendLedger,
        meter: SpendMeter,
        *,
        calls_per_minute: float | None,
        usd_per_hour: float | None,
        interval: float = 5.0,
        min_factor: float = 0.001,
        clock: Callable[[], float] = time.time,
        exhausted: Callable[[bool], object] | None = None,
    ) -> None:
        self._ledger = ledger
        # Told True while the budget throttles sampling (ragpulse_judge_budget_exhausted).
        self._exhausted = exhausted
        self._calls_per_minute = calls_per_minute
        self._usd_per_minute = usd_per_hour / 60.0 if usd_per_hour is not None else None
        self._min_factor = min_factor
        self._clock = clock
        self._meter = meter
        self._factor = 1.0
        self._recorded = meter.total()
        self._refresher = Periodic("budget", interval, self.refresh)
        self._log = ThrottledLog(log, 60.0)

    @property
    def enabled(self) -> bool:
        return self._calls_per_minute is not None or self._usd_per_minute is not None

    def factor(self) -> float:
        return self._factor

    async def refresh(self) -> float:
        now = self._clock()
        minute = int(now // 60)
        total = self._meter.total()
        calls, usd = int(total.calls - self._recorded.calls), total.usd - self._recorded.usd
        try:
            if calls or usd:
                await self._ledger.add(minute, calls, usd)
            self._recorded = total
            previous, current = await self._ledger.read((minute - 1, minute))
        except Exception as exc:  # the budget store is down: keep the last factor; spend is kept too
            self._log.warning(
                "ledger", "budget ledger unavailable, keeping sample factor %.3f: %s", self._factor, exc
            )
            return self._factor
        # Sliding one-minute window: the current bucket plus the unexpired part of the previous one.
        elapsed = (now % 60) / 60.0
        window = Spend(
            previous.calls * (1 - elapsed) + current.calls, previous.usd * (1 - elapsed) + current.usd
        )
        pressure = 0.0
        if self._calls_per_minute:
            pressure = max(pressure, window.calls / self._calls_per_minute)
        if self._usd_per_minute:
            pressure = max(pressure, window.usd / self._usd_per_minute)
        if pressure > 1.0:
            target = self._factor / pressure * 0.95
        elif pressure > 0.0:
            target = min(self._factor * 2.0, self._factor / pressure * 0.95)
        else:
            target = self._factor * 2.0
        self._factor = min(1.0, max(self._min_factor, target))
        if self._exhausted is not None:
            self._exhausted(pressure >= 1.0 or self._factor < 1.0)
        return self._factor

    async def start(self) -> None:
        if self.enabled:
            self._refresher.start()

    async def flush(self) -> None:
        """Nothing held: spend is added to the ledger on every refresh."""

    async def shutdown(self, timeout: float) -> None:
        await self._refresher.stop()


def build(
    section: BudgetSettings, meter: SpendMeter, *, redis: Any = None, exhausted: Callable[[bool], object]
) -> BudgetController:
    """The judge budget of `section`, its ledger shared in Redis when there is a client."""
    return BudgetController(
        RedisLedger(redis) if redis is not None else MemoryLedger(),
        meter,
        calls_per_minute=section.calls_per_minute,
        usd_per_hour=section.usd_per_hour,
        exhausted=exhausted,
    )
