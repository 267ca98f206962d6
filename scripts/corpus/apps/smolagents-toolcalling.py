"""smolagents `ToolCallingAgent` (answers through its built-in `final_answer` tool), OpenInference.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _smolagents import run

if __name__ == "__main__":
    run(
        "smolagents-toolcalling",
        Path(sys.argv[1]),
        code=False,
        notes="final answer through the final_answer tool (its argument is the answer); tool calls and their "
        "results go back to the model as text ('Calling tools: [...]' assistant, 'Observation: ...' user), "
        "the results of parallel calls in one message; conversation = run(reset=False) on the same agent, "
        "each turn its own trace, session.id from openinference using_session",
    )
