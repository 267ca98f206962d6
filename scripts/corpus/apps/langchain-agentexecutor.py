"""Classic LangChain AgentExecutor (langchain-classic) with `create_tool_calling_agent`, OpenInference.

A ChatOpenAI on the fake server, a retriever tool, the usual prompt (system, chat_history,
human input, agent_scratchpad). A conversation is `RunnableWithMessageHistory` over an
in-memory history keyed by session_id (the classic way; only the user and final assistant
messages are kept, not the tool steps); the session id also goes in the run metadata, where
OpenInference reads it. Each turn is one invoke (one trace).

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, search

STACK = "langchain-agentexecutor"
SYSTEM = "You answer questions from the knowledge base. Use the search tool, then answer briefly."


def main(out_dir: Path) -> None:
    offline_env()
    recorder = Recorder(STACK, out_dir)
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=recorder.provider)

    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.history import RunnableWithMessageHistory
    from langchain_core.tools import create_retriever_tool
    from langchain_openai import ChatOpenAI

    class KnowledgeBase(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content=d) for d in search(query)]

    server = FakeLLM(ScenarioPolicy()).start()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-fake", temperature=0)
    tool = create_retriever_tool(KnowledgeBase(), SEARCH_TOOL, SEARCH_DESCRIPTION)
    prompt = ChatPromptTemplate.from_messages([
        ("system", SYSTEM),
        MessagesPlaceholder("chat_history", optional=True),
        ("human", "{input}"),
        MessagesPlaceholder("agent_scratchpad"),
    ])  # fmt: skip
    executor = AgentExecutor(agent=create_tool_calling_agent(model, [tool], prompt), tools=[tool])
    histories: dict[str, InMemoryChatMessageHistory] = {}
    chat = RunnableWithMessageHistory(
        executor,
        lambda session_id: histories.setdefault(session_id, InMemoryChatMessageHistory()),
        input_messages_key="input",
        history_messages_key="chat_history",
    )

    for scenario in SCENARIOS:
        session = f"session-{scenario.name}"
        config = {"configurable": {"session_id": session}, "metadata": {"session_id": session}}
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            out = chat.invoke({"input": turn.question}, config)
            response = out["output"]
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(
        framework=version("langchain-classic", "langchain-core", "langchain-openai"),
        instrumentation=version("openinference-instrumentation-langchain"),
        layout="openinference attributes",
        notes="AgentExecutor + create_tool_calling_agent; tool results in the scratchpad as tool messages; "
        "conversation through RunnableWithMessageHistory (session_id), which keeps only user/assistant text",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
