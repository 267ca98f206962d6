"""Local judges: no network, no model download, cheap enough to run on every sampled span.

`LexicalJudge` decides by content-word overlap plus claim-level checks of the specifics a
hallucination usually gets wrong: numbers, dates and names that the evidence does not contain.
It is a baseline with known limits: it cannot see paraphrase, and a chunk that repeats the
response's words is "useful" even if the model ignored it. docs/judges.md gives its measured
agreement with human labels.

The module-level functions are pure and synchronous, so the test LLM server can compute the
same verdicts from a prompt's fenced text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    answer_separately,
    refuse_criteria,
)
from agent.model import Criterion, Verdict, relevance_query
from agent.text import (
    META_WORDS,
    SOURCE_REFERENCE,
    claims,
    content_words,
    names,
    numbers,
    sentences,
)


def coverage(claim_words: set[str] | frozenset[str], evidence_words: set[str] | frozenset[str]) -> float:
    return len(claim_words & evidence_words) / len(claim_words) if claim_words else 0.0


@dataclass(frozen=True, slots=True)
class Evidence:
    """What claims are checked against, tokenised once: checking n claims against a text reads
    the text once, not n times (the judge stays linear in the size of what it judges)."""

    words: frozenset[str]
    numbers: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Evidence:
        return cls(frozenset(content_words(text)), frozenset(numbers(text)))


def support_score(claim: str, evidence: str | Evidence) -> float:
    """How well `evidence` supports `claim`, in [0, 1].

    The share of the claim's content words found in the evidence, capped by the specifics: every
    number the claim states must appear in the evidence, and each name it uses that the evidence
    lacks halves the score. A claim can reuse the evidence's vocabulary and still swap a date.
    """
    claim_words = content_words(SOURCE_REFERENCE.sub(" ", claim)) - META_WORDS
    if not claim_words:
        return 1.0  # nothing checkable ("Yes.", "I don't know.") asserts nothing unsupported
    if isinstance(evidence, str):
        evidence = Evidence.of(evidence)
    evidence_words = evidence.words
    score = coverage(claim_words, evidence_words)
    missing_numbers = numbers(claim) - evidence.numbers
    if missing_numbers:
        score = min(score, 0.25)
    missing_names = names(claim) - evidence_words
    score *= 0.5 ** len(missing_names)
    return score


def _verdict(score: float, threshold: float) -> Verdict:
    return Verdict(score >= threshold, score=round(score, 4))


def assess_chunks(
    query: str,
    answer: str | None,
    chunks: Sequence[str],
    *,
    usefulness_threshold: float = 0.5,
    relevance_threshold: float = 0.3,
) -> list[ChunkAssessment]:
    # Only what the answer asserts can make a chunk useful; an answer asserting nothing checkable
    # ("Yes.") leaves usefulness undefined (None), not 0.
    answer_sentences = [words for s in sentences(answer or "") if (words := content_words(s) - META_WORDS)]
    query_words = content_words(relevance_query(query))
    assessed = []
    for chunk in chunks:
        chunk_words = content_words(chunk)
        useful = None
        if answer is not None and answer_sentences:
            score = max((coverage(words, chunk_words) for words in answer_sentences), default=0.0)
            useful = _verdict(score, usefulness_threshold)
        statement_scores = [coverage(query_words, content_words(s)) for s in sentences(chunk)]
        relevant = sum(score >= relevance_threshold for score in statement_scores)
        # The chunk's graded relevance: its best statement, nudged up by overall query coverage.
        graded = max(statement_scores, default=0.0) * 0.5 + coverage(query_words, chunk_words) * 0.5
        assessed.append(
            ChunkAssessment(
                useful=useful,
                relevance=Verdict(relevant > 0, score=round(graded, 4)),
                statements=len(statement_scores),
                relevant_statements=relevant,
                # Each statement graded by its query coverage: what context relevancy averages.
                graded_relevant=round(sum(statement_scores), 4),
            )
        )
    return assessed


def check_response(
    query: str,
    response: str,
    chunks: Sequence[str],
    *,
    support_threshold: float = 0.5,
    relevance_threshold: float = 0.2,
) -> list[ClaimVerdict]:
    evidence = Evidence.of("\n".join(chunks))
    query_words = content_words(relevance_query(query))
    checked = []
    for claim in claims(response):
        claim_words = content_words(claim)
        relevance = coverage(query_words, claim_words) if query_words else 1.0
        checked.append(
            ClaimVerdict(
                supported=_verdict(support_score(claim, evidence), support_threshold),
                relevant=_verdict(relevance, relevance_threshold),
            )
        )
    return checked


def check_reference(reference: str, chunks: Sequence[str], *, threshold: float = 0.5) -> list[Verdict]:
    evidence = Evidence.of("\n".join(chunks))
    return [_verdict(support_score(claim, evidence), threshold) for claim in claims(reference)]


def compare_answers(response: str, reference: str, *, threshold: float = 0.5) -> AnswerComparison:
    reference_evidence, response_evidence = Evidence.of(reference), Evidence.of(response)
    return AnswerComparison(
        response_claims=tuple(
            _verdict(support_score(c, reference_evidence), threshold) for c in claims(response)
        ),
        reference_claims=tuple(
            _verdict(support_score(c, response_evidence), threshold) for c in claims(reference)
        ),
    )


class LexicalJudge:
    """Judges by lexical overlap and claim-level checks of numbers and names (see module doc).

    Thresholds are fixed and documented in docs/judges.md; the graded `Verdict.score` lets
    agreement studies compute AUROC without changing the binary verdicts metrics use.
    """

    model = "lexical"

    def __init__(self, usefulness_threshold: float = 0.5, support_threshold: float = 0.5) -> None:
        self._usefulness_threshold = usefulness_threshold
        self._support_threshold = support_threshold

    def prompt_version(self, kind: str) -> str:
        return f"lexical-{kind}-v3"

    def healthy(self) -> bool:
        return True  # computes locally: never refuses

    def problem(self) -> str | None:
        return None

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return assess_chunks(query, answer, chunks, usefulness_threshold=self._usefulness_threshold)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return check_response(query, response, chunks, support_threshold=self._support_threshold)

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return await answer_separately(self, query, response, chunks, criteria)

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        # Open questions need a language model; build.py refuses the setting before any call.
        raise refuse_criteria(self.model)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return check_reference(reference, chunks, threshold=self._support_threshold)

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return compare_answers(response, reference, threshold=self._support_threshold)
