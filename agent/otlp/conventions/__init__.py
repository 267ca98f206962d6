"""Convention adapters: read what a span contributes to a RAG interaction.

Each instrumentation family (OpenInference, OpenLLMetry, OTel GenAI) names things differently;
an adapter maps one family's attributes to `SpanParts` and nothing else, so the assembler never
sees attribute names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from agent.model import Chunk, Span


class Role(StrEnum):
    CHAIN = "chain"
    RETRIEVER = "retriever"
    RERANKER = "reranker"
    LLM = "llm"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class SpanParts:
    """The pieces of a RagInteraction one span carries; None means "this span does not say"."""

    role: Role
    query: str | None = None
    chunks: tuple[Chunk, ...] | None = None
    response: str | None = None

    @property
    def is_complete(self) -> bool:
        return bool(self.query) and self.chunks is not None and self.response is not None


class Convention(Protocol):
    """Maps spans of one instrumentation convention to SpanParts."""

    name: str

    def extract(self, span: Span) -> SpanParts | None:
        """Return the span's parts, or None when the span does not follow this convention."""
        ...
