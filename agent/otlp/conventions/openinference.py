"""OpenInference (Arize): the convention of the LangChain and LlamaIndex instrumentors.

A span states its kind in `openinference.span.kind`; retrievers list documents as flattened
attributes `retrieval.documents.<N>.document.{id,content,score,metadata}`; rerankers list
`reranker.input_documents.<N>...` and `reranker.output_documents.<N>...` (the output is what the
LLM saw); LLM spans carry `llm.input_messages.<N>.message.{role,content}` and
`llm.output_messages.<N>.message.content`; `input.value` / `output.value` hold text or JSON as
`input.mime_type` / `output.mime_type` say. `session.id` and `user.id` name the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import Role, SpanParts, identity, parse_json, string_in

KIND = "openinference.span.kind"
_KINDS = {
    "CHAIN": Role.CHAIN,
    "AGENT": Role.CHAIN,
    "RETRIEVER": Role.RETRIEVER,
    "RERANKER": Role.RERANKER,
    "LLM": Role.LLM,
}
_RETRIEVED = "retrieval.documents"
_RERANKED = "reranker.output_documents"
# Keys a JSON `input.value` / `output.value` commonly holds the question / the answer under
# (LangChain chains, LlamaIndex query engines).
_QUERY_KEYS = ("query", "question", "input", "query_str", "user_input")
_RESPONSE_KEYS = ("response", "output", "answer", "text", "result")
_VALUE = {"input": "input.value", "output": "output.value"}
_MIME_TYPE = {"input": "input.mime_type", "output": "output.mime_type"}
_JSON_START = ("{", "[", '"')
_MAX_DOCUMENTS = 1000  # a bound on the index walk, far above any real top-k
_PRECOMPUTED = 64


def _value(attributes: Mapping[str, AttributeValue], prefix: str, keys: tuple[str, ...]) -> str | None:
    """`input.value` / `output.value` as text: plain text as is, JSON by a known key."""
    value = attributes.get(_VALUE[prefix])
    if not isinstance(value, str):
        return None
    # Only text that opens like JSON can be JSON; skip the mime-type lookup for the rest.
    if value[:1] not in _JSON_START or attributes.get(_MIME_TYPE[prefix]) != "application/json":
        return value
    # A JSON value without a known key is an object the framework passed along, not the text.
    return string_in(parse_json(value), keys)


def _document_keys(prefix: str, index: int) -> tuple[str, str, str, str]:
    base = f"{prefix}.{index}.document."
    return base + "content", base + "score", base + "id", base + "metadata"


# Keys of the first documents, formatted once: this runs for every span of every trace.
_KEYS = {
    prefix: [_document_keys(prefix, index) for index in range(_PRECOMPUTED)]
    for prefix in (_RETRIEVED, _RERANKED)
}


def _documents(attributes: Mapping[str, AttributeValue], prefix: str) -> tuple[Chunk, ...] | None:
    """Documents `<prefix>.<N>.document.*` in index order; None when the span lists none."""
    chunks: list[Chunk] = []
    precomputed = _KEYS[prefix]
    get = attributes.get
    for index in range(_MAX_DOCUMENTS):
        content_key, score_key, id_key, metadata_key = (
            precomputed[index] if index < _PRECOMPUTED else _document_keys(prefix, index)
        )
        content = get(content_key)
        if content is None:
            break
        if not isinstance(content, str):
            continue
        score = get(score_key)
        if score is None:
            # The LangChain instrumentor has no score attribute; retrievers that score put it
            # in the document's metadata.
            metadata = parse_json(get(metadata_key))
            score = metadata.get("score") if isinstance(metadata, dict) else None
        doc_id = get(id_key)
        chunks.append(
            Chunk(
                content,
                doc_id if isinstance(doc_id, str) else (str(doc_id) if isinstance(doc_id, int) else None),
                float(score) if isinstance(score, (float, int)) and not isinstance(score, bool) else None,
            )
        )
    return tuple(chunks) if chunks else None


def _messages(attributes: Mapping[str, AttributeValue], prefix: str, role: str | None) -> str | None:
    """Content of the last `<prefix>.<N>.message` with `role` (any role when None)."""
    found = None
    for index in range(_MAX_DOCUMENTS):
        base = f"{prefix}.{index}.message."
        content = attributes.get(base + "content")
        message_role = attributes.get(base + "role")
        if content is None and message_role is None:
            break
        if isinstance(content, str) and (role is None or message_role == role):
            found = content
    return found


class OpenInference:
    name = "openinference"

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        kind = attributes.get(KIND)
        if not isinstance(kind, str):
            # A span without a kind but with documents is the single-span layout some apps
            # write by hand; anything else is not OpenInference.
            if f"{_RETRIEVED}.0.document.content" not in attributes:
                return None
            kind = "CHAIN"
        role = _KINDS.get(kind.upper(), Role.OTHER)
        if role is Role.OTHER:
            return SpanParts(Role.OTHER)
        session_id = identity(attributes, "session.id")
        user_id = identity(attributes, "user.id")
        if role is Role.LLM:
            response = _messages(attributes, "llm.output_messages", None)
            if response is None:
                response = _value(attributes, "output", _RESPONSE_KEYS)
            return SpanParts(
                Role.LLM,
                query=_messages(attributes, "llm.input_messages", "user"),
                response=response,
                session_id=session_id,
                user_id=user_id,
            )
        if role is Role.RERANKER:
            query = attributes.get("reranker.query")
            return SpanParts(
                Role.RERANKER,
                query=query if isinstance(query, str) else _value(attributes, "input", _QUERY_KEYS),
                chunks=_documents(attributes, _RERANKED),
                session_id=session_id,
                user_id=user_id,
            )
        return SpanParts(
            role,
            query=_value(attributes, "input", _QUERY_KEYS),
            chunks=_documents(attributes, _RETRIEVED),
            response=_value(attributes, "output", _RESPONSE_KEYS) if role is Role.CHAIN else None,
            session_id=session_id,
            user_id=user_id,
        )
