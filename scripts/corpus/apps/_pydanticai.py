"""The PydanticAI app shared by the two native-instrumentation stacks.

An `Agent` on an `OpenAIChatModel` whose `OpenAIProvider` points at the fake server, one plain
search tool returning the documents as a list, PydanticAI's own OpenTelemetry instrumentation
(`Agent.instrument_all(InstrumentationSettings(...))`, the way `logfire.instrument_pydantic_ai`
turns it on). Parallel tool calls: PydanticAI runs the calls of one model reply concurrently.
A conversation: the second turn's run is given the first run's history (`conversation=` where the
version has a `Conversation` object, else `message_history=`), so each turn is its own agent-run
trace and the model is sent the earlier turns again; both carry one `gen_ai.conversation.id`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search

INSTRUCTIONS = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def run(stack: str, out_dir: Path, settings: dict[str, Any], **write: str) -> None:
    offline_env()
    recorder = Recorder(stack, out_dir)

    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    Agent.instrument_all(InstrumentationSettings(tracer_provider=recorder.provider, **settings))

    def knowledge_base(query: str) -> list[str]:
        return search(query)

    server = FakeLLM(ScenarioPolicy()).start()
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-fake")
    )
    tool = Tool(knowledge_base, name=SEARCH_TOOL, description=SEARCH_DESCRIPTION)
    agent = Agent(model, instructions=INSTRUCTIONS, tools=[tool], name="knowledge_agent")
    for scenario in SCENARIOS:
        earlier: list[list[str]] = []
        previous: Any = None
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            if previous is None:
                result = agent.run_sync(turn.question)
            elif hasattr(previous, "conversation"):
                result = agent.run_sync(turn.question, conversation=previous.conversation)
            else:
                result = agent.run_sync(turn.question, message_history=previous.all_messages())
            response = result.output
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
            previous = result
        recorder.flush()
    server.stop()
    recorder.write(**write)
