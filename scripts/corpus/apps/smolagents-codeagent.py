"""smolagents `CodeAgent` (the model writes Python calling `search` and `final_answer`), OpenInference.

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import sys
from pathlib import Path

from _smolagents import run

if __name__ == "__main__":
    run(
        "smolagents-codeagent",
        Path(sys.argv[1]),
        code=True,
        notes="the model writes code between <code> tags: search(...) results are printed and reach the next "
        "model call as 'Observation: Execution logs: ...' user text; the answer is the final_answer(...) "
        "argument of the last code block; two-parallel = both searches in one code block (one model call); "
        "conversation = run(reset=False) on the same agent, each turn its own trace, session.id from "
        "openinference using_session",
    )
