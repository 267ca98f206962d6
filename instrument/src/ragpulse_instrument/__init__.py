"""Instrument a RAG app by hand: record one interaction with the OpenTelemetry API.

For apps that no instrumentor covers::

    from ragpulse_instrument import record_interaction

    answer = generate(question, docs)
    record_interaction(query=question, chunks=[d.text for d in docs], response=answer)

The parts are written in ragpulse's minimal layout on the current span when there is one (e.g.
the request span of a web framework), else on a new span named `rag.interaction`. Only the
`opentelemetry-api` package is used; the app's own SDK set-up decides where spans go.

| attribute | type | meaning |
|---|---|---|
| `ragpulse.query` | string | the user's question |
| `ragpulse.chunks` | string[] | retrieved passages, in the rank order the app used them |
| `ragpulse.chunk_ids` | string[] | optional, same order |
| `ragpulse.chunk_scores` | double[] | optional, same order |
| `ragpulse.response` | string | the answer |
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace

__all__ = ["CHUNKS", "CHUNK_IDS", "CHUNK_SCORES", "QUERY", "RESPONSE", "SPAN_NAME", "record_interaction"]
__version__ = "0.1.0"

QUERY = "ragpulse.query"
CHUNKS = "ragpulse.chunks"
CHUNK_IDS = "ragpulse.chunk_ids"
CHUNK_SCORES = "ragpulse.chunk_scores"
RESPONSE = "ragpulse.response"
SPAN_NAME = "rag.interaction"


def record_interaction(
    *,
    query: str,
    chunks: Sequence[str],
    response: str | None,
    chunk_ids: Sequence[str] | None = None,
    chunk_scores: Sequence[float] | None = None,
    span: trace.Span | None = None,
    tracer: trace.Tracer | None = None,
) -> None:
    """Write one interaction's query, ranked chunks and response onto a span.

    Args:
        span: the span to annotate; default: the current span, or a new `rag.interaction` span
            (started and ended here) when no span is recording.
        tracer: the tracer for that new span; default: the global tracer provider's.
    """
    attributes: dict[str, str | list[str] | list[float]] = {QUERY: query, CHUNKS: list(chunks)}
    if response is not None:
        attributes[RESPONSE] = response
    if chunk_ids is not None:
        attributes[CHUNK_IDS] = [str(i) for i in chunk_ids]
    if chunk_scores is not None:
        attributes[CHUNK_SCORES] = [float(s) for s in chunk_scores]
    target = span if span is not None else trace.get_current_span()
    if target.is_recording():
        target.set_attributes(attributes)
        return
    tracer = tracer or trace.get_tracer("ragpulse.instrument")
    with tracer.start_as_current_span(SPAN_NAME, attributes=attributes):
        pass
