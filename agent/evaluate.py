"""Evaluate: run every configured metric on one interaction, concurrently.

When the metrics ask both chunk and claim questions and the judge can answer them in one call,
that combined answer is handed to the metrics directly (not only through the verdict cache, so a
cache that is down costs no extra judge call). A retryable judge failure (open breaker, timeout,
5xx, 429) is reported beside the results, so the pipeline defers the interaction instead of
recording errors that say nothing about it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.judges.base import (
    ASSESS_CHUNKS,
    CHECK_RESPONSE,
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    Judge,
    JudgeError,
    JudgeWrapper,
)
from agent.metrics.base import Metric
from agent.model import MetricResult, RagInteraction, Verdict

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The metrics' results, and the retryable judge failure behind any error among them."""

    results: list[MetricResult]
    retryable: JudgeError | None = None


class _InteractionJudge(JudgeWrapper):
    """The judge as one evaluation sees it: answers prefetched questions from the combined answer
    and remembers a retryable failure. One per evaluation, so nothing is shared between them."""

    def __init__(self, judge: Judge) -> None:
        super().__init__(judge)
        self.retryable: JudgeError | None = None
        self._prefetched: tuple[tuple[str, str, tuple[str, ...]], Any] | None = None

    def prefill(
        self,
        query: str,
        response: str,
        chunks: Sequence[str],
        answer: tuple[list[ChunkAssessment], list[ClaimVerdict]],
    ) -> None:
        self._prefetched = ((query, response, tuple(chunks)), answer)

    def _known(self, query: str, answer: str | None, chunks: Sequence[str]) -> Any:
        if self._prefetched is None or answer is None:
            return None
        key, value = self._prefetched
        return value if key == (query, answer, tuple(chunks)) else None

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except JudgeError as exc:
            if exc.retryable and self.retryable is None:
                self.retryable = exc
            raise

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        known = self._known(query, answer, chunks)
        if known is not None:
            return list(known[0])
        return await self._call(self._inner.assess_chunks(query, answer, chunks))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        known = self._known(query, response, chunks)
        if known is not None:
            return list(known[1])
        return await self._call(self._inner.check_response(query, response, chunks))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return await self._call(self._inner.check_reference(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return await self._call(self._inner.compare_answers(query, response, reference))


class Evaluator:
    def __init__(self, metrics: Sequence[Metric], judge: Judge) -> None:
        self._metrics = tuple(metrics)
        self._judge = judge
        asked = set().union(*(m.questions for m in self._metrics))
        # Both chunk and claim questions: one combined judge call can serve all the metrics.
        self._prefetch = (
            getattr(judge, "prefetch", None) if {ASSESS_CHUNKS, CHECK_RESPONSE} <= asked else None
        )

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    async def evaluate(self, interaction: RagInteraction) -> list[MetricResult]:
        return (await self.assess(interaction)).results

    async def assess(self, interaction: RagInteraction) -> Evaluation:
        judge = _InteractionJudge(self._judge)
        if self._prefetch is not None and interaction.chunks and interaction.response:
            chunks = [c.content for c in interaction.chunks]
            try:
                answer = await self._prefetch(interaction.judged_query, interaction.response, chunks)
            except JudgeError as exc:
                if exc.retryable:
                    # The judge is away: asking again per metric would only triple the failures.
                    return Evaluation(
                        [
                            MetricResult.error(m.name, str(exc), judge=self._judge.model)
                            for m in self._metrics
                        ],
                        exc,
                    )
                answer = None  # a permanent failure of the combined prompt: the metrics ask alone
            except Exception:  # an optimisation only: the metrics still ask for themselves
                log.exception("combined judge call failed on interaction %s", interaction.interaction_id)
                answer = None
            if answer is not None:
                judge.prefill(interaction.judged_query, interaction.response, chunks, answer)
        results = list(await asyncio.gather(*(self._one(m, interaction, judge) for m in self._metrics)))
        return Evaluation(results, judge.retryable)

    async def _one(self, metric: Metric, interaction: RagInteraction, judge: Judge) -> MetricResult:
        try:
            return await metric.evaluate(interaction, judge)
        except Exception as exc:  # stage boundary: a bug in one metric must not stop the others
            log.exception("metric %s failed on interaction %s", metric.name, interaction.interaction_id)
            return MetricResult.error(metric.name, f"internal error: {exc!r}", judge=self._judge.model)
