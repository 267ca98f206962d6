"""A hand-written agent loop on the raw openai client, opentelemetry-instrumentation-openai-v2 in its
default layout (semconv 1.30) with content capture on: the messages are GenAI EVENTS
(gen_ai.system.message, gen_ai.user.message, gen_ai.assistant.message, gen_ai.tool.message,
gen_ai.choice). This version emits them as OTLP LOG RECORDS tied to the chat span by trace and
span id, not as span events: they are recorded to otlp-logs/ beside the spans in otlp/.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

import os
import sys
from pathlib import Path

os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)

from _genai_openai_v2 import run

if __name__ == "__main__":
    run(
        "genai-openai-v2-events",
        Path(sys.argv[1]),
        stream=False,
        agent_messages=False,
        logs=True,
        layout="genai events (semconv 1.30) as OTLP log records; spans carry no message content",
        notes="messages and choices are log records in otlp-logs/ (ExportLogsServiceRequest), linked to "
        "the chat spans by trace/span id; the chat spans themselves hold no content. The app's own "
        "invoke_agent span carries no messages; its execute_tool spans carry gen_ai.tool.call.arguments "
        "and gen_ai.tool.call.result; tool results go back as role: tool messages",
    )
