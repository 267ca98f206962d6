"""Haystack's own OpenTelemetry tracer (`haystack.*` tags), read into the message model.

Haystack writes no GenAI attributes; its spans carry the inputs and outputs of each step:
- `haystack.pipeline.run`: `haystack.pipeline.input_data` / `output_data`, JSON keyed by component;
- `haystack.component.run`: `haystack.component.input` / `output` (JSON); a chat generator's
  output holds `replies`, its input `messages`;
- `haystack.agent.run`: `haystack.agent.input` / `output` (JSON `{"messages": [...]}`);
- `haystack.agent.step.llm`: `haystack.agent.step.llm.output` (JSON `{"replies"}`) and
  `haystack.agent.step.llm.input`, which Haystack writes as the Python repr of its `ChatMessage`s
  (read here token by token: roles, `TextContent` texts, `ToolCallResult` results);
- `haystack.agent.step.tool`: `haystack.agent.step.tool.input` / `output`, `haystack.tool.name`.
Messages are `ChatMessage.to_dict()`: `{"role", "content": [{"text"} | {"tool_call"} |
{"tool_call_result": {"result", "origin": {"id"}}}]}`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from agent.model import Span
from agent.otlp.conventions import (
    Message,
    Role,
    SpanParts,
    conversation,
    parse_json,
    sub_query,
    text,
    tool_documents,
)

PREFIX = "haystack."


def _message(raw: Any) -> tuple[str | None, list[str], list[Message], bool]:
    """(role, texts, tool results, whether it calls tools) of one serialised ChatMessage."""
    if not isinstance(raw, Mapping):
        return None, [], [], False
    role = raw.get("role")
    texts: list[str] = []
    results: list[Message] = []
    calls = False
    content = raw.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("tool_call"):
            calls = True
        elif isinstance(result := block.get("tool_call_result"), Mapping) and isinstance(
            result.get("result"), str
        ):
            origin = result.get("origin")
            call_id = origin.get("id") if isinstance(origin, Mapping) else None
            results.append(Message("tool", result["result"], call_id if isinstance(call_id, str) else None))
    return (role if isinstance(role, str) else None), texts, results, calls


def _messages(raw: Any) -> tuple[list[Message], list[str], bool]:
    """(messages, system texts, whether the last message calls tools) of a message list."""
    found: list[Message] = []
    system: list[str] = []
    calls = False
    for item in raw if isinstance(raw, list) else ():
        role, texts, results, calls = _message(item)
        found.extend(results)
        if role == "system":
            system.extend(texts)
        elif role and texts:
            found.append(Message(role, "\n".join(texts)))
    return found, system, calls


# The Python repr of a ChatMessage list: one token per role, text and tool result, and every
# other string literal skipped whole (so that markers inside a text are never read as tokens).
_STRING = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
_REPR = re.compile(
    rf"_role=<ChatRole\.\w+: '(?P<role>\w+)'>|TextContent\(text=(?P<text>{_STRING})"
    rf"|ToolCallResult\(result=(?P<result>{_STRING})|{_STRING}"
)


def _literal(token: str) -> str | None:
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _repr_messages(value: Any) -> tuple[list[Message], list[str]]:
    found: list[Message] = []
    system: list[str] = []
    role = None
    if not isinstance(value, str):
        return found, system
    for match in _REPR.finditer(value):
        if match["role"]:
            role = match["role"]
        elif match["text"] and role:
            content = _literal(match["text"])
            if content is not None and role == "system":
                system.append(content)
            elif content is not None:
                found.append(Message(role, content))
        elif match["result"]:
            content = _literal(match["result"])
            if content is not None:
                found.append(Message("tool", content))
    return found, system


def _last(messages: list[Message], role: str) -> str | None:
    return next((m.content for m in reversed(messages) if m.role == role), None)


def _component_messages(data: Any) -> list[Any]:
    """The message lists among a component's (or each component's) inputs or outputs."""
    if not isinstance(data, Mapping):
        return []
    found: list[Any] = []
    for key, value in data.items():
        if key in ("messages", "replies", "last_message") and isinstance(value, (list, Mapping)):
            found.extend(value if isinstance(value, list) else [value])
        elif isinstance(value, Mapping):
            found.extend(_component_messages(value))
    return found


def _reply(output: Any) -> tuple[str | None, bool]:
    replies = output.get("replies") if isinstance(output, Mapping) else None
    messages, _, calls = _messages(replies)
    return _last(messages, "assistant"), calls


def extract(span: Span) -> SpanParts | None:
    """The parts of a span of Haystack's tracer; None for a span of another tracer."""
    name = span.name
    if not name.startswith(PREFIX):
        return None
    attributes = span.attributes
    if name == "haystack.agent.step.llm":
        response, calls = _reply(parse_json(attributes.get("haystack.agent.step.llm.output")))
        messages, system = _repr_messages(attributes.get("haystack.agent.step.llm.input"))
        return SpanParts(
            Role.LLM,
            query=_last(messages, "user"),
            response=None if calls and not response else response,
            messages=conversation(messages),
            calls_tools=calls,
            instructions="\n\n".join(system) or None,
        )
    if name == "haystack.agent.step.tool":
        output = text(attributes.get("haystack.agent.step.tool.output"))
        return SpanParts(
            Role.TOOL,
            query=sub_query(attributes.get("haystack.agent.step.tool.input")),
            chunks=None if output is None else tool_documents(output),
            response=output,
            tool_name=text(attributes.get("haystack.tool.name")),
        )
    for inputs_key, outputs_key in (
        ("haystack.agent.input", "haystack.agent.output"),
        ("haystack.component.input", "haystack.component.output"),
        ("haystack.pipeline.input_data", "haystack.pipeline.output_data"),
    ):
        if inputs_key in attributes or outputs_key in attributes:
            break
    else:
        return SpanParts(Role.OTHER)
    inputs = parse_json(attributes.get(inputs_key))
    outputs = parse_json(attributes.get(outputs_key))
    given, system, _ = _messages(_component_messages(inputs))
    if isinstance(outputs, Mapping) and "replies" in outputs:  # a chat generator: a model call
        response, calls = _reply(outputs)
        return SpanParts(
            Role.LLM,
            query=_last(given, "user"),
            response=None if calls and not response else response,
            messages=conversation(given),
            calls_tools=calls,
            instructions="\n\n".join(system) or None,
        )
    returned, _, _ = _messages(_component_messages(outputs))
    return SpanParts(Role.CHAIN, query=_last(given, "user"), response=_last(returned, "assistant"))
