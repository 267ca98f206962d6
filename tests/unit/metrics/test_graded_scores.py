"""Scores from the judge's confidence: binary verdicts give the literature's values exactly,
graded ones the hand-computed means; the LLM's confidence read from log-probabilities; the
verdict cache keeps the confidence (agent/metrics, agent/judges/confidence.py, cache.py)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from agent.judges.base import ChunkAssessment, ClaimVerdict, InteractionVerdicts
from agent.judges.cache import (
    CachedJudge,
    MemoryVerdictCache,
    decode_claims,
    decode_relevance,
    decode_verdict,
    encode_claims,
    encode_relevance,
    encode_verdict,
)
from agent.judges.confidence import Completion, Token, flag_probabilities, graded, tokens_of, yes_probability
from agent.judges.local import LexicalJudge
from agent.judges.questions import criterion_verdicts
from agent.metrics import (
    answer_correctness_score,
    context_precision_at_k,
    context_recall_score,
    context_relevancy_score,
    faithfulness_score,
    graded_context_precision,
    mean_confidence,
)
from agent.metrics.answer import Faithfulness
from agent.metrics.context import ContextPrecision, ContextRelevancy
from agent.metrics.criteria import criterion_score
from agent.model import Chunk, Criterion, Outcome, RagInteraction, Verdict

LITERATURE = [
    ([0, 1, 1, 0, 0], 0.5833),
    ([1, 1, 0, 1, 0], 0.9167),
    ([0, 0, 1, 1, 1], 0.4778),
    ([1, 0, 1], (1 + 2 / 3) / 2),
]


# -- the math --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("verdicts", "expected"), LITERATURE)
def test_binary_context_precision_is_the_literature_value_exactly(
    verdicts: list[int], expected: float
) -> None:
    assert graded_context_precision([bool(v) for v in verdicts]) == context_precision_at_k(verdicts)
    assert graded_context_precision([float(v) for v in verdicts]) == context_precision_at_k(verdicts)
    assert graded_context_precision(verdicts) == pytest.approx(expected, abs=1e-4)


def test_graded_context_precision_by_hand() -> None:
    # v = (0.5, 1.0): P@1 = 0.5, P@2 = 1.5 / 2 = 0.75; CP = (0.5·0.5 + 0.75·1.0) / 1.5 = 2/3
    assert graded_context_precision([0.5, 1.0]) == pytest.approx(2 / 3)
    # v = (1.0, 0.5): P@1 = 1, P@2 = 0.75; CP = (1·1 + 0.75·0.5) / 1.5 = 0.9167
    assert graded_context_precision([1.0, 0.5]) == pytest.approx(1.375 / 1.5)
    # v = (0.2, 0, 0.8): P@1 = 0.2, P@3 = 1/3; CP = (0.2·0.2 + (1/3)·0.8) / 1.0 = 0.3067
    assert graded_context_precision([0.2, 0.0, 0.8]) == pytest.approx(0.04 + 0.8 / 3)
    assert graded_context_precision([0.0, 0.0]) == 0.0
    assert graded_context_precision([]) is None
    with pytest.raises(ValueError, match="rank 2"):
        graded_context_precision([1.0, 1.5])
    with pytest.raises(ValueError, match="rank 1"):
        graded_context_precision([None])  # type: ignore[list-item]


def test_binary_shares_are_today_values_exactly() -> None:
    assert faithfulness_score([True, False]) == 0.5
    assert faithfulness_score([True, True, False]) == 2 / 3
    assert context_recall_score([True, True, True, False]) == 0.75
    assert context_relevancy_score([4, 5, 0], [4, 5, 2]) == 9 / 11
    assert context_relevancy_score([4.0, 5.0, 0.0], [4, 5, 2]) == 9 / 11
    assert faithfulness_score([]) is None
    assert context_relevancy_score([0.0], [0]) is None


def test_graded_means_by_hand() -> None:
    assert faithfulness_score([0.9, 0.4]) == pytest.approx(0.65)
    assert mean_confidence([1.0, 0.25, 0.5, True]) == pytest.approx(0.6875)
    # 2.5 of 4 statements + 1.2 of 2: 3.7 / 6
    assert context_relevancy_score([2.5, 1.2], [4, 2]) == pytest.approx(3.7 / 6)
    with pytest.raises(ValueError):
        faithfulness_score([1.2])
    with pytest.raises(ValueError):
        context_relevancy_score([3.5], [3])


def test_confidence_defaults_to_the_verdict() -> None:
    assert Verdict(True).confidence == 1.0
    assert Verdict(False).confidence == 0.0
    assert Verdict(True, score=0.7).confidence == 0.7
    assert Verdict(False, score=-0.2).confidence == 0.0  # a cosine below 0 counts as no support
    assessed = ChunkAssessment(None, Verdict(True), 4, 2)
    assert assessed.relevant_weight == 2.0
    assert ChunkAssessment(None, Verdict(True), 4, 2, graded_relevant=1.35).relevant_weight == 1.35


class _Fixed(LexicalJudge):
    """Fixed verdicts, to check how metrics combine them."""

    def __init__(self, useful: list[Verdict], claims: list[Verdict]) -> None:
        super().__init__()
        self._useful, self._claims = useful, claims

    async def assess_chunks(self, query: str, answer: str | None, chunks: object) -> list[ChunkAssessment]:
        return [ChunkAssessment(u, Verdict(True), 2, 1, graded_relevant=0.5) for u in self._useful]

    async def check_response(self, query: str, response: str, chunks: object) -> list[ClaimVerdict]:
        return [ClaimVerdict(v, Verdict(True)) for v in self._claims]


def _interaction(chunks: int = 2) -> RagInteraction:
    return RagInteraction(
        trace_id="ab" * 16, span_id="cd" * 8, query="q", response="r",
        chunks=tuple(Chunk(f"c{i}") for i in range(chunks)), service="s", route="r",
    )  # fmt: skip


def test_metrics_average_the_confidence() -> None:
    judge = _Fixed([Verdict(False, score=0.4), Verdict(True, score=0.9)], [Verdict(True, score=0.6)])
    precision = asyncio.run(ContextPrecision().evaluate(_interaction(), judge))
    # P@1 = 0.4, P@2 = 1.3 / 2; CP = (0.4·0.4 + 0.65·0.9) / 1.3
    assert precision.value == pytest.approx((0.16 + 0.585) / 1.3)
    assert precision.chunk_verdicts == (False, True)  # the documents summary stays yes/no
    faithfulness = asyncio.run(Faithfulness().evaluate(_interaction(), judge))
    assert faithfulness.value == pytest.approx(0.6)
    relevancy = asyncio.run(ContextRelevancy().evaluate(_interaction(), judge))
    assert relevancy.value == pytest.approx(0.25)  # 0.5 + 0.5 of 4 statements
    binary = _Fixed([Verdict(False), Verdict(True), Verdict(True)], [Verdict(True), Verdict(False)])
    assert asyncio.run(ContextPrecision().evaluate(_interaction(3), binary)).value == pytest.approx(
        0.5833, abs=1e-4
    )
    assert asyncio.run(Faithfulness().evaluate(_interaction(), binary)).value == 0.5


def test_answer_correctness_counts_graded_claims() -> None:
    # Binary: TP 2, FP 1, FN 1 → 2 / 3.
    assert answer_correctness_score(2, 1, 1) == 2 / 3
    # Graded: response claims 0.8, 0.6 → TP 1.4, FP 0.6; reference claim 0.5 covered → FN 0.5.
    assert answer_correctness_score(1.4, 0.6, 0.5) == pytest.approx(1.4 / (1.4 + 0.55))


# -- the local judge -------------------------------------------------------------------------------


def test_local_judge_gives_a_borderline_claim_a_fractional_faithfulness() -> None:
    chunk = "The Eiffel Tower in Paris was completed in 1889 for the World's Fair."
    # Two of its three content words are in the chunk: supported (>= 0.5), but not fully.
    response = "The Eiffel Tower was painted red."
    found = asyncio.run(LexicalJudge().check_response("When was the Eiffel Tower built?", response, [chunk]))
    assert [c.supported.value for c in found] == [True]
    support = found[0].supported.score
    assert support is not None and 0.5 <= support < 1.0
    item = RagInteraction(
        trace_id="ab" * 16, span_id="cd" * 8, query="When was the Eiffel Tower built?", response=response,
        chunks=(Chunk(chunk),), service="s", route="r",
    )  # fmt: skip
    result = asyncio.run(Faithfulness().evaluate(item, LexicalJudge()))
    assert result.outcome is Outcome.OK
    assert result.value == support  # not the 1.0 the thresholded verdict gave


def test_local_judge_grades_statement_relevance() -> None:
    (assessed,) = asyncio.run(
        LexicalJudge().assess_chunks(
            "capital of France", None, ["Paris is the capital of France. Bananas are yellow."]
        )
    )
    assert (assessed.statements, assessed.relevant_statements) == (2, 1)
    # The first statement holds both query words (1.0), the second none (0.0).
    assert assessed.graded_relevant == 1.0
    assert context_relevancy_score([assessed.relevant_weight], [assessed.statements]) == 0.5


# -- an LLM's confidence from log-probabilities ----------------------------------------------------


def _tokens(content: str, probability: float) -> tuple[Token, ...]:
    out, rest = [], content
    while rest:
        for flag in ("1", "0"):
            if rest.startswith(flag) and out and out[-1].text.endswith(": "):
                other = "0" if flag == "1" else "1"
                top = ((flag, math.log(probability)), (other, math.log(1 - probability)))
                out.append(Token(flag, math.log(probability), top))
                rest = rest[1:]
                break
        else:
            cut = min((i for i in (rest.find(": 1"), rest.find(": 0")) if i >= 0), default=len(rest) - 2)
            piece = rest[: cut + 2] if cut >= 0 else rest
            out.append(Token(piece or rest, 0.0))
            rest = rest[len(piece or rest) :]
    return tuple(out)


def test_yes_probability_reads_the_runner_up() -> None:
    assert yes_probability(
        Token("1", math.log(0.8), (("1", math.log(0.8)), ("0", math.log(0.15))))
    ) == pytest.approx(0.8 / 0.95)
    assert yes_probability(
        Token("0", math.log(0.9), (("0", math.log(0.9)), ("1", math.log(0.1))))
    ) == pytest.approx(0.1)
    assert yes_probability(Token(" true", math.log(0.7))) == pytest.approx(0.7)  # no alternatives
    assert yes_probability(Token("false", math.log(0.7))) == pytest.approx(0.3)
    assert yes_probability(Token('"claims', 0.0)) is None


def test_llm_answer_is_graded_from_its_flags() -> None:
    content = json.dumps({"claims": [{"supported": 1, "relevant": 1}, {"supported": 0, "relevant": 1}]})
    completion = Completion(content, _tokens(content, 0.75))
    assert flag_probabilities(completion) == {"supported": [0.75, 0.25], "relevant": [0.75, 0.75]}
    parsed = [ClaimVerdict(Verdict(True), Verdict(True)), ClaimVerdict(Verdict(False), Verdict(True))]
    claims = graded(parsed, completion)
    assert [c.supported.score for c in claims] == [0.75, 0.25]
    assert faithfulness_score([c.supported.confidence for c in claims]) == pytest.approx(0.5)


def test_llm_answer_stays_binary_when_logprobs_do_not_line_up() -> None:
    content = json.dumps({"claims": [{"supported": 1, "relevant": 1}]})
    parsed = [ClaimVerdict(Verdict(True), Verdict(True))]
    assert graded(parsed, Completion(content)) is parsed  # no logprobs
    assert graded(parsed, Completion(content, (Token("{", 0.0),))) is parsed  # tokens miss text
    two = [*parsed, ClaimVerdict(Verdict(True), Verdict(True))]
    assert graded(two, Completion(content, _tokens(content, 0.9))) is two  # counts differ
    contradicting = [ClaimVerdict(Verdict(False), Verdict(True))]
    assert graded(contradicting, Completion(content, _tokens(content, 0.9))) is contradicting


def test_tokens_of_reads_provider_logprobs() -> None:
    raw = {"content": [{"token": "1", "logprob": -0.1, "top_logprobs": [{"token": "1", "logprob": -0.1}]}]}
    assert tokens_of(raw) == (Token("1", -0.1, (("1", -0.1),)),)
    assert tokens_of(None) == ()


def test_graded_interaction_answer() -> None:
    content = json.dumps(
        {"chunks": [{"useful": 1, "relevant": [1]}], "claims": [{"supported": 1, "relevant": 0}]}
    )
    completion = Completion(content, _tokens(content, 0.6))
    answer = graded(
        (
            [ChunkAssessment(Verdict(False), Verdict(True), 1, 1)],
            [ClaimVerdict(Verdict(True), Verdict(False))],
        ),
        completion,
    )
    assert answer == (answer[0], answer[1])
    assert answer[0][0].useful is not None and answer[0][0].useful.value is False  # unchanged: contradicts
    consistent = graded(
        (
            [ChunkAssessment(Verdict(True), Verdict(True), 1, 1)],
            [ClaimVerdict(Verdict(True), Verdict(False))],
        ),
        completion,
    )
    assert consistent[0][0].useful.score == 0.6
    assert consistent[1][0].supported.score == 0.6 and consistent[1][0].relevant.score == pytest.approx(0.4)
    assert isinstance(InteractionVerdicts(tuple(consistent[0]), tuple(consistent[1])), InteractionVerdicts)


def _criteria() -> list[Criterion]:
    return [
        Criterion("cites_policy", "Does it cite the policy?"),
        Criterion("tone", "How courteous is it?", scale="1-5", anchors={1: "rude", 5: "warm"}),
        Criterion("speculation", "Does it guess?", higher_is_better=False),
    ]


def test_binary_criteria_are_graded_from_their_flags_and_1_to_5_answers_kept() -> None:
    content = json.dumps({"criteria": {"cites_policy": 1, "tone": 1, "speculation": 0}})
    criteria = _criteria()
    answers, problems = criterion_verdicts(json.loads(content), criteria)
    assert not problems
    completion = Completion(content, _tokens(content, 0.8))
    # The 1-5 answer "1" is a token like a flag, yet it is no yes/no: only the binary names count.
    assert flag_probabilities(completion, ["cites_policy", "speculation"]) == {
        "cites_policy": [0.8],
        "speculation": [pytest.approx(0.2)],
    }
    scored = graded(answers, completion)
    assert scored["cites_policy"].score == 0.8 and scored["speculation"].score == pytest.approx(0.2)
    assert scored["tone"] == answers["tone"] and scored["tone"].score == 0.0
    by_name = {c.name: c for c in criteria}
    scores = {n: criterion_score(v, by_name[n].higher_is_better) for n, v in scored.items()}
    assert scores == {"cites_policy": 0.8, "tone": 0.0, "speculation": pytest.approx(0.8)}
    # Without log-probabilities the answers stay 0 / 1, exactly as before.
    assert graded(answers, Completion(content)) is answers
    assert [criterion_score(answers[n], by_name[n].higher_is_better) for n in by_name] == [1.0, 0.0, 1.0]


def test_criteria_riding_in_the_combined_answer_are_graded_with_it() -> None:
    content = json.dumps(
        {
            "chunks": {"1": {"useful": 1}},
            "claims": [{"supported": 1}],
            "criteria": {"cites_policy": 0, "tone": 5},
        }
    )
    answer = InteractionVerdicts(
        (ChunkAssessment(Verdict(True), Verdict(True), 1, 1),),
        (ClaimVerdict(Verdict(True)),),
        {"cites_policy": Verdict(False), "tone": Verdict(True, score=1.0)},
    )
    scored = graded(answer, Completion(content, _tokens(content, 0.7)))
    assert scored.claims[0].supported.score == 0.7
    assert scored.criteria["cites_policy"].score == pytest.approx(0.3)
    assert scored.criteria["tone"].score == 1.0
    # A criterion answer that contradicts its flag's probability: the whole answer stays binary.
    wrong = InteractionVerdicts(
        answer.chunks, answer.claims, {**answer.criteria, "cites_policy": Verdict(True)}
    )
    assert graded(wrong, Completion(content, _tokens(content, 0.7))) is wrong


# -- the cache -------------------------------------------------------------------------------------


def test_cache_encoding_keeps_the_confidence_and_reads_old_entries() -> None:
    assert decode_verdict(encode_verdict(Verdict(True, 0.6375))) == Verdict(True, 0.6375)
    graded_chunk = ChunkAssessment(None, Verdict(True, 0.5), 4, 2, graded_relevant=1.25)
    assert decode_relevance(encode_relevance(graded_chunk)) == (Verdict(True, 0.5), 4, 2, 1.25)
    assert decode_relevance("1|0.5|4|2") == (Verdict(True, 0.5), 4, 2, None)  # written before
    claims = [ClaimVerdict(Verdict(True, 0.81), Verdict(False, 0.1))]
    assert decode_claims(encode_claims(claims)) == claims


class _Stats:
    def __init__(self) -> None:
        self.hit = self.missed = 0

    def hits(self, n: int) -> None:
        self.hit += n

    def misses(self, n: int) -> None:
        self.missed += n


def test_memory_cache_round_trips_graded_verdicts() -> None:
    stats = _Stats()
    judge = CachedJudge(LexicalJudge(), MemoryVerdictCache(100), stats)
    query, response = "When was the Eiffel Tower built?", "The Eiffel Tower was painted red."
    chunks = ["The Eiffel Tower in Paris was completed in 1889. Paris is in France."]
    first = asyncio.run(judge.assess_interaction(query, response, chunks))
    missed = stats.missed
    again = asyncio.run(judge.assess_interaction(query, response, chunks))
    assert stats.missed == missed and stats.hit > 0  # answered from the cache
    assert again == first
    assert again.claims[0].supported.score is not None and 0 < again.claims[0].supported.score < 1
    assert again.chunks[0].graded_relevant is not None
