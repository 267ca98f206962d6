"""AG2 (the AutoGen fork, 1.x `ag2` package) `Agent` with a search tool, AG2's TelemetryMiddleware.

An `Agent` with `OpenAIConfig(base_url=fake)` (Chat Completions), a plain function `search` as
its tool (the documents joined by blank lines), and AG2's own OpenTelemetry middleware
(`TelemetryMiddleware`, GenAI semconv, content captured by default) on the recording provider.
A conversation is `reply.ask(...)` on the first turn's reply (the reply carries the history);
each `ask` is its own trace; AG2 puts no session id on the spans.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

# This file is named after the stack: its directory must not shadow the ag2 package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from fake_llm import FakeLLM  # noqa: E402
from recording import Recorder, offline_env, version  # noqa: E402
from scenarios import SCENARIOS, ScenarioPolicy, search_text  # noqa: E402

STACK = "ag2"
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def search(query: str) -> str:
    """Search the knowledge base for documents about a topic."""
    return search_text(query)


async def run(recorder: Recorder) -> None:
    from ag2 import Agent
    from ag2.config import OpenAIConfig
    from ag2.middleware.builtin.telemetry import TelemetryMiddleware

    server = FakeLLM(ScenarioPolicy()).start()
    config = OpenAIConfig(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-fake")
    telemetry = TelemetryMiddleware(
        tracer_provider=recorder.provider,
        agent_name="assistant",
        provider_name="openai",
        model_name="gpt-4o-mini",
    )
    agent = Agent("assistant", SYSTEM, config=config, tools=[search], middleware=[telemetry])
    for scenario in SCENARIOS:
        earlier: list[list[str]] = []
        reply = None
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            reply = await (agent.ask(turn.question) if reply is None else reply.ask(turn.question))
            response = reply.body or ""
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()


def main(out_dir: Path) -> None:
    offline_env()
    recorder = Recorder(STACK, out_dir)
    asyncio.run(run(recorder))
    recorder.write(
        framework=version("ag2", "openai"),
        instrumentation="ag2 TelemetryMiddleware (native, GenAI semconv, capture_content default on)",
        layout="GenAI attributes (native AG2)",
        notes="ag2 1.x Agent with OpenAIConfig(base_url=fake) and a function tool returning the documents "
        "joined by blank lines; conversation = reply.ask() on the previous reply, each ask its own trace, "
        "no session id",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
