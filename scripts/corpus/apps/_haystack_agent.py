"""The Haystack `Agent` app shared by the haystack stacks (OpenInference, and Haystack's own tracer).

An `OpenAIChatGenerator` on the fake server, a search `Tool` from a plain function (its
documents joined by blank lines), the `Agent` component as the one component of a `Pipeline`
(the OpenInference instrumentor traces pipelines and the components they run). A conversation
is the agent's returned messages passed back in with the next user message (Haystack keeps no
conversation itself); each pipeline run is its own trace; Haystack has no session id.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search_text

SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def run(stack: str, out_dir: Path, instrument: Callable[[Any], None], **write: str) -> None:
    offline_env()
    recorder = Recorder(stack, out_dir)
    instrument(recorder.provider)

    from haystack import Pipeline
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.tools import create_tool_from_function
    from haystack.utils import Secret

    def search(query: str) -> str:
        """Search the knowledge base for documents about a topic.

        :param query: what to search for
        """
        return search_text(query)

    server = FakeLLM(ScenarioPolicy()).start()
    generator = OpenAIChatGenerator(
        api_key=Secret.from_token("sk-fake"), model="gpt-4o-mini", api_base_url=server.base_url
    )
    tool = create_tool_from_function(search, name=SEARCH_TOOL, description=SEARCH_DESCRIPTION)
    pipeline = Pipeline()
    pipeline.add_component("agent", Agent(chat_generator=generator, tools=[tool], system_prompt=SYSTEM))
    for scenario in SCENARIOS:
        history: list[Any] = []
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            messages = [*history, ChatMessage.from_user(turn.question)]
            out = pipeline.run({"agent": {"messages": messages}})["agent"]
            response = out["last_message"].text
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
            # The agent returns the whole conversation, its system prompt first: send it back without.
            history = [m for m in out["messages"] if not m.is_from("system")]
        recorder.flush()
    server.stop()
    recorder.write(**write)
