"""LLMJudge: typed questions answered by any LLM that litellm can call.

One call answers one question about a whole interaction (all chunks, all claims). Every call:
temperature 0, structured JSON output where the provider supports it, a timeout, retries with
jittered exponential backoff on 429 / 5xx / timeouts / connection errors only (never on other 4xx),
a cap on the total time spent retrying, strict validation of the answer with one repair round,
and a circuit breaker that stops calling a judge that keeps failing.

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
import contextlib
import contextvars
import logging
import os
import random
import re
import secrets
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agent.config import JudgeSettings
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
    SpendSink,
)
from agent.judges.confidence import Completion, graded, tokens_of
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

StructuredOutput = Literal["auto", "json_schema", "json_object", "off"]


def load_litellm() -> Any:
    """Import litellm, offline: without LITELLM_LOCAL_MODEL_COST_MAP it fetches prices at import."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    # litellm logs a line per call at INFO; keep them for when ragpulse itself is debugging.
    if not logging.getLogger("ragpulse").isEnabledFor(logging.DEBUG):
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
            logging.getLogger(name).setLevel(logging.WARNING)
    # The OpenAI SDK (litellm's client for OpenAI-compatible judges) imports its resources on the
    # first call, seconds of work on a busy machine: do it now, not on the running event loop.
    with contextlib.suppress(ImportError):  # litellm without the OpenAI SDK: nothing to warm up
        import openai.resources.chat  # noqa: F401
    return litellm


# Verdicts of these kinds may come from their own prompt, from the combined one, or from a repair.
_ANSWERED_TOGETHER = (ASSESS_CHUNKS, CHECK_RESPONSE, JUDGE_CRITERIA)


# -- Circuit breaker -----------------------------------------------------------------------------


class CircuitBreaker:
    """Opens after `failure_threshold` consecutive failed calls; after `cooldown` seconds lets one
    probe call through (half-open); the probe's success closes it, its failure re-opens it."""

    def __init__(
        self, failure_threshold: int, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._threshold = failure_threshold
        self._cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self._cooldown:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def retry_after(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when closed or half-open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._cooldown - (self._clock() - self._opened_at))

    def release_probe(self) -> None:
        """The probe was cancelled before it could tell anything: let another one through."""
        self._probing = False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probing or self._failures >= self._threshold:
            self._opened_at = self._clock()
        self._probing = False


# -- Usage ---------------------------------------------------------------------------------------


class UsageSink(Protocol):
    def record_usage(
        self, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None
    ) -> None:
        """Count one call's tokens and cost (None: litellm does not know the model's price)."""
        ...


@dataclass
class Usage:
    """Running totals of one judge, for benchmarks and tests."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += cost_usd


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


class _Retryable(Exception):
    """A transient failure (429, 5xx, timeout, connection): worth another attempt after a pause."""

    def __init__(self, message: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


# Transient failures that say the judge service is down (and count towards the breaker); a 429
# says it is up but busy: honour its Retry-After instead of opening the breaker.
_OUTAGE_REASONS = frozenset({"server_error", "timeout", "connection"})
_FAILURE_LOG_INTERVAL = 30.0


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a failed call's response asked for (Retry-After / retry-after-ms), if any."""
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if not headers:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000.0)
        value = headers.get("retry-after")
    except Exception:  # a headers object of an unexpected shape
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _classify(status: object, exc: BaseException, litellm: Any, missing_keys: Sequence[str]) -> str:
    if isinstance(exc, litellm.Timeout) or status == 408:
        return "timeout"
    if status == 429:
        return "rate_limited"
    # Without its key the OpenAI client fails before sending anything, and litellm reports that
    # as a 500: it is no outage, and no retry will find the key.
    if missing_keys and _mentions_credentials(exc):
        return "auth"
    if isinstance(status, int) and status >= 500:
        return "server_error"
    if isinstance(exc, litellm.APIConnectionError) or status == 409:
        return "connection"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    return "bad_request"


def _mentions_credentials(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(word in text for word in ("credential", "api key", "api_key", "apikey", "auth token"))


# Permanent failures that say the judge itself cannot work, whatever it is asked: the command
# stops (eval, probe, canary) and /readyz says why (run), instead of one error per interaction.
BROKEN_REASONS = frozenset({"auth", "not_found"})

_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")
_MESSAGE_IN_BODY = re.compile(r"""['"]message['"]\s*:\s*(['"])(.*?)(?<!\\)\1""")


def provider_message(exc: BaseException) -> str:
    """What the provider said, on one line: the error body's message where there is one, without
    litellm's class-name prefixes."""
    text = " ".join(str(exc).split())
    found = _MESSAGE_IN_BODY.search(text)
    if found:
        return found.group(2)
    return _LITELLM_PREFIX.sub("", text) or type(exc).__name__


def key_variables(litellm: Any, model: str) -> tuple[str, ...]:
    """The environment variables holding the credentials litellm reads for `model`'s provider
    (e.g. OPENAI_API_KEY), whether they are set or not; () when litellm does not say.

    litellm's validate_environment names only the variables that are missing, so it runs here
    against an empty environment: a copy of the function whose `os` sees no variable, leaving
    the process environment untouched."""
    import types

    function = litellm.validate_environment
    try:
        blind_os = types.SimpleNamespace(environ={}, getenv=lambda *_: None)
        blind = types.FunctionType(
            function.__code__, {**function.__globals__, "os": blind_os}, None,
            function.__defaults__, function.__closure__,
        )  # fmt: skip
        blind.__kwdefaults__ = function.__kwdefaults__
        missing = blind(model=model)["missing_keys"]
    except Exception:  # another litellm version: name ragpulse's variable only
        return ()
    return tuple(name for name in missing if _is_credential(name))


def _missing_credentials(litellm: Any, model: str) -> tuple[str, ...]:
    """The provider's credential variables that are not set (what litellm checks before a call)."""
    try:
        missing = litellm.validate_environment(model=model)["missing_keys"]
    except Exception:  # another litellm version
        return ()
    return tuple(name for name in missing if _is_credential(name))


def _is_credential(variable: str) -> bool:
    return variable.endswith(("_KEY", "_TOKEN", "_SECRET", "_ACCESS_KEY_ID", "_SECRET_ACCESS_KEY"))


def judge_failure_line(model: str, reason: str, message: str, provider_keys: Sequence[str],
                       missing: Sequence[str], own_key: bool, status: object = None) -> str:  # fmt: skip
    """One line naming a permanent judge failure, the provider's message and what to set."""
    ours = "RAGPULSE_JUDGE_API_KEY"
    if reason == "auth":
        if missing and not own_key:
            todo = f"set {' or '.join(missing)} (read by litellm for this provider) or {ours}"
        elif own_key:
            instead = " / ".join(provider_keys) or "the provider variable"
            todo = f"check the key in {ours} (it is used instead of {instead})"
        else:
            todo = f"check {' / '.join(provider_keys) or 'the provider key variable'} or set {ours}"
        what = "credentials missing or rejected"
    elif reason == "not_found":
        what, todo = "model or endpoint not found", "check RAGPULSE_JUDGE_MODEL and RAGPULSE_JUDGE_API_BASE"
    else:
        what = "request rejected"
        todo = "check RAGPULSE_JUDGE_MODEL, RAGPULSE_JUDGE_API_BASE and RAGPULSE_JUDGE_STRUCTURED_OUTPUT"
    # The HTTP status when the provider answered one (litellm's missing key is a 500 never sent).
    answered = f", HTTP {status}" if isinstance(status, int) and 400 <= status < 500 else ""
    return f"judge {model}: {what} ({reason}{answered}): {message} -> {todo}"


class LLMJudge:
    """A Judge backed by an LLM through litellm; see the module docstring for the call policy."""

    def __init__(
        self,
        settings: JudgeSettings,
        usage: UsageSink | None = None,
        spend: SpendSink | None = None,
        *,
        retry_base_delay: float = 0.5,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """`extra` is passed to litellm.acompletion as is (e.g. provider-specific parameters)."""
        self._model = settings.model
        self._options = settings
        self._retry_base_delay = retry_base_delay
        self._extra = dict(extra or {})
        self._usage_sink = usage
        # The judge budget's USD, priced per response; calls are counted by InstrumentedJudge.
        self._spend = spend
        self._unpriced_models: set[str] = set()
        self._litellm = load_litellm()
        self._prompts = {kind: load_prompt(kind) for kind in PROMPT_KINDS}
        self._breaker = CircuitBreaker(self._options.breaker_failures, self._options.breaker_cooldown_seconds)
        self._semaphore = asyncio.Semaphore(self._options.max_concurrency)
        # A Retry-After applies to every call of this judge, not only to the one that got it.
        self._not_before = 0.0
        self._failures = ThrottledLog(log, _FAILURE_LOG_INTERVAL)
        self._structured = self._structured_mode()
        self._logprobs = self._logprobs_supported()
        self.usage = Usage()
        # The provider's credential variables (e.g. OPENAI_API_KEY), for the line that says what
        # to set; those missing matter only when no key is configured in ragpulse.
        self._key_variables = key_variables(self._litellm, settings.model)
        self._missing_keys = (
            () if self._options.api_key else _missing_credentials(self._litellm, settings.model)
        )
        # The line of the last failure that says this judge cannot work at all (auth, unknown
        # model), until a call succeeds again: /readyz and the commands report it.
        self._broken: str | None = None

    @property
    def model(self) -> str:
        return self._model

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    def healthy(self) -> bool:
        """False while the circuit breaker is open (the judge is refusing calls), and while the
        judge cannot work (rejected credentials, unknown model) until a call succeeds."""
        return self.problem() is None

    def problem(self) -> str | None:
        if self._broken is not None:
            return self._broken
        if self._breaker.state == "open":
            return f"judge {self._model}: circuit breaker open after repeated failures (retrying)"
        return None

    def prompt_version(self, kind: str) -> str:
        version = self._prompts[kind].version
        if kind in _ANSWERED_TOGETHER:
            # Any of these prompts may produce these verdicts, so editing one invalidates them.
            extra = (ASSESS_INTERACTION, CHECK_CLAIMS) if kind == CHECK_RESPONSE else (ASSESS_INTERACTION,)
            version = "+".join([version, *(self._prompts[k].version for k in extra)])
        return version

    def _structured_mode(self) -> StructuredOutput:
        mode = self._options.structured_output
        if mode == "auto":
            try:
                supported = self._litellm.supports_response_schema(model=self._model)
            except Exception:  # unknown model: litellm has no capability entry for it
                supported = False
            mode = "json_schema" if supported else "json_object"
        return mode

    def _logprobs_supported(self) -> bool:
        """Ask for log-probabilities (the verdicts' confidence, agent/judges/confidence.py) where
        litellm knows the provider returns them, unless switched off (`judge.logprobs: false`)."""
        if not self._options.logprobs or "logprobs" in self._extra:
            return False
        try:
            params = self._litellm.get_supported_openai_params(model=self._model) or []
        except Exception:  # unknown model or provider: stay binary rather than risk a 400
            return False
        return "logprobs" in params and "top_logprobs" in params

    def _format_for(self, request: Request) -> dict[str, Any] | None:
        """The response format of one request: its own pinned schema where the provider takes one."""
        if self._structured == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": request.kind, "schema": request.schema, "strict": True},
            }
        if self._structured == "json_object":
            return {"type": "json_object"}
        return None

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

    def _refused(self) -> JudgeError:
        wait = self._breaker.retry_after()
        return JudgeError(
            f"judge {self._model} unavailable: circuit breaker open",
            retryable=True,
            reason="breaker_open",
            retry_after=wait if wait > 0 else 1.0,
            refused=True,
        )

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
        return await self._complete(request.kind, self._messages(request), self._format_for(request))

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
        probe = self._breaker.state == "half_open"
        if not self._breaker.allow():
            raise self._refused()
        invalid: InvalidAnswer | None = None
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
        finally:
            # The breaker learnt the outcome of every attempt in _complete; a probe that was
            # cancelled or refused before an attempt finished must not hold the half-open state.
            if probe:
                self._breaker.release_probe()
        if invalid is not None:
            raise self._give_up(
                JudgeError(
                    f"invalid {kind} answer after one repair: {invalid}",
                    reason="invalid_answer",
                    partial=invalid.partial or None,
                )
            )
        return result

    async def _complete(
        self, kind: str, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
    ) -> Completion:
        """One completion with retries on transient errors, within the elapsed-time cap."""
        options = self._options
        started = time.monotonic()
        attempt = 0
        while True:
            wait = self._not_before - time.monotonic()
            if wait > 0:
                # Another call was told to wait (Retry-After): honour it here too.
                if time.monotonic() - started + wait > options.retry_max_elapsed_seconds:
                    raise JudgeError(
                        f"judge {self._model} asked to wait {wait:.1f}s (Retry-After)",
                        retryable=True,
                        reason="rate_limited",
                        retry_after=wait,
                        refused=attempt == 0,
                    )
                await asyncio.sleep(wait)
            try:
                async with self._semaphore:
                    content = await self._one_call(kind, messages, response_format)
            except _Retryable as exc:
                attempt += 1
                if exc.reason in _OUTAGE_REASONS:
                    self._breaker.record_failure()  # every failed attempt counts, timeouts included
                if exc.retry_after is not None:
                    self._not_before = max(self._not_before, time.monotonic() + exc.retry_after)
                backoff = self._retry_base_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                delay = max(backoff, exc.retry_after or 0.0)
                elapsed = time.monotonic() - started
                if attempt > options.max_retries or elapsed + delay > options.retry_max_elapsed_seconds:
                    raise JudgeError(
                        f"{exc} (gave up after {attempt} attempt(s), {elapsed:.1f}s)",
                        retryable=True,
                        reason=exc.reason,
                        retry_after=exc.retry_after,
                    ) from exc
                if self._breaker.state == "open":
                    raise self._refused() from exc
                await asyncio.sleep(delay)
            except JudgeError:
                # The service answered (a 4xx other than 429): no outage, but no retry either.
                self._breaker.record_success()
                raise
            else:
                # The service answered, even if the model misbehaves: that is no outage.
                self._breaker.record_success()
                self._broken = None
                return content

    async def _one_call(
        self, kind: str, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
    ) -> Completion:
        litellm = self._litellm
        options = self._options
        request: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": 0,
            "timeout": options.timeout_seconds,
            "num_retries": 0,  # retries are ours: only transient errors, with backoff and a cap
            "max_retries": 0,
            **self._extra,
        }
        if options.api_base:
            request["api_base"] = options.api_base
        if options.api_key:
            request["api_key"] = options.api_key.get_secret_value()
        if response_format is not None:
            request["response_format"] = response_format
        if self._logprobs:
            request |= {"logprobs": True, "top_logprobs": 2}  # p(yes) vs p(no) at each flag
        try:
            response = await asyncio.wait_for(litellm.acompletion(**request), options.timeout_seconds + 5)
        except TimeoutError:
            raise _Retryable(f"judge call timed out after {options.timeout_seconds}s", "timeout") from None
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            reason = _classify(status, exc, litellm, self._missing_keys)
            if reason in _OUTAGE_REASONS or reason == "rate_limited":
                name = type(exc).__name__
                raise _Retryable(
                    f"HTTP {status} {name}: {provider_message(exc)}", reason, retry_after_seconds(exc)
                ) from exc
            raise self._permanent(reason, exc, status) from exc
        self._record_usage(response)
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError) as exc:
            raise JudgeError(f"judge response without a message: {exc}") from None
        return Completion(content or "", tokens_of(getattr(response.choices[0], "logprobs", None)))

    def _permanent(self, reason: str, exc: BaseException, status: object = None) -> JudgeError:
        """A failure no retry can mend, as one line naming what to set."""
        line = judge_failure_line(
            self._model, reason, provider_message(exc), self._key_variables, self._missing_keys,
            own_key=self._options.api_key is not None, status=status,
        )  # fmt: skip
        if reason in BROKEN_REASONS:
            self._broken = line
        return JudgeError(line, reason=reason)

    def _record_usage(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        # litellm prices every response as it builds it; pricing it again costs ~10% of the
        # agent's CPU. Ask completion_cost only when that price is missing, once per model.
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost")
        if cost is None and self._model not in self._unpriced_models:
            try:
                cost = self._litellm.completion_cost(completion_response=response)
            except Exception:  # a model litellm has no price for
                self._unpriced_models.add(self._model)
                cost = None
        self.usage.add(prompt, completion, cost)
        if self._usage_sink is not None:
            self._usage_sink.record_usage(self._model, prompt, completion, cost)
        if self._spend is not None and cost is not None:
            self._spend.add(0, cost)
