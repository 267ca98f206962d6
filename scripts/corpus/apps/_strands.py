"""Strands Agents with its native OpenTelemetry tracing, an OpenAI model provider on the fake server.

Strands' tracer reads the global tracer provider, so the recorder's provider is set as global (what
`StrandsTelemetry()` does with its own). At its default conventions (no
OTEL_SEMCONV_STABILITY_OPT_IN) Strands records messages as span EVENTS, one per message
(`gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`), on
the `invoke_agent`, `execute_event_loop_cycle`, `chat` and `execute_tool` spans. The model streams
(Chat Completions SSE). Parallel tool calls: the default concurrent tool executor runs them together.
A conversation: the same `Agent` object called again (it keeps its messages), each call its own
trace, `session.id` given through the agent's `trace_attributes` (as the Strands docs show).

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, ScenarioPolicy, search_text

STACK = "strands-native"
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def main(out_dir: Path) -> None:
    offline_env()
    recorder = Recorder(STACK, out_dir)

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
    model = OpenAIModel(client_args={"base_url": server.base_url, "api_key": "sk-fake"}, model_id="gpt-4o-mini")
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
    recorder.write(
        framework=version("strands-agents"),
        instrumentation=f"strands native tracing ({version('strands-agents')}), default conventions",
        layout="genai span events (one event per message)",
        notes="messages as span events gen_ai.{system,user,assistant,tool}.message / gen_ai.choice; "
        "the model streams; conversation = the same Agent called again, each turn its own trace, earlier "
        "turns re-sent, session.id from trace_attributes",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
