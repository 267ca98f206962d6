"""Evaluate: run every configured metric on one interaction, concurrently; the one Evaluator of
the stream and of `ragpulse eval`.

Each judge question is asked once per interaction. The metrics see the judge through a view of
their own evaluation (`_InteractionJudge`) that answers a question asked before from the first
answer, so two metrics asking the same question (context precision and context relevancy) share
one. When the metrics ask both chunk and claim questions about the response, the evaluator first
asks the combined `assess_interaction` (one call for an LLM judge) and the view answers the
metrics' questions from it, with or without a verdict cache behind the judge. Custom criteria
ride in that combined question; without it (or for criteria that read the reference) they are
asked together in one `judge_criteria` question, so n criteria add no call to an interaction
that makes the combined one and one call to any other.

A retryable judge failure (open breaker, timeout, 5xx, 429) is reported beside the results, so
the caller defers the interaction (the stream) or retries it (`ragpulse eval`) instead of
recording errors that say nothing about it. The verdicts the metrics obtained are kept on the
evaluation (`JudgedVerdicts`), so a report can show them without asking the judge again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.judges.base import (
    ASSESS_CHUNKS,
    ASSESS_INTERACTION,
    CHECK_REFERENCE,
    CHECK_RESPONSE,
    COMPARE_ANSWERS,
    JUDGE_CRITERIA,
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    Judge,
    JudgeError,
    JudgeWrapper,
)
from agent.metrics.base import Metric
from agent.metrics.context import anchor
from agent.metrics.criteria import CriterionMetric, criterion_inputs
from agent.model import Criterion, MetricResult, RagInteraction, Verdict

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JudgedVerdicts:
    """The judge's verdicts on one interaction, as the metrics obtained them while scoring it.

    `chunks`: one assessment per chunk (usefulness for the answer the metrics judged against:
    the reference when known, else the response); `claims`: the response's claims checked
    against all the chunks. None where no metric asked that question or it failed. Reasons are
    what the judge gave in this evaluation (none for verdicts the cache answered). `criteria`:
    each custom criterion answered, with its definition (which says how to read the answer).
    """

    chunks: tuple[ChunkAssessment, ...] | None = None
    claims: tuple[ClaimVerdict, ...] | None = None
    criteria: tuple[tuple[Criterion, Verdict], ...] = ()


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The metrics' results, the retryable judge failure behind any error among them, and the
    verdicts obtained."""

    results: list[MetricResult]
    retryable: JudgeError | None = None
    verdicts: JudgedVerdicts = JudgedVerdicts()


class _InteractionJudge(JudgeWrapper):
    """The judge as one evaluation sees it: each question asked once (later and concurrent askers
    share the first answer, a failure included), the combined answer standing in for the two
    questions it answers, and the first retryable failure remembered. One per evaluation, so
    nothing is shared between interactions."""

    def __init__(self, judge: Judge) -> None:
        super().__init__(judge)
        self.retryable: JudgeError | None = None
        self._asked: dict[tuple[object, ...], asyncio.Future[Any]] = {}

    async def _once(self, key: tuple[object, ...], ask: Callable[[], Awaitable[T]]) -> T:
        known = self._asked.get(key)
        if known is None:
            known = self._asked[key] = asyncio.ensure_future(self._call(ask()))
        result: T = await known
        return result

    def answered(self, key: tuple[object, ...]) -> Any:
        """The successful answer to a question asked in this evaluation, else None."""
        known = self._asked.get(key)
        if known is None or not known.done() or known.cancelled() or known.exception() is not None:
            return None
        return known.result()

    def _seed(self, key: tuple[object, ...], value: object) -> None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(value)
        self._asked.setdefault(key, future)

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
        key = (ASSESS_CHUNKS, query, answer, tuple(chunks))
        return list(await self._once(key, lambda: self._chunks(query, answer, chunks)))

    async def _chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> tuple[ChunkAssessment, ...]:
        return tuple(await self._inner.assess_chunks(query, answer, chunks))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        key = (CHECK_RESPONSE, query, response, tuple(chunks))
        return list(await self._once(key, lambda: self._claims(query, response, chunks)))

    async def _claims(self, query: str, response: str, chunks: Sequence[str]) -> tuple[ClaimVerdict, ...]:
        return tuple(await self._inner.check_response(query, response, chunks))

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        key = (ASSESS_INTERACTION, query, response, tuple(chunks), *(c.definition for c in criteria))
        answer: InteractionVerdicts = await self._once(
            key, lambda: self._inner.assess_interaction(query, response, chunks, criteria)
        )
        # The combined answer answers the questions it stands for.
        self._seed((ASSESS_CHUNKS, query, response, tuple(chunks)), answer.chunks)
        self._seed((CHECK_RESPONSE, query, response, tuple(chunks)), answer.claims)
        inputs = CriterionInputs(query, response, tuple(chunks))
        for c in criteria:
            if c.name in answer.criteria:
                self._seed(self.criterion_key(c, inputs), answer.criteria[c.name])
        return answer

    @staticmethod
    def criterion_key(criterion: Criterion, inputs: CriterionInputs) -> tuple[object, ...]:
        """What a criterion's answer is known by in this evaluation: its definition and what it reads."""
        shown = inputs.read_by([criterion])
        return (
            JUDGE_CRITERIA,
            criterion.definition,
            shown.query,
            shown.response,
            shown.chunks,
            shown.reference,
        )

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        """Each criterion asked once per evaluation; those not asked yet are asked together, and
        each shares the answer (or the failure) of the question it was asked in."""
        keys = {c.name: self.criterion_key(c, inputs) for c in criteria}
        new = [c for c in criteria if keys[c.name] not in self._asked]
        if new:
            batch = asyncio.ensure_future(self._call(self._inner.judge_criteria(new, inputs)))
            for c in new:
                picked = self._asked[keys[c.name]] = asyncio.ensure_future(self._pick(batch, c.name))
                # A failure is reported by whoever awaits it; never as "exception never retrieved".
                picked.add_done_callback(lambda f: f.cancelled() or f.exception())
        return {c.name: await self._asked[keys[c.name]] for c in criteria}

    @staticmethod
    async def _pick(batch: asyncio.Future[dict[str, Verdict]], name: str) -> Verdict:
        answered = await batch
        if name not in answered:
            raise JudgeError(f"the judge gave no answer for criterion {name}", reason="invalid_answer")
        return answered[name]

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        key = (CHECK_REFERENCE, reference, tuple(chunks))
        return list(await self._once(key, lambda: self._references(reference, chunks)))

    async def _references(self, reference: str, chunks: Sequence[str]) -> tuple[Verdict, ...]:
        return tuple(await self._inner.check_reference(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        key = (COMPARE_ANSWERS, query, response, reference)
        return await self._once(key, lambda: self._inner.compare_answers(query, response, reference))


class Evaluator:
    """Scores interactions with `metrics`, asking `judge` (the whole judge stack)."""

    def __init__(self, metrics: Sequence[Metric], judge: Judge) -> None:
        self._metrics = tuple(metrics)
        self._judge = judge

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    async def evaluate(self, interaction: RagInteraction) -> list[MetricResult]:
        return (await self.assess(interaction)).results

    async def assess(self, interaction: RagInteraction, only: Collection[str] | None = None) -> Evaluation:
        """Score `interaction` with every metric (or those named in `only`)."""
        metrics = self._metrics if only is None else tuple(m for m in self._metrics if m.name in only)
        judge = _InteractionJudge(self._judge)
        chunks = [c.content for c in interaction.chunks]
        asked = set().union(*(m.questions for m in metrics))
        inputs = criterion_inputs(interaction)
        # The custom criteria this interaction has what they read for.
        criteria = [
            m.criterion for m in metrics if isinstance(m, CriterionMetric) and m.missing(inputs) is None
        ]
        # Both chunk and claim questions about the response: one combined question serves all
        # the metrics. (With a reference, chunk usefulness is judged against it instead.)
        combined = (
            {ASSESS_CHUNKS, CHECK_RESPONSE} <= asked
            and bool(chunks)
            and bool(interaction.response)
            and anchor(interaction) == interaction.response
        )
        if combined:
            assert interaction.response is not None
            riding = [c for c in criteria if "reference" not in c.reads]
            try:
                await judge.assess_interaction(interaction.judged_query, interaction.response, chunks, riding)
            except JudgeError as exc:
                if exc.retryable:
                    # The judge is away: asking again per metric would only multiply the failures.
                    errors = [MetricResult.error(m.name, str(exc), judge=self._judge.model) for m in metrics]
                    return Evaluation(errors, exc)
                # A permanent failure of the combined question: the metrics ask their own (a
                # verdict cache then sends only what the failed answer's valid part left open).
            except Exception:  # stage boundary: the metrics still ask for themselves
                log.exception("combined judge call failed on interaction %s", interaction.interaction_id)
        if criteria:
            # The criteria the combined answer did not give, in one question for all of them.
            with contextlib.suppress(Exception):  # the metrics report it: each shares the failure
                await judge.judge_criteria(criteria, inputs)
        results = list(await asyncio.gather(*(self._one(m, interaction, judge) for m in metrics)))
        verdicts = self._verdicts(judge, interaction, chunks, criteria)
        return Evaluation(results, judge.retryable, verdicts)

    @staticmethod
    def _verdicts(
        judge: _InteractionJudge,
        interaction: RagInteraction,
        chunks: Sequence[str],
        criteria: Sequence[Criterion],
    ) -> JudgedVerdicts:
        chunks_key = tuple(chunks)
        assessed = judge.answered(
            (ASSESS_CHUNKS, interaction.judged_query, anchor(interaction) or None, chunks_key)
        )
        claims = None
        if interaction.response is not None:
            claims = judge.answered(
                (CHECK_RESPONSE, interaction.judged_query, interaction.response, chunks_key)
            )
        inputs = criterion_inputs(interaction)
        answered = [(c, judge.answered(judge.criterion_key(c, inputs))) for c in criteria]
        return JudgedVerdicts(assessed, claims, tuple((c, v) for c, v in answered if v is not None))

    async def _one(self, metric: Metric, interaction: RagInteraction, judge: Judge) -> MetricResult:
        try:
            return await metric.evaluate(interaction, judge)
        except Exception as exc:  # stage boundary: a bug in one metric must not stop the others
            log.exception("metric %s failed on interaction %s", metric.name, interaction.interaction_id)
            return MetricResult.error(metric.name, f"internal error: {exc!r}", judge=self._judge.model)
