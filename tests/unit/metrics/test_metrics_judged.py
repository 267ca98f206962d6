"""Judged metrics: their pure scores on worked examples, and the metric classes over a scripted judge."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

import agent.metrics
from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    InteractionVerdicts,
    JudgeError,
    answer_separately,
)
from agent.metrics import (
    METRICS,
    STREAMING_METRICS,
    AnswerCorrectness,
    AnswerRelevancy,
    ContextPrecision,
    ContextRecall,
    ContextRelevancy,
    Faithfulness,
    answer_correctness_score,
    answer_relevancy_score,
    context_recall_score,
    context_relevancy_score,
    faithfulness_score,
)
from agent.model import Chunk, Criterion, Outcome, RagInteraction, Verdict

YES, NO = Verdict(True), Verdict(False)


PURE_FUNCTIONS = (
    "context_precision_at_k",
    "precision_at_k",
    "recall_at_k",
    "hit_rate_at_k",
    "reciprocal_rank",
    "mean_reciprocal_rank",
    "ndcg_at_k",
    "context_entities_recall",
    "nonllm_context_precision",
    "nonllm_context_recall",
    "ragchecker_scores",
    "context_relevancy_score",
    "context_recall_score",
    "faithfulness_score",
    "answer_relevancy_score",
    "answer_correctness_score",
)


def test_every_pure_function_named_in_the_docs_is_importable_from_agent_metrics() -> None:
    for name in PURE_FUNCTIONS:
        assert callable(getattr(agent.metrics, name)), name


def test_registries() -> None:
    assert list(STREAMING_METRICS) == [
        "context_precision",
        "context_relevancy",
        "faithfulness",
        "answer_relevancy",
    ]
    assert set(METRICS) == {*STREAMING_METRICS, "context_recall", "answer_correctness"}


def test_context_relevancy_worked_example() -> None:
    # 9 of 11 statements relevant, spread over three chunks.
    assert context_relevancy_score([4, 5, 0], [4, 5, 2]) == pytest.approx(0.8182, abs=1e-4)
    assert context_relevancy_score([0, 0], [3, 2]) == 0.0
    assert context_relevancy_score([3], [3]) == 1.0
    assert context_relevancy_score([], []) is None
    assert context_relevancy_score([0], [0]) is None
    with pytest.raises(ValueError):
        context_relevancy_score([3], [2])


def test_context_recall_worked_example() -> None:
    assert context_recall_score([True, True, True, False]) == 0.75
    assert context_recall_score([False, False]) == 0.0
    assert context_recall_score([True]) == 1.0
    assert context_recall_score([]) is None


def test_faithfulness_and_answer_relevancy() -> None:
    assert faithfulness_score([True, False]) == 0.5
    assert faithfulness_score([]) is None
    assert faithfulness_score([True] * 3) == 1.0
    assert faithfulness_score([False] * 3) == 0.0
    assert answer_relevancy_score([True] * 9 + [False] * 2) == pytest.approx(0.8182, abs=1e-4)
    assert answer_relevancy_score([]) is None


def test_answer_correctness_is_claim_f1() -> None:
    # RAGAS's worked example: TP 1, FP 2, FN 1 -> 1 / (1 + 1.5) = 0.4
    assert answer_correctness_score(1, 2, 1) == pytest.approx(0.4)
    assert answer_correctness_score(3, 0, 0) == 1.0
    assert answer_correctness_score(0, 2, 1) == 0.0
    assert answer_correctness_score(0, 0, 0) is None
    with pytest.raises(ValueError):
        answer_correctness_score(-1, 0, 0)


class ScriptedJudge:
    """Returns given verdicts and records the questions (a test double for metric logic, no I/O)."""

    model = "scripted"

    def __init__(
        self,
        assessments: Sequence[ChunkAssessment] = (),
        claims: Sequence[ClaimVerdict] = (),
        attributions: Sequence[Verdict] = (),
        comparison: AnswerComparison | None = None,
        fail: bool = False,
    ) -> None:
        self.assessments = list(assessments)
        self.claims = list(claims)
        self.attributions = list(attributions)
        self.comparison = comparison
        self.fail = fail
        self.asked: list[tuple] = []

    def prompt_version(self, kind: str) -> str:
        return f"{kind}-v9"

    def healthy(self) -> bool:
        return True

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return await answer_separately(self, query, response, chunks, criteria)

    def _check(self) -> None:
        if self.fail:
            raise JudgeError("HTTP 500 gave up")

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        self.asked.append(("assess_chunks", answer, len(chunks)))
        self._check()
        return self.assessments[: len(chunks)]

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        self.asked.append(("check_response", response))
        self._check()
        return self.claims

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        self.asked.append(("check_reference", reference))
        self._check()
        return self.attributions

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        self.asked.append(("compare_answers",))
        self._check()
        assert self.comparison is not None
        return self.comparison


def interaction(
    chunks: int = 3, response: str | None = "resp", reference: str | None = None
) -> RagInteraction:
    return RagInteraction(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        query="q",
        chunks=tuple(Chunk(f"chunk {i}") for i in range(chunks)),
        response=response,
        service="s",
        route="r",
        reference=reference,
    )


def assessment(useful: bool, relevant: int, statements: int) -> ChunkAssessment:
    return ChunkAssessment(Verdict(useful), Verdict(relevant > 0), statements, relevant)


def evaluate(metric: object, subject: RagInteraction, judge: ScriptedJudge):  # type: ignore[no-untyped-def]
    return asyncio.run(metric.evaluate(subject, judge))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("useful", "expected"),
    [((0, 1, 1, 0, 0), 0.5833), ((1, 1, 0, 1, 0), 0.9167), ((0, 0, 1, 1, 1), 0.4778), ((0, 0, 0, 0, 0), 0.0)],
)
def test_context_precision_from_usefulness(useful: tuple[int, ...], expected: float) -> None:
    judge = ScriptedJudge([assessment(bool(u), 1, 2) for u in useful])
    result = evaluate(ContextPrecision(), interaction(len(useful)), judge)
    assert result.outcome is Outcome.OK and result.value == pytest.approx(expected, abs=1e-4)
    assert result.prompt_version == "assess_chunks-v9" and result.judge == "scripted"


def test_context_precision_and_relevancy_ask_the_same_question() -> None:
    judge = ScriptedJudge([assessment(True, 4, 4), assessment(False, 5, 5), assessment(False, 0, 2)])
    subject = interaction(3, reference="the reference")
    precision = evaluate(ContextPrecision(), subject, judge)
    relevancy = evaluate(ContextRelevancy(), subject, judge)
    assert precision.value == 1.0
    assert relevancy.value == pytest.approx(9 / 11)
    # With a reference, usefulness is judged against it (reference-anchored precision).
    assert judge.asked == [("assess_chunks", "the reference", 3)] * 2


def test_faithfulness_and_answer_relevancy_from_claims() -> None:
    claims = [
        ClaimVerdict(YES, YES),
        ClaimVerdict(YES, NO),
        ClaimVerdict(NO, YES),
        ClaimVerdict(YES, YES),
    ]
    judge = ScriptedJudge(claims=claims)
    assert evaluate(Faithfulness(), interaction(), judge).value == 0.75
    assert evaluate(AnswerRelevancy(), interaction(), judge).value == 0.75
    assert judge.asked == [("check_response", "resp")] * 2


def test_reference_metrics() -> None:
    judge = ScriptedJudge(
        attributions=[YES, YES, YES, NO], comparison=AnswerComparison((YES, NO, NO), (YES, NO))
    )
    subject = interaction(reference="ref")
    assert evaluate(ContextRecall(), subject, judge).value == 0.75
    assert evaluate(AnswerCorrectness(), subject, judge).value == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("metric", "subject", "reason"),
    [
        (ContextPrecision(), interaction(0), "no_chunks"),
        (ContextPrecision(), interaction(2, response=None), "no_response"),
        (ContextRelevancy(), interaction(0), "no_chunks"),
        (Faithfulness(), interaction(0), "no_chunks"),
        (Faithfulness(), interaction(2, response=""), "no_response"),
        (AnswerRelevancy(), interaction(2, response=None), "no_response"),
        (ContextRecall(), interaction(2), "no_reference"),
        (ContextRecall(), interaction(0, reference="r"), "no_chunks"),
        (AnswerCorrectness(), interaction(2), "no_reference"),
        (AnswerCorrectness(), interaction(2, response=None, reference="r"), "no_response"),
    ],
)
def test_undefined_inputs_are_skipped_without_asking(
    metric: object, subject: RagInteraction, reason: str
) -> None:
    judge = ScriptedJudge()
    result = evaluate(metric, subject, judge)
    assert result.outcome is Outcome.SKIPPED and result.value is None and result.reason == reason
    assert judge.asked == []


def test_no_claims_or_statements_is_skipped_not_zero() -> None:
    empty = ScriptedJudge(
        [assessment(False, 0, 0)], claims=[], attributions=[], comparison=AnswerComparison((), ())
    )
    assert evaluate(Faithfulness(), interaction(1), empty).reason == "no_claims"
    assert evaluate(AnswerRelevancy(), interaction(1), empty).reason == "no_claims"
    assert evaluate(ContextRelevancy(), interaction(1), empty).reason == "no_statements"
    assert evaluate(ContextRecall(), interaction(1, reference="r"), empty).reason == "no_claims"
    assert evaluate(AnswerCorrectness(), interaction(1, reference="r"), empty).reason == "no_claims"


@pytest.mark.parametrize("name", sorted(METRICS))
def test_a_failed_judge_is_an_error_never_a_score(name: str) -> None:
    result = evaluate(METRICS[name](), interaction(2, reference="r"), ScriptedJudge(fail=True))
    assert result.outcome is Outcome.ERROR and result.value is None
    assert "HTTP 500" in result.reason and result.judge == "scripted"
