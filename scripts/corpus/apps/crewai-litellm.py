"""The crewai app with its LLM forced through litellm, under the OpenInference CrewAI + LiteLLM
instrumentors (the pairing the CrewAI instrumentor's docs give for litellm-based crews).

`LLM("openai/gpt-4o-mini", base_url=fake, is_litellm=True)`: CrewAI 1.x would otherwise use its
native OpenAI provider (see crewai). The app is _crewai.py.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

# apps/crewai.py must not shadow the crewai package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.append(str(Path(__file__).resolve().parent))  # after site-packages: for _crewai

from _crewai import run  # noqa: E402
from recording import version  # noqa: E402


def instrument(provider):  # type: ignore[no-untyped-def]
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.litellm import LiteLLMInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    LiteLLMInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(
        "crewai-litellm",
        Path(sys.argv[1]),
        instrument,
        is_litellm=True,
        framework=version("crewai", "litellm"),
        instrumentation=version(
            "openinference-instrumentation-crewai", "openinference-instrumentation-litellm"
        ),
        layout="openinference attributes",
        notes="same crew as crewai, its LLM forced through litellm (is_litellm=True); model calls traced by "
        "the OpenInference LiteLLM instrumentor",
    )
