"""Google ADK's native tracing (`gcp.vertex.agent.*`), read into the message model.

ADK writes each model call twice: an inner `generate_content` span with the GenAI attributes but
no content, and its parent carrying the call as ADK saw it:
- `gcp.vertex.agent.llm_request`: JSON `{"config": {"system_instruction"}, "contents": [{"role":
  "user" | "model", "parts": [{"text"} | {"function_call"} | {"function_response": {"id",
  "response"}}]}]}` (the Gemini content model; a function response is a tool result);
- `gcp.vertex.agent.llm_response`: JSON `{"content": {"parts": [...]}}`;
- `gcp.vertex.agent.session_id`: the conversation.
A tool span carries `gcp.vertex.agent.tool_call_args` / `gcp.vertex.agent.tool_response` (read by
the GenAI adapter's tool branch with the other native tool attributes).

The OpenInference instrumentor of ADK records the same objects as JSON `input.value` /
`output.value` (read by the OpenInference adapter through `event_text` and `function_response`):
the run's input holds the user's `new_message` (a content), an agent's output the final `Event`
(its `content`), a tool's output the `FunctionResponse` (`{"id", "name", "response"}`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.model import AttributeValue
from agent.otlp.conventions import Message, Role, SpanParts, conversation, identity, parse_json

LLM_REQUEST = "gcp.vertex.agent.llm_request"
LLM_RESPONSE = "gcp.vertex.agent.llm_response"
TOOL_ARGS = "gcp.vertex.agent.tool_call_args"
TOOL_RESPONSE = "gcp.vertex.agent.tool_response"


def _result_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and len(value) == 1:
        (inner,) = value.values()  # a function's return value wrapped as {"result": ...}
        if isinstance(inner, str):
            return inner
    try:
        return json.dumps(value, ensure_ascii=False) if value is not None else None
    except (TypeError, ValueError):
        return str(value)


def _parts(content: Any) -> tuple[list[str], list[Message], bool]:
    """(texts, tool results, whether it calls tools) of one Gemini content."""
    texts: list[str] = []
    results: list[Message] = []
    calls = False
    parts = content.get("parts") if isinstance(content, Mapping) else None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, Mapping):
            continue
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif part.get("function_call"):
            calls = True
        elif isinstance(response := part.get("function_response"), Mapping):
            result = _result_text(response.get("response"))
            call_id = response.get("id")
            if result:
                results.append(Message("tool", result, call_id if isinstance(call_id, str) else None))
    return texts, results, calls


def event_text(document: Any, key: str) -> str | None:
    """The text of the content under `key` of an ADK object (`new_message` of a run's input,
    `content` of an Event); None when it holds no Gemini content with text."""
    content = document.get(key) if isinstance(document, Mapping) else None
    if not isinstance(content, Mapping) or not isinstance(content.get("parts"), list):
        return None
    texts, _, _ = _parts(content)
    return "\n".join(texts) or None


_FUNCTION_RESPONSE = {"id", "name", "response", "will_continue", "scheduling", "parts"}


def function_response(document: Any) -> str | None:
    """The text a tool returned to the model, from a `FunctionResponse` object; None for any
    other object."""
    if not isinstance(document, Mapping) or set(document) - _FUNCTION_RESPONSE:
        return None
    if "response" not in document or not isinstance(document.get("name"), str):
        return None
    return _result_text(document["response"])


def _instruction(config: Any) -> str | None:
    found = config.get("system_instruction") if isinstance(config, Mapping) else None
    if isinstance(found, str):
        return found or None
    texts, _, _ = _parts(found)
    return "\n".join(texts) or None


def model_call(attributes: Mapping[str, AttributeValue]) -> SpanParts | None:
    """An ADK model call from its `llm_request` / `llm_response`; None when the span holds none
    (ADK's tool spans carry an empty `{}` request)."""
    request = parse_json(attributes.get(LLM_REQUEST))
    if not isinstance(request, Mapping) or not isinstance(request.get("contents"), list):
        return None
    messages: list[Message] = []
    for content in request["contents"]:
        texts, results, _ = _parts(content)
        messages.extend(results)
        role = content.get("role") if isinstance(content, Mapping) else None
        if texts and isinstance(role, str):
            messages.append(Message(role, "\n".join(texts)))
    response = parse_json(attributes.get(LLM_RESPONSE))
    texts, _, calls = _parts(response.get("content") if isinstance(response, Mapping) else None)
    users = [m.content for m in messages if m.role == "user"]
    answer = "\n".join(texts) if texts else None
    return SpanParts(
        Role.LLM,
        query=users[-1] if users else None,
        response=None if calls and not answer else answer,
        session_id=identity(attributes, "gcp.vertex.agent.session_id"),
        messages=conversation(messages),
        calls_tools=calls,
        instructions=_instruction(request.get("config")),
    )


def merged_tools(attributes: Mapping[str, AttributeValue]) -> bool:
    """Whether a tool span only gathers the results of parallel calls, each traced on its own
    span (ADK's `(merged tools)`: a list of function responses): no search of its own."""
    value = attributes.get(TOOL_RESPONSE)
    if not isinstance(value, str) or value[:2] != "[{":
        return False
    found = parse_json(value)
    return (
        isinstance(found, list)
        and bool(found)
        and all(isinstance(r, Mapping) and "response" in r and "id" in r for r in found)
    )
