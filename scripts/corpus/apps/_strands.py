"""The Strands Agents app shared by the two Strands stacks (native tracing, two message conventions).

Strands' tracer reads the global tracer provider, so the recorder's provider is set as global (what
`StrandsTelemetry()` does with its own). Which GenAI conventions it follows is read from
OTEL_SEMCONV_STABILITY_OPT_IN when the tracer is made; each stack sets it before importing
Strands. The model (an OpenAI model provider on the fake server) streams (Chat Completions SSE).
Parallel tool calls: the default concurrent tool executor runs them together. A conversation: the
same `Agent` object called again (it keeps its messages), each call its own trace, `session.id`
given through the agent's `trace_attributes` (as the Strands docs show).
"""

from __future__ import annotations

import os
from pathlib import Path

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, ScenarioPolicy, search_text

SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def run(stack: str, out_dir: Path, opt_in: str, layout: str, notes: str) -> None:
    offline_env()
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = opt_in
    recorder = Recorder(stack, out_dir)

    from opentelemetry import trace

    trace.set_tracer_provider(recorder.provider)

    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def search(query: str) -> str:
        """Search the knowledge base for documents about a topic.

        Args:
            query: What to search for.
        """
        return search_text(query)

    server = FakeLLM(ScenarioPolicy()).start()
    model = OpenAIModel(
        client_args={"base_url": server.base_url, "api_key": "sk-fake"}, model_id="gpt-4o-mini"
    )
    for scenario in SCENARIOS:
        agent = Agent(
            model=model,
            tools=[search],
            system_prompt=SYSTEM,
            name="knowledge_agent",
            callback_handler=None,
            trace_attributes={"session.id": f"session-{scenario.name}"},
        )
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            response = str(agent(turn.question)).strip()
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    conventions = f"OTEL_SEMCONV_STABILITY_OPT_IN={opt_in}" if opt_in else "default conventions"
    recorder.write(
        framework=version("strands-agents"),
        instrumentation=f"strands native tracing ({version('strands-agents')}), {conventions}",
        layout=layout,
        notes=notes,
    )
