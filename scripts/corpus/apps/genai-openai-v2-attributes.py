"""A hand-written agent loop on the raw openai client, opentelemetry-instrumentation-openai-v2 on the
latest experimental GenAI conventions (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)
with content captured on the spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only):
gen_ai.input.messages / gen_ai.output.messages / gen_ai.system_instructions ATTRIBUTES. The
model calls stream (SSE with tool-call deltas).

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

import os
import sys
from pathlib import Path

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"

from _genai_openai_v2 import run

if __name__ == "__main__":
    run(
        "genai-openai-v2-attributes",
        Path(sys.argv[1]),
        stream=True,
        agent_messages=True,
        logs=False,
        layout="genai attributes (latest experimental semconv: "
        "gen_ai.input.messages / gen_ai.output.messages)",
        notes="streamed chat completions; the app's invoke_agent span also carries the turn's "
        "gen_ai.input.messages / gen_ai.output.messages, its execute_tool spans gen_ai.tool.call.arguments "
        "and gen_ai.tool.call.result; tool results go back as role: tool messages; the conversation is "
        "the app's own message list (gen_ai.conversation.id on invoke_agent)",
    )
