"""Document metadata (source, file name, URL...) carried from spans onto chunks, in every
convention, only for the configured keys, and bounded whatever a span holds."""

from __future__ import annotations

import json

import pytest
from ragpulse_instrument import Search, record_interaction

from agent.model import Chunk, RagInteraction
from agent.otlp.conventions import (
    MAX_METADATA_KEYS,
    METADATA_MAX_CHARS,
    METADATA_VALUE_CHARS,
    metadata_keys,
    picked,
)
from agent.otlp.conventions.openinference import OpenInference
from tests.support.otlp import Recorder, assembler, decoded, set_all

QUERY = "Which river flows through Paris?"
DOCS = [
    "The Seine flows through the heart of Paris.",
    "Lyon sits where the Rhone and the Saone meet.",
    "Paris has 37 bridges across the Seine.",
]
RESPONSE = "The Seine."
SOURCES = ["rivers/seine.md", "rivers/rhone.pdf", "https://example.org/bridges"]


def _llm(recorder: Recorder) -> None:
    with recorder.tracer.start_as_current_span("llm") as llm:
        set_all(
            llm,
            {
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUERY,
                "llm.output_messages.0.message.content": RESPONSE,
            },
        )


def openinference_llamaindex(recorder: Recorder) -> None:
    """LlamaIndex under OpenInference: id, content, score and the node's metadata as JSON."""
    with recorder.tracer.start_as_current_span("RetrieverQueryEngine.query") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        with recorder.tracer.start_as_current_span("VectorIndexRetriever.retrieve") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            for i, (doc, source) in enumerate(zip(DOCS, SOURCES, strict=True)):
                base = f"retrieval.documents.{i}.document."
                metadata = {"source": source, "file_name": source.rsplit("/", 1)[1], "page_label": str(i + 1)}
                set_all(
                    retriever,
                    {
                        base + "id": f"node-{i}",
                        base + "content": doc,
                        base + "score": 0.9 - i / 10,
                        base + "metadata": json.dumps(metadata),
                    },
                )
        _llm(recorder)


def openinference_langchain(recorder: Recorder) -> None:
    """LangChain under OpenInference: no id or score attribute; the score is in the metadata."""
    with recorder.tracer.start_as_current_span("RunnableSequence") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        with recorder.tracer.start_as_current_span("VectorStoreRetriever") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            for i, (doc, source) in enumerate(zip(DOCS, SOURCES, strict=True)):
                base = f"retrieval.documents.{i}.document."
                retriever.set_attribute(base + "content", doc)
                retriever.set_attribute(
                    base + "metadata", json.dumps({"source": source, "page": i, "score": 0.5})
                )
        _llm(recorder)


def openinference_reranker(recorder: Recorder) -> None:
    with recorder.tracer.start_as_current_span("query") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        with recorder.tracer.start_as_current_span("rerank") as reranker:
            reranker.set_attribute("openinference.span.kind", "RERANKER")
            for i, (doc, source) in enumerate(zip(DOCS, SOURCES, strict=True)):
                base = f"reranker.output_documents.{i}.document."
                reranker.set_attribute(base + "content", doc)
                reranker.set_attribute(base + "metadata", json.dumps({"source": source}))
        _llm(recorder)


def openllmetry_langchain(recorder: Recorder) -> None:
    """LangChain under OpenLLMetry: `vector_db_retrieve` with `{"documents": [{page_content, metadata}]}`."""
    with recorder.tracer.start_as_current_span("RunnableSequence.workflow") as root:
        set_all(
            root,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.input": json.dumps({"inputs": QUERY}),
                "traceloop.entity.output": json.dumps({"outputs": RESPONSE}),
            },
        )
        with recorder.tracer.start_as_current_span("vector_db_retrieve VectorStoreRetriever") as retriever:
            documents = [
                {"page_content": d, "metadata": {"source": s, "score": 0.4}}
                for d, s in zip(DOCS, SOURCES, strict=True)
            ]
            set_all(
                retriever,
                {
                    "traceloop.span.kind": "task",
                    "gen_ai.operation.name": "vector_db_retrieve",
                    "traceloop.entity.input": json.dumps({"query": QUERY}),
                    "traceloop.entity.output": json.dumps({"documents": documents}),
                },
            )
        _genai_llm(recorder)


def _genai_llm(recorder: Recorder) -> None:
    with recorder.tracer.start_as_current_span("chat") as llm:
        answer = [{"role": "assistant", "parts": [{"type": "text", "content": RESPONSE}]}]
        question = [{"role": "user", "parts": [{"type": "text", "content": QUERY}]}]
        set_all(
            llm,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(question),
                "gen_ai.output.messages": json.dumps(answer),
            },
        )


def openllmetry_llamaindex(recorder: Recorder) -> None:
    """LlamaIndex under OpenLLMetry: a task span whose output is NodeWithScore JSON (metadata in the node)."""
    with recorder.tracer.start_as_current_span("RetrieverQueryEngine.workflow") as root:
        set_all(
            root,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.input": json.dumps({"str_or_query_bundle": QUERY}),
                "traceloop.entity.output": json.dumps({"response": RESPONSE}),
            },
        )
        with recorder.tracer.start_as_current_span("VectorIndexRetriever.task") as retriever:
            nodes = [
                json.dumps({"node": {"id_": f"n{i}", "text": d, "metadata": {"source": s}}, "score": 0.5})
                for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
            ]
            set_all(
                retriever,
                {
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": json.dumps({"query_bundle": {"query_str": QUERY}}),
                    "traceloop.entity.output": json.dumps(nodes),
                },
            )
        _genai_llm(recorder)


def openllmetry_haystack(recorder: Recorder) -> None:
    """Haystack under OpenLLMetry: the answer builder's documents, `meta` nested or flattened."""
    documents = [
        {"id": f"h{i}", "content": d, "score": 1.0, **({"meta": {"source": s}} if i else {"source": s})}
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    with recorder.tracer.start_as_current_span("haystack_pipeline.workflow") as span:
        set_all(
            span,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.input": json.dumps({"data": {"retriever": {"query": QUERY}}}),
                "traceloop.entity.output": json.dumps(
                    {"answer_builder": {"answers": [{"data": RESPONSE, "documents": documents}]}}
                ),
            },
        )


def _vector_db(recorder: Recorder, name: str, hits: list[tuple[str, dict[str, object]]]) -> None:
    with recorder.tracer.start_as_current_span("POST /ask"):
        with recorder.tracer.start_as_current_span(name) as db:
            for event, attributes in hits:
                db.add_event(event, attributes)  # type: ignore[arg-type]
        _genai_llm(recorder)


def chroma(recorder: Recorder) -> None:
    """Chroma's instrumentor: the document, and the metadata as JSON."""
    hits = [
        (
            "db.query.result",
            {
                "db.query.result.id": f"c{i}",
                "db.query.result.document": d,
                "db.query.result.metadata": json.dumps({"source": s}),
            },
        )
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    _vector_db(recorder, "chroma.query", hits)


def pinecone(recorder: Recorder) -> None:
    """Pinecone's instrumentor: the metadata as `str(dict)`, the text in it (LangChain's `text`)."""
    hits = [
        (
            "db.query.result",
            {"db.query.result.id": f"p{i}", "db.query.result.metadata": str({"text": d, "source": s})},
        )
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    _vector_db(recorder, "pinecone.query", hits)


def milvus_search(recorder: Recorder) -> None:
    hits = [
        (
            "db.search.result",
            {"db.search.result.id": i, "db.search.result.entity": str({"text": d, "source": s})},
        )
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    _vector_db(recorder, "milvus.search", hits)


def milvus_query(recorder: Recorder) -> None:
    hits = [
        ("db.query.result", {"id": i, "text": d, "source": s})
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    _vector_db(recorder, "milvus.query", hits)


def genai(recorder: Recorder) -> None:
    """GenAI `gen_ai.retrieval.documents`: a `metadata` object, or the key among the document's own fields."""
    documents = [
        {"id": f"g{i}", "score": 0.8, "content": d, **({"metadata": {"source": s}} if i else {"source": s})}
        for i, (d, s) in enumerate(zip(DOCS, SOURCES, strict=True))
    ]
    with recorder.tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        with recorder.tracer.start_as_current_span("retrieval") as retriever:
            set_all(
                retriever,
                {
                    "gen_ai.operation.name": "retrieval",
                    "gen_ai.retrieval.query.text": QUERY,
                    "gen_ai.retrieval.documents": json.dumps(documents),
                },
            )
        _genai_llm(recorder)


def openinference_tool(recorder: Recorder) -> None:
    """An agent's retrieval tool (OpenInference TOOL): its output a JSON list of documents."""
    documents = [{"page_content": d, "metadata": {"source": s}} for d, s in zip(DOCS, SOURCES, strict=True)]
    tool_output = json.dumps(documents)
    with recorder.tracer.start_as_current_span("LangGraph") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY})
        with recorder.tracer.start_as_current_span("search") as tool:
            set_all(
                tool,
                {"openinference.span.kind": "TOOL", "input.value": QUERY, "output.value": tool_output},
            )
        with recorder.tracer.start_as_current_span("answer") as llm:
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": QUERY,
                    "llm.input_messages.1.message.role": "tool",
                    "llm.input_messages.1.message.content": tool_output,
                    "llm.output_messages.0.message.content": RESPONSE,
                },
            )


def manual(recorder: Recorder) -> None:
    """ragpulse's own layout (ragpulse_instrument): `ragpulse.chunk_metadata`, JSON per chunk."""
    record_interaction(
        query=QUERY,
        chunks=DOCS,
        chunk_metadata=[{"source": s, "page": 3} for s in SOURCES],
        response=RESPONSE,
        tracer=recorder.tracer,
    )


def manual_searches(recorder: Recorder) -> None:
    record_interaction(
        query=QUERY,
        searches=[Search(QUERY, DOCS, chunk_metadata=[{"source": s} for s in SOURCES])],
        response=RESPONSE,
        tracer=recorder.tracer,
    )


CONVENTIONS = {
    "openinference-llamaindex": openinference_llamaindex,
    "openinference-langchain": openinference_langchain,
    "openinference-reranker": openinference_reranker,
    "openinference-tool": openinference_tool,
    "openllmetry-langchain": openllmetry_langchain,
    "openllmetry-llamaindex": openllmetry_llamaindex,
    "openllmetry-haystack": openllmetry_haystack,
    "chroma": chroma,
    "pinecone": pinecone,
    "milvus-search": milvus_search,
    "milvus-query": milvus_query,
    "genai": genai,
    "manual": manual,
    "manual-searches": manual_searches,
}


def assembled(write, metadata: tuple[str, ...]) -> RagInteraction:  # type: ignore[no-untyped-def]
    recorder = Recorder()
    write(recorder)
    unit = assembler(metadata=metadata)
    interactions = unit.add(decoded(recorder.spans())).interactions + unit.flush().interactions
    (interaction,) = interactions
    assert [c.content for c in interaction.chunks] == DOCS
    return interaction


@pytest.mark.parametrize("convention", sorted(CONVENTIONS))
def test_each_convention_carries_the_configured_metadata_key_and_nothing_else(convention: str) -> None:
    interaction = assembled(CONVENTIONS[convention], ("source",))
    assert [c.meta("source") for c in interaction.chunks] == SOURCES
    # Only the configured key is carried, whatever else the metadata holds.
    assert all(c.metadata == (("source", c.meta("source")),) for c in interaction.chunks)
    # Not configured: no metadata is carried at all.
    assert all(c.metadata == () for c in assembled(CONVENTIONS[convention], ()).chunks)


def test_numbers_are_carried_as_text_and_several_keys_in_the_order_asked() -> None:
    interaction = assembled(openinference_langchain, ("page", "source", "absent"))
    assert [c.metadata for c in interaction.chunks] == [
        (("page", str(i)), ("source", s)) for i, s in enumerate(SOURCES)
    ]
    # The score the LangChain instrumentor keeps in the metadata is still read.
    assert [c.score for c in interaction.chunks] == [0.5, 0.5, 0.5]
    llamaindex = assembled(openinference_llamaindex, ("file_name", "page_label"))
    assert llamaindex.chunks[0].metadata == (("file_name", "seine.md"), ("page_label", "1"))


def test_without_a_key_the_metadata_json_is_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path pays nothing for metadata nobody asked for (the score is an attribute here)."""
    import agent.otlp.conventions.openinference as openinference

    def refuse(value: object) -> None:
        raise AssertionError("metadata parsed without a configured key")

    monkeypatch.setattr(openinference, "metadata_record", refuse)
    recorder = Recorder()
    openinference_llamaindex(recorder)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert [c.id for c in interaction.chunks] == ["node-0", "node-1", "node-2"]


def _retriever_span(metadata: object) -> Chunk:
    """One OpenInference single-span interaction whose one document has `metadata` as recorded."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("rag") as span:
        set_all(
            span,
            {
                "openinference.span.kind": "CHAIN",
                "input.value": QUERY,
                "output.value": RESPONSE,
                "retrieval.documents.0.document.id": "doc-0",
                "retrieval.documents.0.document.content": DOCS[0],
                "retrieval.documents.0.document.score": 0.5,
                "retrieval.documents.0.document.metadata": metadata,
            },
        )
    (interaction,) = assembler(metadata=("source",)).add(decoded(recorder.spans())).interactions
    (chunk,) = interaction.chunks
    assert (chunk.content, chunk.id, chunk.score) == (DOCS[0], "doc-0", 0.5)  # the document survives
    return chunk


HOSTILE = {
    "not json": "source: rivers/seine.md",
    "a python repr": str({"source": "rivers/seine.md"}),
    "a json list": json.dumps([{"source": "rivers/seine.md"}]),
    "a json string": json.dumps("rivers/seine.md"),
    "nested object": json.dumps({"source": {"path": "rivers/seine.md"}}),
    "a list value": json.dumps({"source": ["rivers/seine.md"]}),
    "null": json.dumps({"source": None}),
    "a boolean": json.dumps({"source": True}),
    "blank": json.dumps({"source": "   "}),
    "NaN": '{"source": NaN}',
    "infinity": '{"source": 1e400}',
    "a huge integer": json.dumps({"source": 10**30}),
    "deeply nested": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "unclosed": '{"source": "rivers/seine.md"',
    "larger than the parse limit": json.dumps({"pad": "x" * METADATA_MAX_CHARS, "source": "rivers/seine.md"}),
    "not a string attribute": ["source", "rivers/seine.md"],
    "an int attribute": 42,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_metadata_gives_no_value_and_keeps_the_document(case: str) -> None:
    assert _retriever_span(HOSTILE[case]).metadata == ()


def test_metadata_is_bounded_whatever_the_span_holds() -> None:
    # A long value is cut; thousands of other keys are not carried.
    many = {f"key-{i}": "v" * 10 for i in range(1500)} | {"source": "s" * 20_000}
    assert len(json.dumps(many)) < METADATA_MAX_CHARS
    chunk = _retriever_span(json.dumps(many))
    assert chunk.metadata == (("source", "s" * METADATA_VALUE_CHARS),)
    assert _retriever_span(json.dumps({"source": 3})).metadata == (("source", "3"),)
    assert _retriever_span(json.dumps({"source": 2.5})).metadata == (("source", "2.5"),)
    # A convention reads a few keys at most, each once.
    assert metadata_keys(["source", "source", "", "url"]) == ("source", "url")
    with pytest.raises(ValueError, match="at most"):
        metadata_keys([f"k{i}" for i in range(MAX_METADATA_KEYS + 1)])
    with pytest.raises(ValueError, match="at most"):
        OpenInference([f"k{i}" for i in range(MAX_METADATA_KEYS + 1)])
    # Records searched in order: the metadata first, then the document's own fields.
    assert picked(("source",), {"source": "meta"}, {"source": "doc"}) == (("source", "meta"),)
    assert picked(("source",), {"source": {"x": 1}}, {"source": "doc"}) == (("source", "doc"),)
    assert picked(("source",), None, "not a mapping") == ()


def test_metadata_counts_in_the_assemblers_byte_bound() -> None:
    """A buffered span's metadata is held memory, counted like its text (assembly_max_chunk_bytes)."""

    def buffered_bytes(metadata: tuple[str, ...]) -> int:
        recorder = Recorder()
        with recorder.tracer.start_as_current_span("root") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            with recorder.tracer.start_as_current_span("retriever") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("retrieval.documents.0.document.content", DOCS[0])
                retriever.set_attribute(
                    "retrieval.documents.0.document.metadata", json.dumps({"source": "s" * 1000})
                )
        retriever_only = [s for s in decoded(recorder.spans()) if s.name == "retriever"]
        return assembler(metadata=metadata).add(retriever_only).buffered_bytes

    assert buffered_bytes(("source",)) >= buffered_bytes(()) + METADATA_VALUE_CHARS


def test_the_instrument_refuses_chunk_metadata_without_chunks() -> None:
    with pytest.raises(ValueError, match="chunk_metadata goes with chunks"):
        record_interaction(query=QUERY, response=RESPONSE, chunk_metadata=[{"source": "a"}])
