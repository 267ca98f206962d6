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
from dataclasses import dataclass

from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    InteractionVerdicts,
    answer_separately,
)
from agent.model import Verdict, relevance_query

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
# List markers and source references carry numbers that are no claim: "2.", "Passage 3".
_ENUMERATOR = re.compile(r"^\s*(?:\(?\d{1,2}[.)]|[-*•#]+)(?:\s+|$)")
_REFERENCE = re.compile(
    r"\b(?:passages?|steps?|documents?|sources?|chunks?)\s+\d+(?:\s*(?:,|and|&)\s*\d+)*", re.I
)


def _fold(token: str) -> str:
    """A light suffix fold so that 'cooking' meets 'cook' and 'steaks' meets 'steak'."""
    for suffix, min_len in (("ing", 6), ("ed", 5), ("ly", 5), ("es", 5), ("s", 4)):
        if len(token) >= min_len and token.endswith(suffix) and not token.endswith("ss"):
            return token[: -len(suffix)]
    return token


# Words a response uses to talk about its sources or itself, not about the world.
_META_WORDS = """
    passage passages provided given based answer answers question questions information context
    unable mention mentioned mentions hope helps let know note according summary overall
    """.split()  # noqa: SIM905
# Connectives order an answer's claims; they are not part of what a claim says.
_CONNECTIVES = """
    however therefore thus hence moreover furthermore additionally whereas nevertheless nonetheless
    ultimately
    """.split()  # noqa: SIM905
# Assent, refusal and hedges: "Yes.", "Sure!", "Sorry, I don't know." assert nothing checkable.
_NON_ASSERTING = """
    yes yeah yep nope sure ok okay maybe perhaps correct incorrect true false right wrong indeed
    absolutely definitely certainly sorry thank thanks hello hi don doesn didn isn aren wasn
    t s ll re ve d m
    """.split()  # noqa: SIM905
META_WORDS = frozenset(map(_fold, _META_WORDS + _CONNECTIVES + _NON_ASSERTING))
# "The passages do not mention X.", "The provided information lacks Y.": what the sources lack is
# said of the sources, not of the world, so such a sentence is no claim to check against them.
_THE_SOURCES = re.compile(
    r"\b(?:passages?|contexts?|documents?|sources?)\b"
    r"|\b(?:given|provided) (?:information|texts?|articles?)\b",
    re.I,
)
_ABSENCE = re.compile(r"\b(?:not|no|nor|unable|cannot|neither|without|lacks?)\b|n't\b", re.I)


def content_words(text: str) -> set[str]:
    """Lowercased word tokens minus stopwords, with a light suffix fold."""
    return {_fold(t) for t in _WORD.findall(text.lower()) if t not in STOPWORDS}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def numbers(text: str) -> set[str]:
    """Numbers as written, without thousands separators ('1,000' is '1000'), minus source and
    step references ('Passage 2', 'steps 4 and 5') and list markers."""
    text = _REFERENCE.sub(" ", _ENUMERATOR.sub("", text))
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def names(text: str) -> set[str]:
    """Capitalised words inside a sentence (not its first word), folded: likely proper names."""
    found = set()
    for sentence in sentences(text):
        body = _ENUMERATOR.sub("", sentence)
        for clause in re.split(r"[:;]\s*", body):
            for match in list(_NAME.finditer(clause))[1:] if clause[:1].isupper() else _NAME.finditer(clause):
                word = match.group().lower()
                if word not in STOPWORDS and word not in META_WORDS:
                    found.add(_fold(word))
    return found


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
    claim_words = content_words(_REFERENCE.sub(" ", claim)) - META_WORDS
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


def claims(text: str) -> list[str]:
    """A text's claims: its sentences, without list markers, that say something about the world
    (at least one content word that is not about the sources: "Based on the passages, ..." and
    "Unable to answer based on given passages." are no claims). A lead-in ending in a colon
    ("Here are the steps:") introduces claims and is none, and neither is a sentence saying what
    the sources do not contain ("The passages do not mention the oven's temperature.")."""
    found = []
    for sentence in sentences(text):
        body = _ENUMERATOR.sub("", sentence).strip()
        if body.endswith(":") or (_THE_SOURCES.search(body) and _ABSENCE.search(body)):
            continue
        if content_words(_REFERENCE.sub(" ", body)) - META_WORDS:
            found.append(body)
    return found


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

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        return assess_chunks(query, answer, chunks, usefulness_threshold=self._usefulness_threshold)

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return check_response(query, response, chunks, support_threshold=self._support_threshold)

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str]
    ) -> InteractionVerdicts:
        return await answer_separately(self, query, response, chunks)

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return check_reference(reference, chunks, threshold=self._support_threshold)

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return compare_answers(response, reference, threshold=self._support_threshold)
