"""The minimal layout for apps that instrument by hand (written by `ragpulse_instrument`).

One span attribute per part, using only OpenTelemetry's native attribute types:

| attribute | type | meaning |
|---|---|---|
| `ragpulse.query` | string | the user's question |
| `ragpulse.chunks` | string[] | retrieved passages, in the rank order the app used them |
| `ragpulse.chunk_ids` | string[] | optional, same order |
| `ragpulse.chunk_scores` | double[] | optional, same order |
| `ragpulse.chunk_metadata` | string[] | optional, same order: JSON objects (`{"source": "faq.md"}`) |
| `ragpulse.response` | string | the answer |
| `ragpulse.search.query` | string | marks a search span (one of several an answer was given): its query |
| `ragpulse.search.failed` | boolean | on a search span: it failed |
| `ragpulse.searches` | int | on an answer: how many search spans it was given (its trace waits for them) |
| `ragpulse.history.roles` / `ragpulse.history.contents` | string[] | the conversation's earlier turns |
| `session.id` | string | the conversation id |

All parts on one span make a single-span interaction. The parts may also sit on separate spans of
one trace (chunks on a retrieval span, the response on a generation span): a span with chunks and
no response is a retriever, one with a response is a model call, and the trace assembler joins
them like any other convention. A search span is an agent's search (a TOOL): an answer span in
its trace is given every search, in the order they ended (agent/otlp/rules/agent.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import (
    NO_METADATA,
    Message,
    Role,
    SpanParts,
    chunk,
    conversation,
    identity,
    metadata_keys,
    metadata_record,
    picked,
    text,
)

QUERY = "ragpulse.query"
CHUNKS = "ragpulse.chunks"
CHUNK_IDS = "ragpulse.chunk_ids"
CHUNK_SCORES = "ragpulse.chunk_scores"
CHUNK_METADATA = "ragpulse.chunk_metadata"
RESPONSE = "ragpulse.response"
SEARCH_QUERY = "ragpulse.search.query"
SEARCH_FAILED = "ragpulse.search.failed"
SEARCHES = "ragpulse.searches"
HISTORY_ROLES = "ragpulse.history.roles"
HISTORY_CONTENTS = "ragpulse.history.contents"


def _chunks(attributes: Mapping[str, AttributeValue], keys: tuple[str, ...]) -> tuple[Chunk, ...] | None:
    contents = attributes.get(CHUNKS)
    if not isinstance(contents, list):
        return None
    ids = attributes.get(CHUNK_IDS)
    ids = ids if isinstance(ids, list) else []
    scores = attributes.get(CHUNK_SCORES)
    scores = scores if isinstance(scores, list) else []
    metadata = attributes.get(CHUNK_METADATA) if keys else None
    metadata = metadata if isinstance(metadata, list) else []
    chunks = [
        found
        for i, content in enumerate(contents)
        if (
            found := chunk(
                content,
                ids[i] if i < len(ids) else None,
                scores[i] if i < len(scores) else None,
                picked(keys, metadata_record(metadata[i])) if i < len(metadata) else NO_METADATA,
            )
        )
    ]
    return tuple(chunks)


def _messages(roles: object, contents: object, query: str | None) -> tuple[Message, ...] | None:
    """The earlier turns and the question as the answer's input conversation."""
    if not isinstance(roles, list) or not isinstance(contents, list):
        return None
    turns = [
        Message(role, content)
        for role, content in zip(roles, contents, strict=False)
        if role in ("user", "assistant") and isinstance(content, str) and content
    ]
    return conversation([*turns, Message("user", query)]) if turns and query else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Manual:
    name = "manual"

    def __init__(self, metadata: Sequence[str] = ()) -> None:
        """`metadata`: the document metadata keys to carry on chunks (none: metadata is not read)."""
        self._keys = metadata_keys(metadata)

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        query = text(attributes.get(QUERY))
        response = text(attributes.get(RESPONSE))
        chunks = _chunks(attributes, self._keys)
        session_id = identity(attributes, "session.id")
        if SEARCH_QUERY in attributes or SEARCH_FAILED in attributes:
            failed = attributes.get(SEARCH_FAILED) is True
            return SpanParts(
                Role.TOOL,
                query=text(attributes.get(SEARCH_QUERY)) or None,
                chunks=None if failed else (chunks or ()),
                session_id=session_id,
                user_id=identity(attributes, "user.id"),
                failed=failed,
            )
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
            session_id=session_id,
            user_id=identity(attributes, "user.id"),
            messages=_messages(attributes.get(HISTORY_ROLES), attributes.get(HISTORY_CONTENTS), query)
            if HISTORY_ROLES in attributes
            else None,
            searches=_count(attributes.get(SEARCHES)),
        )
