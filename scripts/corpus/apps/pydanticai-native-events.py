"""PydanticAI with its native OpenTelemetry instrumentation, data format version 1 (messages as GenAI events).

Version 1 follows the older, event-based GenAI conventions: each message is an event
(`gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`,
`gen_ai.tool.message`, `gen_ai.choice`). With `event_mode='attributes'` (its default) PydanticAI
writes those events as one JSON list in the `events` attribute of each model-request span, and
the agent-run span carries `all_messages_events`; `event_mode='logs'` would send them as OTel log
records instead, outside the trace. PydanticAI 2.x no longer has version 1 (its versions 2 to 6 all
keep messages in `gen_ai.input.messages` / `gen_ai.output.messages` attributes), so this stack is
pinned to the last 1.x release.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _pydanticai import run
from recording import version

if __name__ == "__main__":
    run(
        "pydanticai-native-events",
        Path(sys.argv[1]),
        {"version": 1, "event_mode": "attributes"},
        framework=version("pydantic-ai-slim"),
        instrumentation="pydantic-ai native (InstrumentationSettings version=1, event_mode='attributes')",
        layout="genai events as a JSON list in the 'events' span attribute",
        notes="PydanticAI 1.x (2.x dropped instrumentation version 1); Agent + OpenAIChatModel, a plain "
        "tool returning the documents as a JSON list; conversation = the next run given the previous "
        "run's message history, each turn its own trace, earlier turns re-sent, one gen_ai.conversation.id",
    )
