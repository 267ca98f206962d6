"""AutoGen AgentChat `AssistantAgent` with a search tool, OpenInference autogen-agentchat instrumentor.

An `OpenAIChatCompletionClient` on the fake server (`model_info` given, as for any non-OpenAI
endpoint), a plain async function as the search tool (its documents joined by blank lines),
`max_tool_iterations=3` so the agent may search twice in a row, `reflect_on_tool_use=True` so
the answer is a model call (the default would return the tool result itself as the answer).
A conversation is the same agent object run twice: it keeps its own model context, each `run`
is its own trace. AutoGen has no session id.

AutoGen's native tracing (`invoke_agent`, `execute_tool` GenAI spans on the global tracer
provider) carries names only, no messages nor tool arguments or results, so the recording sets
the global provider too (its spans sit in the same traces) but the content comes from the
OpenInference instrumentor, which traces the agent, the tool executions and the model client.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from pathlib import Path

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search_text

STACK = "autogen-agentchat"
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


async def run(recorder: Recorder) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelFamily
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    async def search(query: str) -> str:
        return search_text(query)

    server = FakeLLM(ScenarioPolicy()).start()
    client = OpenAIChatCompletionClient(
        model="gpt-4o-mini",
        base_url=server.base_url,
        api_key="sk-fake",
        model_info={
            "vision": False, "function_calling": True, "json_output": False,
            "family": ModelFamily.UNKNOWN, "structured_output": False, "multiple_system_messages": True,
        },
    )  # fmt: skip
    tool = FunctionTool(search, description=SEARCH_DESCRIPTION, name=SEARCH_TOOL)
    for scenario in SCENARIOS:
        agent = AssistantAgent(
            "assistant", model_client=client, tools=[tool], system_message=SYSTEM,
            reflect_on_tool_use=True, max_tool_iterations=3,
        )  # fmt: skip
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            result = await agent.run(task=turn.question)
            response = result.messages[-1].to_text()
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        # The instrumentor's agent span ends when its stream generator is closed, which the
        # event loop does on its next turns: let it, so each scenario's trace is in its batch.
        await asyncio.sleep(0.1)
        recorder.flush()
    await client.close()
    server.stop()


def main(out_dir: Path) -> None:
    offline_env()
    # The client maps "gpt-4o-mini" to a dated name and warns that the server's model differs.
    warnings.filterwarnings("ignore", message="Resolved model mismatch")
    recorder = Recorder(STACK, out_dir)
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor
    from opentelemetry import trace

    trace.set_tracer_provider(recorder.provider)
    AutogenAgentChatInstrumentor().instrument(tracer_provider=recorder.provider)
    asyncio.run(run(recorder))
    recorder.write(
        framework=version("autogen-agentchat", "autogen-core", "autogen-ext"),
        instrumentation=version("openinference-instrumentation-autogen-agentchat")
        + ", autogen native GenAI spans",
        layout="openinference attributes, plus autogen's native GenAI spans without content",
        notes="AssistantAgent, reflect_on_tool_use=True, max_tool_iterations=3; the tool result is the "
        "documents joined by blank lines; parallel tool calls run in one iteration; conversation = the "
        "same agent run twice (its own model context), each run its own trace, no session id",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
