"""OpenLLMetry (Traceloop): `traceloop.*` workflow and task spans, `gen_ai.prompt.N.*` LLM spans.

- Workflow spans (`traceloop.span.kind=workflow`) carry the chain's input and output as JSON in
  `traceloop.entity.input` (`{"inputs": <question or {question: ...}>, ...}`) and
  `traceloop.entity.output` (`{"outputs": <answer>, ...}`).
- The LangChain instrumentor records retrievers as `vector_db_retrieve` task spans whose
  `traceloop.entity.output` is `{"documents": [{"page_content", "metadata", "id"?}, ...]}`.
- Vector-DB instrumentors (Chroma, Pinecone, Qdrant, ...) add one `db.query.result` event per
  hit with `db.query.result.{id,score,document}`.
- LLM spans written before the GenAI message attributes list `gen_ai.prompt.<N>.{role,content}`
  and `gen_ai.completion.<N>.{role,content}`; newer ones use the GenAI conventions (genai.py).
App-level association properties `traceloop.association.properties.{session_id,user_id}` name
the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import Role, SpanParts, chunk, identity, parse_json, string_in

SPAN_KIND = "traceloop.span.kind"
_ENTITY_INPUT = "traceloop.entity.input"
_ENTITY_OUTPUT = "traceloop.entity.output"
_RESULT_EVENT = "db.query.result"
_RETRIEVE = "vector_db_retrieve"
_ASSOCIATION = "traceloop.association.properties."
_QUERY_KEYS = ("question", "query", "input", "user_input", "inputs")
_RESPONSE_KEYS = ("answer", "output", "text", "result", "response", "outputs")
_MAX_MESSAGES = 1000


def _entity(
    attributes: Mapping[str, AttributeValue], key: str, field: str, inner: tuple[str, ...]
) -> str | None:
    """`traceloop.entity.*` JSON → the string under `field`, or under a known key inside it."""
    document = parse_json(attributes.get(key))
    if not isinstance(document, Mapping):
        return None
    return string_in(document.get(field), inner)


def _documents(value: Any) -> tuple[Chunk, ...] | None:
    documents = value.get("documents") if isinstance(value, Mapping) else None
    if not isinstance(documents, list):
        return None
    chunks: list[Chunk] = []
    for doc in documents:
        if not isinstance(doc, Mapping):
            continue
        metadata = doc.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        found = chunk(doc.get("page_content"), doc.get("id") or metadata.get("id"), metadata.get("score"))
        if found is not None:
            chunks.append(found)
    return tuple(chunks) if chunks else None


def _result_events(span: Span) -> tuple[Chunk, ...] | None:
    chunks = []
    for event in span.events:
        if event.name != _RESULT_EVENT:
            continue
        hit = event.attributes
        content = hit.get("db.query.result.document")
        found = chunk(content, hit.get("db.query.result.id"), hit.get("db.query.result.score"))
        if found is not None:
            chunks.append(found)
    return tuple(chunks) if chunks else None


def _indexed(attributes: Mapping[str, AttributeValue], prefix: str, role: str | None) -> str | None:
    found = None
    for index in range(_MAX_MESSAGES):
        content = attributes.get(f"{prefix}.{index}.content")
        message_role = attributes.get(f"{prefix}.{index}.role")
        if content is None and message_role is None:
            break
        if isinstance(content, str) and (role is None or message_role in (role, None)):
            found = content
    return found


class OpenLLMetry:
    name = "openllmetry"

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        kind = attributes.get(SPAN_KIND)
        session_id = identity(attributes, _ASSOCIATION + "session_id")
        user_id = identity(attributes, _ASSOCIATION + "user_id")
        if isinstance(kind, str):
            if kind in ("workflow", "agent"):
                return SpanParts(
                    Role.CHAIN,
                    query=_entity(attributes, _ENTITY_INPUT, "inputs", _QUERY_KEYS),
                    response=_entity(attributes, _ENTITY_OUTPUT, "outputs", _RESPONSE_KEYS),
                    session_id=session_id,
                    user_id=user_id,
                )
            if attributes.get("gen_ai.operation.name") == _RETRIEVE or span.name.startswith(_RETRIEVE):
                request = parse_json(attributes.get(_ENTITY_INPUT))
                query = string_in(request.get("query"), _QUERY_KEYS) if isinstance(request, Mapping) else None
                return SpanParts(
                    Role.RETRIEVER,
                    query=query,
                    chunks=_documents(parse_json(attributes.get(_ENTITY_OUTPUT))),
                    session_id=session_id,
                    user_id=user_id,
                )
            return SpanParts(Role.OTHER)
        if "gen_ai.completion.0.content" in attributes or "gen_ai.prompt.0.content" in attributes:
            return SpanParts(
                Role.LLM,
                query=_indexed(attributes, "gen_ai.prompt", "user"),
                response=_indexed(attributes, "gen_ai.completion", None),
                session_id=session_id,
                user_id=user_id,
            )
        if span.events and any(event.name == _RESULT_EVENT for event in span.events):
            db_query = attributes.get("db.query.text") or attributes.get("db.statement")
            return SpanParts(
                Role.RETRIEVER,
                query=db_query if isinstance(db_query, str) else None,
                chunks=_result_events(span),
                session_id=session_id,
                user_id=user_id,
            )
        return None
