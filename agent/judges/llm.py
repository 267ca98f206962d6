"""LLMJudge: typed questions answered by any LLM that litellm can call.

One call answers one question about a whole interaction (all chunks, all claims). Every call
goes through `ModelCaller` (agent/judges/caller.py), the call policy the testset writer shares:
temperature 0, structured JSON output where the provider supports it, a timeout, retries with
jittered exponential backoff on 429 / 5xx / timeouts / connection errors only (never on other 4xx),
a cap on the total time spent retrying, and a circuit breaker that stops calling a judge that
keeps failing. The judge adds strict validation of the answer with one repair round.

Requests, schemas, validation and repair live in agent/judges/questions.py: each request's schema
pins one verdict per chunk (and per claim to check); a repair asks only for what was missing,
and when the repair fails too the error still carries the valid verdicts (`JudgeError.partial`)
for the verdict cache to keep.
Untrusted text (query, chunks, response, reference, and anything a repair quotes) is fenced with
a random per-request id that the text does not contain, and the instructions say fenced text is data.

litellm is imported on first use only, so `import agent` and the local judge never load it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import string
import time
from collections.abc import Sequence
from typing import Any

from agent.infra.throttled_log import ThrottledLog
from agent.judges.base import (
    ASSESS_CHUNKS,
    ASSESS_INTERACTION,
    CHECK_RESPONSE,
    JUDGE_CRITERIA,
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    JudgeError,
)
from agent.judges.caller import CircuitBreaker, ModelCaller, Usage
from agent.judges.confidence import Completion, graded
from agent.judges.questions import (
    CHECK_CLAIMS,
    PROMPT_KINDS,
    PROMPT_VERSION,
    Fence,
    InvalidAnswer,
    Prompt,
    Request,
    assess_chunks_request,
    assess_interaction_request,
    check_reference_request,
    check_response_request,
    compare_answers_request,
    judge_criteria_request,
    load_prompt,
    numbered_statements,
    ordered,
)
from agent.model import Criterion, Verdict

__all__ = [
    "PROMPT_VERSION",
    "Fence",
    "InvalidAnswer",
    "LLMJudge",
    "Prompt",
    "load_prompt",
    "numbered_statements",
]

log = logging.getLogger(__name__)


# Verdicts of these kinds may come from their own prompt, from the combined one, or from a repair.
_ANSWERED_TOGETHER = (ASSESS_CHUNKS, CHECK_RESPONSE, JUDGE_CRITERIA)


# -- Start-up self-check ---------------------------------------------------------------------------


# True while check_judge asks its question: its caller reports the outcome in one line, so the
# judge does not log the failure a second time.
_self_checking = contextvars.ContextVar("ragpulse_judge_self_checking", default=False)


async def check_judge(judge: Any) -> JudgeError | None:
    """Ask one tiny question, so that a wrong model, api base or key is found before any work
    instead of by every evaluation failing; returns the failure, if any (`self_check_line` words
    it). The text is new each time, so no cache answers for the judge."""
    # Letters only: a run of digits could be taken for a phone number and counted as a redaction.
    token = "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))
    chunk = f"Paris is the capital of France (self-check {token})."
    marked = _self_checking.set(True)
    try:
        await judge.assess_chunks("What is the capital of France?", None, [chunk])
    except JudgeError as exc:
        return exc
    finally:
        _self_checking.reset(marked)
    return None


async def judge_problem(judge: Any) -> str | None:
    """`check_judge` for a command that stops on failure: None, or the one line saying why."""
    failure = await check_judge(judge)
    return None if failure is None else self_check_line(judge.model, failure)


async def self_check(judge: Any, where: str = "") -> JudgeError | None:
    """`ragpulse run`'s check at start: `check_judge`, its outcome logged (and, for a judge that
    cannot work, reported by /readyz through the judge's `problem()`)."""
    started = time.monotonic()
    failure = await check_judge(judge)
    if failure is not None:
        log.error(
            "%s; RAGPULSE_JUDGE_SELF_CHECK=false skips this check",
            self_check_line(judge.model, failure, where),
        )
        return failure
    log.info("judge self-check ok: %s answered in %.1fs", judge.model, time.monotonic() - started)
    return None


def self_check_line(model: str, error: JudgeError, where: str = "") -> str:
    """The one line of a failed self-check: a permanent failure's own line already names the
    provider's message and what to set; a transient one (5xx, timeout, connection) gets the
    settings that point the judge somewhere."""
    at = f" at {where}" if where else ""
    if not error.retryable:
        return f"judge self-check failed{at}: {error}"
    return (
        f"judge self-check failed: {model}{at}: {error} ({error.reason}); check RAGPULSE_JUDGE_MODEL, "
        "RAGPULSE_JUDGE_API_BASE and RAGPULSE_JUDGE_API_KEY"
    )


# -- The judge -----------------------------------------------------------------------------------


_FAILURE_LOG_INTERVAL = 30.0


class LLMJudge:
    """A Judge backed by an LLM through litellm; see the module docstring for the call policy."""

    def __init__(self, caller: ModelCaller) -> None:
        """`caller` sends the requests with the call policy (retries, breaker, Retry-After,
        usage and USD); the judge's calls are counted by InstrumentedJudge."""
        self._caller = caller
        self._model = caller.model
        self._prompts = {kind: load_prompt(kind) for kind in PROMPT_KINDS}
        self._failures = ThrottledLog(log, _FAILURE_LOG_INTERVAL)

    @property
    def model(self) -> str:
        return self._model

    @property
    def breaker(self) -> CircuitBreaker:
        return self._caller.breaker

    @property
    def usage(self) -> Usage:
        return self._caller.usage

    def healthy(self) -> bool:
        """False while the circuit breaker is open (the judge is refusing calls), and while the
        judge cannot work (rejected credentials, unknown model) until a call succeeds."""
        return self.problem() is None

    def problem(self) -> str | None:
        return self._caller.problem()

    def prompt_version(self, kind: str) -> str:
        version = self._prompts[kind].version
        if kind in _ANSWERED_TOGETHER:
            # Any of these prompts may produce these verdicts, so editing one invalidates them.
            extra = (ASSESS_INTERACTION, CHECK_CLAIMS) if kind == CHECK_RESPONSE else (ASSESS_INTERACTION,)
            version = "+".join([version, *(self._prompts[k].version for k in extra)])
        return version

    def _format_for(self, request: Request) -> dict[str, Any] | None:
        """The response format of one request: its own pinned schema where the provider takes one."""
        return self._caller.response_format(request.kind, request.schema)

    # -- Questions -------------------------------------------------------------------------------

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        if not chunks:
            return []
        numbered = dict(enumerate(chunks, 1))
        found = await self._ask(assess_chunks_request(query, answer, numbered))
        return ordered(found, list(numbered))

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        return await self._ask(check_response_request(query, response, chunks))

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        # One call answers both questions and the criteria (prompts/assess_interaction.v2.txt).
        verdicts: InteractionVerdicts = await self._ask(
            assess_interaction_request(query, response, chunks, criteria)
        )
        return verdicts

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        if not criteria:
            return {}
        return await self._ask(judge_criteria_request(criteria, inputs))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return await self._ask(check_reference_request(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return await self._ask(compare_answers_request(query, response, reference))

    # -- Calling ---------------------------------------------------------------------------------

    def _give_up(self, error: JudgeError) -> JudgeError:
        """Log a final judge failure, at most once per reason per interval (a self-check's
        caller reports its own)."""
        if _self_checking.get():
            return error
        if error.retryable:
            self._failures.warning(
                error.reason,
                "judge %s: %s (%s); the interaction is deferred and retried when the judge answers",
                self._model,
                error,
                error.reason,
            )
        else:
            # The error's own line names the provider's message and the settings to check.
            self._failures.error(
                error.reason, "%s; such evaluations are recorded as errors, never retried", error
            )
        return error

    def _messages(self, request: Request) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self._prompts[request.kind].text},
            {"role": "user", "content": request.render()},
        ]

    async def _send(self, request: Request) -> Completion:
        return await self._caller.complete(self._messages(request), self._format_for(request), logprobs=True)

    async def _repair(self, request: Request, first: InvalidAnswer) -> Any:
        """One repair round: ask only for what the first answer missed (or, when nothing of it
        was usable, the same question again with the problem stated, in a fence)."""
        log.debug("judge %s: invalid %s answer (%s); one repair", self._model, request.kind, first)
        if first.repair is None:
            again = request.again(str(first))
            return again.parse((await self._send(again)).content)
        completions = await asyncio.gather(*(self._send(r) for r in first.repair.requests))
        return first.repair.finish([c.content for c in completions])

    async def _ask(self, request: Request) -> Any:
        """One question: a call, and one repair round if the answer is invalid."""
        kind = request.kind
        invalid: InvalidAnswer | None = None
        # Refused at once while the breaker is open; the repair calls share the question's turn.
        with self._caller.admit():
            try:
                completion = await self._send(request)
                try:
                    # A repaired answer is pieced from several calls: only a first answer is graded.
                    result = graded(request.parse(completion.content), completion)
                except InvalidAnswer as first:
                    try:
                        result = await self._repair(request, first)
                    except InvalidAnswer as second:
                        invalid = second
                    except JudgeError as exc:
                        # The repair call failed (a timeout...): the first answer's valid part stands.
                        exc.partial = exc.partial or first.partial or None
                        raise
            except JudgeError as exc:
                self._give_up(exc)
                raise
        if invalid is not None:
            raise self._give_up(
                JudgeError(
                    f"invalid {kind} answer after one repair: {invalid}",
                    reason="invalid_answer",
                    partial=invalid.partial or None,
                )
            )
        return result
