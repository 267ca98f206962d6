"""A CrewAI crew (one agent, one task, a search tool) under the OpenInference CrewAI instrumentor.

CrewAI's default route for `openai/gpt-4o-mini`: its native OpenAI provider (the `openai` SDK,
not litellm). Tracing as the instrumentor's docs pair it: the CrewAIInstrumentor (crew kickoff,
task, tool spans) and, for the model calls, the OpenInference OpenAI instrumentor on the same
provider. The app is _crewai.py.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named after the stack: its directory must not shadow the crewai package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: for _crewai

from _crewai import run  # noqa: E402
from recording import version  # noqa: E402


def instrument(provider):  # type: ignore[no-untyped-def]
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(
        "crewai",
        Path(sys.argv[1]),
        instrument,
        is_litellm=False,
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
