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
from dataclasses import dataclass, field
from typing import Any

from agent.model import AttributeValue, Chunk, Span
from agent.otlp.conventions import (
    NO_METADATA,
    Message,
    Role,
    SpanParts,
    adk,
    chunk,
    conversation,
    haystack,
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
            query = _blocks(attributes.get("content"))[0] or query
        elif event.name == "gen_ai.choice":
            body = structured(attributes.get("message"))
            response = message_text(body if isinstance(body, Mapping) else dict(attributes)) or response
    return query, response


# -- messages as events ------------------------------------------------------------------------------
# The older GenAI layout, Strands' native tracing and PydanticAI 1.x record a call's messages as
# events (span events, or a JSON list in an `events` attribute): `gen_ai.system.message`,
# `gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`, whose
# `content` is a string, a list of strings, or content blocks (`[{"text"}]`, `toolUse`,
# `toolResult`).


@dataclass(slots=True)
class _Events:
    messages: list[Message] = field(default_factory=list)
    system: list[str] = field(default_factory=list)
    response: str | None = None
    tool_result: str | None = None  # a tool span's result (Strands: its gen_ai.choice)
    tool_input: str | None = None  # a tool span's arguments (Strands: its gen_ai.tool.message)
    calls_tools: bool = False


def _blocks(value: Any) -> tuple[str | None, list[tuple[str, str | None]], bool]:
    """(text, tool results as (text, call id), whether it calls tools) of a content value."""
    if isinstance(value, str):
        parsed = parse_json(value) if value[:1] in ("[", "{") else None
        if parsed is None:
            return value, [], False
        value = parsed
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return None, [], False
    texts: list[str] = []
    results: list[tuple[str, str | None]] = []
    calls = False
    plain = [v for v in value if isinstance(v, str)]
    if plain and len(plain) == len(value):
        return json.dumps(plain, ensure_ascii=False), [], False  # a list of documents
    for block in value:
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "toolUse" in block or block.get("type") in ("tool_use", "tool_call", "function"):
            calls = True
        elif isinstance(block.get("toolResult"), Mapping):
            result = block["toolResult"]
            inner, _, _ = _blocks(result.get("content"))
            call_id = result.get("toolUseId")
            if inner:
                results.append((inner, call_id if isinstance(call_id, str) else None))
    return ("\n".join(texts) if texts else None), results, calls


def _records(span: Span) -> list[tuple[str, Mapping[str, Any]]]:
    """The span's message events: its span events, else the JSON list of its `events` attribute."""
    found: list[tuple[str, Mapping[str, Any]]] = [(e.name, e.attributes) for e in span.events]
    if not any(name.startswith("gen_ai.") for name, _ in found):
        listed = parse_json(span.attributes.get("events"))
        if isinstance(listed, list):
            found = [(r.get("event.name", ""), r) for r in listed if isinstance(r, Mapping)]
    return found


def _events(span: Span) -> _Events:
    out = _Events()
    for name, record in _records(span):
        if name == "gen_ai.choice":
            body = record.get("message")
            if isinstance(body, Mapping):
                content = body.get("content")
                calls = bool(body.get("tool_calls"))
            else:
                content, calls = (
                    body if body is not None else record.get("content"),
                    bool(record.get("tool_calls")),
                )
            texts, _, block_calls = _blocks(content)
            out.calls_tools = out.calls_tools or calls or block_calls
            if texts is not None:
                out.response = texts.strip()
                out.tool_result = texts
            continue
        if name not in _EVENT_ROLES:
            continue
        role = _EVENT_ROLES[name]
        texts, results, calls = _blocks(record.get("content"))
        if role == "system":
            if texts:
                out.system.append(texts)
            continue
        if role == "tool" and isinstance(record.get("content"), str):
            out.tool_input = record["content"]  # on a tool span: its arguments
        if role == "tool" and not results and texts is not None:
            call_id = record.get("id")
            results = [(texts, call_id if isinstance(call_id, str) else None)]
        for result, call_id in results:
            out.messages.append(Message("tool", result, call_id))
        if role != "tool" and texts and not calls:
            out.messages.append(Message(role, texts))
        elif role == "assistant" and isinstance(record.get("tool_calls"), list):
            continue
    return out


_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _instructions(value: AttributeValue, inputs: Any) -> str | None:
    """System instructions: `gen_ai.system_instructions`, else the system messages' text."""
    found = structured(value)
    if isinstance(found, str):
        return found
    texts = [t for m in found if (t := message_text(m))] if isinstance(found, list) else []
    if not texts and isinstance(inputs, list):
        texts = [
            t
            for m in inputs
            if isinstance(m, Mapping) and m.get("role") == "system" and (t := message_text(m))
        ]
    return "\n\n".join(texts) or None


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
        elif adk.LLM_REQUEST in attributes:
            return adk.model_call(attributes)
        else:
            # Native tracers that write no GenAI attribute at all (conventions/haystack.py).
            return haystack.extract(span)
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
            if adk.merged_tools(attributes):
                return SpanParts(Role.OTHER)
            failed = (
                span.failed or "error.type" in attributes or any(e.name == "exception" for e in span.events)
            )
            raw = attributes.get(TOOL_RESULT)
            result = raw if isinstance(raw, str) else _response_text(raw)  # text as the model got it
            arguments = structured(attributes.get("gen_ai.tool.call.arguments"))
            if result is None or arguments is None:
                # PydanticAI's `tool_response` / `tool_arguments`, Google ADK's, Strands' tool events.
                native = span.attributes
                events = _events(span) if span.events else None
                result = (
                    result
                    or text(native.get("tool_response"))
                    or text(attributes.get(adk.TOOL_RESPONSE))
                    or (events.tool_result if events else None)
                )
                arguments = (
                    arguments
                    or structured(native.get("tool_arguments"))
                    or structured(attributes.get(adk.TOOL_ARGS))
                    or (parse_json(events.tool_input) if events and events.tool_input else None)
                )
            if result is not None and result[:2] == "[{":
                blocks = parse_json(result)  # content blocks ([{"type": "text", "text"}]), not documents
                if isinstance(blocks, list) and all(
                    isinstance(b, Mapping) and isinstance(b.get("text"), str) and set(b) <= {"type", "text"}
                    for b in blocks
                ):
                    result = "\n".join(b["text"] for b in blocks)
            call_id = identity(attributes, "gen_ai.tool.call.id")
            return SpanParts(
                Role.TOOL,
                query=sub_query(arguments),
                chunks=None if failed or result is None else tool_documents(result, self._keys),
                response=result,
                session_id=session_id,
                user_id=user_id,
                failed=failed,
                call_id=call_id,
                tool_name=identity(attributes, "gen_ai.tool.name"),
            )
        inputs = structured(attributes.get(INPUT_MESSAGES))
        outputs = structured(attributes.get(OUTPUT_MESSAGES))
        system = attributes.get("gen_ai.system_instructions")
        if inputs is None and outputs is None:
            # The same attributes on the `gen_ai.client.inference.operation.details` event.
            # (Strands writes one event per attribute.)
            for event in span.events:
                if event.name == _DETAILS_EVENT:
                    details = event.attributes
                    inputs = structured(details.get(INPUT_MESSAGES)) if inputs is None else inputs
                    outputs = structured(details.get(OUTPUT_MESSAGES)) if outputs is None else outputs
                    system = details.get("gen_ai.system_instructions") if system is None else system
        query = last_text(inputs, "user")
        response = last_text(outputs, None)
        if (query is None or response is None) and span.events:
            event_query, event_response = _from_events(span)
            query = query or event_query
            response = response if response is not None else event_response
        messages = conversation_of(inputs)
        instructions = _instructions(system, inputs)
        tools_called = calls_tools(outputs)
        if inputs is None and outputs is None:
            events = _events(span)
            if events.messages or events.response is not None or events.system:
                users = [m.content for m in events.messages if m.role == "user"]
                query = query or (users[-1] if users else None)
                response = response if response is not None else events.response
                messages = conversation(events.messages)
                instructions = instructions or ("\n\n".join(events.system) or None)
                tools_called = events.calls_tools
        if role is Role.CHAIN:
            if response is None:  # PydanticAI's agent run
                response = text(span.attributes.get("final_result")) if inputs is None else None
            return SpanParts(role, query=query, response=response, session_id=session_id, user_id=user_id)
        return SpanParts(
            role,
            query=query,
            response=None if tools_called and not response else response,
            session_id=session_id,
            user_id=user_id,
            messages=messages,
            calls_tools=tools_called,
            instructions=instructions,
        )
