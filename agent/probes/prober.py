"""Send golden questions through the live app, each in a trace of its own that the agent scores.

For each golden item and endpoint, the prober starts a new trace with a client span carrying the
item (agent/otlp/probes.py: set, item id, reference, relevant ids), sends the question over HTTP
with that span's W3C `traceparent`, and ends the span when the app answered. The app's own
OpenTelemetry HTTP server instrumentation continues the trace, so its RAG spans and the prober's
span meet in the agent (directly over OTLP, or through the Collector and Kafka), which scores the
app's interaction against the reference. When the request fails, the span says why
(`ragpulse.probe.failure`: timeout, http_error, no_answer) and the agent counts it instead.

One round sends len(items) x len(endpoints) requests, `concurrency` at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agent.config import ProbeEndpoint, ProbeSettings
from agent.otlp import probes as attributes

log = logging.getLogger(__name__)

TIMEOUT, HTTP_ERROR, NO_ANSWER = "timeout", "http_error", "no_answer"
SPAN_NAME = "ragpulse.probe"


@dataclass(frozen=True, slots=True)
class GoldenItem:
    """One golden question, from a row of the `ragpulse eval` input format."""

    id: str
    question: str
    reference: str | None = None
    relevant_ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    item: str
    endpoint: str
    trace_id: str
    failure: str | None = None
    answer: str | None = None
    hint: str | None = None  # for a no_answer failure: where the answer was looked for, what was there


@dataclass(frozen=True, slots=True)
class Round:
    """The requests a round sent; `unsent` counts those a stop left unsent (no span, no request)."""

    outcomes: tuple[ProbeOutcome, ...]
    unsent: int = 0

    @property
    def failures(self) -> Counter[str]:
        return Counter(o.failure for o in self.outcomes if o.failure is not None)

    def hints(self) -> dict[str, str]:
        """The first no_answer hint of each endpoint: why its answers were not found."""
        found: dict[str, str] = {}
        for outcome in self.outcomes:
            if outcome.hint is not None:
                found.setdefault(outcome.endpoint, outcome.hint)
        return found


def fill(template: Any, question: str) -> Any:
    """The body template with every "{question}" in its strings replaced by the question."""
    if isinstance(template, str):
        return template.replace("{question}", question)
    if isinstance(template, list):
        return [fill(value, question) for value in template]
    if isinstance(template, dict):
        return {key: fill(value, question) for key, value in template.items()}
    return template


def answer_at(document: Any, path: str) -> str | None:
    """The string at a dotted path (`data.answer`, `choices.0.text`); None when absent or empty."""
    value = document
    for step in path.split(".") if path else ():
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value if isinstance(value, str) and value.strip() else None


def missing_answer_hint(document: Any, path: str) -> str:
    """Why `answer_at(document, path)` found nothing, in a line: how far the path went, and the
    keys (or the kind of value) found where it stopped."""
    value = document
    walked: list[str] = []
    for step in path.split(".") if path else ():
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            break
        walked.append(step)
    else:
        kind = "an empty string" if isinstance(value, str) else f"a {type(value).__name__}, not a string"
        return f"answer_path {path!r} leads to {kind}"
    where = f"at {'.'.join(walked)!r}" if walked else "at the top"
    if isinstance(value, dict):
        keys = ", ".join(list(map(str, value))[:12]) or "none"
        return f"answer_path {path!r}: no {step!r} {where}; the response has keys: {keys}"
    if isinstance(value, list):
        return f"answer_path {path!r}: {where} is a list of {len(value)}, no item {step!r}"
    return f"answer_path {path!r}: {where} is a {type(value).__name__}, not an object"


class Prober:
    """Runs rounds of the golden set against the endpoints; spans go to `tracer`'s provider."""

    def __init__(self, settings: ProbeSettings, tracer: Tracer) -> None:
        self._config = settings
        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()

    async def round(self, items: Sequence[GoldenItem], stop: asyncio.Event | None = None) -> Round:
        """One request per item and endpoint. Once `stop` is set, the requests in flight finish
        (each within timeout_seconds, its span ended and queued for export) and the rest are not
        sent, so every probe span the agent receives is of a request the app received."""
        semaphore = asyncio.Semaphore(self._config.concurrency)
        timeout = aiohttp.ClientTimeout(total=self._config.timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def one(item: GoldenItem, endpoint: ProbeEndpoint) -> ProbeOutcome | None:
                async with semaphore:
                    if stop is not None and stop.is_set():
                        return None
                    return await self._probe(session, item, endpoint)

            outcomes = await asyncio.gather(
                *(one(item, endpoint) for item in items for endpoint in self._config.endpoints)
            )
        sent = tuple(o for o in outcomes if o is not None)
        return Round(sent, unsent=len(outcomes) - len(sent))

    async def _probe(
        self, session: aiohttp.ClientSession, item: GoldenItem, endpoint: ProbeEndpoint
    ) -> ProbeOutcome:
        span_attributes: dict[str, Any] = {
            attributes.SET: self._config.set_name,
            attributes.ITEM: item.id,
            attributes.ENDPOINT: endpoint.name,
            "http.request.method": endpoint.method,
            "url.full": endpoint.url,
        }
        if item.reference is not None:
            span_attributes[attributes.REFERENCE] = item.reference
        if item.relevant_ids is not None:
            span_attributes[attributes.RELEVANT_IDS] = list(item.relevant_ids)
        # A new trace (empty parent context): the prober's span is its root.
        with self._tracer.start_as_current_span(
            SPAN_NAME, context=otel_context.Context(), kind=SpanKind.CLIENT, attributes=span_attributes
        ) as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
            headers = {"content-type": "application/json", **endpoint.headers}
            self._propagator.inject(headers)  # traceparent of this span
            failure, answer, hint = await self._send(session, item, endpoint, headers)
            if failure is not None:
                span.set_attribute(attributes.FAILURE, failure)
                span.set_status(Status(StatusCode.ERROR, failure))
        return ProbeOutcome(item.id, endpoint.name, trace_id, failure, answer, hint)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        item: GoldenItem,
        endpoint: ProbeEndpoint,
        headers: dict[str, str],
    ) -> tuple[str | None, str | None, str | None]:
        """(failure, answer, hint): a hint says why a no_answer response held no answer."""
        body = fill(endpoint.body, item.question)
        data = None if endpoint.method == "GET" else json.dumps(body)
        try:
            async with session.request(endpoint.method, endpoint.url, data=data, headers=headers) as response:
                if response.status >= 400:
                    log.warning("probe %s on %s: HTTP %d", item.id, endpoint.name, response.status)
                    return HTTP_ERROR, None, None
                try:
                    document = await response.json(content_type=None)
                except ValueError:
                    kind = response.headers.get("content-type", "no content type")
                    return NO_ANSWER, None, f"the response is not JSON ({kind})"
        except TimeoutError:
            log.warning("probe %s on %s: timed out", item.id, endpoint.name)
            return TIMEOUT, None, None
        except aiohttp.ClientError as exc:
            log.warning("probe %s on %s: %s", item.id, endpoint.name, exc)
            return HTTP_ERROR, None, None
        answer = answer_at(document, endpoint.answer_path)
        if answer is None:
            return NO_ANSWER, None, missing_answer_hint(document, endpoint.answer_path)
        return None, answer, None
