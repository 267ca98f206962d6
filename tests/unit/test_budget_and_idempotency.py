from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from agent.budget import BudgetController, MemoryLedger, Spend, SpendCounter
from agent.build import build_judge
from agent.config import Settings
from agent.idempotency import LeaseOutcome, MemoryIdempotency
from agent.judges.base import InteractionVerdicts, JudgeError
from agent.judges.instrumented import InstrumentedJudge
from agent.judges.local import LexicalJudge
from agent.model import Criterion
from agent.telemetry import JudgeTelemetry


class Meter:
    def __init__(self) -> None:
        self.calls = 0.0

    def total(self) -> Spend:
        return Spend(self.calls, self.calls * 0.001)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_budget_lowers_the_factor_in_proportion_and_restores_it() -> None:
    meter, clock = Meter(), Clock(60 * 1000.0)  # at the start of a minute
    controller = BudgetController(MemoryLedger(), meter, calls_per_minute=100, usd_per_hour=None, clock=clock)
    assert run(controller.refresh()) == 1.0

    meter.calls += 400  # 4x the budget within the window
    clock.now += 5
    factor = run(controller.refresh())
    assert factor == pytest.approx(0.95 / 4.0, rel=0.02)
    assert controller.factor() == factor

    # Two minutes of silence: spend leaves the window and the factor doubles back up to 1.
    clock.now += 125
    factors = [run(controller.refresh()) for _ in range(4)]
    assert factors == sorted(factors) and factors[-1] == 1.0


def test_usd_budget_is_per_hour() -> None:
    meter, clock = Meter(), Clock(60 * 500.0)
    controller = BudgetController(MemoryLedger(), meter, calls_per_minute=None, usd_per_hour=0.6, clock=clock)
    meter.calls += 20  # 0.02 USD in a minute = 2x the 0.01 USD/minute that 0.6 USD/hour allows
    clock.now += 1
    assert run(controller.refresh()) == pytest.approx(0.95 / 2.0, rel=0.05)


def test_budget_disabled_without_limits() -> None:
    controller = BudgetController(MemoryLedger(), Meter(), calls_per_minute=None, usd_per_hour=None)
    assert not controller.enabled and controller.factor() == 1.0


def test_memory_idempotency_claims_once_and_respects_leases() -> None:
    clock = Clock(0.0)
    mine = MemoryIdempotency("a", lease_seconds=10, done_seconds=100, clock=clock)
    assert run(mine.acquire("i1", "a:1")) is LeaseOutcome.GRANTED
    # Another attempt, even in the same replica, is busy while the first holds the lease.
    assert run(mine.acquire("i1", "a:2")) is LeaseOutcome.BUSY
    clock.now = 8
    assert run(mine.renew("i1", "a:1"))
    clock.now = 15  # past the first lease, within the renewed one
    assert run(mine.acquire("i1", "a:2")) is LeaseOutcome.BUSY
    run(mine.complete("i1"))
    assert run(mine.acquire("i1", "a:3")) is LeaseOutcome.DONE
    clock.now = 116
    assert run(mine.acquire("i1", "a:4")) is LeaseOutcome.GRANTED  # remembered only for done_seconds


def test_memory_idempotency_lease_runs_out_without_renewal() -> None:
    clock = Clock(0.0)
    store = MemoryIdempotency("a", lease_seconds=10, done_seconds=100, clock=clock)
    assert run(store.acquire("x", "dead:1")) is LeaseOutcome.GRANTED
    clock.now = 11
    assert run(store.acquire("x", "b:1")) is LeaseOutcome.GRANTED  # the holder died: taken over
    assert not run(store.renew("x", "dead:1"))


def test_memory_idempotency_release_frees_a_claim() -> None:
    store = MemoryIdempotency("a", lease_seconds=10, done_seconds=100)
    run(store.acquire("x", "a:1"))
    run(store.release("x", "someone-else"))
    assert run(store.acquire("x", "a:2")) is LeaseOutcome.BUSY
    run(store.release("x", "a:1"))
    assert run(store.acquire("x", "a:2")) is LeaseOutcome.GRANTED


class UnreadRegistry(CollectorRegistry):
    """A registry the judge's instruments record into and that nobody may read back."""

    def collect(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the budget read a Prometheus registry")

    def get_sample_value(self, name, labels=None):  # type: ignore[no-untyped-def]
        raise AssertionError("the budget read a Prometheus registry")


class Failing(LexicalJudge):
    """Fails every question: refused (open breaker, no call made) or after reaching the judge."""

    def __init__(self, refused: bool) -> None:
        super().__init__()
        self.refused = refused

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        raise JudgeError("down", retryable=self.refused, refused=self.refused)


def test_judge_spend_reaches_the_budget_without_reading_a_registry() -> None:
    spend, telemetry = SpendCounter(), JudgeTelemetry(UnreadRegistry())
    judge = build_judge(Settings(judge_model="lexical"), telemetry, spend=spend)
    chunks = ["Paris is the capital of France.", "Bananas are yellow."]

    async def ask(batch: int) -> None:
        for i in range(40):
            await judge.assess_interaction(f"Capital of France {batch}.{i}?", "Paris.", chunks)
        await judge.assess_interaction(f"Capital of France {batch}.0?", "Paris.", chunks)  # cached: no call
        for refused in (True, False):
            with pytest.raises(JudgeError):
                await InstrumentedJudge(Failing(refused), telemetry, spend).assess_interaction(
                    "q", "r", chunks
                )

    run(ask(1))
    # 40 questions reached the judge, and one that failed there; the refused one is no spend.
    assert spend.total() == Spend(41, 0.0)

    clock = Clock(60 * 1000.0)
    controller = BudgetController(MemoryLedger(), spend, calls_per_minute=10, usd_per_hour=None, clock=clock)
    run(ask(2))  # 41 more calls in this minute: 4.1x the budget
    clock.now += 1
    assert run(controller.refresh()) == pytest.approx(0.95 / 4.1, rel=0.02)
    # USD comes from the LLM judge's priced responses: tests/integration/test_llm_judge.py.
