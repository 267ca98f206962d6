"""A hand-built LangGraph StateGraph in the "agentic RAG" tutorial shape, OpenInference instrumentor.

    START -> agent --(tool calls)--> tools (ToolNode) -> agent --(no tool calls)--> generate -> END

The agent node is the model with the search tool bound; once it has searched it says only
"I have enough information." (a planning call, never the answer). The generate node is a plain
model call without tools: the retrieved documents of the turn are pasted into its SYSTEM prompt,
followed by the conversation (user questions and earlier answers), and it writes the answer.
A conversation is one thread_id on an InMemorySaver; each turn is one invocation (one trace).

Run through scripts/corpus/record.sh: app.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fake_llm import Call, FakeLLM, Reply
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, ScenarioPolicy, Turn, search

STACK = "langgraph-stategraph-generate"
DONE = "I have enough information."
AGENT_PROMPT = "Decide which searches of the knowledge base answer the question. Do not answer it yourself."
GENERATE_PROMPT = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
    "context to answer the question. Keep the answer short.\n\nContext:\n{context}"
)


class PlanThenGenerate(ScenarioPolicy):
    """With tools bound: search, then say DONE. Without tools (the generate node): answer."""

    def __call__(self, call: Call) -> Reply:
        if not call.tools:
            turn, _ = self.current(call)
            return Reply(text=turn.answer)
        return super().__call__(call)

    def answer_reply(self, call: Call, turn: Turn) -> Reply:
        return Reply(text=DONE)


def main(out_dir: Path) -> None:
    offline_env()
    recorder = Recorder(STACK, out_dir)
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=recorder.provider)

    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, SystemMessage
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import create_retriever_tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class KnowledgeBase(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content=d) for d in search(query)]

    server = FakeLLM(PlanThenGenerate()).start()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-fake", temperature=0)
    retriever_tool = create_retriever_tool(KnowledgeBase(), SEARCH_TOOL, SEARCH_DESCRIPTION)

    def agent(state: MessagesState) -> dict[str, Any]:
        reply = model.bind_tools([retriever_tool]).invoke([SystemMessage(AGENT_PROMPT), *state["messages"]])
        return {"messages": [reply]}

    def generate(state: MessagesState) -> dict[str, Any]:
        messages = state["messages"]
        last_question = max(i for i, m in enumerate(messages) if m.type == "human")
        context = "\n\n".join(m.content for m in messages[last_question:] if m.type == "tool")
        conversation = [
            m for m in messages
            if m.type == "human" or (m.type == "ai" and not m.tool_calls and m.content != DONE)
        ]  # fmt: skip
        reply = model.invoke([SystemMessage(GENERATE_PROMPT.format(context=context)), *conversation])
        return {"messages": [AIMessage(reply.content)]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([retriever_tool]))
    graph.add_node("generate", generate)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "generate"})
    graph.add_edge("tools", "agent")
    graph.add_edge("generate", END)
    app = graph.compile(checkpointer=InMemorySaver())

    for scenario in SCENARIOS:
        config = {"configurable": {"thread_id": f"session-{scenario.name}"}}
        earlier: list[list[str]] = []
        for number, turn in enumerate(scenario.turns):
            mark = server.mark()
            out = app.invoke({"messages": [{"role": "user", "content": turn.question}]}, config)
            response = out["messages"][-1].content
            recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
            earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(
        framework=version("langgraph", "langchain-core", "langchain-openai"),
        instrumentation=version("openinference-instrumentation-langchain"),
        layout="openinference attributes",
        notes=f"planning agent node (tools bound) ends with {DONE!r}; a separate generate node (no tools) "
        "gets the turn's retrieved documents in its SYSTEM prompt and writes the answer",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
