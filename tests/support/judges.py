"""Judge wrappers, and the judge model caller of the test LLM server, for tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agent.config import JudgeSettings
from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    JudgeWrapper,
    SpendSink,
)
from agent.judges.caller import ModelCaller
from agent.model import Criterion, Verdict

TEST_MODEL = "openai/ragpulse-test-judge"


def model_caller(
    api_base: str, *, spend: SpendSink | None = None, retry_base_delay: float = 0.01, **options: Any
) -> ModelCaller:
    """The judge model's caller for the test LLM server at `api_base` (tests/support/llm_server.py):
    a 2 s timeout and short backoff unless `options` (JudgeSettings fields) say otherwise."""
    values: dict[str, Any] = {
        "model": TEST_MODEL,
        "api_base": api_base,
        "api_key": "test-key",
        "timeout_seconds": 2.0,
    }
    return ModelCaller(JudgeSettings(**(values | options)), spend=spend, retry_base_delay=retry_base_delay)


def binary(value: Any) -> Any:
    """`value` with every graded confidence dropped (Verdict.score, graded_relevant): the verdicts
    a judge that answers yes/no would give, as the test LLM server does."""
    if isinstance(value, list | tuple):
        return type(value)(binary(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for field in dataclasses.fields(value):
            current = getattr(value, field.name)
            if field.name in ("score", "graded_relevant") and isinstance(value, Verdict | ChunkAssessment):
                changes[field.name] = None
            elif dataclasses.is_dataclass(current) or isinstance(current, list | tuple):
                changes[field.name] = binary(current)
        return dataclasses.replace(value, **changes)
    return value


class Binary(JudgeWrapper):
    """The wrapped judge's verdicts, thresholded: scores as a yes/no judge's would be."""

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return binary(await self._inner.assess_chunks(query, answer, chunks))  # type: ignore[no-any-return]

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return binary(await self._inner.check_response(query, response, chunks))  # type: ignore[no-any-return]

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return binary(await self._inner.assess_interaction(query, response, chunks, criteria))  # type: ignore[no-any-return]

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return binary(await self._inner.check_reference(reference, chunks))  # type: ignore[no-any-return]

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return binary(await self._inner.compare_answers(query, response, reference))  # type: ignore[no-any-return]

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        return binary(await self._inner.judge_criteria(criteria, inputs))  # type: ignore[no-any-return]
