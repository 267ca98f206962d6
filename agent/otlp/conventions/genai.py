"""OpenTelemetry GenAI semantic conventions (development status, as of semconv 1.38+).

`gen_ai.operation.name` says what a span is: `chat` / `text_completion` / `generate_content` are
model calls, `retrieval` a document search, `invoke_agent` / `invoke_workflow` an outer step.
Content is opt-in and arrives in one of these forms, all read here:
- span attributes `gen_ai.input.messages` / `gen_ai.output.messages` (JSON strings, or structured
  values: `[{"role", "parts": [{"type": "text", "content"}]}]`), `gen_ai.system_instructions`;
- the span event `gen_ai.client.inference.operation.details` carrying the same attributes;
- the older event forms `gen_ai.content.prompt` / `gen_ai.content.completion` (attributes
  `gen_ai.prompt` / `gen_ai.completion`) and `gen_ai.user.message` / `gen_ai.choice`;
- retrieval spans: `gen_ai.retrieval.query.text` and `gen_ai.retrieval.documents`
  (`[{"id", "score", "content"}]`; a document's metadata keys are read from its `metadata`
  object, JSON or structured, else from its own fields).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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
    parse_json,
    picked,
    sub_query,
    text,
    tool_documents,
)

OPERATION = "gen_ai.operation.name"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_RESULT = "gen_ai.tool.call.result"
_OPERATIONS = {
    "chat": Role.LLM,
    "text_completion": Role.LLM,
    "generate_content": Role.LLM,
    "retrieval": Role.RETRIEVER,
    "invoke_agent": Role.CHAIN,
    "invoke_workflow": Role.CHAIN,
    "execute_tool": Role.TOOL,
}
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def structured(value: AttributeValue) -> Any:
    """A structured content attribute: JSON in a string, or an OTLP array / kvlist value."""
    if isinstance(value, str):
        return parse_json(value)
    return value


def message_text(message: Any) -> str | None:
    """The text of one message: its text parts joined, or a plain `content` string."""
    if not isinstance(message, Mapping):
        return None
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [
            part["content"]
            for part in parts
            if isinstance(part, Mapping)
            and part.get("type", "text") == "text"
            and isinstance(part.get("content"), str)
        ]
        return "\n".join(texts) if texts else None
    content = message.get("content")
    if isinstance(content, str):
        return content
    nested = message.get("message")  # the `gen_ai.choice` event body
    return message_text(nested) if isinstance(nested, Mapping) else None


def last_text(messages: Any, role: str | None) -> str | None:
    """Text of the last message with `role` (any role when None) in a list of messages."""
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and (role is None or message.get("role", role) == role):
            found = message_text(message)
            if found is not None:
                return found
    return None


def _response_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if value is None:
        return None
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def conversation_of(messages: Any) -> tuple[Message, ...] | None:
    """A GenAI message list as the call's input conversation: text parts of user and assistant
    messages, `tool_call_response` parts (and `tool` role messages) as tool results."""
    if not isinstance(messages, list) or len(messages) < 2:
        return None
    found: list[Message] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        parts = message.get("parts")
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, Mapping) and part.get("type") == "tool_call_response":
                    result = _response_text(part.get("response", part.get("result")))
                    if result:
                        call_id = part.get("id")
                        found.append(Message("tool", result, call_id if isinstance(call_id, str) else None))
        if role in ("user", "assistant", "tool"):
            content = message_text(message)
            if content:
                call_id = message.get("tool_call_id") or message.get("id")
                found.append(Message(role, content, call_id if isinstance(call_id, str) else None))
    return conversation(found)


def calls_tools(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    return any(
        isinstance(m, Mapping)
        and isinstance(m.get("parts"), list)
        and any(isinstance(p, Mapping) and p.get("type") == "tool_call" for p in m["parts"])
        for m in messages
    )


def _documents(value: AttributeValue, keys: Sequence[str]) -> tuple[Chunk, ...] | None:
    documents = structured(value)
    if not isinstance(documents, list):
        return None
    chunks = [
        found
        for doc in documents
        if isinstance(doc, Mapping)
        and (
            found := chunk(
                doc.get("content", doc.get("text")),
                doc.get("id"),
                doc.get("score"),
                picked(keys, metadata_record(doc.get("metadata")), doc) if keys else NO_METADATA,
            )
        )
    ]
    return tuple(chunks) if chunks else None


def _from_events(span: Span) -> tuple[str | None, str | None]:
    query = response = None
    for event in span.events:
        attributes = event.attributes
        if event.name == _DETAILS_EVENT:
            query = last_text(structured(attributes.get(INPUT_MESSAGES)), "user") or query
            response = last_text(structured(attributes.get(OUTPUT_MESSAGES)), None) or response
        elif event.name == "gen_ai.content.prompt":
            query = last_text(structured(attributes.get("gen_ai.prompt")), "user") or query
        elif event.name == "gen_ai.content.completion":
            response = last_text(structured(attributes.get("gen_ai.completion")), None) or response
        elif event.name == "gen_ai.user.message":
            query = message_text(dict(attributes)) or query
        elif event.name == "gen_ai.choice":
            body = structured(attributes.get("message"))
            response = message_text(body if isinstance(body, Mapping) else dict(attributes)) or response
    return query, response


class GenAI:
    name = "genai"

    def __init__(self, metadata: Sequence[str] = ()) -> None:
        """`metadata`: the document metadata keys to carry on chunks (none: metadata is not read)."""
        self._keys = metadata_keys(metadata)

    def extract(self, span: Span) -> SpanParts | None:
        attributes = span.convention_attributes
        operation = attributes.get(OPERATION)
        if isinstance(operation, str):
            role = _OPERATIONS.get(operation, Role.OTHER)
        elif INPUT_MESSAGES in attributes or OUTPUT_MESSAGES in attributes:
            role = Role.LLM
        else:
            return None
        if role is Role.OTHER:
            return SpanParts(Role.OTHER)
        session_id = identity(attributes, "gen_ai.conversation.id") or identity(attributes, "session.id")
        user_id = identity(attributes, "user.id")
        if role is Role.RETRIEVER:
            listed = attributes.get("gen_ai.retrieval.documents")
            chunks = _documents(listed, self._keys)
            # Documents listed as an empty list: the retrieval ran and found nothing.
            empty = chunks is None and listed is not None and structured(listed) == []
            return SpanParts(
                Role.RETRIEVER,
                query=text(attributes.get("gen_ai.retrieval.query.text")),
                chunks=() if empty else chunks,
                session_id=session_id,
                user_id=user_id,
                empty=empty,
            )
        if role is Role.TOOL:
            failed = (
                span.failed or "error.type" in attributes or any(e.name == "exception" for e in span.events)
            )
            result = _response_text(structured(attributes.get(TOOL_RESULT)))
            call_id = identity(attributes, "gen_ai.tool.call.id")
            return SpanParts(
                Role.TOOL,
                query=sub_query(structured(attributes.get("gen_ai.tool.call.arguments"))),
                chunks=None if failed or result is None else tool_documents(result, self._keys),
                response=result,
                session_id=session_id,
                user_id=user_id,
                failed=failed,
                call_id=call_id,
            )
        inputs = structured(attributes.get(INPUT_MESSAGES))
        outputs = structured(attributes.get(OUTPUT_MESSAGES))
        query = last_text(inputs, "user")
        response = last_text(outputs, None)
        if (query is None or response is None) and span.events:
            event_query, event_response = _from_events(span)
            query = query or event_query
            response = response if response is not None else event_response
        if role is Role.CHAIN:
            return SpanParts(role, query=query, response=response, session_id=session_id, user_id=user_id)
        return SpanParts(
            role,
            query=query,
            response=response,
            session_id=session_id,
            user_id=user_id,
            messages=conversation_of(inputs),
            calls_tools=calls_tools(outputs),
        )
