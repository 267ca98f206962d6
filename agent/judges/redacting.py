"""A Judge wrapper that redacts personal data before anything else sees the text.

The factory puts it outermost (redact → cache → instruments → LLM judge), so the verdict cache
keys, the single-flight keys and the prompts are all computed from redacted text, and nothing
downstream ever holds the original. It redacts every question of the Judge contract, the
combined `assess_interaction` included, so no question can reach the judge around it. The texts
of one question are redacted together (query, answer or response, reference, chunks), so a value
gets the same placeholder everywhere in that question and claim checks still line up; verdicts
are positional (one per chunk, one per claim), so they map back to the original interaction
unchanged.

Each distinct set of texts is redacted once: the questions about one interaction (the combined
question, then any a metric asks on its own) reuse the result from a small memo, and
`ragpulse_redactions_total{kind}` counts values per interaction, not per question.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    Judge,
    JudgeWrapper,
)
from agent.model import Criterion, Verdict
from agent.redact import Redactor

_MEMO_SIZE = 256


class RedactionCounter(Protocol):
    def redacted(self, kind: str, n: int) -> None: ...


class RedactingJudge(JudgeWrapper):
    def __init__(self, inner: Judge, redactor: Redactor, counter: RedactionCounter) -> None:
        super().__init__(inner)
        self._redactor = redactor
        self._counter = counter
        self._memo: OrderedDict[tuple[str, ...], tuple[str, ...]] = OrderedDict()

    def _redact(self, *texts: str) -> tuple[str, ...]:
        known = self._memo.get(texts)
        if known is not None:
            self._memo.move_to_end(texts)
            return known
        redaction = self._redactor.redact(texts)
        for kind, n in redaction.counts.items():
            self._counter.redacted(kind, n)
        self._memo[texts] = redaction.texts
        if len(self._memo) > _MEMO_SIZE:
            self._memo.popitem(last=False)
        return redaction.texts

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        if answer is None:
            q, *c = self._redact(query, *chunks)
            return await self._inner.assess_chunks(q, None, c)
        q, a, *c = self._redact(query, answer, *chunks)
        return await self._inner.assess_chunks(q, a, c)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        q, r, *c = self._redact(query, response, *chunks)
        return await self._inner.check_response(q, r, c)

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        # The answer is positional (per chunk, per claim) or by criterion name: it holds for the
        # original texts too.
        q, r, *c = self._redact(query, response, *chunks)
        return await self._inner.assess_interaction(q, r, c, criteria)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        ref, *c = self._redact(reference, *chunks)
        return await self._inner.check_reference(ref, c)

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        q, r, ref = self._redact(query, response, reference)
        return await self._inner.compare_answers(q, r, ref)

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        # Redacted together, in the combined question's order, so both share one memo entry.
        texts = [inputs.query, *([inputs.response] if inputs.response is not None else []), *inputs.chunks]
        texts += [inputs.reference] if inputs.reference is not None else []
        redacted = list(self._redact(*texts))
        query = redacted.pop(0)
        response = redacted.pop(0) if inputs.response is not None else None
        chunks = tuple(redacted[: len(inputs.chunks)])
        reference = redacted[len(inputs.chunks)] if inputs.reference is not None else None
        return await self._inner.judge_criteria(criteria, CriterionInputs(query, response, chunks, reference))
