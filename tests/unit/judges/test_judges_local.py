"""The lexical judge: linear in what it reads, and silent (skipped) on answers that assert nothing."""

from __future__ import annotations

import asyncio

import pytest

from agent.judges import local
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, Outcome, RagInteraction


def _sentences(n: int, topic: str) -> str:
    return " ".join(f"The {topic} number {i} was built in {1800 + i % 200} by Engineer{i}." for i in range(n))


@pytest.mark.parametrize("size", [200, 2000])
def test_the_lexical_judge_reads_each_text_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """Count the characters tokenised: a judge that re-reads the evidence for every claim reads
    claims x evidence characters (quadratic); this one reads each text a few times whatever its size."""
    read = 0
    tokenise = local.content_words

    def counting(text: str) -> set[str]:
        nonlocal read
        read += len(text)
        return tokenise(text)

    monkeypatch.setattr(local, "content_words", counting)
    response = _sentences(size, "bridge")
    chunks = [_sentences(size // 4, "dam") for _ in range(4)]
    query = "When was the bridge built?"
    total = len(response) + sum(map(len, chunks)) + len(query)
    judge = local.LexicalJudge()
    asyncio.run(judge.check_response(query, response, chunks))
    asyncio.run(judge.assess_chunks(query, response, chunks))
    asyncio.run(judge.check_reference(response, chunks))
    asyncio.run(judge.compare_answers(query, response, " ".join(chunks)))
    # Every question reads its inputs a small constant number of times.
    assert read <= 12 * total, f"read {read} characters of {total}: not linear"


def test_a_200_kb_span_is_judged_without_rereading_the_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    evidence_of = local.Evidence.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[local.Evidence], text: str) -> local.Evidence:
        calls.append(len(text))
        return evidence_of(cls, text)

    monkeypatch.setattr(local.Evidence, "of", classmethod(counting))
    response = _sentences(1800, "bridge")  # ~100 KB, 1800 claims
    chunks = [_sentences(500, "dam") for _ in range(4)]  # ~100 KB
    assert len(response) + sum(map(len, chunks)) > 200_000
    claims = local.check_response("When was the bridge built?", response, chunks)
    assert len(claims) == 1800
    assert len(calls) == 1  # the evidence is tokenised once, not once per claim


@pytest.mark.parametrize("answer", ["Yes.", "No.", "Sure!", "I don't know.", "Sorry, I don't know."])
def test_answers_that_assert_nothing_checkable_are_skipped_not_zero(answer: str) -> None:
    interaction = RagInteraction(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        query="Is the Meridian dam open to visitors?",
        chunks=(Chunk("The Meridian dam is open to visitors every day. It was completed in 1931."),),
        response=answer,
        service="s",
        route="r",
    )
    judge = local.LexicalJudge()
    results = {
        name: asyncio.run(metric().evaluate(interaction, judge)) for name, metric in STREAMING_METRICS.items()
    }
    for name in ("context_precision", "faithfulness", "answer_relevancy"):
        assert results[name].outcome is Outcome.SKIPPED, (name, results[name])
        assert results[name].value is None
    # Relevance of the context to the query does not depend on the answer.
    assert results["context_relevancy"].outcome is Outcome.OK


def test_a_short_answer_that_asserts_something_is_still_judged() -> None:
    judge = local.LexicalJudge()
    claims = asyncio.run(judge.check_response("When?", "Yes, in 1931.", ["It was completed in 1931."]))
    assert [c.supported.value for c in claims] == [True]
    claims = asyncio.run(judge.check_response("When?", "Yes, in 1952.", ["It was completed in 1931."]))
    assert [c.supported.value for c in claims] == [False]


def test_lead_ins_and_what_the_sources_lack_are_no_claims() -> None:
    response = (
        "Based on the given passages, here are the steps to fry chicken in the oven:\n"
        "1. Preheat the oven to 425 degrees.\n"
        "2. Coat the chicken in flour.\n"
        "The passages do not mention how long to bake it. "
        "The provided information lacks a sauce recipe. "
        "Therefore, the chicken is crisp."
    )
    assert local.claims(response) == [
        "Preheat the oven to 425 degrees.",
        "Coat the chicken in flour.",
        "Therefore, the chicken is crisp.",
    ]
    # A negation alone, or the sources alone, does not make a sentence about the sources' gaps.
    assert local.claims("The oven does not need oil. Passage 2 says to bake it for 20 minutes.") == [
        "The oven does not need oil.",
        "Passage 2 says to bake it for 20 minutes.",
    ]


def test_connectives_are_not_what_a_claim_says() -> None:
    evidence = "Preheat the oven to 425 degrees. Coat the chicken in flour."
    # "therefore" is not in the evidence, and no longer counts against the claim.
    assert local.support_score("Therefore, coat the chicken in flour.", evidence) == 1.0
    assert local.support_score("However, coat the fish in flour.", evidence) == pytest.approx(2 / 3)
