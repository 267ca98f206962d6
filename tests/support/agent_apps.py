"""Agent apps on real frameworks under real instrumentors, offline, for the agent tests and
`benchmarks/agent_traces.py`.

Each app runs in its own process (instrumentors patch globally) with a scripted model, records
its spans with the real SDK into memory and hands back the encoded request and, per answer, what
the framework itself gave the answering model call (the tool results in its input, in order).
Scenarios, one trace each: one search; two searches in one turn with the useful passage in the
first, then in the second; a two-turn conversation with a search in each turn. The LangGraph apps
also hold that conversation in one trace (their own `chat session` span around both turns).

Run one app by hand: python -m tests.support.agent_apps langgraph-openinference OUT
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent.otlp.decode import decode_request
from tests.support.repo import ROOT

DOCS = {
    "seine": ["The Seine flows through Paris.", "The Seine reaches the sea at Le Havre."],
    "bridges": ["Paris has 37 bridges across the Seine.", "The Loire is the longest river in France."],
    "tour": ["A boat tour on the Seine costs 15 euros.", "Lyon sits on the Rhone."],
}
QUESTION = "Which river flows through Paris?"
FOLLOW_UP = "And how much does a boat tour on it cost?"
# (turns: [(question, [sub-queries], answer)]); one trace per turn.
SCENARIOS = {
    "one": [(QUESTION, ["seine"], "The Seine.")],
    "useful-first": [(QUESTION, ["seine", "bridges"], "The Seine.")],
    "useful-second": [(QUESTION, ["bridges", "seine"], "The Seine.")],
    "conversation": [(QUESTION, ["seine"], "The Seine."), (FOLLOW_UP, ["tour"], "15 euros.")],
}
# Apps that can also run a conversation inside one trace (the app's own span around both turns,
# as a request handler or a chat session span would be) add it under this name; its answers say
# "one_trace": every earlier search of the conversation is then in the trace.
ONE_TRACE = "conversation-in-one-trace"


def _recorder():  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, provider


def _search_text(query: str) -> str:
    return "\n\n".join(DOCS[query])


# -- LangGraph / LangChain: create_agent with a retriever tool -------------------------------------


def langgraph_openinference() -> dict:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    memory, provider = _recorder()
    LangChainInstrumentor().instrument(tracer_provider=provider)
    return _langgraph(memory, provider)


def langgraph_openllmetry() -> dict:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    memory, provider = _recorder()
    LangchainInstrumentor().instrument(tracer_provider=provider)
    return _langgraph(memory, provider)


def _langgraph(memory: Any, provider: Any) -> dict:
    from langchain.agents import create_agent
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import create_retriever_tool
    from langgraph.checkpoint.memory import InMemorySaver

    given: list[list[str]] = []

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):  # type: ignore[no-untyped-def]
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
            result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            if not result.generations[0].message.tool_calls:
                given.append([m.content for m in messages if m.type == "tool"])
            return result

    answers = []
    tracer = provider.get_tracer("agent-app")
    for name, turns in [*SCENARIOS.items(), (ONE_TRACE, SCENARIOS["conversation"])]:
        script = []
        for turn, (_, queries, answer) in enumerate(turns):
            script += [
                AIMessage(
                    content="",
                    tool_calls=[{"name": "search", "args": {"query": q}, "id": f"{name}-{turn}-{q}"}],
                )
                for q in queries
            ]
            script.append(AIMessage(content=answer))

        class Exact(BaseRetriever):
            def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
                return [Document(page_content=d) for d in DOCS[query]]

        tool = create_retriever_tool(Exact(), "search", "Search the knowledge base.")
        agent = create_agent(Scripted(messages=iter(script)), tools=[tool], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": name}}
        with tracer.start_as_current_span("chat session") if name == ONE_TRACE else nullcontext():
            for question, _, _ in turns:
                out = agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
                response = out["messages"][-1].content
                answers.append({"scenario": name, "question": question, "response": response,
                                "one_trace": name == ONE_TRACE})  # fmt: skip
    for answer, tool_results in zip(answers, given, strict=True):
        answer["given"] = tool_results
    return {"spans": memory.get_finished_spans(), "answers": answers}


# -- LlamaIndex: FunctionAgent and ReActAgent with a RetrieverTool ---------------------------------


def _llamaindex_tool():  # type: ignore[no-untyped-def]
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.core.tools import RetrieverTool

    class Exact(BaseRetriever):
        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            query = query_bundle.query_str.replace("input is", "").strip()
            return [
                NodeWithScore(node=TextNode(text=d, id_=f"{query}-{i}"), score=1.0)
                for i, d in enumerate(DOCS[query])
            ]

    return RetrieverTool.from_defaults(Exact(), name="search", description="Search the knowledge base.")


async def _run(agent: Any, question: str, history: list) -> Any:
    return await agent.run(question, chat_history=list(history))


def llamaindex_function_openinference() -> dict:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms import ChatMessage, MockFunctionCallingLLM
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    memory, provider = _recorder()
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    answers = []
    for name, turns in SCENARIOS.items():
        history: list[ChatMessage] = []
        for turn, (question, queries, answer) in enumerate(turns):
            script = [
                ChatMessage(
                    role="assistant",
                    blocks=[
                        ToolCallBlock(
                            tool_call_id=f"{name}-{turn}-{q}", tool_name="search", tool_kwargs={"input": q}
                        )
                    ],
                )
                for q in queries
            ] + [ChatMessage(role="assistant", content=answer)]
            given: list[list[str]] = []

            def respond(messages, script=script, given=given, **kwargs):  # type: ignore[no-untyped-def]
                reply = script.pop(0)
                if reply.content:
                    given.append([m.content for m in messages if m.role == "tool"])
                return reply

            llm = MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)
            agent = FunctionAgent(tools=[_llamaindex_tool()], llm=llm, streaming=False)
            out = asyncio.run(_run(agent, question, history))
            history += [
                ChatMessage(role="user", content=question),
                ChatMessage(role="assistant", content=answer),
            ]
            answers.append({"scenario": name, "question": question, "response": str(out), "given": given[0]})
    return {"spans": memory.get_finished_spans(), "answers": answers}


def llamaindex_react_openinference() -> dict:
    from llama_index.core.agent.workflow import ReActAgent
    from llama_index.core.llms import ChatMessage, CompletionResponse
    from llama_index.core.llms.mock import MockLLM
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    memory, provider = _recorder()
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    answers = []
    for name, turns in SCENARIOS.items():
        history: list[ChatMessage] = []
        for question, queries, answer in turns:
            script = [
                f'Thought: I need to search.\nAction: search\nAction Input: {{"input": "{q}"}}'
                for q in queries
            ] + [f"Thought: I can answer.\nAnswer: {answer}"]

            class Scripted(MockLLM):
                def complete(self, prompt, formatted=False, script=script, **kwargs):  # type: ignore[no-untyped-def]
                    return CompletionResponse(text=script.pop(0))

            agent = ReActAgent(tools=[_llamaindex_tool()], llm=Scripted(), streaming=False)
            out = asyncio.run(_run(agent, question, history))
            history += [
                ChatMessage(role="user", content=question),
                ChatMessage(role="assistant", content=answer),
            ]
            given = [_search_text(q) for q in queries]  # the observations, in the order of the steps
            answers.append({"scenario": name, "question": question, "response": str(out), "given": given})
    return {"spans": memory.get_finished_spans(), "answers": answers}


# -- OpenAI Agents SDK against a local Responses API ------------------------------------------------


class _ResponsesServer:
    """A real HTTP server on 127.0.0.1 answering POST /v1/responses with scripted outputs."""

    def __init__(self) -> None:
        self.script: list[list[dict]] = []
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                output = owner.script.pop(0)
                data = json.dumps({
                    "id": f"resp_{len(owner.requests)}", "object": "response", "created_at": 0,
                    "status": "completed", "model": body.get("model", "m"), "output": output,
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                              "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"


def openai_agents_openinference() -> dict:
    import agents
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_trace_processors([])  # nothing goes to OpenAI's trace backend
    memory, provider = _recorder()
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    return _openai_agents(memory)


def openai_agents_openllmetry() -> dict:
    import agents
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    agents.set_trace_processors([])  # nothing goes to OpenAI's trace backend
    memory, provider = _recorder()
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    return _openai_agents(memory)


def _openai_agents(memory: Any) -> dict:
    import agents
    from openai import AsyncOpenAI

    server = _ResponsesServer()

    @agents.function_tool
    def search(query: str) -> str:
        """Search the knowledge base."""
        return json.dumps([{"id": f"{query}-{i}", "content": d} for i, d in enumerate(DOCS[query])])

    client = AsyncOpenAI(base_url=server.base_url, api_key="test")
    agent = agents.Agent(name="helper", instructions="Answer from the search tool.", tools=[search],
                         model=agents.OpenAIResponsesModel("gpt-4o", client))  # fmt: skip
    answers = []
    for name, turns in SCENARIOS.items():
        session = agents.SQLiteSession(name)
        for turn, (question, queries, answer) in enumerate(turns):
            for q in queries:
                call = {
                    "type": "function_call", "id": f"fc_{q}", "call_id": f"{name}-{turn}-{q}",
                    "name": "search", "arguments": json.dumps({"query": q}), "status": "completed",
                }  # fmt: skip
                server.script.append([call])
            text = {"type": "output_text", "text": answer, "annotations": []}
            message = {
                "type": "message",
                "id": "msg",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
            server.script.append([message])
            result = asyncio.run(agents.Runner.run(agent, question, session=session))
            request = server.requests[-1]
            given = [
                item["output"] for item in request["input"] if item.get("type") == "function_call_output"
            ]
            answers.append({"scenario": name, "question": question, "response": result.final_output,
                            "given": given})  # fmt: skip
    return {"spans": memory.get_finished_spans(), "answers": answers}


APPS = {
    "langgraph-openinference": langgraph_openinference,
    "llamaindex-function-openinference": llamaindex_function_openinference,
    "llamaindex-react-openinference": llamaindex_react_openinference,
    "openai-agents-openinference": openai_agents_openinference,
    "langgraph-openllmetry": langgraph_openllmetry,
    "openai-agents-openllmetry": openai_agents_openllmetry,
}


def _run_app(name: str, out: Path) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    result = APPS[name]()
    spans = result.pop("spans")
    out.with_suffix(".pb").write_bytes(encode_spans(spans).SerializeToString())
    out.with_suffix(".json").write_text(json.dumps(result))


def expected_chunks(given: list[str], searched: int) -> list[str]:
    """The documents behind the tool results the answering call was given, in that order. The
    last `searched` are this turn's searches, whose spans are in the trace; an earlier turn's
    result is read from the message itself: a JSON list as its documents, a text as one document
    per paragraph (the tools here join their documents with blank lines)."""
    by_text = {_search_text(q): docs for q, docs in DOCS.items()}
    by_json = {
        json.dumps([{"id": f"{q}-{i}", "content": d} for i, d in enumerate(docs)]): docs
        for q, docs in DOCS.items()
    }
    out: list[str] = []
    for n, text in enumerate(given):
        this_turn = n >= len(given) - searched
        paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
        docs = (by_text.get(text.strip()) if this_turn else None) or by_json.get(text) or paragraphs
        out += [d for d in docs if d not in out]
    return out


def expectation(answer: dict) -> tuple[list[str], list[str]]:
    """(the sub-queries, the chunks) an answer's interaction should carry. In a trace of its own,
    its turn's searches; in a conversation inside one trace, every search of the conversation so
    far: each result the call was given is then read as its search's documents and counted."""
    turns = SCENARIOS["conversation" if answer.get("one_trace") else answer["scenario"]]
    turns = turns[: next(n for n, t in enumerate(turns) if t[0] == answer["question"]) + 1]
    if answer.get("one_trace"):
        return [q for t in turns for q in t[1]], expected_chunks(answer["given"], len(answer["given"]))
    return turns[-1][1], expected_chunks(answer["given"], len(turns[-1][1]))


def run_app(app: str, tmp_path: Path) -> tuple[dict, list]:
    env = {**os.environ, "LLAMA_INDEX_CACHE_DIR": str(tmp_path / "llama_index"), "OTEL_SDK_DISABLED": "false",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1",
           "OPENAI_AGENTS_DISABLE_TRACING": "0"}  # fmt: skip
    out = tmp_path / "app"
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.agent_apps", app, str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    expected = json.loads(out.with_suffix(".json").read_text())
    decoded = decode_request(out.with_suffix(".pb").read_bytes(), "protobuf")
    assert decoded.rejected == []
    return expected, decoded.spans


if __name__ == "__main__":
    _run_app(sys.argv[1], Path(sys.argv[2]))
