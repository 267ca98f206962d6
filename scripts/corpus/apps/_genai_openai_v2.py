"""A hand-written agent loop over the raw `openai` client under opentelemetry-instrumentation-openai-v2.

No framework: the app keeps the conversation itself (a list of Chat Completions messages), sends
the search tool's results back as `role: tool` messages, and wraps each turn in an
`invoke_agent` span and each search in an `execute_tool` span the way the GenAI semantic
conventions describe (gen_ai.operation.name, gen_ai.agent.name, gen_ai.conversation.id,
gen_ai.tool.name, gen_ai.tool.call.id). The chat spans come from the instrumentation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search_text

AGENT = "research-assistant"
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."
TOOLS = [{
    "type": "function",
    "function": {"name": SEARCH_TOOL, "description": SEARCH_DESCRIPTION, "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
}]  # fmt: skip


def _complete(client: Any, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One model call; the assistant message as a dict (streamed deltas put back together)."""
    if not stream:
        message = (
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            .choices[0]
            .message
        )
        return message.model_dump(exclude_none=True)
    text, calls = "", {}
    chunks = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    delta.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = delta.id or call["id"]
                if delta.function:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run(
    stack: str, out_dir: Path, stream: bool, agent_messages: bool, logs: bool, layout: str, notes: str
) -> None:
    """`agent_messages`: also put the turn's input/output messages on the invoke_agent span
    (gen_ai.input.messages / gen_ai.output.messages, JSON, as the newer conventions allow).
    `logs`: the instrumentation's events (log records) are recorded too, to otlp-logs/."""
    offline_env()
    recorder = Recorder(stack, out_dir)
    from openai import OpenAI
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.trace import SpanKind

    if logs:
        OpenAIInstrumentor().instrument(
            tracer_provider=recorder.provider, logger_provider=recorder.enable_logs()
        )
    else:
        OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    tracer = recorder.provider.get_tracer("corpus.genai-agent")
    server = FakeLLM(ScenarioPolicy()).start()
    client = OpenAI(base_url=server.base_url, api_key="sk-fake")

    for scenario in SCENARIOS:
        session = f"session-{scenario.name}"
        history: list[dict[str, Any]] = []
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            with tracer.start_as_current_span(f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL) as span:
                span.set_attribute("gen_ai.operation.name", "invoke_agent")
                span.set_attribute("gen_ai.agent.name", AGENT)
                span.set_attribute("gen_ai.conversation.id", session)
                span.set_attribute("gen_ai.system", "openai")
                span.set_attribute("gen_ai.provider.name", "openai")
                messages = [
                    {"role": "system", "content": SYSTEM},
                    *history,
                    {"role": "user", "content": turn.question},
                ]
                new = [messages[-1]]
                while True:
                    reply = _complete(client, messages, stream)
                    messages.append(reply)
                    new.append(reply)
                    if not reply.get("tool_calls"):
                        break
                    for call in reply["tool_calls"]:
                        name = call["function"]["name"]
                        with tracer.start_as_current_span(
                            f"execute_tool {name}", kind=SpanKind.INTERNAL
                        ) as tool:
                            tool.set_attribute("gen_ai.operation.name", "execute_tool")
                            tool.set_attribute("gen_ai.tool.name", name)
                            tool.set_attribute("gen_ai.tool.type", "function")
                            tool.set_attribute("gen_ai.tool.call.id", call["id"])
                            tool.set_attribute("gen_ai.tool.call.arguments", call["function"]["arguments"])
                            result = search_text(json.loads(call["function"]["arguments"])["query"])
                            tool.set_attribute("gen_ai.tool.call.result", result)
                        result_message = {"role": "tool", "tool_call_id": call["id"], "content": result}
                        messages.append(result_message)
                        new.append(result_message)
                response = reply["content"] or ""
                if agent_messages:
                    span.set_attribute("gen_ai.input.messages", json.dumps(_parts([*history, new[0]])))
                    span.set_attribute("gen_ai.output.messages", json.dumps(_parts([reply], output=True)))
            history += new
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(
        framework=version("openai"), instrumentation=version("opentelemetry-instrumentation-openai-v2"),
        layout=layout, notes=notes, **({"logs": "otlp-logs"} if logs else {}),
    )  # fmt: skip


def _parts(messages: list[dict[str, Any]], output: bool = False) -> list[dict[str, Any]]:
    """Chat messages in the GenAI conventions' JSON message shape (role + parts)."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.get("content"):
            parts.append({"type": "text", "content": m["content"]})
        for c in m.get("tool_calls") or []:
            parts.append({"type": "tool_call", "id": c["id"], "name": c["function"]["name"],
                          "arguments": json.loads(c["function"]["arguments"])})  # fmt: skip
        if m["role"] == "tool":
            parts = [{"type": "tool_call_response", "id": m["tool_call_id"], "response": m["content"]}]
        item: dict[str, Any] = {"role": m["role"], "parts": parts}
        if output:
            item["finish_reason"] = "stop"
        out.append(item)
    return out
