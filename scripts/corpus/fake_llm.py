"""A fake model server for recording the agent corpus: a real HTTP server on 127.0.0.1, stdlib only.

It runs inside the recording app's process (the app's venv has only the framework), on port 0,
and speaks enough of the OpenAI API for the frameworks' own clients:

- `POST /v1/chat/completions`: Chat Completions, non-streaming and `stream: true` (SSE chunks,
  text deltas and tool-call deltas, a usage chunk when `stream_options.include_usage`);
- `POST /v1/responses`: the Responses API, non-streaming and `stream: true` (the event sequence
  the openai client parses). With `previous_response_id` the server keeps the conversation
  itself: a later call sends only its new items (tool outputs, the next user message), and the
  policy still sees the whole conversation;
- `GET /v1/models`.

What the model answers comes from a *policy*: any callable `policy(call: Call) -> Reply`. `Call`
is the parsed request with its messages normalised across both APIs (role, text, tool calls,
tool call id); `Reply` is either text, tool calls, or both. `scenarios.ScenarioPolicy` is the
policy that plays the corpus scenarios; a stack wraps or subclasses it when its framework needs
something else (a ReAct text, a hand-off tool, a final-answer tool).

Every request is logged in `server.log` (a list of dicts, in arrival order):
`{"n", "api": "chat"|"responses", "path", "body", "reply": {"text", "tool_calls": [{"id",
"name", "arguments"}]}, "queries", "response_id", "previous_response_id", "stream"}` where
`queries` are the search queries the reply asked for (set by the policy) and `body` is the
request exactly as the framework sent it. `recording.turn_expectation` reads this log.

    server = FakeLLM(ScenarioPolicy()).start()   # server.base_url == "http://127.0.0.1:PORT/v1"
    mark = server.mark(); ...run one turn...; entries = server.since(mark)
    server.stop()
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Message:
    """One message of the conversation as the model sees it, across both APIs."""

    role: str  # system | user | assistant | tool
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True)
class Call:
    """A parsed model request: what the policy decides from."""

    api: str  # "chat" | "responses"
    body: dict[str, Any]
    messages: tuple[Message, ...]  # the whole conversation, server-side state included
    tools: dict[str, list[str]]  # tool name -> its parameter names (first required one first)


@dataclass(frozen=True)
class Reply:
    """The next assistant message. `queries` are the search queries it asks for (for the log)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    queries: tuple[str, ...] = field(default=())


Policy = Callable[[Call], Reply]


def _text(content: Any) -> str:
    """The text of a message content: a string or a list of parts (chat or Responses parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                parts.append(str(part.get("text") or part.get("content") or ""))
        return "\n".join(p for p in parts if p)
    return str(content)


def _chat_messages(body: dict[str, Any]) -> list[Message]:
    out = []
    for m in body.get("messages", []):
        calls = tuple(
            ToolCall(c["function"]["name"], _args(c["function"].get("arguments")), c.get("id", ""))
            for c in m.get("tool_calls") or []
        )
        role = "system" if m.get("role") == "developer" else m.get("role", "user")
        out.append(Message(role, _text(m.get("content")), calls, m.get("tool_call_id", "")))
    return out


def _responses_items(body: dict[str, Any]) -> list[Message]:
    out = []
    if body.get("instructions"):
        out.append(Message("system", _text(body["instructions"])))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            out.append(Message(role, _text(item.get("content"))))
        elif kind == "function_call":
            call = ToolCall(item["name"], _args(item.get("arguments")), item.get("call_id", ""))
            out.append(Message("assistant", "", (call,)))
        elif kind == "function_call_output":
            out.append(Message("tool", _text(item.get("output")), (), item.get("call_id", "")))
    return out


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


def _tools(body: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tool in body.get("tools") or []:
        spec = tool.get("function", tool)  # chat nests under "function"; Responses does not
        if "name" not in spec:
            continue
        params = spec.get("parameters") or {}
        required = list(params.get("required") or [])
        names = required + [p for p in (params.get("properties") or {}) if p not in required]
        out[spec["name"]] = names
    return out


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeLLM:
    """The server. `start()` binds 127.0.0.1:0 and serves in a daemon thread."""

    def __init__(self, policy: Policy, model: str = "gpt-4o-mini") -> None:
        self.policy = policy
        self.model = model
        self.log: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Responses API server-side state: response id -> the conversation after that response.
        self._conversations: dict[str, list[Message]] = {}
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeLLM:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    data = {"object": "list", "data": [{"id": owner.model, "object": "model",
                                                        "created": 0, "owned_by": "fake"}]}  # fmt: skip
                    self._json(200, data)
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0].rstrip("/")
                try:
                    if path.endswith("/chat/completions"):
                        owner._chat(self, body)
                    elif path.endswith("/responses"):
                        owner._responses(self, body)
                    else:
                        self._json(404, {"error": {"message": f"no route {self.path}"}})
                except Exception as exc:  # the app should see a 500, the recorder the reason
                    import traceback

                    traceback.print_exc()
                    self._json(500, {"error": {"message": f"fake_llm: {exc!r}"}})

            def _json(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stops serving; with FAKE_LLM_LOG=path set, writes the request log there (to debug a stack)."""
        if os.environ.get("FAKE_LLM_LOG"):
            Path(os.environ["FAKE_LLM_LOG"]).write_text(json.dumps(self.log, indent=1))
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def mark(self) -> int:
        with self._lock:
            return len(self.log)

    def since(self, mark: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.log[mark:])

    # -- the APIs --------------------------------------------------------------------------------

    def _decide(self, api: str, body: dict[str, Any], messages: list[Message]) -> Reply:
        return self.policy(Call(api, body, tuple(messages), _tools(body)))

    def _record(self, api: str, path: str, body: dict[str, Any], reply: Reply, **extra: Any) -> int:
        with self._lock:
            n = len(self.log)
            self.log.append({
                "n": n, "api": api, "path": path, "body": body, "stream": bool(body.get("stream")),
                "reply": {"text": reply.text, "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls]},
                "queries": list(reply.queries), **extra,
            })  # fmt: skip
            return n

    def _call_ids(self, reply: Reply) -> list[str]:
        return [c.id or f"call_{next(self._ids)}" for c in reply.tool_calls]

    def _chat(self, handler: Any, body: dict[str, Any]) -> None:
        reply = self._decide("chat", body, _chat_messages(body))
        self._record("chat", "/v1/chat/completions", body, reply)
        ids = self._call_ids(reply)
        rid = f"chatcmpl-{next(self._ids)}"
        created = int(time.time())
        model = body.get("model", self.model)
        prompt = _tokens(json.dumps(body.get("messages", [])))
        completion = _tokens(reply.text + json.dumps([c.arguments for c in reply.tool_calls]))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}  # fmt: skip
        finish = "tool_calls" if reply.tool_calls else "stop"
        calls = [
            {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in zip(ids, reply.tool_calls, strict=True)
        ]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if calls:
                message["tool_calls"] = calls
            handler._json(200, {
                "id": rid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage, "system_fingerprint": "fake",
            })  # fmt: skip
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "system_fingerprint": "fake",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                 "logprobs": None}]}  # fmt: skip

        events = [chunk({"role": "assistant", "content": ""})]
        words = reply.text.split(" ")
        for n, word in enumerate(words if reply.text else []):
            events.append(chunk({"content": word if n == 0 else " " + word}))
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
            events.append(chunk({"tool_calls": [head]}))
            arguments = call["function"]["arguments"]
            for start in range(0, len(arguments), 12):
                piece = {"index": index, "function": {"arguments": arguments[start : start + 12]}}
                events.append(chunk({"tool_calls": [piece]}))
        events.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk({}), "choices": [], "usage": usage})
        _sse(handler, [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"])

    def _responses(self, handler: Any, body: dict[str, Any]) -> None:
        previous = body.get("previous_response_id")
        with self._lock:
            history = list(self._conversations.get(previous, [])) if previous else []
        if previous and previous not in self._conversations:
            handler._json(400, {"error": {"message": f"unknown previous_response_id {previous}"}})
            return
        new = _responses_items(body)
        # The instructions are sent again on every call; keep one system message at the top.
        if history and new and new[0].role == "system":
            history = [m for m in history if m.role != "system"]
            messages = [new[0], *history, *new[1:]]
        else:
            messages = [*history, *new]
        reply = self._decide("responses", body, messages)
        response_id = f"resp_{next(self._ids)}"
        self._record("responses", "/v1/responses", body, reply, response_id=response_id,
                     previous_response_id=previous)  # fmt: skip
        ids = self._call_ids(reply)
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append({
                "type": "message", "id": f"msg_{next(self._ids)}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            })  # fmt: skip
        for call_id, call in zip(ids, reply.tool_calls, strict=True):
            output.append({
                "type": "function_call", "id": f"fc_{next(self._ids)}", "call_id": call_id,
                "name": call.name, "arguments": json.dumps(call.arguments), "status": "completed",
            })  # fmt: skip
        calls = tuple(ToolCall(c.name, c.arguments, i) for i, c in zip(ids, reply.tool_calls, strict=True))
        after = [*messages, Message("assistant", reply.text, calls)]
        with self._lock:
            self._conversations[response_id] = after
        input_tokens = _tokens(json.dumps(body.get("input", "")))
        output_tokens = _tokens(json.dumps(output))
        response = {
            "id": response_id, "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": body.get("model", self.model), "output": output,
            "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []), "instructions": body.get("instructions"),
            "previous_response_id": previous, "temperature": body.get("temperature"),
            "top_p": body.get("top_p"), "text": {"format": {"type": "text"}},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }  # fmt: skip
        if not body.get("stream"):
            handler._json(200, response)
            return
        seq = itertools.count()
        in_progress = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [
            {"type": "response.created", "response": in_progress},
            {"type": "response.in_progress", "response": in_progress},
        ]
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events += [
                    {"type": "response.output_item.added", "output_index": index,
                     "item": {**item, "status": "in_progress", "content": []}},
                    {"type": "response.content_part.added", "output_index": index, "item_id": item["id"],
                     "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
                    {"type": "response.output_text.delta", "output_index": index, "item_id": item["id"],
                     "content_index": 0, "delta": text, "logprobs": []},
                    {"type": "response.output_text.done", "output_index": index, "item_id": item["id"],
                     "content_index": 0, "text": text, "logprobs": []},
                    {"type": "response.content_part.done", "output_index": index, "item_id": item["id"],
                     "content_index": 0, "part": item["content"][0]},
                ]  # fmt: skip
            else:
                events += [
                    {"type": "response.output_item.added", "output_index": index,
                     "item": {**item, "status": "in_progress", "arguments": ""}},
                    {"type": "response.function_call_arguments.delta", "output_index": index,
                     "item_id": item["id"], "delta": item["arguments"]},
                    {"type": "response.function_call_arguments.done", "output_index": index,
                     "item_id": item["id"], "arguments": item["arguments"]},
                ]  # fmt: skip
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": response})
        _sse(handler, [
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': next(seq)})}\n\n" for e in events
        ])  # fmt: skip


def _sse(handler: Any, frames: list[str]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for frame in frames:
        handler.wfile.write(frame.encode())
    handler.wfile.flush()
    handler.close_connection = True
