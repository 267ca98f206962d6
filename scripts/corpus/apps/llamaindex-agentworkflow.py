"""LlamaIndex AgentWorkflow: a root agent hands off to a research agent that searches and answers.

The root FunctionAgent has no tool but the workflow's `handoff`; the research FunctionAgent has
the RetrieverTool. OpenInference instrumentor. Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

import sys
from pathlib import Path

from _llamaindex import run
from fake_llm import Call, Reply, ToolCall
from scenarios import SEARCH_TOOL, ScenarioPolicy

HANDOFF = "handoff"


class HandOffFirst(ScenarioPolicy):
    """The root agent (offered `handoff` but not the search tool) hands off once per turn."""

    def __call__(self, call: Call) -> Reply:
        if HANDOFF in call.tools and SEARCH_TOOL not in call.tools:
            _, after = self.current(call)
            if not any(c.name == HANDOFF for m in after for c in m.tool_calls):
                params = call.tools[HANDOFF]
                args = {
                    p: "research" if "agent" in p else "The question needs a knowledge base search."
                    for p in params
                }
                return Reply(tool_calls=(ToolCall(HANDOFF, args),))
        return super().__call__(call)


def build(llm, tool):  # type: ignore[no-untyped-def]
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent

    root = FunctionAgent(
        name="root", description="Talks to the user and routes questions.", llm=llm, tools=[],
        system_prompt="You route questions: hand off to the research agent for anything factual.",
        can_handoff_to=["research"],
    )  # fmt: skip
    research = FunctionAgent(
        name="research", description="Searches the knowledge base and answers.", llm=llm, tools=[tool],
        system_prompt="You answer from the knowledge base; search first.",
    )  # fmt: skip
    return AgentWorkflow(agents=[root, research], root_agent="root")


if __name__ == "__main__":
    run(
        "llamaindex-agentworkflow",
        Path(sys.argv[1]),
        HandOffFirst(),
        build,
        notes="multi-agent: the root agent's first call is a handoff tool call (a planning call), the "
        "research agent searches and answers; conversation = one Context across runs",
    )
