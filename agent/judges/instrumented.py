"""A Judge wrapper that measures every call that reaches the real judge (after the cache).

A question is one request, `assess_interaction` included (one call for an LLM judge).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    InteractionVerdicts,
    Judge,
    JudgeError,
    JudgeWrapper,
)
from agent.model import Verdict
from agent.telemetry import Telemetry

T = TypeVar("T")


class InstrumentedJudge(JudgeWrapper):
    def __init__(self, inner: Judge, telemetry: Telemetry) -> None:
        super().__init__(inner)
        self._requests = telemetry.judge_requests
        self._latency = telemetry.judge_latency.labels(inner.model)

    async def _measure(self, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            result = await call
        except JudgeError as exc:
            # A refused call (open breaker) reached no judge: not spend, not latency.
            self._requests.labels(self.model, "refused" if exc.refused else "error").inc()
            raise
        finally:
            self._latency.observe(time.perf_counter() - started)
        self._requests.labels(self.model, "ok").inc()
        return result

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return await self._measure(self._inner.assess_chunks(query, answer, chunks))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return await self._measure(self._inner.check_response(query, response, chunks))

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str]
    ) -> InteractionVerdicts:
        return await self._measure(self._inner.assess_interaction(query, response, chunks))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return await self._measure(self._inner.check_reference(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return await self._measure(self._inner.compare_answers(query, response, reference))
