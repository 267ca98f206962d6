"""Haystack `Agent` in a `Pipeline` under Haystack's own OpenTelemetry tracer, content tracing on.

Haystack 3.x moved its OpenTelemetry tracer out of the core into the `opentelemetry-haystack`
integration: `tracing.enable_tracing(OpenTelemetryTracer(...))`, and
HAYSTACK_CONTENT_TRACING_ENABLED=true (read when haystack is imported) for the inputs and
outputs. Same app as haystack-agent (_haystack_agent.py).

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import os
import sys
from pathlib import Path

from _haystack_agent import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    os.environ["HAYSTACK_CONTENT_TRACING_ENABLED"] = "true"
    from haystack import tracing
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

    tracing.enable_tracing(OpenTelemetryTracer(provider.get_tracer("ragpulse-corpus")))


if __name__ == "__main__":
    run(
        "haystack-agent-native",
        Path(sys.argv[1]),
        instrument,
        framework=version("haystack-ai"),
        instrumentation=version("opentelemetry-haystack") + " (Haystack's tracer), content tracing on",
        layout="haystack native tags",
        notes="same app as haystack-agent; spans haystack.pipeline.run, haystack.component.run, "
        "haystack.agent.run / step / step.llm with haystack.* tags; inputs and outputs are JSON "
        "of the ChatMessages, except haystack.agent.step.llm.input, a Python repr (ChatMessage objects "
        "inside a dict); tool spans haystack.agent.step.tool carry the tool input and output",
    )
