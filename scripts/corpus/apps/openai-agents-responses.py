"""OpenAI Agents SDK on the fake Responses API, OpenInference openai-agents instrumentor.

The agent has a `function_tool` search returning the documents as a JSON list. A conversation
keeps its state on the server: turn 2 is `Runner.run(..., previous_response_id=<turn 1's last
response>)`, so its model calls are sent neither turn 1 nor, after the first call, their own
earlier items (the SDK chains `previous_response_id` inside the run). `RunConfig.group_id` links
the turns' traces in the SDK; the instrumentor does not map it, so each turn also runs under
OpenInference's `using_session`. The SDK's own trace export to OpenAI is switched off with
`set_trace_processors([])` before the instrumentor adds its processor.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, ScenarioPolicy, search

STACK = "openai-agents-responses"


def main(out_dir: Path) -> None:
    offline_env()
    recorder = Recorder(STACK, out_dir)
    import agents
    from openai import AsyncOpenAI
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_trace_processors([])  # nothing goes to OpenAI's trace backend
    OpenAIAgentsInstrumentor().instrument(tracer_provider=recorder.provider)

    @agents.function_tool(description_override=SEARCH_DESCRIPTION)
    def search_tool(query: str) -> str:
        return json.dumps([{"id": f"{query}-{i}", "content": d} for i, d in enumerate(search(query))])

    search_tool.name = "search"
    server = FakeLLM(ScenarioPolicy()).start()
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-fake")
    agent = agents.Agent(
        name="research assistant", instructions="Answer from the knowledge base; search first.",
        tools=[search_tool], model=agents.OpenAIResponsesModel("gpt-4o-mini", client),
    )  # fmt: skip

    async def play() -> None:
        for scenario in SCENARIOS:
            earlier: list[list[str]] = []
            previous: str | None = None
            config = agents.RunConfig(group_id=f"session-{scenario.name}", workflow_name=scenario.name)
            for number, turn in enumerate(scenario.turns):
                mark = server.mark()
                with using_session(f"session-{scenario.name}"):
                    result = await agents.Runner.run(
                        agent, turn.question, previous_response_id=previous, run_config=config
                    )
                previous = result.last_response_id
                response = str(result.final_output)
                recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
                earlier += [["user", turn.question], ["assistant", response]]
            recorder.flush()

    asyncio.run(play())
    server.stop()
    recorder.write(
        framework=version("openai-agents", "openai"),
        instrumentation=version("openinference-instrumentation-openai-agents"),
        layout="openinference attributes",
        notes="Responses API; turn 2 of the conversation runs with previous_response_id (server-side "
        "state): its calls carry neither turn 1 nor the user's first question. Chunks of a turn are read "
        "from its answering request and the requests of the same turn it chains to",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
