"""What the LlamaIndex stacks share: the OpenAI-like LLM on the fake server, the retriever tool,
the OpenInference instrumentor, and the scenario loop.

A conversation is one `Memory` (with its session_id) and one workflow `Context` passed to every
`run` (the Context alone does not carry the memory from one run to the next in this version),
each turn its own trace; the span's session id is set with OpenInference's `using_session`.
Agents stream by default (FunctionAgent and ReActAgent `streaming=True`), so the fake server
answers over SSE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_llm import FakeLLM, Policy
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_DESCRIPTION, SEARCH_TOOL, search


def llm(server: FakeLLM) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(
        model="gpt-4o-mini", api_base=server.base_url, api_key="sk-fake", is_chat_model=True,
        is_function_calling_model=True, context_window=128000, temperature=0,
    )  # fmt: skip


def search_tool() -> Any:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.core.tools import RetrieverTool

    class KnowledgeBase(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            # RetrieverTool hands its kwargs over as text: "input is <query>".
            query = query_bundle.query_str.strip().removeprefix("input is").strip()
            docs = search(query)
            return [
                NodeWithScore(node=TextNode(text=d, id_=f"{query}-{i}"), score=1.0 - i / 10)
                for i, d in enumerate(docs)
            ]

    return RetrieverTool.from_defaults(KnowledgeBase(), name=SEARCH_TOOL, description=SEARCH_DESCRIPTION)


def run(stack: str, out_dir: Path, policy: Policy, build: Callable[[Any, Any], Any], notes: str) -> None:
    """`build(llm, tool)` returns the agent or workflow; each turn is `await it.run(q, ctx=ctx)`."""
    offline_env()
    recorder = Recorder(stack, out_dir)
    from openinference.instrumentation import using_session
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=recorder.provider)
    from llama_index.core.memory import Memory
    from llama_index.core.workflow import Context

    server = FakeLLM(policy).start()
    agent = build(llm(server), search_tool())

    async def play() -> None:
        for scenario in SCENARIOS:
            ctx = Context(agent)
            memory = Memory.from_defaults(session_id=f"session-{scenario.name}", token_limit=40000)
            earlier: list[list[str]] = []
            for number, turn in enumerate(scenario.turns):
                mark = server.mark()
                with using_session(f"session-{scenario.name}"):
                    result = await agent.run(user_msg=turn.question, ctx=ctx, memory=memory)
                response = str(result.response.content)
                recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
                earlier += [["user", turn.question], ["assistant", response]]
            recorder.flush()

    asyncio.run(play())
    server.stop()
    recorder.write(
        framework=version("llama-index-core", "llama-index-llms-openai-like"),
        instrumentation=version("openinference-instrumentation-llama-index"),
        layout="openinference attributes",
        notes=notes,
    )
