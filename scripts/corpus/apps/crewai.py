"""A CrewAI crew (one agent, one task, a search tool) under the OpenInference CrewAI instrumentor.

The agent's `LLM("openai/gpt-4o-mini", base_url=fake)`: CrewAI 1.x routes the `openai/` prefix
to its native OpenAI provider (the `openai` SDK, not litellm), which calls tools natively
(function calling, parallel calls allowed). The tool is `@tool("search")` returning the
documents joined by blank lines. Tracing as the instrumentor's docs pair it: the
CrewAIInstrumentor (crew kickoff, task, tool spans) and, for the model calls, the OpenInference
OpenAI instrumentor on the same provider.

A crew has no conversation object: the task description takes the earlier turns as a kickoff
input (`{history}`), the usual CrewAI way; each kickoff is its own trace; no session id.
CrewAI's own telemetry and tracing are turned off by its environment switches.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# This file is named after the stack: its directory must not shadow the crewai package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from fake_llm import Call, FakeLLM, Message  # noqa: E402
from recording import Recorder, offline_env, version  # noqa: E402
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, Turn, search_text  # noqa: E402

STACK = "crewai"
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


def main(out_dir: Path) -> None:
    offline_env()
    # CrewAI's own telemetry and trace upload (nothing may leave the machine); not OTEL_SDK_DISABLED,
    # which would switch off the recording's SDK too.
    os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
    os.environ["CREWAI_DISABLE_TRACKING"] = "true"
    os.environ["CREWAI_TRACING_ENABLED"] = "false"
    recorder = Recorder(STACK, out_dir)
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=recorder.provider)
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool(SEARCH_TOOL)
    def search(query: str) -> str:
        """Search the knowledge base for documents about a topic."""
        return search_text(query)

    assert search.description.endswith(SEARCH_DESCRIPTION) or SEARCH_DESCRIPTION in search.description
    server = FakeLLM(LatestQuestionPolicy()).start()
    llm = LLM(model="openai/gpt-4o-mini", base_url=server.base_url, api_key="sk-fake", temperature=0)
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
    recorder.write(
        framework=version("crewai", "openai"),
        instrumentation=version(
            "openinference-instrumentation-crewai", "openinference-instrumentation-openai"
        ),
        layout="openinference attributes",
        notes="Crew with one agent and one task; LLM('openai/gpt-4o-mini', base_url=fake) goes through "
        "CrewAI's native OpenAI provider (not litellm) with native tool calls; @tool search returns the "
        "documents joined by blank lines; model calls traced by the OpenInference OpenAI instrumentor; "
        "conversation = earlier turns pasted into the task description (a kickoff input), each kickoff "
        "its own trace, no session id; the crew is reused across kickoffs, so the kickoff span's "
        "crew_tasks attribute shows the previous kickoff's interpolated task description",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
