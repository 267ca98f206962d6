"""LLMJudge: typed questions answered by any LLM that litellm can call.

One call answers one question about a whole interaction (all chunks, all claims). Every call:
temperature 0, structured JSON output where the provider supports it, a timeout, retries with
jittered exponential backoff on 429 / 5xx / timeouts / connection errors only (never on other 4xx),
a cap on the total time spent retrying, strict validation of the answer with one repair round,
and a circuit breaker that stops calling a judge that keeps failing.

Requests, schemas, validation and repair live in agent/judges/questions.py: each request's schema
pins one verdict per chunk (and per claim to check); a repair asks only for what was missing.
Untrusted text (query, chunks, response, reference, and anything a repair quotes) is fenced with
a random per-request id that the text does not contain, and the instructions say fenced text is data.

litellm is imported on first use only, so `import agent` and the local judge never load it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent.judges.base import (
    ASSESS_CHUNKS,
    ASSESS_INTERACTION,
    CHECK_RESPONSE,
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    JudgeError,
)
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
    load_prompt,
    numbered_statements,
    ordered,
)
from agent.model import Verdict

__all__ = [
    "PROMPT_VERSION",
    "Fence",
    "InvalidAnswer",
    "LLMJudge",
    "LLMJudgeOptions",
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
    return litellm


# Verdicts of these kinds may come from their own prompt, from the combined one, or from a repair.
_ANSWERED_TOGETHER = (ASSESS_CHUNKS, CHECK_RESPONSE)


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


# -- The judge -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LLMJudgeOptions:
    """How LLMJudge calls its model; every field comes from Settings (see agent/config.py)."""

    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 30.0
    max_retries: int = 3
    retry_base_delay: float = 0.5
    retry_max_elapsed: float = 60.0
    breaker_failures: int = 5
    breaker_cooldown: float = 30.0
    max_concurrency: int = 16
    structured_output: StructuredOutput = "auto"
    # Passed to litellm.acompletion as is (e.g. provider-specific parameters).
    extra: dict[str, Any] = field(default_factory=dict)


class _Retryable(Exception):
    """A transient failure (429, 5xx, timeout, connection): worth another attempt after a pause."""


class LLMJudge:
    """A Judge backed by an LLM through litellm; see the module docstring for the call policy."""

    def __init__(
        self, model: str, options: LLMJudgeOptions | None = None, usage: UsageSink | None = None
    ) -> None:
        self._model = model
        self._options = options or LLMJudgeOptions()
        self._usage_sink = usage
        self._unpriced_models: set[str] = set()
        self._litellm = load_litellm()
        self._prompts = {kind: load_prompt(kind) for kind in PROMPT_KINDS}
        self._breaker = CircuitBreaker(self._options.breaker_failures, self._options.breaker_cooldown)
        self._semaphore = asyncio.Semaphore(self._options.max_concurrency)
        self._structured = self._structured_mode()
        self.usage = Usage()

    @property
    def model(self) -> str:
        return self._model

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    def healthy(self) -> bool:
        """False while the circuit breaker is open (the judge is refusing calls)."""
        return self._breaker.state != "open"

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
        self, query: str, response: str, chunks: Sequence[str]
    ) -> tuple[list[ChunkAssessment], list[ClaimVerdict]]:
        return await self._ask(assess_interaction_request(query, response, chunks))

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        return await self._ask(check_reference_request(reference, chunks))

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        return await self._ask(compare_answers_request(query, response, reference))

    # -- Calling ---------------------------------------------------------------------------------

    def _messages(self, request: Request) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self._prompts[request.kind].text},
            {"role": "user", "content": request.render()},
        ]

    async def _send(self, request: Request) -> str:
        return await self._complete(request.kind, self._messages(request), self._format_for(request))

    async def _repair(self, request: Request, first: InvalidAnswer) -> Any:
        """One repair round: ask only for what the first answer missed (or, when nothing of it
        was usable, the same question again with the problem stated, in a fence)."""
        log.debug("judge %s: invalid %s answer (%s); one repair", self._model, request.kind, first)
        if first.repair is None:
            again = request.again(str(first))
            return again.parse(await self._send(again))
        contents = await asyncio.gather(*(self._send(r) for r in first.repair.requests))
        return first.repair.complete(
            [r.parse(content) for r, content in zip(first.repair.requests, contents, strict=True)]
        )

    async def _ask(self, request: Request) -> Any:
        """One question: a call, and one repair round if the answer is invalid."""
        kind = request.kind
        if not self._breaker.allow():
            raise JudgeError(f"judge {self._model} unavailable: circuit breaker open", retryable=True)
        invalid: InvalidAnswer | None = None
        try:
            content = await self._send(request)
            try:
                result = request.parse(content)
            except InvalidAnswer as first:
                try:
                    result = await self._repair(request, first)
                except InvalidAnswer as second:
                    invalid = second
        except JudgeError:
            self._breaker.record_failure()
            raise
        except BaseException:
            self._breaker.release_probe()
            raise
        # The service answered, even if the model misbehaved: that is no outage.
        self._breaker.record_success()
        if invalid is not None:
            raise JudgeError(f"invalid {kind} answer after one repair: {invalid}")
        return result

    async def _complete(
        self, kind: str, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
    ) -> str:
        """One completion with retries on transient errors, within the elapsed-time cap."""
        options = self._options
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    return await self._one_call(kind, messages, response_format)
            except _Retryable as exc:
                attempt += 1
                delay = options.retry_base_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                elapsed = time.monotonic() - started
                if attempt > options.max_retries or elapsed + delay > options.retry_max_elapsed:
                    raise JudgeError(
                        f"{exc} (gave up after {attempt} attempt(s), {elapsed:.1f}s)", retryable=True
                    ) from exc
                await asyncio.sleep(delay)

    async def _one_call(
        self, kind: str, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
    ) -> str:
        litellm = self._litellm
        options = self._options
        request: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": 0,
            "timeout": options.timeout,
            "num_retries": 0,  # retries are ours: only transient errors, with backoff and a cap
            "max_retries": 0,
            **options.extra,
        }
        if options.api_base:
            request["api_base"] = options.api_base
        if options.api_key:
            request["api_key"] = options.api_key
        if response_format is not None:
            request["response_format"] = response_format
        try:
            response = await asyncio.wait_for(litellm.acompletion(**request), options.timeout + 5)
        except TimeoutError:
            raise _Retryable(f"judge call timed out after {options.timeout}s") from None
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            transient = isinstance(exc, litellm.Timeout | litellm.APIConnectionError) or (
                isinstance(status, int) and (status in (408, 409, 429) or status >= 500)
            )
            name = type(exc).__name__
            if transient:
                raise _Retryable(f"HTTP {status} {name}") from exc
            raise JudgeError(f"judge call failed permanently: HTTP {status} {name}: {exc}") from exc
        self._record_usage(response)
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError) as exc:
            raise JudgeError(f"judge response without a message: {exc}") from None
        return content or ""

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
