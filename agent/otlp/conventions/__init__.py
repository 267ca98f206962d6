"""Convention adapters: read what a span contributes to a RAG interaction.

Each instrumentation family (OpenInference, OpenLLMetry, OTel GenAI, the minimal hand-written
layout) names things differently; an adapter maps one family's attributes to `SpanParts` and
nothing else, so the assembler never sees attribute names. Adapters read
`span.convention_attributes`, which holds the keys under `KNOWN_PREFIXES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from agent.model import AttributeValue, Chunk, Span

# Every span attribute a convention reads starts with one of these. The decoder converts exactly
# these keys to Python values up front (into `Span.known`) and leaves the rest in the protobuf
# message until someone asks: converting every attribute of every span would cost more than the
# rest of the intake together. The most frequent keys come first: str.startswith tries in order.
KNOWN_PREFIXES = (
    # OpenInference
    "retrieval.documents.", "input.", "output.", "openinference.span.kind", "reranker.",
    "llm.input_messages.", "llm.output_messages.", "session.id", "user.id",
    # OpenLLMetry / Traceloop
    "traceloop.span.kind", "traceloop.entity.input", "traceloop.entity.output",
    "traceloop.association.properties.session_id", "traceloop.association.properties.user_id",
    "gen_ai.prompt.", "gen_ai.completion.", "db.query.text", "db.statement",
    # OpenTelemetry GenAI
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.retrieval.",
    "gen_ai.conversation.id",
    # the minimal layout, and the default route attribute
    "ragpulse.", "http.route",
    # human labels: OpenInference annotations / evaluations (agent/trust/labels.py)
    "annotations.", "evaluations.", "trace.annotations.", "trace.evaluations.",
)  # fmt: skip


class Role(StrEnum):
    CHAIN = "chain"  # a workflow step; the outermost one usually holds the user's question
    RETRIEVER = "retriever"
    RERANKER = "reranker"  # its output documents are the context the LLM saw
    LLM = "llm"
    OTHER = "other"


# A retrieval's hits are in the span but not their text (ids and scores only): the context of the
# model call that follows is unknown, and it must not borrow an earlier retrieval's chunks.
UNKNOWN_CHUNKS: tuple[Chunk, ...] = ()


class SpanParts(NamedTuple):
    """The pieces of a RagInteraction one span carries; None means "this span does not say".

    Immutable like the values in agent/model.py; a named tuple because one is built for every
    span received, and it builds several times faster than a frozen dataclass.
    """

    role: Role
    query: str | None = None
    chunks: tuple[Chunk, ...] | None = None
    response: str | None = None
    session_id: str | None = None
    user_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return bool(self.query) and bool(self.chunks) and self.response is not None

    @property
    def is_useful(self) -> bool:
        """Whether assembly can use this span: anything else is counted `not_rag` on arrival."""
        if self.role is Role.LLM:
            return self.response is not None
        if self.role in (Role.RETRIEVER, Role.RERANKER):
            # UNKNOWN_CHUNKS too: a retrieval whose text is not in the span still marks where the
            # context of the model calls after it came from.
            return self.chunks is not None
        return bool(self.query) or bool(self.chunks)


class Convention(Protocol):
    """Maps spans of one instrumentation convention to SpanParts."""

    name: str

    def extract(self, span: Span) -> SpanParts | None:
        """Return the span's parts, or None when the span does not follow this convention.

        Must not raise on any attribute values: spans come from outside.
        """
        ...


# -- helpers shared by the adapters -----------------------------------------------------------


def parse_json(value: AttributeValue) -> Any:
    """The JSON document in a string attribute, or None when it is not JSON."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def string_in(document: Any, keys: Sequence[str]) -> str | None:
    """The first string under one of `keys` in a JSON object, or the document if it is a string."""
    if isinstance(document, str):
        return document
    if isinstance(document, Mapping):
        for key in keys:
            value = document.get(key)
            if isinstance(value, str):
                return value
    return None


def identity(attributes: Mapping[str, AttributeValue], key: str) -> str | None:
    value = attributes.get(key)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
        return str(value)
    return None


def chunk(content: Any, doc_id: Any = None, score: Any = None) -> Chunk | None:
    if not isinstance(content, str):
        return None
    return Chunk(
        content=content,
        id=str(doc_id) if isinstance(doc_id, (str, int)) and not isinstance(doc_id, bool) else None,
        score=number(score),
    )
