"""Custom criteria in the judge: requests, pinned answers, repairs, and the verdict cache."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from agent.judges.base import CriterionInputs, JudgeError, PartialAnswer
from agent.judges.cache import CachedJudge, MemoryVerdictCache
from agent.judges.local import LexicalJudge
from agent.judges.questions import (
    InvalidAnswer,
    assess_interaction_request,
    judge_criteria_request,
)
from agent.model import Criterion, Verdict

TONE = Criterion("tone", "Is the response polite?", ("response",), "1-5", {1: "rude", 5: "warm"})
GROUNDED = Criterion("grounded", "Is every fact\nin the chunks?", ("response", "context"))
INPUTS = CriterionInputs("What is it?", "It is blue.", ("The sky is blue.",), "Blue.")


def test_a_criteria_request_shows_only_what_they_read_and_pins_one_answer_each() -> None:
    request = judge_criteria_request([TONE, GROUNDED], INPUTS)
    assert request.kind == "judge_criteria"
    assert [name for name, _ in request.blocks] == ["RESPONSE", "CHUNK 1"]  # no query, no reference
    assert request.schema["properties"]["criteria"]["properties"] == {
        "tone": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
        "grounded": {"type": "integer", "enum": [0, 1]},
    }
    rendered = request.render()
    # The operator's text is one line each, outside the fences.
    assert (
        '- "grounded" (reads RESPONSE, CHUNKS; answer 1 for yes, 0 for no): Is every fact in the chunks?'
        in rendered
    )
    assert (
        '- "tone" (reads RESPONSE; answer an integer from 1 to 5 (1 = rude; 5 = warm)): '
        "Is the response polite?" in rendered
    )


@pytest.mark.parametrize(("answer", "score"), [(1, 0.0), (2, 0.25), (3, 0.5), (5, 1.0)])
def test_a_1_to_5_answer_is_a_verdict_scored_on_0_to_1(answer: int, score: float) -> None:
    parsed = judge_criteria_request([TONE, GROUNDED], INPUTS).parse(
        json.dumps({"criteria": {"tone": answer, "grounded": 0}})
    )
    assert parsed == {"tone": Verdict(score >= 0.5, score=score), "grounded": Verdict(False)}


@pytest.mark.parametrize("bad", [6, 0, "yes", True, 2.5, None])
def test_an_invalid_or_missing_answer_is_repaired_for_that_criterion_only(bad: object) -> None:
    request = judge_criteria_request([TONE, GROUNDED], INPUTS)
    answer = {"grounded": 1} if bad is None else {"tone": bad, "grounded": 1}
    with pytest.raises(InvalidAnswer, match="tone") as caught:
        request.parse(json.dumps({"criteria": answer}))
    assert caught.value.partial.criteria == {"grounded": Verdict(True)}
    assert caught.value.repair is not None
    (follow,) = caught.value.repair.requests
    assert "tone" in follow.render() and '"grounded"' not in follow.render()
    assert caught.value.repair.finish(['{"criteria": {"tone": 4}}']) == {
        "grounded": Verdict(True),
        "tone": Verdict(True, score=0.75),
    }
    # The repair fails too: the valid part is what the error keeps.
    with pytest.raises(InvalidAnswer) as again:
        caught.value.repair.finish(['{"criteria": {}}'])
    assert again.value.partial.criteria == {"grounded": Verdict(True)}


def test_criteria_in_the_combined_request_are_repaired_alongside_the_rest() -> None:
    request = assess_interaction_request("q", "It is blue.", ["The sky is blue."], [TONE, GROUNDED])
    assert request.schema["required"] == ["chunks", "claims", "criteria"]
    content = {
        "chunks": {"1": {"useful": 1, "relevant": [1]}},
        "claims": [{"claim": "It is blue", "supported": 1, "relevant": 1}],
        "criteria": {"grounded": 1},
    }
    with pytest.raises(InvalidAnswer, match="no answer for criterion tone") as caught:
        request.parse(json.dumps(content))
    assert caught.value.partial.criteria == {"grounded": Verdict(True)}
    assert caught.value.partial.claims is not None and set(caught.value.partial.chunks) == {0}
    assert caught.value.repair is not None
    (follow,) = caught.value.repair.requests  # chunks and claims were fine: only the criterion
    assert follow.kind == "judge_criteria" and '"tone"' in follow.render()
    completed = caught.value.repair.finish(['{"criteria": {"tone": 5}}'])
    assert completed.criteria == {"grounded": Verdict(True), "tone": Verdict(True, score=1.0)}
    assert len(completed.chunks) == 1 and len(completed.claims) == 1


class CriteriaJudge(LexicalJudge):
    """Answers criteria yes, except those named in `fail` (which it leaves out and fails on)."""

    model = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []
        self.fail: set[str] = set()

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        self.asked.append([c.name for c in criteria])
        answered = {c.name: Verdict(True) for c in criteria if c.name not in self.fail}
        if self.fail & {c.name for c in criteria}:
            raise JudgeError(
                "invalid answer", reason="invalid_answer", partial=PartialAnswer(criteria=answered)
            )
        return answered


class Stats:
    def __init__(self) -> None:
        self.hit = self.missed = 0

    def hits(self, n: int) -> None:
        self.hit += n

    def misses(self, n: int) -> None:
        self.missed += n


def test_the_cache_keeps_each_criterion_under_its_definition_and_its_inputs() -> None:
    inner = CriteriaJudge()
    judge = CachedJudge(inner, MemoryVerdictCache(100), Stats())
    inner.fail = {"tone"}
    with pytest.raises(JudgeError):
        asyncio.run(judge.judge_criteria([TONE, GROUNDED], INPUTS))
    # The valid part was kept: the next question asks for the failed criterion only.
    inner.fail = set()
    assert asyncio.run(judge.judge_criteria([TONE, GROUNDED], INPUTS)) == {
        "tone": Verdict(True),
        "grounded": Verdict(True),
    }
    assert inner.asked == [["tone", "grounded"], ["tone"]]
    # A change to what tone does not read (the chunks, the reference) is no new question ...
    other_chunks = CriterionInputs(INPUTS.query, INPUTS.response, ("Grass is green.",), None)
    asyncio.run(judge.judge_criteria([TONE], other_chunks))
    assert inner.asked[-1] == ["tone"] and len(inner.asked) == 2
    # ... an edited question is.
    edited = Criterion("tone", "Is the response warm?", ("response",), "1-5", {1: "cold", 5: "warm"})
    asyncio.run(judge.judge_criteria([edited], INPUTS))
    assert len(inner.asked) == 3


def test_the_local_judge_refuses_criteria_naming_the_setting() -> None:
    with pytest.raises(
        JudgeError, match="the lexical judge cannot judge custom criteria; set judge_model"
    ) as caught:
        asyncio.run(LexicalJudge().judge_criteria([TONE], INPUTS))
    assert caught.value.reason == "unsupported" and not caught.value.retryable
