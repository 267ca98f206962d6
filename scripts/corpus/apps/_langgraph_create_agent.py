"""The LangGraph `create_agent` app (langchain>=1.0) shared by the two instrumentor stacks.

A ChatOpenAI on the fake server, a retriever tool (`create_retriever_tool`) over an exact-match
retriever of the scenario knowledge base, an InMemorySaver checkpointer: a conversation is one
`thread_id`, each turn one `invoke` (one trace), the earlier turns re-sent by the framework.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search

SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def run(stack: str, out_dir: Path, instrument: Callable[[Any], None], **write: str) -> None:
    offline_env()
    recorder = Recorder(stack, out_dir)
    instrument(recorder.provider)

    from langchain.agents import create_agent
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import create_retriever_tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    class KnowledgeBase(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [
                Document(page_content=d, metadata={"source": f"kb-{i}"}) for i, d in enumerate(search(query))
            ]

    server = FakeLLM(ScenarioPolicy()).start()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-fake", temperature=0)
    tool = create_retriever_tool(KnowledgeBase(), SEARCH_TOOL, SEARCH_DESCRIPTION)
    agent = create_agent(model, tools=[tool], system_prompt=SYSTEM, checkpointer=InMemorySaver())
    for scenario in SCENARIOS:
        config = {"configurable": {"thread_id": f"session-{scenario.name}"}}
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            out = agent.invoke({"messages": [{"role": "user", "content": turn.question}]}, config)
            response = out["messages"][-1].content
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(**write)
