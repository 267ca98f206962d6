"""Google ADK `LlmAgent` under ADK's native OpenTelemetry tracing (its default schema, content on spans).

ADK traces on the global tracer provider. Its default telemetry schema (2, GenAI semconv
aligned) records message content only when asked: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
=SPAN_ONLY puts it on the spans (the default NO_CONTENT would leave nothing to judge).

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import os
import sys
from pathlib import Path

from _google_adk import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    from opentelemetry import trace

    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    trace.set_tracer_provider(provider)


if __name__ == "__main__":
    run(
        "google-adk",
        Path(sys.argv[1]),
        instrument,
        framework=version("google-adk", "litellm"),
        instrumentation="google-adk native OTel tracing (schema 2), "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
        layout="GenAI attributes (native ADK)",
        notes="LlmAgent with LiteLlm('openai/gpt-4o-mini', api_base=fake) and a function tool returning the "
        "documents joined by blank lines (ADK wraps it as {'result': ...}); conversation = one ADK session, "
        "each turn its own trace",
    )
