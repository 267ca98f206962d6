"""A Judge wrapper that measures every call that reaches the real judge (after the cache).

A question is one request, `assess_interaction` included (one call for an LLM judge). Each request
that reached the judge is also spend for the judge budget (`SpendSink`); a refused one is not.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    Judge,
    JudgeError,
    JudgeWrapper,
    SpendSink,
)
from agent.model import Criterion, Verdict
from agent.telemetry import JudgeTelemetry

T = TypeVar("T")


class InstrumentedJudge(JudgeWrapper):
    def __init__(self, inner: Judge, telemetry: JudgeTelemetry, spend: SpendSink | None = None) -> None:
        super().__init__(inner)
        self._requests = telemetry.requests
        self._latency = telemetry.latency.labels(inner.model)
        self._spend = spend

    async def _measure(self, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            result = await call
        except JudgeError as exc:
            # A refused call (open breaker) reached no judge: not spend, not latency.
            self._requests.labels(self.model, "refused" if exc.refused else "error").inc()
            if not exc.refused:
                self._spent()
            raise
        finally:
            self._latency.observe(time.perf_counter() - started)
        self._requests.labels(self.model, "ok").inc()
        self._spent()
        return result

    def _spent(self) -> None:
        if self._spend is not None:
            self._spend.add(1, 0.0)

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return await self._measure(self._inner.assess_chunks(query, answer, chunks))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return await self._measure(self._inner.check_response(query, response, chunks))

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return await self._measure(self._inner.assess_interaction(query, response, chunks, criteria))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return await self._measure(self._inner.check_reference(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return await self._measure(self._inner.compare_answers(query, response, reference))

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        return await self._measure(self._inner.judge_criteria(criteria, inputs))
