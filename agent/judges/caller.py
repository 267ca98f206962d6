"""ModelCaller: one request to the judge model with the judge's call policy, for every caller.

The LLM judge (agent/judges/llm.py) and the testset writer (agent/offline/testset_writer.py) both
send their requests through it, so a missing key, a 401, a 429 with Retry-After or an outage
behave the same in both. One `complete(messages, response_format)`:

1. waits out a Retry-After that any earlier call of this caller was given;
2. sends at temperature 0 with a timeout, at most `max_concurrency` at once, structured output
   as the caller asked (`response_format`), log-probabilities where asked and supported;
3. retries 429 / 5xx / timeouts / connection errors with jittered exponential backoff, within
   `max_retries` and `retry_max_elapsed_seconds`; never other 4xx;
4. turns a permanent failure into one `JudgeError` line naming the provider's message and what
   to set (the provider's key variable, RAGPULSE_JUDGE_API_KEY, the model or API base);
5. counts tokens and USD (to the usage sink and the judge budget's spend) for each response.

The circuit breaker is the caller's too: outages (5xx, timeouts, connection errors) count
towards it, and `admit()` refuses a question while it is open. A question may take several
calls (an LLM judge's repair round), so admission is per question, not per call.

litellm is imported when a caller is built, so `import agent` and the local judge never load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agent.config import JudgeSettings
from agent.judges.base import JudgeError, SpendSink
from agent.judges.confidence import Completion, tokens_of

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
    """Running totals of one caller, for benchmarks and tests."""

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


# -- Failures ------------------------------------------------------------------------------------


class _Retryable(Exception):
    """A transient failure (429, 5xx, timeout, connection): worth another attempt after a pause."""

    def __init__(self, message: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


# Transient failures that say the judge service is down (and count towards the breaker); a 429
# says it is up but busy: honour its Retry-After instead of opening the breaker.
_OUTAGE_REASONS = frozenset({"server_error", "timeout", "connection"})


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


# -- The caller ----------------------------------------------------------------------------------


class ModelCaller:
    """Sends requests to the judge model of `settings` with the call policy of the module
    docstring; one per model user (the LLM judge, the testset writer), each with its own breaker,
    concurrency limit and Retry-After window.

    Args:
        settings: the judge section (model, API base and key, timeout, retries, breaker,
            concurrency, structured output, log-probabilities).
        usage: where each response's tokens and price are counted (the judge's telemetry).
        spend: the judge budget, told the USD of each priced response (calls are counted by
            whoever asks the question: the instrumented judge, the testset writer).
        retry_base_delay: the first backoff, in seconds (doubled per attempt, jittered).
        extra: passed to litellm.acompletion as is (e.g. provider-specific parameters).
    """

    def __init__(
        self,
        settings: JudgeSettings,
        usage: UsageSink | None = None,
        spend: SpendSink | None = None,
        *,
        retry_base_delay: float = 0.5,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self._model = settings.model
        self._options = settings
        self._retry_base_delay = retry_base_delay
        self._extra = dict(extra or {})
        self._usage_sink = usage
        self._spend = spend
        self._unpriced_models: set[str] = set()
        self._litellm = load_litellm()
        self._breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_cooldown_seconds)
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)
        # A Retry-After applies to every call of this caller, not only to the one that got it.
        self._not_before = 0.0
        self._structured = self._structured_mode()
        self._logprobs = self._logprobs_supported()
        self.usage = Usage()
        # The provider's credential variables (e.g. OPENAI_API_KEY), for the line that says what
        # to set; those missing matter only when no key is configured in ragpulse.
        self._key_variables = key_variables(self._litellm, settings.model)
        self._missing_keys = () if settings.api_key else _missing_credentials(self._litellm, settings.model)
        # The line of the last failure that says this model cannot work at all (auth, unknown
        # model), until a call succeeds again: /readyz and the commands report it.
        self._broken: str | None = None

    @property
    def model(self) -> str:
        return self._model

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    def problem(self) -> str | None:
        """Why calls cannot succeed now (rejected credentials, an unknown model, an open
        breaker), or None."""
        if self._broken is not None:
            return self._broken
        if self._breaker.state == "open":
            return f"judge {self._model}: circuit breaker open after repeated failures (retrying)"
        return None

    def response_format(self, name: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """What to ask the model to answer in: `schema` pinned where the provider takes one,
        else JSON mode; None when structured output is off (`judge.structured_output`)."""
        if self._structured == "json_schema" and schema is not None:
            return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        if self._structured == "off":
            return None
        return {"type": "json_object"}

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """One question's turn, around all of its calls: refused at once (a retryable JudgeError,
        reason `breaker_open`) while the breaker is open; a half-open breaker admits one probe,
        let go again if the question ends before any call told the breaker anything."""
        probe = self._breaker.state == "half_open"
        if not self._breaker.allow():
            raise self._refused()
        try:
            yield
        finally:
            # The breaker learnt the outcome of every attempt in complete(); a probe cancelled or
            # refused before an attempt finished must not hold the half-open state.
            if probe:
                self._breaker.release_probe()

    def _refused(self) -> JudgeError:
        wait = self._breaker.retry_after()
        return JudgeError(
            f"judge {self._model} unavailable: circuit breaker open",
            retryable=True,
            reason="breaker_open",
            retry_after=wait if wait > 0 else 1.0,
            refused=True,
        )

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
        """Log-probabilities (the verdicts' confidence, agent/judges/confidence.py) where litellm
        knows the provider returns them, unless switched off (`judge.logprobs: false`)."""
        if not self._options.logprobs or "logprobs" in self._extra:
            return False
        try:
            params = self._litellm.get_supported_openai_params(model=self._model) or []
        except Exception:  # unknown model or provider: stay binary rather than risk a 400
            return False
        return "logprobs" in params and "top_logprobs" in params

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None = None,
        *,
        logprobs: bool = False,
    ) -> Completion:
        """One completion with retries on transient errors, within the elapsed-time cap; raises
        JudgeError (`retryable` says whether a later attempt may succeed). `logprobs` asks for
        the tokens' log-probabilities where the provider returns them."""
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
                    content = await self._one_call(messages, response_format, logprobs and self._logprobs)
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
        self, messages: list[dict[str, str]], response_format: dict[str, Any] | None, logprobs: bool
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
        if logprobs:
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
            # The service answered, with nothing to read: an unusable answer, as a malformed one.
            raise JudgeError(f"judge response without a message: {exc}", reason="invalid_answer") from None
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
