"""LlamaIndex FunctionAgent (workflow agent, streaming) with a RetrieverTool, OpenInference.

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

import sys
from pathlib import Path

from _llamaindex import run
from scenarios import ScenarioPolicy


def build(llm, tool):  # type: ignore[no-untyped-def]
    from llama_index.core.agent.workflow import FunctionAgent

    return FunctionAgent(tools=[tool], llm=llm, system_prompt="Answer from the knowledge base; search first.")


if __name__ == "__main__":
    run(
        "llamaindex-functionagent",
        Path(sys.argv[1]),
        ScenarioPolicy(),
        build,
        notes="FunctionAgent streams (SSE with tool-call deltas); conversation = one Context across runs",
    )
