"""OpenLLMetry (Traceloop): `traceloop.*` workflow and task spans, `gen_ai.prompt.N.*` LLM spans.

- Workflow spans (`traceloop.span.kind=workflow`) carry the chain's input and output as JSON in
  `traceloop.entity.input` (`{"inputs": <question or {question: ...}>, ...}`) and
  `traceloop.entity.output` (`{"outputs": <answer>, ...}`).
- The LangChain instrumentor records retrievers as `vector_db_retrieve` task spans whose
  `traceloop.entity.output` is `{"documents": [{"page_content", "metadata", "id"?}, ...]}`.
- The LlamaIndex instrumentor writes every step as a workflow / task span with no role of its
  own: the query engine's root workflow has `{"str_or_query_bundle": <query or {query_str}>}` in
  and `{"response": ...}` out; retrievers and node postprocessors (rerankers) are task spans whose
  `traceloop.entity.output` is a JSON array of JSON-encoded `NodeWithScore` objects
  (`{"node": {"id_", "text", ...}, "score"}`), a postprocessor's input holding `nodes`; LLM calls
  are task spans carrying GenAI messages (`gen_ai.output.messages`).
- The Haystack instrumentor writes one `haystack_pipeline.workflow` span whose input is the
  pipeline's run data (`{"kwargs" or "data": {component: {"query" | "question": ...}}}`) and whose
  output holds each leaf component's output: `answer_builder.answers[0]` carries the answer
  (`data`) and the documents it was built from (`documents: [{id, content, score}]`); its
  `haystack.openai.chat` LLM span records no usable content (the literal "replies").
- Vector-DB instrumentors add one event per hit to their query span, in rank order (checked with
  the real instrumentors, docs/intake.md):
  Chroma `db.query.result` with `db.query.result.{id, distance, metadata (JSON), document}`;
  Pinecone `db.query.result` with `db.query.result.{id, score, metadata, vector}` and no document:
  the text is wherever the app put it in the metadata, which arrives as `str(dict)` (a Python repr);
  Milvus `search` `db.search.result` with `db.search.result.{id, distance, entity}` (the output
  fields, `str(dict)` too), Milvus `query` a `db.query.result` event whose attributes are the row.
  A hit's text is the document, else a text field of the metadata / entity / row (`text`,
  `content`, `page_content`, ...; LlamaIndex's `_node_content`); when a hit has none, the span's
  chunks are unknown (never a subset of what the model saw).
  Distances are not scores (lower is better, and Milvus' depends on the metric). Qdrant's,
  LanceDB's and Weaviate's instrumentors record no hits.
- LLM spans written before the GenAI message attributes list `gen_ai.prompt.<N>.{role,content}`
  and `gen_ai.completion.<N>.{role,content}`; newer ones use the GenAI conventions (genai.py).
- Agents: tool spans (`traceloop.span.kind=tool`; LangChain / LangGraph tools, the OpenAI Agents
  SDK's function tools, the `@tool` decorator) are searches: the input is LangChain's callback
  record `{"input_str", "inputs", "kwargs": {"tool_call_id"}}` (also in
  `gen_ai.tool.call.arguments`), the decorator's `{"args", "kwargs"}`, or the tool's arguments;
  the output `{"output": <ToolMessage: content, tool_call_id, status>}` or the return value
  (`gen_ai.tool.call.result`, else `traceloop.entity.output`). A tool failed when it raised
  (`error.type`, an `exception` event) or its ToolMessage has status "error". A LangGraph
  workflow's input is the agent state: its last user message is the question. The model calls
  are GenAI `chat` spans (genai.py) with `tool_call` / `tool_call_response` parts.
App-level association properties `traceloop.association.properties.{session_id,user_id}` name
the conversation.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import (
    METADATA_MAX_CHARS,
    UNKNOWN_CHUNKS,
    Role,
    SpanParts,
    chunk,
    identity,
    last_user_message,
    message_fields,
    metadata_keys,
    parse_json,
    picked,
    string_in,
    sub_query,
    tool_documents,
)

SPAN_KIND = "traceloop.span.kind"
_ENTITY_INPUT = "traceloop.entity.input"
_ENTITY_OUTPUT = "traceloop.entity.output"
_RESULT_EVENT = "db.query.result"  # Chroma, Pinecone; Milvus `query` (the row as attributes)
_SEARCH_EVENT = "db.search.result"  # Milvus `search`
_HIT_EVENTS = (_RESULT_EVENT, _SEARCH_EVENT)
# Where apps and frameworks keep a chunk's text in a vector store's metadata or fields: LangChain's
# vector stores `text` (Pinecone, Milvus), LlamaIndex's `text` or its serialised `_node_content`.
_TEXT_FIELDS = ("document", "text", "content", "page_content", "chunk")
_NODE_CONTENT = "_node_content"
_RETRIEVE = "vector_db_retrieve"
_ASSOCIATION = "traceloop.association.properties."
_QUERY_KEYS = ("question", "query", "input", "user_input", "inputs", "str_or_query_bundle", "query_str")
_RESPONSE_KEYS = ("answer", "output", "text", "result", "response", "outputs")
_BUNDLE_KEYS = ("query_str", "question", "query")  # LlamaIndex's QueryBundle
_GENAI_MESSAGES = ("gen_ai.output.messages", "gen_ai.input.messages")
_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
_TOOL_RESULT = "gen_ai.tool.call.result"
_MAX_MESSAGES = 1000


def _entity(
    attributes: Mapping[str, AttributeValue], key: str, field: str, inner: tuple[str, ...]
) -> str | None:
    """`traceloop.entity.*` JSON → the string under `field`, or under a known key inside it;
    without `field` (LlamaIndex), under a known key of the document itself."""
    document = parse_json(attributes.get(key))
    if not isinstance(document, Mapping):
        return None
    if field in document:
        return string_in(document.get(field), inner)
    for name in inner:
        value = document.get(name)
        found = value if isinstance(value, str) else string_in(value, _BUNDLE_KEYS)
        if found is not None:
            return found
    return None


def _node(value: Any, keys: Sequence[str]) -> Chunk | None:
    """One LlamaIndex NodeWithScore (a dict, or JSON in a string) as a chunk."""
    if isinstance(value, str):
        value = parse_json(value)
    if not isinstance(value, Mapping) or not isinstance(value.get("node"), Mapping):
        return None
    node = value["node"]
    return chunk(node.get("text"), node.get("id_"), value.get("score"), picked(keys, node.get("metadata")))


def _nodes(value: Any, keys: Sequence[str]) -> tuple[Chunk, ...] | None:
    if not isinstance(value, list) or not value:
        return None
    chunks = [found for item in value if (found := _node(item, keys)) is not None]
    # All or nothing: a list that is not a list of nodes is some other step's output.
    return tuple(chunks) if len(chunks) == len(value) else None


def _pipeline_parts(
    attributes: Mapping[str, AttributeValue], keys: Sequence[str]
) -> tuple[str | None, tuple[Chunk, ...] | None, str | None]:
    """A Haystack pipeline run: query from the components' inputs; answer and documents from an
    answer builder's output (or a generator's replies)."""
    request = parse_json(attributes.get(_ENTITY_INPUT))
    query = None
    if isinstance(request, Mapping):
        data = request.get("data")
        if not isinstance(data, Mapping):
            args = request.get("args")
            data = args[0] if isinstance(args, list) and args and isinstance(args[0], Mapping) else None
        if not isinstance(data, Mapping):
            data = request.get("kwargs")
        if isinstance(data, Mapping):
            for inputs in data.values():
                query = string_in(inputs, ("query", "question")) if isinstance(inputs, Mapping) else None
                if query:
                    break
    result = parse_json(attributes.get(_ENTITY_OUTPUT))
    response: str | None = None
    chunks: tuple[Chunk, ...] | None = None
    if isinstance(result, Mapping):
        for outputs in result.values():
            if not isinstance(outputs, Mapping):
                continue
            answers = outputs.get("answers")
            if isinstance(answers, list) and answers and isinstance(answers[0], Mapping):
                response = response or text_of(answers[0].get("data"))
                chunks = chunks or _haystack_documents(answers[0].get("documents"), keys)
            replies = outputs.get("replies")
            if isinstance(replies, list) and replies:
                response = response or text_of(replies[0])
            chunks = chunks or _haystack_documents(outputs.get("documents"), keys)
    return query, chunks, response


def text_of(value: Any) -> str | None:
    """A reply as Haystack serialises it: a string, or a ChatMessage-like object."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("text", "content", "_content"):
            inner = value.get(key)
            if isinstance(inner, str):
                return inner
            if isinstance(inner, list):
                texts = [
                    t
                    for part in inner
                    if isinstance(part, Mapping) and isinstance(t := part.get("text"), str)
                ]
                if texts:
                    return "\n".join(texts)
    return None


def _haystack_documents(value: Any, keys: Sequence[str]) -> tuple[Chunk, ...] | None:
    if not isinstance(value, list):
        return None
    chunks = [
        found
        for doc in value
        if isinstance(doc, Mapping)
        and (
            found := chunk(
                doc.get("content"), doc.get("id"), doc.get("score"), picked(keys, doc.get("meta"), doc)
            )
        )
    ]
    return tuple(chunks) if chunks else None


def _documents(value: Any, keys: Sequence[str]) -> tuple[Chunk, ...] | None:
    documents = value.get("documents") if isinstance(value, Mapping) else None
    if not isinstance(documents, list):
        return None
    chunks: list[Chunk] = []
    for doc in documents:
        if not isinstance(doc, Mapping):
            continue
        metadata = doc.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        found = chunk(
            doc.get("page_content"),
            doc.get("id") or metadata.get("id"),
            metadata.get("score"),
            picked(keys, metadata, doc),
        )
        if found is not None:
            chunks.append(found)
    return tuple(chunks) if chunks else None


def _record(value: Any) -> Mapping[str, Any] | None:
    """A dict an instrumentor wrote as a string: JSON (Chroma) or `str(dict)`, a Python repr
    (Pinecone's metadata, Milvus' entity), read as a literal: never evaluated as code."""
    if not isinstance(value, str) or not value.startswith("{"):
        return None
    found = parse_json(value)
    if found is None:
        try:
            found = ast.literal_eval(value)
        except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: not a record
            return None
    return found if isinstance(found, Mapping) else None


def _record_text(record: Mapping[str, Any] | None) -> str | None:
    if record is None:
        return None
    found = string_in(record, _TEXT_FIELDS)
    if found is None:
        node = parse_json(record.get(_NODE_CONTENT))
        found = string_in(node, ("text",)) if isinstance(node, Mapping) else None
    return found


def _hit(name: str, hit: Mapping[str, AttributeValue], keys: Sequence[str]) -> Chunk | None:
    """One vector-DB result event as a chunk; None when it carries no text. The metadata keys
    are read from the hit's metadata (Chroma, Pinecone), entity (Milvus search) or row (query)."""
    if name == _SEARCH_EVENT:
        entity = _record(hit.get("db.search.result.entity"))
        return chunk(_record_text(entity), hit.get("db.search.result.id"), None, picked(keys, entity))
    if "db.query.result.id" in hit or "db.query.result.document" in hit:
        content = hit.get("db.query.result.document")
        metadata = hit.get("db.query.result.metadata")
        record = None
        if not isinstance(content, str):
            record = _record(metadata)
            content = _record_text(record)
        elif keys and isinstance(metadata, str) and len(metadata) <= METADATA_MAX_CHARS:
            record = _record(metadata)  # read only for its keys: bounded like any metadata
        return chunk(
            content, hit.get("db.query.result.id"), hit.get("db.query.result.score"), picked(keys, record)
        )
    return chunk(_record_text(hit), hit.get("id"), None, picked(keys, hit))  # Milvus `query`: the row


def _result_events(span: Span, keys: Sequence[str]) -> tuple[Chunk, ...] | None:
    """The hits in event order (the database's rank order); UNKNOWN_CHUNKS when any hit has no
    text (the context would be a subset of what the model saw, so it is unknown, never guessed)."""
    chunks = []
    for event in span.events:
        if event.name in _HIT_EVENTS:
            found = _hit(event.name, event.attributes, keys)
            if found is None:
                return UNKNOWN_CHUNKS
            chunks.append(found)
    return tuple(chunks) if chunks else None


def _state_question(attributes: Mapping[str, AttributeValue]) -> str | None:
    """The question in a LangGraph workflow's input: its agent state `{"inputs": {"messages"}}`."""
    document = parse_json(attributes.get(_ENTITY_INPUT))
    inputs = document.get("inputs") if isinstance(document, Mapping) else None
    return last_user_message(inputs.get("messages")) if isinstance(inputs, Mapping) else None


def _tool_input(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, str | None]:
    """(the sub-query, the tool call id) from a tool span's input: LangChain's callback record
    `{"input_str", "inputs", "kwargs": {"tool_call_id"}}`, the Traceloop `@tool` decorator's
    `{"args", "kwargs"}`, or the tool's own arguments (the OpenAI Agents SDK)."""
    raw = attributes.get(_TOOL_ARGUMENTS) or attributes.get(_ENTITY_INPUT)
    document = parse_json(raw)
    if not isinstance(document, Mapping):
        return sub_query(raw) if isinstance(raw, str) else None, None
    kwargs = document.get("kwargs")
    kwargs = kwargs if isinstance(kwargs, Mapping) else {}
    call_id = identity(kwargs, "tool_call_id")
    if "input_str" in document:  # LangChain
        inputs = document.get("inputs")
        if not isinstance(inputs, Mapping):
            inputs = _record(document.get("input_str")) or document.get("input_str")
        return sub_query(inputs), call_id
    if "args" in document and set(document) <= {"args", "kwargs"}:  # @tool
        args = document.get("args")
        return sub_query(kwargs) or sub_query(args), None
    return sub_query(document), call_id


def _tool_output(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, str | None, bool]:
    """(the text the model got back, the tool call id, whether the tool reported an error) from
    a tool span's output: LangChain's `{"output": <ToolMessage>}`, or the tool's own return value."""
    raw = attributes.get(_TOOL_RESULT)
    if raw is None:
        raw = attributes.get(_ENTITY_OUTPUT)
    if not isinstance(raw, str):
        return None, None, False
    document = parse_json(raw) if raw[:1] == "{" else None
    if not isinstance(document, Mapping) or "output" not in document:
        return raw, None, False
    output = document["output"]
    if isinstance(output, str):
        return output, None, False
    if isinstance(output, Mapping):
        role, content = message_fields(output)
        if role == "tool" and content is not None:
            message = output.get("kwargs") or output.get("data") or output
            call_id = identity(message, "tool_call_id") if isinstance(message, Mapping) else None
            failed = isinstance(message, Mapping) and message.get("status") == "error"
            return content, call_id, failed
    try:
        return json.dumps(output, ensure_ascii=False), None, False
    except (TypeError, ValueError):
        return None, None, False


def _tool(span: Span, session_id: str | None, user_id: str | None, keys: Sequence[str]) -> SpanParts:
    """A tool span (`traceloop.span.kind=tool`): LangChain / LangGraph tools, the OpenAI Agents
    SDK's function tools, the Traceloop `@tool` decorator."""
    attributes = span.convention_attributes
    query, input_call_id = _tool_input(attributes)
    output, call_id, reported = _tool_output(attributes)
    failed = (
        reported
        or span.failed
        or "error.type" in attributes
        or any(e.name == "exception" for e in span.events)
    )
    return SpanParts(
        Role.TOOL,
        query=query,
        chunks=None if failed or output is None else tool_documents(output, keys),
        response=output,
        session_id=session_id,
        user_id=user_id,
        failed=failed,
        call_id=call_id or input_call_id,
    )


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

    def __init__(self, metadata: Sequence[str] = ()) -> None:
        """`metadata`: the document metadata keys to carry on chunks (none: metadata is not read)."""
        from agent.otlp.conventions.genai import GenAI

        self._keys = metadata_keys(metadata)
        self._genai: GenAI | None = GenAI(self._keys)

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        kind = attributes.get(SPAN_KIND)
        session_id = identity(attributes, _ASSOCIATION + "session_id")
        user_id = identity(attributes, _ASSOCIATION + "user_id")
        if isinstance(kind, str):
            if kind in ("workflow", "agent"):
                if span.name.startswith("haystack_pipeline"):
                    query, chunks, response = _pipeline_parts(attributes, self._keys)
                    return SpanParts(Role.CHAIN, query, chunks, response, session_id, user_id)
                return SpanParts(
                    Role.CHAIN,
                    query=_entity(attributes, _ENTITY_INPUT, "inputs", _QUERY_KEYS)
                    or _state_question(attributes),
                    response=_entity(attributes, _ENTITY_OUTPUT, "outputs", _RESPONSE_KEYS),
                    session_id=session_id,
                    user_id=user_id,
                )
            if kind == "tool":
                return _tool(span, session_id, user_id, self._keys)
            if attributes.get("gen_ai.operation.name") == _RETRIEVE or span.name.startswith(_RETRIEVE):
                request = parse_json(attributes.get(_ENTITY_INPUT))
                query = string_in(request.get("query"), _QUERY_KEYS) if isinstance(request, Mapping) else None
                return SpanParts(
                    Role.RETRIEVER,
                    query=query,
                    chunks=_documents(parse_json(attributes.get(_ENTITY_OUTPUT)), self._keys),
                    session_id=session_id,
                    user_id=user_id,
                )
            if any(key in attributes for key in _GENAI_MESSAGES) and self._genai is not None:
                # A task span that is a model call (LlamaIndex's LLM steps).
                parts = self._genai.extract(span)
                if parts is not None and parts.role is Role.LLM:
                    return parts._replace(
                        session_id=parts.session_id or session_id, user_id=parts.user_id or user_id
                    )
            nodes = _nodes(parse_json(attributes.get(_ENTITY_OUTPUT)), self._keys)
            if nodes is not None:
                # LlamaIndex retrievers return nodes; node postprocessors (rerankers) take nodes too.
                request = parse_json(attributes.get(_ENTITY_INPUT))
                reranks = isinstance(request, Mapping) and "nodes" in request
                query = _entity(
                    attributes, _ENTITY_INPUT, "", ("query_bundle", "str_or_query_bundle", "query")
                )
                role = Role.RERANKER if reranks else Role.RETRIEVER
                return SpanParts(role, query=query, chunks=nodes, session_id=session_id, user_id=user_id)
            return SpanParts(Role.OTHER)
        if "gen_ai.completion.0.content" in attributes or "gen_ai.prompt.0.content" in attributes:
            return SpanParts(
                Role.LLM,
                query=_indexed(attributes, "gen_ai.prompt", "user"),
                response=_indexed(attributes, "gen_ai.completion", None),
                session_id=session_id,
                user_id=user_id,
            )
        if span.events and any(event.name in _HIT_EVENTS for event in span.events):
            db_query = attributes.get("db.query.text") or attributes.get("db.statement")
            return SpanParts(
                Role.RETRIEVER,
                query=db_query if isinstance(db_query, str) else None,
                chunks=_result_events(span, self._keys),
                session_id=session_id,
                user_id=user_id,
            )
        return None
