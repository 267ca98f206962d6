"""The Judge contract: typed questions in, typed verdicts out; metrics never see prompts.

A judge answers every item of a question in one go (all chunks of an interaction at once), so an
LLM judge makes one call per question, not one per chunk. The questions:

- `assess_chunks`: per chunk, was it useful for the answer, and which of its statements are
  relevant to the query (context precision and context relevancy).
- `check_response`: the response's claims, each checked for support by the chunks and for
  relevance to the query (faithfulness and answer relevancy).
- `assess_interaction`: both questions above about one interaction, answered together. An LLM
  judge answers it with one call, so the four reference-free metrics cost one call per
  interaction; a judge without that saving answers it by asking the two questions
  (`answer_separately`). Every judge and every wrapper implements it: the saving is part of the
  contract, not an ability found at run time.
- `check_reference`: the reference's claims, each checked for attribution to the chunks
  (context recall).
- `compare_answers`: the response's claims checked against the reference and the reference's
  claims checked against the response (answer correctness).
- `judge_criteria`: the operator's own criteria (`agent.model.Criterion`), each answered 0 / 1
  or 1-5 from what it reads. When the combined question is asked, the criteria that read no
  reference ride in it (`assess_interaction(..., criteria)`): two custom criteria add no call.

A judge that cannot answer raises JudgeError; it never makes up a verdict. When part of its
answer was valid (4 of 5 chunks), the error carries that part (`PartialAnswer`) so that a cache
can keep it and the next question asks only for the rest; the question itself still failed.

Wrappers (verdict cache, redaction, instruments, bounds) implement the same Protocol and forward
every method explicitly (`JudgeWrapper` makes each question abstract), so the order in which they
are stacked never skips redaction or caching.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.model import Criterion, Verdict

# Question kinds; they are part of every cache key and name the prompt files.
ASSESS_CHUNKS = "assess_chunks"
CHECK_RESPONSE = "check_response"
# Both questions above for one interaction, answered in one call (an LLM judge's saving).
ASSESS_INTERACTION = "assess_interaction"
CHECK_REFERENCE = "check_reference"
COMPARE_ANSWERS = "compare_answers"
JUDGE_CRITERIA = "judge_criteria"
QUESTION_KINDS = (ASSESS_CHUNKS, CHECK_RESPONSE, CHECK_REFERENCE, COMPARE_ANSWERS, JUDGE_CRITERIA)


class JudgeError(RuntimeError):
    """The judge could not produce valid verdicts (timeout, HTTP error, invalid answer, open breaker).

    `retryable` failures (open breaker, timeout, 5xx, 429, connection) say nothing about the
    interaction: the pipeline defers it and tries again later instead of recording an error.
    Permanent ones (auth, other 4xx, an invalid answer after repair) become `error` outcomes.
    `reason` is a short bounded label (e.g. `rate_limited`, `timeout`, `server_error`,
    `connection`, `breaker_open`, `auth`, `bad_request`, `invalid_answer`); `retry_after` is
    how long the judge asked us to wait (a Retry-After header, an open breaker's cooldown).
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        reason: str | None = None,
        retry_after: float | None = None,
        refused: bool = False,
        partial: PartialAnswer | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reason = reason or ("unavailable" if retryable else "failed")
        self.retry_after = retry_after
        # True when no call reached the judge (open breaker, a Retry-After still running): such
        # failures cost nothing and are not counted as budget spend.
        self.refused = refused
        # The valid verdicts of a failed answer (never a score: the question failed all the same).
        self.partial = partial


@dataclass(frozen=True, slots=True)
class ChunkAssessment:
    """What a judge says about one retrieved chunk.

    `useful`: was the chunk useful in arriving at the answer (None when no answer was given).
    `relevant_statements` of the chunk's `statements` (sentences) are relevant to the query;
    `relevance` sums that up as a verdict (any relevant statement) with the share as its score.
    `graded_relevant`, when the judge grades each statement, is the sum of their confidences
    (in [0, statements]); context relevancy counts it instead of `relevant_statements`. None
    means the statements were judged yes/no.
    """

    useful: Verdict | None
    relevance: Verdict
    statements: int
    relevant_statements: int
    graded_relevant: float | None = None

    @property
    def relevant_weight(self) -> float:
        """What context relevancy counts for this chunk: graded when the judge graded it."""
        if self.graded_relevant is None:
            return float(self.relevant_statements)
        return min(max(self.graded_relevant, 0.0), float(self.statements))


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """One claim of a text: `supported` by the evidence it was checked against, and `relevant`
    to the query (None when the question did not ask)."""

    supported: Verdict
    relevant: Verdict | None = None


@dataclass(frozen=True, slots=True)
class AnswerComparison:
    """Claims of the response checked against the reference, and claims of the reference
    checked against the response (the true positives, false positives and false negatives of
    answer correctness)."""

    response_claims: tuple[Verdict, ...]
    reference_claims: tuple[Verdict, ...]


@dataclass(frozen=True, slots=True)
class InteractionVerdicts:
    """The answer to `assess_interaction`: what `assess_chunks(query, response, chunks)` and
    `check_response(query, response, chunks)` answer, one assessment per chunk in order and the
    response's claims; `criteria`, what `judge_criteria` answers for the criteria asked with them
    (by name)."""

    chunks: tuple[ChunkAssessment, ...]
    claims: tuple[ClaimVerdict, ...]
    criteria: Mapping[str, Verdict] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CriterionInputs:
    """What custom criteria may read of one interaction; each criterion is shown only what it
    `reads` (and a criterion reading something absent here is not asked)."""

    query: str
    response: str | None = None
    chunks: tuple[str, ...] = ()
    reference: str | None = None

    def has(self, name: str) -> bool:
        """Whether the input a criterion reads (agent.model.CRITERION_INPUTS) is present."""
        if name == "query":
            return True
        if name == "context":
            return bool(self.chunks)
        return bool(self.response if name == "response" else self.reference)

    def read_by(self, criteria: Sequence[Criterion]) -> CriterionInputs:
        """Only what `criteria` read: the rest is never sent to the judge."""
        reads = {r for c in criteria for r in c.reads}
        return CriterionInputs(
            self.query if "query" in reads else "",
            self.response if "response" in reads else None,
            self.chunks if "context" in reads else (),
            self.reference if "reference" in reads else None,
        )


@dataclass(frozen=True, slots=True)
class PartialAnswer:
    """The valid part of an answer that failed as a whole (a chunk without a verdict, twice).

    `chunks`: assessments by position in the chunks the question was about; `claims`: the
    response's claims, only when every one of them was checked (a shortened claims list would
    raise a score). A cache stores these so that the next question asks only for the rest.
    """

    chunks: Mapping[int, ChunkAssessment] = field(default_factory=dict)
    claims: tuple[ClaimVerdict, ...] | None = None
    # Custom criteria answered validly, by name.
    criteria: Mapping[str, Verdict] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.chunks) or self.claims is not None or bool(self.criteria)

    def merge(self, *others: PartialAnswer | None) -> PartialAnswer:
        chunks = dict(self.chunks)
        claims = self.claims
        criteria = dict(self.criteria)
        for other in others:
            if other is not None:
                chunks |= other.chunks
                claims = claims if claims is not None else other.claims
                criteria |= other.criteria
        return PartialAnswer(chunks, claims, criteria)


class Judge(Protocol):
    """Answers typed questions about an interaction's text (see the module docstring).

    Every method is part of the contract: a wrapper forwards each one explicitly, and callers
    never probe a judge for optional abilities.
    """

    @property
    def model(self) -> str:
        """The judge's identity in cache keys and labels, e.g. 'lexical' or 'openai/gpt-4o-mini'."""
        ...

    def prompt_version(self, kind: str) -> str:
        """Version of the instructions used for a question kind; part of the cache key."""
        ...

    def healthy(self) -> bool:
        """False while the judge refuses calls (an LLM judge's open circuit breaker); readiness
        reports it. A judge that never refuses is always healthy."""
        ...

    def problem(self) -> str | None:
        """Why the judge cannot answer now, as one line for /readyz and the commands (rejected
        credentials, an unknown model, an open circuit breaker), or None when it can."""
        ...

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        """One assessment per chunk, in order: usefulness for `answer` (the response, or the
        reference when one is known) and statement-level relevance to `query`."""
        ...

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        """The response's claims, each with support by `chunks` (any of them) and relevance to
        `query`. An empty list means the response makes no claim."""
        ...

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        """`assess_chunks(query, response, chunks)` and `check_response(query, response, chunks)`
        answered together: one call for an LLM judge (the saving that makes the four
        reference-free metrics cost one call per interaction), the two questions for a judge
        without it (`answer_separately`). `criteria` (none reading the reference) are answered
        in the same call, as `judge_criteria` would about (query, response, chunks). Fails as a
        whole, like any question; valid verdicts of a failed answer travel on the JudgeError as
        its `partial`."""
        ...

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        """The reference's claims, each: can it be attributed to `chunks`?"""
        ...

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        """Claims of `response` supported by `reference`, and claims of `reference` covered by
        `response`."""
        ...

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        """Each criterion's answer by name: binary ones a yes/no verdict, 1-5 ones a verdict whose
        `score` is (answer - 1) / 4 (the raw answer; the metric applies the direction). Every
        criterion reads only inputs present in `inputs`. A judge that cannot judge criteria (the
        local ones) raises JudgeError; the composition root refuses that setting at start-up."""
        ...


async def answer_separately(
    judge: Judge, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
) -> InteractionVerdicts:
    """`assess_interaction` for a judge that has no combined question: the two questions (and the
    criteria's, when there are criteria), asked concurrently."""
    inputs = CriterionInputs(query, response, tuple(chunks))
    assessed, claims, judged = await asyncio.gather(
        judge.assess_chunks(query, response, chunks),
        judge.check_response(query, response, chunks),
        judge.judge_criteria(criteria, inputs) if criteria else _no_criteria(),
    )
    return InteractionVerdicts(tuple(assessed), tuple(claims), judged)


async def _no_criteria() -> dict[str, Verdict]:
    return {}


def refuse_criteria(model: str) -> JudgeError:
    """What a judge that cannot judge custom criteria raises (build.py refuses the setting first)."""
    return JudgeError(
        f"the {model} judge cannot judge custom criteria; set judge_model to an LLM", reason="unsupported"
    )


class JudgeWrapper(ABC):
    """Base of the judges that wrap another one (verdict cache, redaction, instruments, bounds,
    one evaluation's view).

    The wrapped judge's identity, prompt versions and health pass through unchanged. Every
    question is abstract here: a wrapper states how it handles each one, so a wrapper that
    forgot one (and would hand unredacted text on, or skip the cache) cannot be built.
    """

    def __init__(self, inner: Judge) -> None:
        self._inner = inner

    @property
    def inner(self) -> Judge:
        return self._inner

    @property
    def model(self) -> str:
        return self._inner.model

    def prompt_version(self, kind: str) -> str:
        return self._inner.prompt_version(kind)

    def healthy(self) -> bool:
        return self._inner.healthy()

    def problem(self) -> str | None:
        return self._inner.problem()

    @abstractmethod
    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]: ...

    @abstractmethod
    async def check_response(
        self, query: str, response: str, chunks: Sequence[str]
    ) -> list[ClaimVerdict]: ...

    @abstractmethod
    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts: ...

    @abstractmethod
    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]: ...

    @abstractmethod
    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison: ...

    @abstractmethod
    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]: ...


class SpendSink(Protocol):
    """Where a judge reports its spend as it is made: the judge budget's SpendCounter
    (agent/budget.py). Calls come from the instrumented judge (every question that reached a
    judge; refused ones are not spend), USD from the LLM judge (litellm's price per response)."""

    def add(self, calls: int, usd: float) -> None: ...
