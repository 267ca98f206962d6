"""PydanticAI with its native OpenTelemetry instrumentation, default data format (messages as attributes).

`InstrumentationSettings()` at its default version: `gen_ai.input.messages`,
`gen_ai.output.messages` and `gen_ai.system_instructions` on the model-request spans,
`pydantic_ai.all_messages` and `final_result` on the agent-run span.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _pydanticai import run
from recording import version

if __name__ == "__main__":
    from pydantic_ai.models.instrumented import InstrumentationSettings

    run(
        "pydanticai-native-attributes",
        Path(sys.argv[1]),
        {},
        framework=version("pydantic-ai-slim"),
        instrumentation="pydantic-ai native (InstrumentationSettings "
        f"version={InstrumentationSettings().version})",
        layout="genai attributes (gen_ai.input.messages / gen_ai.output.messages)",
        notes="Agent + OpenAIChatModel, a plain tool returning the documents as a JSON list; "
        "conversation = the next run given the previous run's Conversation, each turn its own trace, "
        "earlier turns re-sent, one gen_ai.conversation.id",
    )
