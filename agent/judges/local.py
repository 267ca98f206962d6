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

import re
from collections.abc import Sequence

from agent.judges.base import AnswerComparison, ChunkAssessment, ClaimVerdict
from agent.model import Verdict

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# A sentence ends at . ! ? followed by space (not inside "3.5" or "e.g."-like tokens), or a newline.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(?:[-'][A-Za-z]+)*")
# Function words carry no evidence of where an answer came from.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905
)
# Capitalised words that are not names: sentence openers and discourse words.
_NOT_NAMES = STOPWORDS | {"however", "yes", "according", "based", "overall", "additionally", "therefore"}


def _fold(token: str) -> str:
    if len(token) > 4 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def content_words(text: str) -> set[str]:
    """Lowercased word tokens minus stopwords, with a light plural/suffix fold."""
    return {_fold(t) for t in _WORD.findall(text.lower()) if t not in STOPWORDS}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def numbers(text: str) -> set[str]:
    """Numbers as written, without thousands separators: '1,000' and '1000' are the same."""
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def names(text: str) -> set[str]:
    """Capitalised words that are not sentence-initial function words, lowercased."""
    found = set()
    for match in _NAME.finditer(text):
        word = match.group().lower()
        if word not in _NOT_NAMES:
            found.add(_fold(word))
    return found


def coverage(claim_words: set[str], evidence_words: set[str]) -> float:
    return len(claim_words & evidence_words) / len(claim_words) if claim_words else 0.0


def support_score(claim: str, evidence: str) -> float:
    """How well `evidence` supports `claim`, in [0, 1].

    The share of the claim's content words found in the evidence, capped by the specifics: every
    number the claim states must appear in the evidence, and each name it uses that the evidence
    lacks halves the score. A claim can reuse the evidence's vocabulary and still swap a date.
    """
    claim_words = content_words(claim)
    if not claim_words:
        return 1.0  # nothing checkable ("Yes.", "I don't know.") asserts nothing unsupported
    evidence_words = content_words(evidence)
    score = coverage(claim_words, evidence_words)
    missing_numbers = numbers(claim) - numbers(evidence)
    if missing_numbers:
        score = min(score, 0.25)
    missing_names = names(claim) - evidence_words
    score *= 0.5 ** len(missing_names)
    return score


def claims(text: str) -> list[str]:
    """A text's claims: its sentences that carry at least one content word."""
    return [s for s in sentences(text) if content_words(s)]


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
    answer_sentences = [words for s in sentences(answer or "") if (words := content_words(s))]
    query_words = content_words(query)
    assessed = []
    for chunk in chunks:
        chunk_words = content_words(chunk)
        useful = None
        if answer is not None:
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
    evidence = "\n".join(chunks)
    query_words = content_words(query)
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
    evidence = "\n".join(chunks)
    return [_verdict(support_score(claim, evidence), threshold) for claim in claims(reference)]


def compare_answers(response: str, reference: str, *, threshold: float = 0.5) -> AnswerComparison:
    return AnswerComparison(
        response_claims=tuple(_verdict(support_score(c, reference), threshold) for c in claims(response)),
        reference_claims=tuple(_verdict(support_score(c, response), threshold) for c in claims(reference)),
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
        return f"lexical-{kind}-v2"

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return assess_chunks(query, answer, chunks, usefulness_threshold=self._usefulness_threshold)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return check_response(query, response, chunks, support_threshold=self._support_threshold)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return check_reference(reference, chunks, threshold=self._support_threshold)

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return compare_answers(response, reference, threshold=self._support_threshold)
