"""Semantic Kernel `ChatCompletionAgent` with a search plugin, SK's native OpenTelemetry diagnostics.

An `OpenAIChatCompletion` service on an `AsyncOpenAI` client pointed at the fake server, a
plugin `kb` whose `kernel_function` `search` returns the documents joined by blank lines (the
model sees the tool as `kb-search`), function choice left at the agent's default (auto, parallel
calls allowed). A conversation is one `ChatHistoryAgentThread` passed to each `get_response`;
each turn is its own trace; the thread id is not put on the spans.

Tracing: SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE=true and SK's own
tracer on the global provider. SK writes `invoke_agent` spans with the agent's input and output
messages as JSON attributes, `chat.completions` spans with the model and token counts, and
`execute_tool` spans with the tool's arguments and result; the prompts and completions of the
model calls go to Python logging as GenAI events; SK's telemetry sample hands its records to
an OTel LoggingHandler, so they are OTLP log records (not span events), recorded here in
`otlp-logs/NNNN.pb`, linked to the `chat` spans by trace and span id.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated

from fake_llm import Call, FakeLLM, Message, Reply, ToolCall
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, Turn, search_text

STACK = "semantic-kernel"
PLUGIN = "kb"
TOOL = f"{PLUGIN}-{SEARCH_TOOL}"  # SK names a function "<plugin>-<function>" for the model
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


class PluginPolicy(ScenarioPolicy):
    """The scenario policy with the search tool under its plugin-qualified name."""

    def results_seen(self, after: list[Message]) -> int:
        names = {c.id: c.name for m in after for c in m.tool_calls if c.id}
        return sum(1 for m in after if m.role == "tool" and names.get(m.tool_call_id) == TOOL)

    def search_reply(self, call: Call, turn: Turn, queries: tuple[str, ...]) -> Reply:
        params = call.tools.get(TOOL) or ["query"]
        return Reply(tool_calls=tuple(ToolCall(TOOL, {params[0]: q}) for q in queries), queries=queries)


async def run(recorder: Recorder) -> None:
    from openai import AsyncOpenAI
    from semantic_kernel import Kernel
    from semantic_kernel.agents import ChatCompletionAgent, ChatHistoryAgentThread
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
    from semantic_kernel.functions import kernel_function

    class KnowledgeBase:
        @kernel_function(name=SEARCH_TOOL, description=SEARCH_DESCRIPTION)
        def search(self, query: Annotated[str, "what to search for"]) -> str:
            return search_text(query)

    server = FakeLLM(PluginPolicy()).start()
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-fake")
    service = OpenAIChatCompletion(ai_model_id="gpt-4o-mini", async_client=client)
    kernel = Kernel()
    kernel.add_plugin(KnowledgeBase(), plugin_name=PLUGIN)
    agent = ChatCompletionAgent(kernel=kernel, service=service, name="assistant", instructions=SYSTEM)
    for scenario in SCENARIOS:
        thread = ChatHistoryAgentThread()
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            # Positional: SK's tracing decorator reads the input messages from the positional
            # arguments only (with messages=... the span's gen_ai.input.messages is []).
            response = await agent.get_response(turn.question, thread=thread)
            text = str(response.content)
            recorder.answer(scenario, number, turn.question, text, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", text]]
        recorder.flush()
    await client.close()
    server.stop()


def main(out_dir: Path) -> None:
    offline_env()
    # Read when semantic_kernel is imported: set before.
    os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE"] = "true"
    recorder = Recorder(STACK, out_dir)
    from opentelemetry import trace

    trace.set_tracer_provider(recorder.provider)
    # SK's telemetry sample: an OTel logging handler on the root logger, for SK's records only.
    from opentelemetry.sdk._logs import LoggingHandler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=recorder.enable_logs())
    handler.addFilter(logging.Filter("semantic_kernel"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    asyncio.run(run(recorder))
    recorder.write(
        framework=version("semantic-kernel", "openai"),
        instrumentation="semantic-kernel native OTel GenAI diagnostics (sensitive)",
        layout="GenAI attributes (native Semantic Kernel), message events as OTLP log records",
        logs="otlp-logs",
        notes="ChatCompletionAgent with a plugin kb whose kernel_function search returns the documents "
        "joined by blank lines (tool name kb-search); invoke_agent spans carry "
        "gen_ai.agent.invocation_input/output JSON, execute_tool spans gen_ai.tool.call.arguments/result, "
        "chat spans no content: SK logs every prompt message and the choice as log records "
        "(body = the message JSON, attribute event.name gen_ai.user.message / gen_ai.tool.message / "
        "gen_ai.choice...), recorded in otlp-logs/; the question passed positionally (as "
        "messages=... SK records no input messages); conversation = one ChatHistoryAgentThread, "
        "each turn its own trace, only the new user message on the invoke_agent span",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
