"""Real RAG frameworks under real instrumentors, offline: their spans go through ragpulse unchanged.

Each app runs in its own process (instrumentors patch their framework globally), records its
spans with the real SDK into memory, encodes them with the real OTLP encoder and hands the bytes
back with what the framework itself returned (the documents it put in the prompt, in order, and
the answer). The test decodes and assembles the bytes and compares. Nothing is downloaded: the
LLMs and embeddings are the frameworks' own fakes, the retrievers are in memory.

Run one app by hand: python -m tests.integration.test_instrumented_frameworks llamaindex-openinference OUT
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.otlp.assemble import NOT_RAG
from agent.otlp.decode import decode_request
from tests.support.otlp import assembler
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

QUESTION = "Which river flows through Paris?"
PASSAGES = [
    "The Seine flows through the heart of Paris before reaching the English Channel.",
    "Lyon sits where the Rhone and the Saone rivers meet.",
    "The Loire is the longest river entirely in France.",
    "Paris has 37 bridges across the Seine.",
]
ANSWER = "The Seine flows through Paris."
# Each passage's metadata `source`, which the frameworks keep and their instrumentors record.
SOURCES = ["rivers/seine.md", "rivers/rhone.md", "rivers/loire.md", "paris/bridges.md"]


def _recorder():  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "framework-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, provider


def llamaindex_openinference() -> dict:
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    memory, provider = _recorder()
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    Settings.llm = MockLLM()  # echoes its prompt: deterministic, and holds the context it saw
    Settings.embed_model = MockEmbedding(embed_dim=8)
    nodes = [
        TextNode(text=text, id_=f"passage-{i}", metadata={"source": SOURCES[i]})
        for i, text in enumerate(PASSAGES)
    ]
    engine = VectorStoreIndex(nodes).as_query_engine(similarity_top_k=3)
    response = engine.query(QUESTION)
    return {
        "spans": memory.get_finished_spans(),
        "chunks": [n.node.get_content() for n in response.source_nodes],
        "ids": [n.node.node_id for n in response.source_nodes],
        "sources": [n.node.metadata["source"] for n in response.source_nodes],
        "response": str(response),
        "llm_span": "MockLLM.complete",
    }


def _langchain_chain(seen: list[str], sources: list[str]):  # type: ignore[no-untyped-def]
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore.from_texts(
        PASSAGES, DeterministicFakeEmbedding(size=32), metadatas=[{"source": s} for s in SOURCES]
    )
    retriever = store.as_retriever(search_kwargs={"k": 3})

    def format_docs(docs):  # type: ignore[no-untyped-def]
        seen.extend(d.page_content for d in docs)
        sources.extend(d.metadata["source"] for d in docs)
        return "\n\n".join(d.page_content for d in docs)

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer only from the passages.\n\n{context}"), ("human", "{question}")]
    )
    return (
        {"context": retriever | RunnableLambda(format_docs), "question": RunnablePassthrough()}
        | prompt
        | FakeListChatModel(responses=[ANSWER])
        | StrOutputParser()
    )


def langchain_openinference() -> dict:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    memory, provider = _recorder()
    LangChainInstrumentor().instrument(tracer_provider=provider)
    seen: list[str] = []
    sources: list[str] = []
    answer = _langchain_chain(seen, sources).invoke(QUESTION)
    return {"spans": memory.get_finished_spans(), "chunks": seen, "sources": sources, "response": answer,
            "llm_span": "FakeListChatModel"}  # fmt: skip


def langchain_openllmetry() -> dict:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    memory, provider = _recorder()
    LangchainInstrumentor().instrument(tracer_provider=provider)
    seen: list[str] = []
    sources: list[str] = []
    answer = _langchain_chain(seen, sources).invoke(QUESTION)
    return {"spans": memory.get_finished_spans(), "chunks": seen, "sources": sources, "response": answer,
            "llm_span": "FakeListChatModel.chat"}  # fmt: skip


def llamaindex_openllmetry() -> dict:
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import TextNode
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    memory, provider = _recorder()
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    Settings.llm = MockLLM()  # echoes its prompt: deterministic, and holds the context it saw
    Settings.embed_model = MockEmbedding(embed_dim=8)
    nodes = [
        TextNode(text=text, id_=f"passage-{i}", metadata={"source": SOURCES[i]})
        for i, text in enumerate(PASSAGES)
    ]
    # A node postprocessor between retrieval and synthesis: what it returns is what the LLM sees.
    engine = VectorStoreIndex(nodes).as_query_engine(
        similarity_top_k=3, node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.0)]
    )
    response = engine.query(QUESTION)
    return {
        "spans": memory.get_finished_spans(),
        "chunks": [n.node.get_content() for n in response.source_nodes],
        "ids": [n.node.node_id for n in response.source_nodes],
        "sources": [n.node.metadata["source"] for n in response.source_nodes],
        "response": str(response),
        "llm_span": "MockLLM.task",
    }


def haystack_openllmetry() -> dict:
    os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
    from haystack import Document, Pipeline
    from haystack.components.builders import AnswerBuilder, ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret
    from opentelemetry.instrumentation.haystack import HaystackInstrumentor

    from tests.support.llm_server import FakeLLMServer

    memory, provider = _recorder()
    HaystackInstrumentor().instrument(tracer_provider=provider)
    store = InMemoryDocumentStore()
    store.write_documents(
        [
            Document(content=text, id=f"passage-{i}", meta={"source": SOURCES[i]})
            for i, text in enumerate(PASSAGES)
        ]
    )
    template = [
        ChatMessage.from_system("Answer only from:\n{% for d in documents %}{{ d.content }}\n{% endfor %}"),
        ChatMessage.from_user("{{ question }}"),
    ]
    # The LLM is the test OpenAI-compatible server on 127.0.0.1, answering every prompt the same.
    with FakeLLMServer(default_answer=ANSWER) as server:
        pipeline = Pipeline()
        pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=3))
        pipeline.add_component(
            "prompt_builder",
            ChatPromptBuilder(template=template, required_variables=["question", "documents"]),
        )
        pipeline.add_component(
            "llm", OpenAIChatGenerator(api_key=Secret.from_token("k"), api_base_url=server.api_base)
        )
        pipeline.add_component("answer_builder", AnswerBuilder())
        pipeline.connect("retriever.documents", "prompt_builder.documents")
        pipeline.connect("prompt_builder.prompt", "llm.messages")
        pipeline.connect("llm.replies", "answer_builder.replies")
        pipeline.connect("retriever.documents", "answer_builder.documents")
        out = pipeline.run(
            {
                "retriever": {"query": QUESTION},
                "prompt_builder": {"question": QUESTION},
                "answer_builder": {"query": QUESTION},
            }
        )
    (answer,) = out["answer_builder"]["answers"]
    return {
        "spans": memory.get_finished_spans(),
        "chunks": [d.content for d in answer.documents],
        "ids": [d.id for d in answer.documents],
        "sources": [d.meta["source"] for d in answer.documents],
        "response": answer.data,
        # Its LLM span has no usable content: the pipeline span is the interaction.
        "llm_span": "haystack_pipeline.workflow",
    }


APPS = {
    "llamaindex-openinference": llamaindex_openinference,
    "llamaindex-openllmetry": llamaindex_openllmetry,
    "langchain-openinference": langchain_openinference,
    "langchain-openllmetry": langchain_openllmetry,
    "haystack-openllmetry": haystack_openllmetry,
}


def _run_app(name: str, out: Path) -> None:
    """Child process: run the app, write the encoded request and what the framework returned."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    result = APPS[name]()
    spans = result.pop("spans")
    out.with_suffix(".pb").write_bytes(encode_spans(spans).SerializeToString())
    out.with_suffix(".json").write_text(json.dumps(result))


@pytest.mark.parametrize("app", sorted(APPS))
def test_instrumented_framework_spans_assemble_unchanged(app: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LLAMA_INDEX_CACHE_DIR": str(tmp_path / "llama_index"),
        "TRACELOOP_TRACE_CONTENT": "true",
        "OTEL_SDK_DISABLED": "false",
        # Any attempt to reach the network fails fast instead of hanging (127.0.0.1 is the test's).
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1",
    }
    out = tmp_path / "app"
    run = subprocess.run(
        [sys.executable, "-m", "tests.integration.test_instrumented_frameworks", app, str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    expected = json.loads(out.with_suffix(".json").read_text())
    decoded = decode_request(out.with_suffix(".pb").read_bytes(), "protobuf")
    assert decoded.rejected == []

    result = assembler().add(decoded.spans)
    (interaction,) = result.interactions
    assert interaction.query == QUESTION
    assert len(expected["chunks"]) == 3 and set(expected["chunks"]) <= set(PASSAGES)
    assert [c.content for c in interaction.chunks] == expected["chunks"]
    assert interaction.response == expected["response"]
    if app.startswith(("langchain", "haystack")):
        assert interaction.response == ANSWER
    if "ids" in expected:
        assert [c.id for c in interaction.chunks] == expected["ids"]
    # Metadata is read only when a key is configured (documents_key); then each chunk carries
    # the source the framework kept for its passage.
    assert all(c.metadata == () for c in interaction.chunks)
    (sourced,) = assembler(metadata=("source",)).add(decoded.spans).interactions
    assert [c.meta("source") for c in sourced.chunks] == expected["sources"]
    # The model call (under OpenLLMetry's LlamaIndex layout: the task span with GenAI messages).
    llm = next(
        s
        for s in decoded.spans
        if s.name == expected["llm_span"]
        and (s.name != "MockLLM.task" or "gen_ai.output.messages" in s.attributes)
    )
    assert interaction.span_id == llm.span_id
    assert interaction.service == "framework-app"
    # Every span of the trace is accounted for: the ones used, the rest not needed.
    assert result.assembled_spans + result.skipped[NOT_RAG] == len(decoded.spans)
    assert result.buffered_spans == 0

    # Split and interleaved delivery: the same trace and a copy of it under another trace id,
    # one span per request, alternating, as a Collector batching two apps might send them.
    copy = [dataclasses.replace(span, trace_id="f" * 32) for span in decoded.spans]
    split = assembler()
    interactions = []
    for pair in zip(decoded.spans, copy, strict=True):
        for span in pair:
            interactions += split.add([span]).interactions
    interactions += split.flush().interactions
    assert sorted(i.trace_id for i in interactions) == sorted({interaction.trace_id, "f" * 32})
    for delivered in interactions:
        assert (delivered.query, delivered.chunks, delivered.response) == (
            interaction.query,
            interaction.chunks,
            interaction.response,
        )


if __name__ == "__main__":
    _run_app(sys.argv[1], Path(sys.argv[2]))
