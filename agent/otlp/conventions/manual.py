"""The minimal layout for apps that instrument by hand (written by `ragpulse_instrument`).

One span attribute per part, using only OpenTelemetry's native attribute types:

| attribute | type | meaning |
|---|---|---|
| `ragpulse.query` | string | the user's question |
| `ragpulse.chunks` | string[] | retrieved passages, in the rank order the app used them |
| `ragpulse.chunk_ids` | string[] | optional, same order |
| `ragpulse.chunk_scores` | double[] | optional, same order |
| `ragpulse.response` | string | the answer |

All parts on one span make a single-span interaction. The parts may also sit on separate spans of
one trace (chunks on a retrieval span, the response on a generation span): a span with chunks and
no response is a retriever, one with a response is a model call, and the trace assembler joins
them like any other convention.
"""

from __future__ import annotations

from agent.model import Chunk, Span
from agent.otlp.conventions import Role, SpanParts, chunk, identity, text

QUERY = "ragpulse.query"
CHUNKS = "ragpulse.chunks"
CHUNK_IDS = "ragpulse.chunk_ids"
CHUNK_SCORES = "ragpulse.chunk_scores"
RESPONSE = "ragpulse.response"


def _chunks(contents: object, ids: object, scores: object) -> tuple[Chunk, ...] | None:
    if not isinstance(contents, list):
        return None
    ids = ids if isinstance(ids, list) else []
    scores = scores if isinstance(scores, list) else []
    chunks = [
        found
        for i, content in enumerate(contents)
        if (found := chunk(content, ids[i] if i < len(ids) else None, scores[i] if i < len(scores) else None))
    ]
    return tuple(chunks)


class Manual:
    name = "manual"

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        query = text(attributes.get(QUERY))
        response = text(attributes.get(RESPONSE))
        chunks = _chunks(attributes.get(CHUNKS), attributes.get(CHUNK_IDS), attributes.get(CHUNK_SCORES))
        if query is None and response is None and chunks is None:
            return None
        if response is not None and chunks is None:
            role = Role.LLM
        elif chunks is not None and response is None:
            role = Role.RETRIEVER
        else:
            role = Role.CHAIN
        return SpanParts(
            role,
            query=query,
            chunks=chunks,
            response=response,
            session_id=identity(attributes, "session.id"),
            user_id=identity(attributes, "user.id"),
        )
