"""Assemble decoded spans into RagInteractions.

`SingleSpanAssembler` handles the layout where one span carries the query, the retrieved
documents and the response (OpenInference single-span, or an app's hand-written span). Every span
that does not become part of an interaction is reported with a reason, never dropped silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.model import RagInteraction, Span
from agent.otlp.conventions import Convention, Role, SpanParts

# Reasons a span yields no interaction; they label ragpulse_spans_skipped_total.
NOT_RAG = "not_rag"
INCOMPLETE = "incomplete"


@dataclass(slots=True)
class Assembly:
    interactions: list[RagInteraction] = field(default_factory=list)
    assembled_spans: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


class Assembler(Protocol):
    """Turns spans (in any order, any batching) into interactions."""

    def add(self, spans: Iterable[Span]) -> Assembly: ...

    def flush(self) -> Assembly:
        """Emit or account for everything still buffered (called at shutdown)."""
        ...


class Labeller:
    """Derives the bounded `service` and `route` labels of an interaction."""

    def __init__(
        self,
        route_attributes: Sequence[str],
        limit_service: Callable[[str], str],
        limit_route: Callable[[str], str],
    ) -> None:
        self._route_attributes = tuple(route_attributes)
        self._limit_service = limit_service
        self._limit_route = limit_route

    def service(self, span: Span) -> str:
        return self._limit_service(span.resource.service_name)

    def route(self, span: Span) -> str:
        for name in self._route_attributes:
            value = span.attributes.get(name)
            if isinstance(value, str) and value:
                return self._limit_route(value)
        return self._limit_route(span.name or "unknown")


def _first_parts(conventions: Sequence[Convention], span: Span) -> SpanParts | None:
    for convention in conventions:
        parts = convention.extract(span)
        if parts is not None:
            return parts
    return None


class SingleSpanAssembler:
    def __init__(self, conventions: Sequence[Convention], labeller: Labeller) -> None:
        self._conventions = tuple(conventions)
        self._labeller = labeller

    def add(self, spans: Iterable[Span]) -> Assembly:
        out = Assembly()
        for span in spans:
            parts = _first_parts(self._conventions, span)
            if parts is None:
                out.skipped[NOT_RAG] += 1
            elif parts.role in (Role.RETRIEVER, Role.RERANKER) or not parts.is_complete:
                out.skipped[INCOMPLETE] += 1
            else:
                out.assembled_spans += 1
                out.interactions.append(self._interaction(span, parts))
        return out

    def flush(self) -> Assembly:
        return Assembly()

    def _interaction(self, span: Span, parts: SpanParts) -> RagInteraction:
        assert parts.query is not None and parts.chunks is not None
        return RagInteraction(
            trace_id=span.trace_id,
            span_id=span.span_id,
            query=parts.query,
            chunks=parts.chunks,
            response=parts.response,
            service=self._labeller.service(span),
            route=self._labeller.route(span),
            end_time_unix_nano=span.end_time_unix_nano,
            attributes=span.attributes,
        )
