"""Custom criteria: the definition's checks, the score's arithmetic, and what is never a score."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from agent.judges.base import CriterionInputs, JudgeError
from agent.judges.local import LexicalJudge
from agent.metrics.criteria import CriterionMetric, answer_text, criterion_inputs, criterion_score
from agent.model import Chunk, Criterion, Outcome, RagInteraction, Verdict

TONE = Criterion(
    "tone", "Is the response polite?", ("response",), "1-5", {1: "rude", 3: "neutral", 5: "warm"}
)


@pytest.mark.parametrize(
    ("verdict", "higher_is_better", "expected"),
    [
        (Verdict(True), True, 1.0),
        (Verdict(False), True, 0.0),
        (Verdict(True), False, 0.0),
        (Verdict(False), False, 1.0),
        (Verdict(True, score=0.8), True, 0.8),  # a graded yes counts with its confidence
        (Verdict(False, score=0.25), True, 0.25),  # a 1-5 answer of 2: (2 - 1) / 4
        (Verdict(False, score=0.25), False, 0.75),
    ],
)
def test_score_of_a_verdict(verdict: Verdict, higher_is_better: bool, expected: float) -> None:
    assert criterion_score(verdict, higher_is_better) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Tone"}, "lower-case letters"),
        ({"name": "tone-of-voice"}, "lower-case letters"),
        ({"name": "x" * 49}, "at most 48"),
        ({"question": "  "}, "question is empty"),
        ({"reads": ()}, "reads must name"),
        ({"reads": ("answer",)}, "reads must name"),
        ({"reads": ("response", "response")}, "reads must name"),
        ({"scale": "1-10"}, "scale must be binary or 1-5"),
        ({"scale": "binary", "anchors": {1: "no"}}, "a binary one has none"),
        ({"anchors": {1: "rude"}}, "needs anchors for 1 and 5"),
        ({"anchors": {1: "rude", 5: "warm", 6: "x"}}, "needs anchors for 1 and 5"),
        ({"anchors": {1: "rude", 5: " "}}, "an anchor is empty"),
    ],
)
def test_an_invalid_definition_is_one_line_naming_the_criterion(fields: dict, message: str) -> None:
    values = {"name": "tone", "question": "Is it polite?", "reads": ("response",), "scale": "1-5",
              "anchors": {1: "rude", 5: "warm"}, **fields}  # fmt: skip
    with pytest.raises(ValueError, match=message) as caught:
        Criterion(**values)
    assert str(caught.value).startswith(f"criterion {values['name']!r}: ") and "\n" not in str(caught.value)


def test_the_definition_names_what_the_judge_is_asked_and_reads_have_one_order() -> None:
    a = Criterion("grounded", "Is it grounded?", ("context", "response"))
    b = Criterion("grounded", "Is it grounded?", ("response", "context"))
    assert a.reads == b.reads == ("response", "context") and a.definition == b.definition
    assert Criterion("grounded", "Is it well grounded?", ("response", "context")).definition != a.definition
    # The direction is applied to the score, not asked of the judge: the verdicts stay shared.
    assert Criterion("grounded", "Is it grounded?", ("response",), higher_is_better=False).definition == (
        Criterion("grounded", "Is it grounded?", ("response",)).definition
    )
    assert TONE.points == (1, 2, 3, 4, 5) and a.points == (0, 1)


class AnsweringJudge(LexicalJudge):
    """Answers every criterion with a fixed verdict, and records what it was asked."""

    def __init__(self, verdict: Verdict | None) -> None:
        super().__init__()
        self.verdict = verdict
        self.asked: list[tuple[tuple[str, ...], CriterionInputs]] = []

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        self.asked.append((tuple(c.name for c in criteria), inputs))
        if self.verdict is None:
            raise JudgeError("HTTP 400", reason="bad_request")
        return {c.name: self.verdict for c in criteria}


def interaction(response: str | None = "Thanks for asking!", reference: str | None = None) -> RagInteraction:
    return RagInteraction(
        trace_id="ab" * 16, span_id="cd" * 8, query="q?", chunks=(Chunk("c."),), response=response,
        service="s", route="r", reference=reference,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("reads", "subject", "reason"),
    [
        (("response",), interaction(response=None), "no_response"),
        (("response",), interaction(response=""), "no_response"),
        (("query", "reference"), interaction(), "no_reference"),
        (
            ("context",),
            replace(interaction(), chunks=()),
            "no_chunks",
        ),
    ],
)
def test_a_criterion_reading_what_is_missing_is_skipped_without_asking(
    reads: tuple[str, ...], subject: RagInteraction, reason: str
) -> None:
    judge = AnsweringJudge(Verdict(True))
    result = asyncio.run(CriterionMetric(Criterion("c", "Q?", reads)).evaluate(subject, judge))
    assert result.outcome is Outcome.SKIPPED and result.value is None and result.reason == reason
    assert judge.asked == []


def test_a_judge_failure_is_an_error_and_an_answer_a_score() -> None:
    metric = CriterionMetric(TONE)
    failed = asyncio.run(metric.evaluate(interaction(), AnsweringJudge(None)))
    assert failed.outcome is Outcome.ERROR and failed.value is None and "400" in failed.reason
    judge = AnsweringJudge(Verdict(True, score=0.75))
    ok = asyncio.run(metric.evaluate(interaction(), judge))
    assert ok.outcome is Outcome.OK and ok.value == 0.75 and ok.metric == "tone"
    # The judge gets the interaction's texts; it shows each criterion only what it reads.
    assert judge.asked == [(("tone",), criterion_inputs(interaction()))]


def test_inputs_read_by_criteria_hold_nothing_else() -> None:
    inputs = CriterionInputs("q", "r", ("c1", "c2"), "ref")
    assert inputs.read_by([TONE]) == CriterionInputs("", "r", (), None)
    grounded = Criterion("grounded", "Q?", ("context", "reference"))
    assert inputs.read_by([TONE, grounded]) == CriterionInputs("", "r", ("c1", "c2"), "ref")


def test_the_explanation_is_the_judges_answer_as_given() -> None:
    tone = Criterion("tone", "How courteous?", scale="1-5", anchors={1: "rude", 3: "neutral", 5: "warm"})
    guess = Criterion("speculation", "Does it guess?", higher_is_better=False)
    assert answer_text(tone, Verdict(True, score=0.5)) == "answered 3 of 5 (neutral)"
    assert answer_text(tone, Verdict(False, score=0.25)) == "answered 2 of 5"  # no anchor for 2
    # The answer as given, whichever way the criterion scores it; the confidence when graded.
    assert answer_text(guess, Verdict(True)) == "answered yes"
    assert answer_text(guess, Verdict(False, score=0.17)) == "answered no (p(yes) 0.17)"
    assert answer_text(guess, Verdict(True, reason="invents a date")) == "answered yes: invents a date"
