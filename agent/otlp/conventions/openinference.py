"""OpenInference (Arize): the convention of the LangChain and LlamaIndex instrumentors.

A span states its kind in `openinference.span.kind`; retrievers list documents as flattened
attributes `retrieval.documents.<N>.document.{id,content,score}`; `input.value` / `output.value`
hold text or JSON as `input.mime_type` / `output.mime_type` say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import Role, SpanParts

_KINDS = {
    "CHAIN": Role.CHAIN,
    "AGENT": Role.CHAIN,
    "RETRIEVER": Role.RETRIEVER,
    "RERANKER": Role.RERANKER,
    "LLM": Role.LLM,
}
_DOCUMENTS = "retrieval.documents."
# Keys a JSON `input.value` commonly carries the user's question under.
_QUERY_KEYS = ("query", "question", "input", "query_str", "user_input")


def _text(attributes: Mapping[str, AttributeValue], prefix: str) -> str | None:
    value = attributes.get(f"{prefix}.value")
    if not isinstance(value, str):
        return None
    if attributes.get(f"{prefix}.mime_type") == "application/json":
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, str):
            return decoded
        if isinstance(decoded, dict):
            for key in _QUERY_KEYS:
                if isinstance(decoded.get(key), str):
                    return decoded[key]
    return value


def _documents(attributes: Mapping[str, AttributeValue]) -> tuple[Chunk, ...] | None:
    by_index: dict[int, dict[str, AttributeValue]] = {}
    for key, value in attributes.items():
        if not key.startswith(_DOCUMENTS):
            continue
        index, _, field = key[len(_DOCUMENTS) :].partition(".document.")
        if index.isdigit() and field:
            by_index.setdefault(int(index), {})[field] = value
    if not by_index:
        return None
    chunks = []
    for _, doc in sorted(by_index.items()):
        content = doc.get("content")
        if not isinstance(content, str):
            continue
        score = doc.get("score")
        doc_id = doc.get("id")
        chunks.append(
            Chunk(
                content=content,
                id=str(doc_id) if doc_id is not None else None,
                score=float(score)
                if isinstance(score, (int, float)) and not isinstance(score, bool)
                else None,
            )
        )
    return tuple(chunks)


class OpenInference:
    name = "openinference"

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.attributes
        kind = attributes.get("openinference.span.kind")
        chunks = _documents(attributes)
        if not isinstance(kind, str) and chunks is None:
            return None
        return SpanParts(
            role=_KINDS.get(str(kind).upper(), Role.OTHER),
            query=_text(attributes, "input"),
            chunks=chunks,
            response=_text(attributes, "output"),
        )
