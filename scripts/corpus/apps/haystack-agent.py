"""Haystack `Agent` in a `Pipeline` under the OpenInference Haystack instrumentor.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _haystack_agent import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    from openinference.instrumentation.haystack import HaystackInstrumentor

    HaystackInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(
        "haystack-agent",
        Path(sys.argv[1]),
        instrument,
        framework=version("haystack-ai"),
        instrumentation=version("openinference-instrumentation-haystack"),
        layout="openinference attributes",
        notes="Agent component (OpenAIChatGenerator, a search Tool returning the documents joined by "
        "blank lines) as the one component of a Pipeline; conversation = the returned messages sent "
        "back with the next question, each turn its own trace, no session id",
    )
