"""Google ADK `LlmAgent` under ADK's native tracing in its legacy telemetry schema (1).

ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 pins the format ADK 1.x emitted by default (supported until
at least 2027-03-31): `invocation`, `invoke_agent`, `call_llm` spans with the whole model
request and response as JSON in `gcp.vertex.agent.llm_request` / `llm_response`, and
`execute_tool` spans with `gcp.vertex.agent.tool_call_args` / `tool_response`; content is on
by default in this schema (ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS). Same app as google-adk.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import os
import sys
from pathlib import Path

from _google_adk import run
from recording import version


def instrument(provider):  # type: ignore[no-untyped-def]
    from opentelemetry import trace

    os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
    trace.set_tracer_provider(provider)


if __name__ == "__main__":
    run(
        "google-adk-schema1",
        Path(sys.argv[1]),
        instrument,
        framework=version("google-adk", "litellm"),
        instrumentation="google-adk native OTel tracing, legacy schema 1 "
        "(ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1)",
        layout="ADK legacy attributes (gcp.vertex.agent.*)",
        notes="same app as google-adk; call_llm spans carry the model request and response as JSON "
        "(gcp.vertex.agent.llm_request / llm_response, google-genai Content objects: parts with text, "
        "function_call, function_response), execute_tool spans the tool args and response; "
        "conversation = one ADK session, gcp.vertex.agent.session_id on call_llm spans",
    )
