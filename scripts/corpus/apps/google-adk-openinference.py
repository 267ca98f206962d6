"""Google ADK `LlmAgent` under the OpenInference google-adk instrumentor.

The instrumentor wraps the runner, the agent and the model calls and stands in for ADK's own
tracer (ADK's native spans are not emitted twice). Same app as google-adk (_google_adk.py).
Under ADK's default telemetry schema (2) there is no `call_llm` span and the instrumentor's
model-call hook (`trace_call_llm`) is a no-op: the trace has the invocation, the agent run (its
final response as output) and the tool calls, and NO model-call spans. Recorded as it is.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _google_adk import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    from openinference.instrumentation.google_adk import GoogleADKInstrumentor

    GoogleADKInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(
        "google-adk-openinference",
        Path(sys.argv[1]),
        instrument,
        framework=version("google-adk", "litellm"),
        instrumentation=version("openinference-instrumentation-google-adk"),
        layout="openinference attributes",
        notes="LlmAgent with LiteLlm('openai/gpt-4o-mini', api_base=fake) and a function tool returning the "
        "documents joined by blank lines (ADK wraps it as {'result': ...}); conversation = one ADK session, "
        "each turn its own trace; no LLM spans (ADK schema 2 has no call_llm span for the instrumentor "
        "to hook): the answer is the agent_run/invocation output, the context the tool spans",
    )
