"""LlamaIndex ReActAgent (workflow agent, streaming text) with a RetrieverTool, OpenInference.

The model writes ReAct text (Thought / Action / Action Input, then Thought / Answer); the search
results come back as `Observation:` steps in the next prompt.
Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

import sys
from pathlib import Path

from _llamaindex import run
from scenarios import ScenarioPolicy


def build(llm, tool):  # type: ignore[no-untyped-def]
    from llama_index.core.agent.workflow import ReActAgent

    return ReActAgent(tools=[tool], llm=llm)


if __name__ == "__main__":
    run(
        "llamaindex-reactagent",
        Path(sys.argv[1]),
        ScenarioPolicy(react=True),
        build,
        notes="ReAct text protocol: observations are fed back as text messages, the answer follows "
        "'Answer:' in the last model reply; one search per step, so two-parallel runs sequentially",
    )
