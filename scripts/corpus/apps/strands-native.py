"""Strands Agents with its native OpenTelemetry tracing at its default conventions.

Messages are span EVENTS, one per message (`gen_ai.system.message`, `gen_ai.user.message`,
`gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`), on the `invoke_agent`,
`execute_event_loop_cycle`, `chat` and `execute_tool` spans. See _strands.py.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _strands import run

if __name__ == "__main__":
    run(
        "strands-native",
        Path(sys.argv[1]),
        opt_in="",
        layout="genai span events (one event per message)",
        notes="messages as span events gen_ai.{system,user,assistant,tool}.message / gen_ai.choice; "
        "the model streams; conversation = the same Agent called again, each turn its own trace, earlier "
        "turns re-sent, session.id from trace_attributes",
    )
