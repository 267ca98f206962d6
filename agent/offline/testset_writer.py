"""The writer of `ragpulse testset`: asks the judge model to write one item from given chunks.

`ItemWriter` is the contract the command depends on; `LLMItemWriter` calls the judge model
through litellm with the judge's settings (model, API base and key, timeout, retries, structured
output), and `RedactingWriter` redacts personal data first, as the judge stack does for remote
judges, and puts the original values back into what the model wrote.

The prompt is a versioned file beside the judge's (agent/judges/prompts/write_testset_item.v1.txt,
hashed into `prompt_version`); the chunks are fenced with a random per-request id that no chunk
contains, and the instructions say fenced text is data, so a document cannot instruct the model.

The call policy is the judge's (agent/judges/llm.py): temperature 0, JSON output, retries with
jittered backoff on 429 / 5xx / timeouts / connection errors only, never on other 4xx. A failure
that cannot pass (auth, an unknown model, a bad request) is a permanent `JudgeError`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agent.judges.base import JudgeError, SpendSink
from agent.judges.llm import UsageSink, load_litellm, retry_after_seconds
from agent.judges.questions import Fence, load_prompt
from agent.offline.testset import (
    MULTI,
    SINGLE,
    UNANSWERABLE,
    Draft,
    parse_draft,
    redact_with_placeholders,
    restore,
)
from agent.redact import Redactor

if TYPE_CHECKING:
    from agent.config import JudgeSettings

WRITE_ITEM = "write_testset_item"
# What each kind asks for; the prompt file says what an item is.
KIND_INSTRUCTIONS = {
    SINGLE: "KIND single: write a question that CHUNK 1 alone answers, its reference answer from "
    'CHUNK 1, and "chunks": [1].',
    MULTI: "KIND multi: write a question whose answer needs facts from both CHUNK 1 and CHUNK 2 "
    '(neither alone is enough), its reference answer from both, and "chunks": [1, 2].',
    UNANSWERABLE: "KIND unanswerable: write a question on the subject of CHUNK 1 that a user might "
    "plausibly ask but that CHUNK 1 does not answer (it asks for a fact the chunk does not give), "
    'a reference saying the documents do not give this information, and "chunks": [].',
}


class ItemWriter(Protocol):
    """Writes one draft item of a kind from the chunks it is shown (1, or 2 for `multi`)."""

    @property
    def model(self) -> str: ...

    @property
    def prompt_version(self) -> str: ...

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        """The draft; raises InvalidDraft when the answer cannot be an item, JudgeError when the
        model could not be asked (`retryable` says whether another run may do better)."""
        ...


def render_request(kind: str, chunks: Sequence[str]) -> str:
    """The user message: the fenced chunks, then the kind's instruction (outside any fence)."""
    fence = Fence(*chunks)
    parts = [fence.preamble(WRITE_ITEM)]
    parts += [fence.wrap(f"CHUNK {n}", text) for n, text in enumerate(chunks, 1)]
    parts.append(KIND_INSTRUCTIONS[kind])
    return "\n\n".join(parts)


def _reason(status: object, exc: BaseException, litellm: Any) -> str | None:
    """The retryable reason of a failed call, None when it is permanent."""
    if isinstance(exc, litellm.Timeout) or status == 408:
        return "timeout"
    if status == 429:
        return "rate_limited"
    if _mentions_credentials(exc):
        # Without its key the OpenAI client fails before sending anything, and litellm reports
        # that as a 500: no outage, and no retry will find the key.
        return None
    if isinstance(status, int) and status >= 500:
        return "server_error"
    if isinstance(exc, litellm.APIConnectionError):
        return "connection"
    return None


def _mentions_credentials(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(word in text for word in ("credential", "api key", "api_key", "apikey", "auth token"))


def _permanent(status: object, exc: BaseException) -> str:
    if status in (401, 403) or _mentions_credentials(exc):
        return "auth"
    return "not_found" if status == 404 else "bad_request"


class LLMItemWriter:
    def __init__(
        self,
        settings: JudgeSettings,
        usage: UsageSink | None = None,
        spend: SpendSink | None = None,
        *,
        retry_base_delay: float = 0.5,
    ) -> None:
        """Calls the judge model of `settings` with its timeouts, retries and concurrency."""
        self._model = settings.model
        self._options = settings
        self._retry_base_delay = retry_base_delay
        self._usage = usage
        self._spend = spend
        self._litellm = load_litellm()
        self._prompt = load_prompt(WRITE_ITEM)
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)

    @property
    def model(self) -> str:
        return self._model

    @property
    def prompt_version(self) -> str:
        return self._prompt.version

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": render_request(kind, chunks)},
        ]
        return parse_draft(await self._complete(messages), kind)

    async def _complete(self, messages: list[dict[str, str]]) -> str:
        options = self._options
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    return await self._call(messages)
            except _Transient as exc:
                attempt += 1
                delay = max(
                    self._retry_base_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1.5),
                    exc.retry_after or 0.0,
                )
                elapsed = time.monotonic() - started
                if attempt > options.max_retries or elapsed + delay > options.retry_max_elapsed_seconds:
                    raise JudgeError(
                        f"{exc} (gave up after {attempt} attempt(s), {elapsed:.1f}s)",
                        retryable=True,
                        reason=exc.reason,
                    ) from exc
                await asyncio.sleep(delay)

    async def _call(self, messages: list[dict[str, str]]) -> str:
        litellm, options = self._litellm, self._options
        request: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": 0,
            "timeout": options.timeout_seconds,
            "num_retries": 0,
            "max_retries": 0,
        }
        if options.structured_output != "off":
            request["response_format"] = {"type": "json_object"}
        if options.api_base:
            request["api_base"] = options.api_base
        if options.api_key:
            request["api_key"] = options.api_key.get_secret_value()
        try:
            response = await asyncio.wait_for(litellm.acompletion(**request), options.timeout_seconds + 5)
        except TimeoutError:
            raise _Transient(f"call timed out after {options.timeout_seconds}s", "timeout") from None
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            reason = _reason(status, exc, litellm)
            if reason is not None:
                raise _Transient(
                    f"HTTP {status} {type(exc).__name__}", reason, retry_after_seconds(exc)
                ) from exc
            raise JudgeError(
                f"judge call failed permanently: HTTP {status} {type(exc).__name__}: {exc}",
                reason=_permanent(status, exc),
            ) from exc
        self._record(response)
        try:
            return str(response.choices[0].message.content or "")
        except (AttributeError, IndexError) as exc:
            raise JudgeError(f"judge response without a message: {exc}", reason="invalid_answer") from None

    def _record(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if self._usage is not None:
            self._usage.record_usage(self._model, prompt, completion, cost)
        if self._spend is not None:
            self._spend.add(1, cost or 0.0)


class _Transient(Exception):
    def __init__(self, message: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class RedactionCounter(Protocol):
    def redacted(self, kind: str, n: int) -> None: ...


class RedactingWriter:
    """Redacts the chunks of each request together (consistent placeholders), and restores the
    original values in the question and reference the model wrote: personal data never leaves,
    and the set still asks about the documents' own words."""

    def __init__(self, inner: ItemWriter, redactor: Redactor, counter: RedactionCounter) -> None:
        self._inner = inner
        self._redactor = redactor
        self._counter = counter

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def prompt_version(self) -> str:
        return self._inner.prompt_version

    async def write(self, kind: str, chunks: Sequence[str]) -> Draft:
        redaction, originals = redact_with_placeholders(self._redactor, chunks)
        for what, n in redaction.counts.items():
            self._counter.redacted(what, n)
        draft = await self._inner.write(kind, redaction.texts)
        return Draft(restore(draft.question, originals), restore(draft.reference, originals), draft.holding)
