"""Strands Agents with its native tracing opted in to the latest GenAI conventions.

`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`: the messages of a call are JSON
(`gen_ai.input.messages` / `gen_ai.output.messages`, parts with `type` text / tool_call /
tool_call_response) carried by span events named `gen_ai.client.inference.operation.details`,
the system prompt in the `gen_ai.system_instructions` attribute, and tool spans also carry
`gen_ai.tool.call.arguments` / `gen_ai.tool.call.result` attributes. See _strands.py.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _strands import run

if __name__ == "__main__":
    run(
        "strands-latest-conventions",
        Path(sys.argv[1]),
        opt_in="gen_ai_latest_experimental",
        layout="genai latest messages (gen_ai.input.messages / gen_ai.output.messages) inside span events",
        notes="opt-in latest GenAI conventions: gen_ai.client.inference.operation.details events carry the "
        "messages as JSON parts; the model streams; conversation = the same Agent called again, each turn "
        "its own trace, earlier turns re-sent, session.id from trace_attributes",
    )
