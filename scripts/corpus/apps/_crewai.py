"""The CrewAI app shared by the crewai stacks: one agent, one task, a search tool.

The agent's `LLM("openai/gpt-4o-mini", base_url=fake)`: CrewAI 1.x routes the `openai/` prefix
to its native OpenAI provider (the `openai` SDK); `is_litellm=True` sends it through litellm
instead. Either way the model calls tools natively (function calling, parallel calls allowed).
The tool is `@tool("search")` returning the documents joined by blank lines.

A crew has no conversation object: the task description takes the earlier turns as a kickoff
input (`{history}`), the usual CrewAI way; each kickoff is its own trace; no session id.
CrewAI's own telemetry and tracing are turned off by its environment switches.

The importing app must drop its own directory from sys.path first: apps/crewai.py would shadow
the crewai package.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_llm import Call, FakeLLM, Message
from recording import Recorder, offline_env
from scenarios import SCENARIOS, SEARCH_TOOL, ScenarioPolicy, Turn, search_text

TASK = (
    "Answer the user's question from the knowledge base: search it with the search tool, then "
    "answer briefly.\n{history}\nQuestion: {question}"
)


class LatestQuestionPolicy(ScenarioPolicy):
    """The scenario policy, reading the question that comes LAST in a message: the task text
    holds the earlier turns' questions before the current one."""

    def current(self, call: Call) -> tuple[Turn, list[Message]]:
        for index in range(len(call.messages) - 1, -1, -1):
            message = call.messages[index]
            if message.role in ("system", "tool"):
                continue
            found = [(message.text.rfind(q), t) for q, t in self.turns.items() if q in message.text]
            if found:
                return max(found, key=lambda pair: pair[0])[1], list(call.messages[index + 1 :])
        return super().current(call)


def run(stack: str, out_dir: Path, instrument: Callable[[Any], None], is_litellm: bool, **write: str) -> None:
    offline_env()
    # CrewAI's own telemetry and trace upload (nothing may leave the machine); not OTEL_SDK_DISABLED,
    # which would switch off the recording's SDK too.
    os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
    os.environ["CREWAI_DISABLE_TRACKING"] = "true"
    os.environ["CREWAI_TRACING_ENABLED"] = "false"
    # litellm would fetch its model price list from the network at import.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    recorder = Recorder(stack, out_dir)
    instrument(recorder.provider)

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool(SEARCH_TOOL)
    def search(query: str) -> str:
        """Search the knowledge base for documents about a topic."""
        return search_text(query)

    server = FakeLLM(LatestQuestionPolicy()).start()
    llm = LLM(
        model="openai/gpt-4o-mini",
        base_url=server.base_url,
        api_key="sk-fake",
        temperature=0,
        is_litellm=is_litellm,
    )
    agent = Agent(
        role="Knowledge base assistant",
        goal="Answer questions from the knowledge base",
        backstory="You look facts up in the knowledge base before you answer.",
        llm=llm, tools=[search], allow_delegation=False,
    )  # fmt: skip
    task = Task(description=TASK, expected_output="A short answer to the question.", agent=agent)
    crew = Crew(agents=[agent], tasks=[task])
    for scenario in SCENARIOS:
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            history = "".join(f"\n{role.title()}: {text}" for role, text in earlier)
            history = f"\nThe conversation so far:{history}\n" if history else ""
            mark = server.mark()
            result = crew.kickoff(inputs={"question": turn.question, "history": history})
            response = result.raw
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(**write)
