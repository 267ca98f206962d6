"""The delivery pieces: offsets kept until committed, claims, the judge gate, deferral."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest
from prometheus_client import CollectorRegistry

from agent.config import PipelineSettings
from agent.delivery import Delivery, JudgeGate, Leases, WorkLedger
from agent.evaluate import Evaluator
from agent.idempotency import LeaseOutcome, MemoryIdempotency
from agent.judges.base import ChunkAssessment, ClaimVerdict, InteractionVerdicts, JudgeError
from agent.judges.cache import CachedJudge
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, Criterion, Outcome, RagInteraction, Verdict
from agent.otlp.decode import DecodedRequest
from agent.pipeline import Pipeline, Route
from agent.sampling import KeepRule, RateTable, RuleSampler
from agent.sources.offsets import OffsetTracker
from agent.telemetry import Telemetry
from tests.support.otlp import Recorder, assembler, decoded
from tests.support.pipeline import ListExporter


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


# -- Offsets -------------------------------------------------------------------------------------


def test_offsets_stay_tracked_until_their_commit_succeeds() -> None:
    tracker = OffsetTracker()
    for offset, sequence in ((10, 0), (11, 1), (12, 2)):
        tracker.track("p0", offset, sequence)
    tracker.track("p1", 5, 1)
    assert tracker.committable(2) == {"p0": 12, "p1": 6}
    # The commit failed (a rebalance in progress): the same offsets are offered again, not lost.
    assert tracker.committable(2) == {"p0": 12, "p1": 6}
    tracker.committed({"p0": 12})
    assert tracker.pending("p0") == 1 and tracker.last_committed("p0") == 12
    # A kept partition keeps committing as more work finishes.
    assert tracker.committable(3) == {"p0": 13, "p1": 6}
    tracker.committed({"p0": 13, "p1": 6})
    assert tracker.committable(10) == {}
    tracker.forget(["p0"])
    assert tracker.last_committed("p0") is None and tracker.pending("p0") == 0


def test_work_ledger_watermark_and_oldest_age() -> None:
    now = [100.0]
    ledger = WorkLedger(clock=lambda: now[0])
    first, second = ledger.begin(), ledger.begin()
    ledger.add(first)
    assert ledger.publish(None) == first
    now[0] = 103.0
    assert ledger.oldest_age() == pytest.approx(3.0)
    ledger.finish(first)
    assert ledger.publish(second) == second  # still buffered in the assembler
    assert ledger.oldest_age() == pytest.approx(3.0)
    assert ledger.publish(None) == 2 and ledger.oldest_age() == 0.0


# -- Leases --------------------------------------------------------------------------------------


class BrokenStore:
    """An idempotency store whose backend is down (every call raises)."""

    def __init__(self) -> None:
        self.down = True
        self.done: list[str] = []

    async def acquire(self, interaction_id: str, token: str) -> LeaseOutcome:
        raise ConnectionError("redis down")

    async def renew(self, interaction_id: str, token: str) -> bool:
        raise ConnectionError("redis down")

    async def complete(self, interaction_id: str) -> None:
        if self.down:
            raise ConnectionError("redis down")
        self.done.append(interaction_id)

    async def release(self, interaction_id: str, token: str) -> None:
        raise ConnectionError("redis down")


def test_a_duplicate_arriving_during_evaluation_is_busy_then_done() -> None:
    async def scenario() -> None:
        claims = Leases(MemoryIdempotency("r", 30, 300), "r", lease_seconds=30, done_seconds=300)
        lease = await claims.acquire("t:s")
        assert not isinstance(lease, LeaseOutcome)
        assert await claims.acquire("t:s") is LeaseOutcome.BUSY  # same replica, still evaluating
        await claims.complete(lease)
        assert await claims.acquire("t:s") is LeaseOutcome.DONE

    run(scenario())


def test_claims_without_the_store_still_score_once_per_replica_and_write_done_marks_later() -> None:
    async def scenario() -> None:
        errors: list[int] = []
        store = BrokenStore()
        claims = Leases(store, "r", lease_seconds=0.3, done_seconds=300, errors=lambda: errors.append(1))
        await claims.start()
        lease = await claims.acquire("t:s")
        assert not isinstance(lease, LeaseOutcome) and not lease.shared
        assert await claims.acquire("t:s") is LeaseOutcome.BUSY
        await claims.complete(lease)
        assert await claims.acquire("t:s") is LeaseOutcome.DONE
        assert errors and store.done == []
        store.down = False  # Redis is back: the missed done mark is written
        for _ in range(50):
            if store.done:
                break
            await asyncio.sleep(0.05)
        assert store.done == ["t:s"]
        await claims.shutdown(1.0)

    run(scenario())


def test_leases_are_renewed_while_work_runs() -> None:
    async def scenario() -> None:
        store = MemoryIdempotency("r", lease_seconds=0.3, done_seconds=300)
        claims = Leases(store, "r", lease_seconds=0.3, done_seconds=300)
        await claims.start()
        lease = await claims.acquire("t:s")
        assert not isinstance(lease, LeaseOutcome)
        await asyncio.sleep(1.0)  # three leases long
        # Another replica still cannot take it: the holder renewed its lease.
        assert await store.acquire("t:s", "other:1") is LeaseOutcome.BUSY
        await claims.release(lease)
        assert await store.acquire("t:s", "other:1") is LeaseOutcome.GRANTED
        await claims.shutdown(1.0)

    run(scenario())


# -- Judge gate ----------------------------------------------------------------------------------


def test_gate_honours_retry_after_and_lets_one_probe_through() -> None:
    async def scenario() -> None:
        now = [0.0]
        gate = JudgeGate(base_delay=0.01, clock=lambda: now[0])
        delay = gate.failed(JudgeError("429", retryable=True, reason="rate_limited", retry_after=6.0))
        assert gate.failing and delay >= 6.0 and gate.retry_after() >= 6.0
        waiting = asyncio.ensure_future(gate.admit())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # Retry-After not yet over
        now[0] = 6.5
        assert await asyncio.wait_for(waiting, 2) is True  # the probe
        second = asyncio.ensure_future(gate.admit())
        await asyncio.sleep(0.6)
        assert not second.done()  # one probe at a time
        gate.succeeded()
        assert await asyncio.wait_for(second, 2) is False and not gate.failing

    run(scenario())


# -- Deferral through the pipeline ------------------------------------------------------------


class FlakyJudge:
    """Refuses retryably (as an open breaker does) until `healthy` is set."""

    model = "flaky"

    def __init__(self) -> None:
        self.healthy = False

    def prompt_version(self, kind: str) -> str:
        return "v1"

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        if not self.healthy:
            raise JudgeError("breaker open", retryable=True, reason="breaker_open", retry_after=0.05)
        return [ClaimVerdict(Verdict(True), Verdict(True))]


def test_a_retryable_judge_failure_defers_and_pauses_instead_of_recording_an_error() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        for i in range(3):
            with recorder.tracer.start_as_current_span("rag") as span:
                span.set_attribute("openinference.span.kind", "CHAIN")
                span.set_attribute("input.value", f"question {i}?")
                span.set_attribute("output.value", "an answer.")
                span.set_attribute("retrieval.documents.0.document.content", "a chunk.")
        judge, exporter = FlakyJudge(), ListExporter()
        telemetry = Telemetry(CollectorRegistry())
        route = Route(
            "production",
            Evaluator([STREAMING_METRICS["faithfulness"]()], judge),  # type: ignore[arg-type]
            [exporter],
            sampler=RuleSampler(RateTable(1.0, {}, {})),
        )
        leases = Leases(MemoryIdempotency("r", 30, 300), "r", lease_seconds=30, done_seconds=300)
        pipeline = Pipeline(
            assembler(),
            {"production": route},
            lambda interaction: "production",
            Delivery(leases, JudgeGate(base_delay=0.05, max_delay=0.2), telemetry.evaluation),
            telemetry.pipeline,
            PipelineSettings(max_pending=100, eval_concurrency=2),
        )
        await pipeline.start()
        tracker = OffsetTracker()
        tracker.track("p0", 0, pipeline.accept(DecodedRequest(decoded(recorder.spans())), "kafka"))
        for _ in range(100):
            if pipeline.pause_reason() == "judge_unavailable":
                break
            await asyncio.sleep(0.02)
        assert pipeline.pause_reason() == "judge_unavailable"
        assert pipeline.retry_after_seconds() >= 1.0
        await asyncio.sleep(0.5)
        assert exporter.exported == []  # nothing recorded while the judge is away
        assert tracker.committable(pipeline.low_watermark()) == {}
        judge.healthy = True
        for _ in range(200):
            if len(exporter.exported) == 3:
                break
            await asyncio.sleep(0.02)
        assert len(exporter.exported) == 3 and len(set(exporter.exported)) == 3
        assert pipeline.pause_reason() is None
        assert tracker.committable(pipeline.low_watermark()) == {"p0": 1}
        registry = telemetry.registry
        assert (
            registry.get_sample_value("ragpulse_evaluations_deferred_total", {"reason": "breaker_open"}) or 0
        ) >= 1
        await pipeline.shutdown(1.0)

    run(scenario())


# -- The combined answer reaches the metrics without the cache --------------------------------


class DeadCache:
    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        return [None] * len(keys)  # what RedisVerdictCache answers while Redis is down

    async def set_many(self, values: Mapping[str, str]) -> None:
        return None  # dropped


class CombinedJudge:
    model = "combined"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def prompt_version(self, kind: str) -> str:
        return "v1"

    def healthy(self) -> bool:
        return True

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        self.calls.append("assess_interaction")
        assessed = tuple(ChunkAssessment(Verdict(True), Verdict(True, 1.0), 1, 1) for _ in chunks)
        return InteractionVerdicts(assessed, (ClaimVerdict(Verdict(True), Verdict(True)),))

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        self.calls.append("assess_chunks")
        return [ChunkAssessment(Verdict(True), Verdict(True, 1.0), 1, 1) for _ in chunks]

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.calls.append("check_response")
        return [ClaimVerdict(Verdict(True), Verdict(True))]


class NoStats:
    def hits(self, n: int) -> None: ...

    def misses(self, n: int) -> None: ...


def _interaction() -> RagInteraction:
    return RagInteraction(
        trace_id="a" * 32,
        span_id="b" * 16,
        query="What is the capital of France?",
        chunks=(Chunk("Paris is the capital of France."), Chunk("Bananas are yellow.")),
        response="Paris.",
        service="s",
        route="r",
    )


def test_with_the_cache_down_one_combined_call_still_serves_all_four_metrics() -> None:
    inner = CombinedJudge()
    judge = CachedJudge(inner, DeadCache(), NoStats())  # type: ignore[arg-type]
    evaluator = Evaluator([m() for m in STREAMING_METRICS.values()], judge)
    evaluation = run(evaluator.assess(_interaction()))
    assert inner.calls == ["assess_interaction"]
    assert evaluation.retryable is None
    assert all(r.outcome is Outcome.OK for r in evaluation.results)


def test_a_retryable_combined_failure_is_reported_without_asking_each_metric() -> None:
    class Down(CombinedJudge):
        async def assess_interaction(self, query, response, chunks, criteria=()):  # type: ignore[no-untyped-def]
            self.calls.append("assess_interaction")
            raise JudgeError("HTTP 500", retryable=True, reason="server_error")

    inner = Down()
    evaluator = Evaluator(
        [m() for m in STREAMING_METRICS.values()], CachedJudge(inner, DeadCache(), NoStats())
    )  # type: ignore[arg-type]
    evaluation = run(evaluator.assess(_interaction()))
    assert inner.calls == ["assess_interaction"]
    assert evaluation.retryable is not None and evaluation.retryable.reason == "server_error"


# -- Sampling caps -----------------------------------------------------------------------------


def test_keep_rules_have_a_cap_of_their_own_and_budget_drops_are_labelled() -> None:
    now = [0.0]

    class HalfBudget:
        def factor(self) -> float:
            return 0.0

    sampler = RuleSampler(
        RateTable(1.0, {}, {}),
        [KeepRule.parse("feedback.score < 0")],
        HalfBudget(),
        keep_per_minute=2,
        clock=lambda: now[0],
    )

    def interaction(i: int, attributes: dict) -> RagInteraction:  # type: ignore[type-arg]
        return RagInteraction(f"{i:032x}", "b" * 16, "q", (), "r", "s", "r", attributes=attributes)

    kept = [sampler.decide(interaction(i, {"feedback.score": -1})) for i in range(5)]
    assert [d.keep for d in kept] == [True, True, False, False, False]
    assert kept[-1].reason == "keep_cap"
    assert sampler.decide(interaction(9, {})).reason == "budget"  # the base rate 1.0 would keep it
    now[0] = 30.0  # half a minute refills one token
    assert sampler.decide(interaction(10, {"feedback.score": -1})).keep


def test_gate_opens_when_nothing_is_left_to_probe_with() -> None:
    async def scenario() -> None:
        gate = JudgeGate(base_delay=10.0)
        gate.failed(JudgeError("down", retryable=True, reason="server_error"))
        assert gate.failing
        gate.nothing_waiting()  # e.g. the deferred interaction was scored by another replica
        assert not gate.failing
        assert await asyncio.wait_for(gate.admit(), 1) is False

    run(scenario())


def test_retry_after_is_read_from_seconds_milliseconds_and_dates() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from agent.judges.caller import retry_after_seconds

    class Failure(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.litellm_response_headers = headers

    assert retry_after_seconds(Failure({"retry-after": "6"})) == 6.0
    assert retry_after_seconds(Failure({"retry-after-ms": "1500"})) == 1.5
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds(Failure({"retry-after": when})) or 0) <= 31
    assert retry_after_seconds(Failure({})) is None
    assert retry_after_seconds(ValueError("no headers")) is None
