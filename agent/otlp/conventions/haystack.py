"""Haystack's own OpenTelemetry tracer (`haystack.*` tags), read into the message model.

Haystack writes no GenAI attributes; its spans carry the inputs and outputs of each step:
- `haystack.pipeline.run`: `haystack.pipeline.input_data` / `output_data`, JSON keyed by component;
- `haystack.component.run`: `haystack.component.input` / `output` (JSON); a chat generator's
  output holds `replies`, its input `messages`;
- `haystack.agent.run`: `haystack.agent.input` / `output` (JSON `{"messages": [...]}`);
- `haystack.agent.step.llm`: `haystack.agent.step.llm.output` (JSON `{"replies"}`) and
  `haystack.agent.step.llm.input`, which Haystack writes as the Python repr of its `ChatMessage`s
  (read by `parse_repr`, a tokenizer and parser of that repr: see below);
- `haystack.agent.step.tool`: `haystack.agent.step.tool.input` / `output`, `haystack.tool.name`.
Messages are `ChatMessage.to_dict()`: `{"role", "content": [{"text"} | {"tool_call"} |
{"tool_call_result": {"result", "origin": {"id"}}}]}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

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


# -- Python reprs of ChatMessage objects -------------------------------------------------------------
# Haystack's native tracer writes a model step's input, and the OpenInference instrumentor every
# message, as the Python repr of `ChatMessage`s: `ChatMessage(_role=<ChatRole.USER: 'user'>,
# _content=[TextContent(text='...'), ToolCall(tool_name='search', arguments={'query': '...'},
# id='call_1', extra=None), ToolCallResult(result='...', origin=ToolCall(...), error=False)],
# _name=None, _meta={...})`. It is read by a tokenizer and a small parser of that grammar (calls
# with keyword arguments, lists, tuples, dicts, string literals, `<...>` enum reprs, bare atoms),
# never evaluated. Bounded: a repr longer than MAX_REPR_CHARS or of more than MAX_REPR_TOKENS tokens
# is not read, nesting beyond MAX_REPR_DEPTH ends the parse, and a transcript's first
# MAX_REPR_MESSAGES reprs are read; every step consumes a token, so hostile text costs linear time
# within those bounds (a real message is tens of tokens, its texts one token each).
MAX_REPR_CHARS = 1 << 20
MAX_REPR_TOKENS = 20_000
MAX_REPR_DEPTH = 32
MAX_REPR_MESSAGES = 1000
_TOKEN = re.compile(
    r"""\s*(?:(?P<string>[rbuRBU]{0,2}(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))"""
    r"""|(?P<punct>[()\[\]{}<>,:=])|(?P<atom>[^\s()\[\]{}<>,:='"]+))""",
    re.DOTALL,
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
            "f": "\f", "v": "\v", "\n": ""}  # fmt: skip
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class _Call(NamedTuple):
    """`Name(arg, key=value)` in a repr: a constructor's arguments."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]


class _Atom(NamedTuple):
    """A bare name or number (`extra=None` aside: None, True and False are read as themselves)."""

    text: str


class _Unreadable(Exception):
    """The repr does not follow the grammar (or exceeds its bounds)."""


def _unescape(found: re.Match[str]) -> str:
    code = found.group(1)
    if code[0] in "xuU" and len(code) > 1:
        point = int(code[1:], 16)
        return chr(point) if point <= 0x10FFFF else ""
    if code[0] in "01234567":
        return chr(int(code, 8))
    return _ESCAPES.get(code, "\\" + code)


def _string(token: str) -> str:
    quote = next(i for i, c in enumerate(token) if c in "'\"")
    prefix, body = token[:quote].lower(), token[quote + 1 : -1]
    return body if "r" in prefix else _ESCAPE.sub(_unescape, body)


def _tokens(value: str) -> list[tuple[str, str]]:
    """(kind, text) of each token: "string" (decoded), "punct" or "atom"."""
    out: list[tuple[str, str]] = []
    at, end = 0, len(value)
    while at < end:
        found = _TOKEN.match(value, at)
        if found is None:  # only white space left, or a character no token starts with
            if value[at:].strip():
                raise _Unreadable(at)
            break
        at = found.end()
        kind = found.lastgroup
        assert kind is not None
        token = found.group(kind)
        out.append((kind, _string(token) if kind == "string" else token))
        if len(out) > MAX_REPR_TOKENS:
            raise _Unreadable("tokens")
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end":
            raise _Unreadable("end")
        self.at += 1
        return token

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_REPR_DEPTH:
            raise _Unreadable("depth")
        kind, token = self.take()
        if kind == "string":
            return token
        if kind == "atom":
            if self.peek() == ("punct", "("):
                self.take()
                args, kwargs = self.items(")", depth, keywords=True)
                return _Call(token, args, kwargs)
            return {"None": None, "True": True, "False": False}.get(token, _Atom(token))
        if token == "<":  # <ChatRole.USER: 'user'> (its value: the last string), <function f.<locals>.g>
            found: Any = None
            nested = 1
            while nested:
                part = self.take()
                if part[0] == "string":
                    found = part[1]
                elif part[1] in ("<", ">") and part[0] == "punct":
                    nested += 1 if part[1] == "<" else -1
            return found
        if token in ("[", "("):
            return self.items(_CLOSE[token], depth)[0]
        if token == "{":
            return self.mapping(depth)
        raise _Unreadable(token)

    def items(self, close: str, depth: int, keywords: bool = False) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        while self.peek() != ("punct", close):
            kind, token = self.peek()
            following = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else None
            if keywords and kind == "atom" and following == ("punct", "="):
                self.at += 2
                kwargs[token] = self.value(depth + 1)
            else:
                args.append(self.value(depth + 1))
            if self.peek() == ("punct", ","):
                self.take()
            elif self.peek() != ("punct", close):
                raise _Unreadable(self.peek())
        self.take()
        return args, kwargs

    def mapping(self, depth: int) -> dict[Any, Any]:
        found: dict[Any, Any] = {}
        while self.peek() != ("punct", "}"):
            key = self.value(depth + 1)
            if self.take() != ("punct", ":"):
                raise _Unreadable(":")
            item = self.value(depth + 1)
            if isinstance(key, (str, int, bool)) or key is None:
                found[key] = item
            if self.peek() == ("punct", ","):
                self.take()
            elif self.peek() != ("punct", "}"):
                raise _Unreadable(self.peek())
        self.take()
        return found


def parse_repr(value: str) -> Any:
    """The structure of a Python repr (see above); None when it cannot be read."""
    if len(value) > MAX_REPR_CHARS:
        return None
    try:
        parser = _Parser(_tokens(value))
        found = parser.value()
        return found if parser.peek()[0] == "end" else None
    except _Unreadable:
        return None


def _chat_message(found: Any) -> tuple[str | None, list[str], list[Message], bool]:
    """(role, texts, tool results, whether it calls tools) of one parsed ChatMessage."""
    if not isinstance(found, _Call) or found.name != "ChatMessage":
        return None, [], [], False
    role = found.kwargs.get("_role", found.kwargs.get("role"))
    content = found.kwargs.get("_content", found.kwargs.get("content"))
    texts: list[str] = []
    results: list[Message] = []
    calls = False
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, _Call):
            continue
        if part.name == "TextContent" and isinstance(part.kwargs.get("text"), str):
            texts.append(part.kwargs["text"])
        elif part.name == "ToolCall":
            calls = True
        elif part.name == "ToolCallResult" and isinstance(part.kwargs.get("result"), str):
            origin = part.kwargs.get("origin")
            origin = origin.kwargs if isinstance(origin, _Call) else {}
            results.append(
                Message(
                    "tool",
                    part.kwargs["result"],
                    text(origin.get("id")),
                    text(origin.get("tool_name")),
                    sub_query(origin.get("arguments")),
                )
            )
    return (role if isinstance(role, str) else None), texts, results, calls


def _chat_messages(parsed: Any, depth: int = 0) -> list[Any]:
    """The ChatMessages in a parsed repr: itself, a list of them, or a mapping's `messages`."""
    if isinstance(parsed, _Call) or depth > 2:
        return [parsed]
    if isinstance(parsed, Mapping):
        return _chat_messages(parsed.get("messages"), depth + 1)
    return parsed if isinstance(parsed, list) else []


def _repr_messages(value: Any) -> tuple[list[Message], list[str], bool]:
    """(messages, system texts, whether the last calls tools) of one repr or a list of reprs: a
    ChatMessage, or a list of them."""
    found: list[Message] = []
    system: list[str] = []
    calls = False
    reprs = value[:MAX_REPR_MESSAGES] if isinstance(value, list) else [value]
    for item in reprs:
        parsed = parse_repr(item) if isinstance(item, str) else None
        for message in _chat_messages(parsed):
            role, texts, results, calls = _chat_message(message)
            found.extend(results)
            if role == "system":
                system.extend(texts)
            elif role and texts:
                found.append(Message(role, "\n".join(texts)))
    return found, system, calls


def _repr_list(document: Any, depth: int = 0) -> list[Any] | None:
    """The `messages` list of ChatMessage reprs in a component's (or a pipeline's) JSON output."""
    if not isinstance(document, Mapping) or depth > 3:
        return None
    found = document.get("messages")
    if isinstance(found, list) and found and all(isinstance(m, str) for m in found):
        return found
    for inner in document.values():
        if isinstance(inner, Mapping) and (found := _repr_list(inner, depth + 1)) is not None:
            return found
    return None


REPR_MARK = "ChatMessage(_role="


def transcript(value: str) -> SpanParts | None:
    """A chain span whose JSON output holds the whole conversation as ChatMessage reprs (the
    OpenInference instrumentor's `Agent.run` / `Pipeline.run`): the user's question, the answer
    (the last message, when it is the assistant's text) and the messages before it, tool results
    with their calls' inputs. None when the output holds no such list."""
    reprs = _repr_list(parse_json(value))
    if reprs is None:
        return None
    messages, _, calls = _repr_messages(reprs)
    if not messages:
        return None
    answer = messages[-1].content if messages[-1].role == "assistant" and not calls else None
    given = messages[:-1] if answer is not None else messages
    return SpanParts(
        Role.CHAIN,
        query=_last(given, "user"),
        response=answer,
        messages=conversation(given),
    )


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
        messages, system, _ = _repr_messages(attributes.get("haystack.agent.step.llm.input"))
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
