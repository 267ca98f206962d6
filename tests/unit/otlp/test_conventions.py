"""Each convention, recorded with the real SDK and encoded with the real OTLP encoder, assembled."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from ragpulse_instrument import record_interaction

from agent.model import Chunk
from agent.otlp.assemble import INCOMPLETE, NOT_RAG
from agent.otlp.conventions import parse_json
from tests.support.otlp import Recorder, assembler, decoded, set_all
from tests.support.spans import openinference_single_span

QUERY = "When was the Eiffel Tower finished?"
DOCS = [
    "The Eiffel Tower was completed in March 1889 for the World's Fair.",
    "Gustave Eiffel's company designed and built the tower.",
    "Paris hosted the Exposition Universelle in 1889.",
]
RESPONSE = "It was finished in March 1889."
ENCODINGS = ["protobuf", "json"]


def openinference_trace(recorder: Recorder, *, rerank: bool) -> dict[str, str]:
    """CHAIN root → RETRIEVER → (RERANKER) → LLM, as the OpenInference instrumentors write them."""
    tracer = recorder.tracer
    ids = {}
    with tracer.start_as_current_span("RetrieverQueryEngine.query") as root:
        set_all(
            root,
            {
                "openinference.span.kind": "CHAIN",
                "input.value": QUERY,
                "output.value": RESPONSE,
                "session.id": "session-7",
                "user.id": "user-3",
            },
        )
        with tracer.start_as_current_span("VectorIndexRetriever.retrieve") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            retriever.set_attribute("input.value", QUERY)
            for i, doc in enumerate(DOCS):
                retriever.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{i}")
                retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
                retriever.set_attribute(f"retrieval.documents.{i}.document.score", 0.9 - i / 10)
                retriever.set_attribute(f"retrieval.documents.{i}.document.metadata", json.dumps({"i": i}))
        if rerank:
            with tracer.start_as_current_span("CohereRerank.postprocess") as reranker:
                reranker.set_attribute("openinference.span.kind", "RERANKER")
                reranker.set_attribute("reranker.query", QUERY)
                for i, doc in enumerate(DOCS):
                    reranker.set_attribute(f"reranker.input_documents.{i}.document.content", doc)
                for rank, i in enumerate((2, 0)):  # top-2, reordered
                    reranker.set_attribute(f"reranker.output_documents.{rank}.document.id", f"doc-{i}")
                    reranker.set_attribute(f"reranker.output_documents.{rank}.document.content", DOCS[i])
                    reranker.set_attribute(
                        f"reranker.output_documents.{rank}.document.score", 0.99 - rank / 10
                    )
                ids["reranker"] = format(reranker.get_span_context().span_id, "016x")
        with tracer.start_as_current_span("OpenAI.chat") as llm:
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "Answer from: " + " ".join(DOCS),
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": QUERY,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": RESPONSE,
                },
            )
            ids["llm"] = format(llm.get_span_context().span_id, "016x")
        ids["root"] = format(root.get_span_context().span_id, "016x")
    return ids


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openinference_multi_span_with_a_reranker(encoding: str) -> None:
    recorder = Recorder("shop-search")
    ids = openinference_trace(recorder, rerank=True)
    out = assembler().add(decoded(recorder.spans(), encoding))
    (interaction,) = out.interactions
    assert interaction.query == QUERY
    # The reranker's output is the context the LLM saw, in the reranker's order.
    assert interaction.chunks == (Chunk(DOCS[2], "doc-2", 0.99), Chunk(DOCS[0], "doc-0", 0.89))
    assert interaction.response == RESPONSE
    assert interaction.span_id == ids["llm"]
    assert interaction.trace_id == format(recorder.spans()[0].context.trace_id, "032x")
    assert interaction.service == "shop-search"
    assert interaction.route == "RetrieverQueryEngine.query"
    assert (interaction.session_id, interaction.user_id) == ("session-7", "user-3")
    # root (the query), reranker, LLM assembled; the superseded retriever is not needed.
    assert out.assembled_spans == 3 and out.skipped == {NOT_RAG: 1} and out.buffered_spans == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openinference_multi_span_without_a_reranker(encoding: str) -> None:
    recorder = Recorder()
    openinference_trace(recorder, rerank=False)
    (interaction,) = assembler().add(decoded(recorder.spans(), encoding)).interactions
    assert [c.content for c in interaction.chunks] == DOCS
    assert [c.id for c in interaction.chunks] == ["doc-0", "doc-1", "doc-2"]
    assert [c.score for c in interaction.chunks] == pytest.approx([0.9, 0.8, 0.7])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openinference_single_span(encoding: str) -> None:
    recorder = Recorder()
    openinference_single_span(recorder.tracer, query=QUERY, chunks=DOCS, response=RESPONSE)
    (span,) = recorder.spans()
    out = assembler().add(decoded([span], encoding))
    (interaction,) = out.interactions
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert [c.content for c in interaction.chunks] == DOCS
    assert interaction.span_id == format(span.context.span_id, "016x")
    assert interaction.route == "rag.query"
    assert out.assembled_spans == 1 and not out.skipped


def openllmetry_trace(recorder: Recorder, *, vector_db_events: bool) -> None:
    tracer = recorder.tracer
    with tracer.start_as_current_span("RetrievalQA.workflow") as root:
        set_all(
            root,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.workflow.name": "RetrievalQA",
                "traceloop.entity.input": json.dumps({"inputs": {"question": QUERY}, "tags": []}),
                "traceloop.entity.output": json.dumps({"outputs": {"answer": RESPONSE}}),
                "traceloop.association.properties.session_id": "s-1",
            },
        )
        if vector_db_events:
            # Chroma's instrumentor (0.62.4): one db.query.result event per hit, a distance, no score.
            with tracer.start_as_current_span("chroma.query") as db:
                set_all(db, {"db.system": "chroma", "db.operation": "query", "db.chroma.query.n_results": 3})
                for i, doc in enumerate(DOCS):
                    db.add_event(
                        "db.query.result",
                        {
                            "db.query.result.id": f"c{i}",
                            "db.query.result.distance": 0.25 * (i + 1),
                            "db.query.result.metadata": json.dumps({"source": "tower.txt"}),
                            "db.query.result.document": doc,
                        },
                    )
        else:
            with tracer.start_as_current_span("vector_db_retrieve VectorStoreRetriever") as retriever:
                documents = [
                    {"page_content": d, "metadata": {"score": 0.5, "id": f"v{i}"}} for i, d in enumerate(DOCS)
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
        with tracer.start_as_current_span("openai.chat") as llm:
            set_all(
                llm,
                {
                    "llm.request.type": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.prompt.0.role": "system",
                    "gen_ai.prompt.0.content": "Use: " + DOCS[0],
                    "gen_ai.prompt.1.role": "user",
                    "gen_ai.prompt.1.content": QUERY,
                    "gen_ai.completion.0.role": "assistant",
                    "gen_ai.completion.0.content": RESPONSE,
                },
            )


@pytest.mark.parametrize("vector_db_events", [False, True])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openllmetry_multi_span(encoding: str, vector_db_events: bool) -> None:
    recorder = Recorder()
    openllmetry_trace(recorder, vector_db_events=vector_db_events)
    out = assembler().add(decoded(recorder.spans(), encoding))
    (interaction,) = out.interactions
    assert interaction.query == QUERY
    assert [c.content for c in interaction.chunks] == DOCS
    if vector_db_events:
        # A distance is not a score: lower is better.
        assert [(c.id, c.score) for c in interaction.chunks] == [("c0", None), ("c1", None), ("c2", None)]
    else:
        assert [(c.id, c.score) for c in interaction.chunks] == [(f"v{i}", 0.5) for i in range(3)]
    assert interaction.response == RESPONSE
    assert interaction.route == "RetrievalQA.workflow"
    assert interaction.session_id == "s-1"
    llm = next(s for s in recorder.spans() if s.name == "openai.chat")
    assert interaction.span_id == format(llm.context.span_id, "016x")
    assert out.assembled_spans == 3 and not out.skipped


# Result events as the vector-DB instrumentors from PyPI write them (recorded from real runs:
# opentelemetry-instrumentation-pinecone 0.60.0 with pinecone 8.1.2, -milvus 0.60.0 with pymilvus
# 3.0.2 and milvus-lite; docs/intake.md). Pinecone and Milvus write dicts as `str(dict)`.
def _pinecone_hit(i: int, metadata: dict[str, object]) -> tuple[str, dict[str, object]]:
    attributes = {
        "db.query.result.id": f"p-{i}",
        "db.query.result.score": 0.9 - i / 10,
        "db.query.result.metadata": str(metadata),
        "db.query.result.vector": [],
    }
    return "db.query.result", attributes


def _milvus_search_hit(i: int, entity: dict[str, object]) -> tuple[str, dict[str, object]]:
    attributes = {
        "db.search.query.id": 0,
        "db.search.result.id": i,
        "db.search.result.distance": str(0.98 - i / 10),
        "db.search.result.entity": str(entity),
    }
    return "db.search.result", attributes


VECTOR_DB_HITS = {
    # LangChain's PineconeVectorStore keeps the text under `text` in the metadata.
    "pinecone": (
        "pinecone.query",
        [_pinecone_hit(i, {"text": d, "source": "t.txt"}) for i, d in enumerate(DOCS)],
    ),
    # LlamaIndex's PineconeVectorStore keeps the serialised node (its text inside) in `_node_content`.
    "pinecone-llamaindex": (
        "pinecone.query",
        [
            _pinecone_hit(
                i, {"_node_content": json.dumps({"id_": f"n{i}", "text": d}), "_node_type": "TextNode"}
            )
            for i, d in enumerate(DOCS)
        ],
    ),
    "milvus-search": ("milvus.search", [_milvus_search_hit(i, {"text": d}) for i, d in enumerate(DOCS)]),
    # Milvus `query` (a filter, no ranking) writes each row's fields as the event's attributes.
    "milvus-query": ("milvus.query", [("db.query.result", {"id": i, "text": d}) for i, d in enumerate(DOCS)]),
}


def vector_db_trace(recorder: Recorder, span_name: str, hits: list[tuple[str, dict[str, object]]]) -> None:
    """A request span, a vector-DB query span with its hits, then the model call as
    opentelemetry-instrumentation-openai 0.62.4 writes it (GenAI message attributes)."""
    tracer = recorder.tracer
    with tracer.start_as_current_span("POST /ask") as request:
        request.set_attribute("http.route", "/ask")
        with tracer.start_as_current_span(span_name) as db:
            db.set_attribute("db.system", span_name.split(".")[0])
            for name, attributes in hits:
                db.add_event(name, attributes)  # type: ignore[arg-type]
        with tracer.start_as_current_span("openai.chat") as llm:
            messages = [
                {"role": "system", "parts": [{"type": "text", "content": "Answer from: " + " ".join(DOCS)}]},
                {"role": "user", "parts": [{"type": "text", "content": QUERY}]},
            ]
            answer = [{"role": "assistant", "parts": [{"type": "text", "content": RESPONSE}]}]
            set_all(
                llm,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": json.dumps(answer),
                },
            )


@pytest.mark.parametrize("database", sorted(VECTOR_DB_HITS))
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_vector_db_hits_as_each_instrumentor_writes_them(encoding: str, database: str) -> None:
    recorder = Recorder()
    span_name, hits = VECTOR_DB_HITS[database]
    vector_db_trace(recorder, span_name, hits)
    out = assembler().add(decoded(recorder.spans(), encoding))
    (interaction,) = out.interactions
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert [c.content for c in interaction.chunks] == DOCS  # in the database's rank order
    if database.startswith("pinecone"):
        assert [c.id for c in interaction.chunks] == ["p-0", "p-1", "p-2"]
        assert [c.score for c in interaction.chunks] == pytest.approx([0.9, 0.8, 0.7])
    else:
        assert [c.id for c in interaction.chunks] == ["0", "1", "2"]
        assert [c.score for c in interaction.chunks] == [None, None, None]  # Milvus: a distance
    assert out.assembled_spans == 2 and out.skipped == {NOT_RAG: 1}


WITHOUT_TEXT = {
    # The app keeps only a reference in the index; its text lives elsewhere.
    "pinecone-no-text": [_pinecone_hit(i, {"source": "t.txt", "chunk_id": i}) for i in range(3)],
    "pinecone-no-metadata": [
        (
            "db.query.result",
            {
                "db.query.result.id": f"p-{i}",
                "db.query.result.score": 0.5,
                "db.query.result.metadata": "None",
            },
        )
        for i in range(3)
    ],
    # Chroma queried with include=["distances"]: ids and distances only.
    "chroma-no-documents": [
        ("db.query.result", {"db.query.result.id": f"c{i}", "db.query.result.distance": 0.1})
        for i in range(3)
    ],
    # Chroma stores records added without a document: that hit has no document attribute.
    "chroma-one-document-missing": [
        *(
            ("db.query.result", {"db.query.result.id": f"c{i}", "db.query.result.document": d})
            for i, d in enumerate(DOCS[:2])
        ),
        ("db.query.result", {"db.query.result.id": "c2", "db.query.result.distance": 0.3}),
    ],
    # One hit of three without text: the model saw three passages, the spans show two.
    "one-hit-without-text": [
        *(_pinecone_hit(i, {"text": d}) for i, d in enumerate(DOCS[:2])),
        _pinecone_hit(2, {"source": "t.txt"}),
    ],
    "milvus-search-ids-only": [_milvus_search_hit(i, {}) for i in range(3)],
}


@pytest.mark.parametrize("case", sorted(WITHOUT_TEXT))
def test_vector_db_hits_without_text_leave_the_chunks_unknown(case: str) -> None:
    """No text (or part of it) is unknown context: the model call forms no interaction, and is
    skipped `incomplete` when its trace ends; nothing is judged against a guessed context."""
    recorder = Recorder()
    vector_db_trace(recorder, "pinecone.query", WITHOUT_TEXT[case])
    spans = decoded(recorder.spans())
    unit = assembler()
    out = unit.add(spans)
    # The search (unknown context) and the model call wait for their trace; nothing is judged.
    assert out.interactions == [] and out.buffered_spans == 2
    end = unit.flush()
    assert end.interactions == []
    assert out.skipped + end.skipped == {NOT_RAG: 1, INCOMPLETE: 2}


def test_a_retrieval_without_text_is_the_context_of_the_calls_after_it() -> None:
    """retrieve (text) -> model call -> retrieve (no text) -> model call: the second call saw the
    second retrieval's hits, not the first's; it forms no interaction rather than a wrong one."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("POST /ask"):
        vector_db_trace(recorder, *VECTOR_DB_HITS["pinecone"])
        vector_db_trace(recorder, "pinecone.query", WITHOUT_TEXT["pinecone-no-text"])
    unit = assembler()
    out = unit.add(decoded(recorder.spans()))
    end = unit.flush()
    interactions = out.interactions + end.interactions
    (interaction,) = interactions
    first_call = next(s for s in recorder.spans() if s.name == "openai.chat")
    assert interaction.span_id == format(first_call.context.span_id, "016x")
    assert [c.content for c in interaction.chunks] == DOCS


HOSTILE_METADATA = [
    "{'text': __import__('os').getcwd()}",  # code, not a literal: never evaluated
    "{'text': 'a' * 3}",
    "{" * 10_000,
    "{'text': 'unclosed",
    "{'text': 1" + "0" * 5000 + "}",
    "{'text': ['not', 'a', 'string']}",
    "{1: 2, 3: 4}",
    "{'text': b'bytes'}",
]


@pytest.mark.parametrize("metadata", HOSTILE_METADATA, ids=range(len(HOSTILE_METADATA)))
def test_vector_db_metadata_that_is_not_a_dict_literal_with_text_gives_no_chunk(metadata: str) -> None:
    recorder = Recorder()
    hits = [("db.query.result", {"db.query.result.id": "p-0", "db.query.result.metadata": metadata})]
    vector_db_trace(recorder, "pinecone.query", hits)
    unit = assembler()
    out = unit.add(decoded(recorder.spans()))
    assert out.interactions == [] and unit.flush().interactions == []


def _node(text: str, node_id: str, score: float) -> str:
    return json.dumps({"node": {"id_": node_id, "text": text, "metadata": {}}, "score": score})


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openllmetry_llamaindex_reranked_nodes_are_the_context(encoding: str) -> None:
    """OpenLLMetry's LlamaIndex layout: workflow/task spans only; the postprocessor's nodes (not
    the retriever's) are what the LLM saw; the LLM step is a task with GenAI messages."""
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("RetrieverQueryEngine.workflow") as root:
        set_all(
            root,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.input": json.dumps({"str_or_query_bundle": {"query_str": QUERY}}),
                "traceloop.entity.output": json.dumps({"response": RESPONSE, "metadata": {}}),
            },
        )
        with tracer.start_as_current_span("VectorIndexRetriever.task") as retriever:
            set_all(
                retriever,
                {
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": json.dumps({"query_bundle": {"query_str": QUERY}}),
                    "traceloop.entity.output": json.dumps(
                        [_node(d, f"n{i}", 0.9 - i / 10) for i, d in enumerate(DOCS)]
                    ),
                },
            )
        with tracer.start_as_current_span("LLMRerank.task") as reranker:
            set_all(
                reranker,
                {
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": json.dumps({"nodes": [], "query_bundle": {"query_str": QUERY}}),
                    "traceloop.entity.output": json.dumps(
                        [_node(DOCS[2], "n2", 9.0), _node(DOCS[0], "n0", 8.0)]
                    ),
                },
            )
        with tracer.start_as_current_span("CompactAndRefine.task") as synthesizer:
            set_all(synthesizer, {"traceloop.span.kind": "task", "traceloop.entity.output": '"text"'})
            with tracer.start_as_current_span("OpenAI.task") as llm:
                set_all(
                    llm,
                    {
                        "traceloop.span.kind": "task",
                        "gen_ai.output.messages": json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": RESPONSE}]}]
                        ),
                    },
                )
        with tracer.start_as_current_span("Broken.task") as broken:
            # Not a list of nodes throughout: some other step's output, not a context.
            set_all(
                broken,
                {
                    "traceloop.span.kind": "task",
                    "traceloop.entity.output": json.dumps([_node("x", "y", 1), 3]),
                },
            )
    (interaction,) = assembler().add(decoded(recorder.spans(), encoding)).interactions
    assert interaction.query == QUERY
    assert [(c.content, c.id, c.score) for c in interaction.chunks] == [
        (DOCS[2], "n2", 9.0),
        (DOCS[0], "n0", 8.0),
    ]
    assert interaction.response == RESPONSE
    llm_span = next(s for s in recorder.spans() if s.name == "OpenAI.task")
    assert interaction.span_id == format(llm_span.context.span_id, "016x")


def genai_trace(recorder: Recorder, *, events: bool) -> None:
    tracer = recorder.tracer
    with tracer.start_as_current_span("invoke_agent support") as root:
        set_all(
            root,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.conversation.id": "conv-1",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": QUERY}]}]
                ),
            },
        )
        with tracer.start_as_current_span("retrieval kb") as retriever:
            documents = [{"id": f"kb{i}", "score": 0.8, "content": d} for i, d in enumerate(DOCS)]
            set_all(
                retriever,
                {
                    "gen_ai.operation.name": "retrieval",
                    "gen_ai.retrieval.query.text": QUERY,
                    "gen_ai.retrieval.documents": json.dumps(documents),
                },
            )
        with tracer.start_as_current_span("chat gpt-4o") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            inputs = json.dumps(
                [
                    {"role": "system", "parts": [{"type": "text", "content": "Context: " + DOCS[0]}]},
                    {"role": "user", "parts": [{"type": "text", "content": QUERY}]},
                ]
            )
            outputs = json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": RESPONSE}],
                        "finish_reason": "stop",
                    }
                ]
            )
            if events:
                llm.add_event(
                    "gen_ai.client.inference.operation.details",
                    {"gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs},
                )
            else:
                set_all(llm, {"gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs})


@pytest.mark.parametrize("events", [False, True])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_genai_semantic_conventions_multi_span(encoding: str, events: bool) -> None:
    recorder = Recorder()
    genai_trace(recorder, events=events)
    out = assembler().add(decoded(recorder.spans(), encoding))
    (interaction,) = out.interactions
    assert interaction.query == QUERY
    assert [(c.content, c.id, c.score) for c in interaction.chunks] == [
        (d, f"kb{i}", 0.8) for i, d in enumerate(DOCS)
    ]
    assert interaction.response == RESPONSE
    assert interaction.route == "invoke_agent support"
    assert interaction.session_id == "conv-1"
    assert out.assembled_spans == 3 and not out.skipped


def test_genai_older_event_forms() -> None:
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("GET /answer"):  # a plain root with no GenAI attributes
        with tracer.start_as_current_span("retrieval") as retriever:
            retriever.set_attribute("gen_ai.operation.name", "retrieval")
            retriever.set_attribute("gen_ai.retrieval.documents", json.dumps([{"content": d} for d in DOCS]))
        with tracer.start_as_current_span("chat model") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.add_event(
                "gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": QUERY}])}
            )
            llm.add_event(
                "gen_ai.content.completion",
                {"gen_ai.completion": json.dumps([{"role": "assistant", "content": RESPONSE}])},
            )
    out = assembler().add(decoded(recorder.spans()))
    (interaction,) = out.interactions
    # No query on the root or the retrieval: the call's own last user message is the query.
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert [c.content for c in interaction.chunks] == DOCS
    assert interaction.route == "GET /answer"
    assert out.assembled_spans == 2 and out.skipped == {NOT_RAG: 1}


@pytest.mark.parametrize(("listed", "interactions"), [("[]", 1), (None, 0)])
def test_genai_retrieval_that_lists_no_document_is_an_empty_one(
    listed: str | None, interactions: int
) -> None:
    """`gen_ai.retrieval.documents` = [] says the retrieval found nothing (an interaction without
    context, agent/signals.py counts it); no attribute at all says nothing about the context."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("GET /answer"):
        with recorder.tracer.start_as_current_span("retrieval") as retriever:
            retriever.set_attribute("gen_ai.operation.name", "retrieval")
            if listed is not None:
                retriever.set_attribute("gen_ai.retrieval.documents", listed)
        with recorder.tracer.start_as_current_span("chat model") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute(
                "gen_ai.input.messages",
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": QUERY}]}]),
            )
            llm.set_attribute(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": RESPONSE}]}]),
            )
    out = assembler().add(decoded(recorder.spans()))
    assert len(out.interactions) == interactions
    if interactions:
        (interaction,) = out.interactions
        assert interaction.chunks == () and interaction.empty_searches == 1
        assert (interaction.query, interaction.response) == (QUERY, RESPONSE)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_manual_layout_in_three_lines_inside_the_apps_own_span(encoding: str) -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("POST /ask") as request_span:
        request_span.set_attribute("http.route", "/ask")
        record_interaction(
            query=QUERY,
            chunks=DOCS,
            response=RESPONSE,
            chunk_ids=["a", "b", "c"],
            chunk_scores=[0.3, 0.2, 0.1],
        )
    (interaction,) = assembler().add(decoded(recorder.spans(), encoding)).interactions
    assert (interaction.query, interaction.response, interaction.route) == (QUERY, RESPONSE, "/ask")
    assert interaction.chunks == tuple(
        Chunk(d, i, s) for d, i, s in zip(DOCS, "abc", (0.3, 0.2, 0.1), strict=True)
    )


def test_manual_layout_without_a_current_span_starts_its_own() -> None:
    recorder = Recorder()
    assert not trace.get_current_span().is_recording()
    record_interaction(query=QUERY, chunks=DOCS, response=RESPONSE, tracer=recorder.tracer)
    (span,) = recorder.spans()
    assert span.name == "rag.interaction"
    (interaction,) = assembler().add(decoded([span])).interactions
    assert [c.content for c in interaction.chunks] == DOCS and interaction.chunks[0].id is None
    assert interaction.route == "rag.interaction"


def test_manual_parts_on_separate_spans_join_like_any_convention() -> None:
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("handler") as root:
        root.set_attribute("ragpulse.query", QUERY)
        with tracer.start_as_current_span("search") as search:
            search.set_attribute("ragpulse.chunks", DOCS)
        with tracer.start_as_current_span("generate") as generate:
            generate.set_attribute("ragpulse.response", RESPONSE)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert [c.content for c in interaction.chunks] == DOCS
    assert interaction.span_id == format(recorder.spans()[1].context.span_id, "016x")


def test_genai_structured_message_values_in_otlp_json() -> None:
    """Newer SDKs send messages as structured AnyValues (arrayValue of kvlistValue), not JSON text."""

    def kv(key: str, value: dict) -> dict:
        return {"key": key, "value": value}

    def message(role: str, text: str) -> dict:
        part = {
            "kvlistValue": {
                "values": [kv("type", {"stringValue": "text"}), kv("content", {"stringValue": text})]
            }
        }
        return {
            "kvlistValue": {
                "values": [kv("role", {"stringValue": role}), kv("parts", {"arrayValue": {"values": [part]}})]
            }
        }

    documents = {
        "arrayValue": {
            "values": [
                {
                    "kvlistValue": {
                        "values": [
                            kv("id", {"stringValue": f"d{i}"}),
                            kv("score", {"doubleValue": 0.5}),
                            kv("content", {"stringValue": doc}),
                        ]
                    }
                }
                for i, doc in enumerate(DOCS)
            ]
        }
    }
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    spans = [
        {
            "traceId": trace_id,
            "spanId": "b7ad6b7169203331",
            "name": "retrieval kb",
            "parentSpanId": "00f067aa0ba902b7",
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
            "attributes": [
                kv("gen_ai.operation.name", {"stringValue": "retrieval"}),
                kv("gen_ai.retrieval.documents", documents),
            ],
        },
        {
            "traceId": trace_id,
            "spanId": "c7ad6b7169203331",
            "name": "chat m",
            "parentSpanId": "00f067aa0ba902b7",
            "startTimeUnixNano": "3",
            "endTimeUnixNano": "4",
            "attributes": [
                kv("gen_ai.operation.name", {"stringValue": "chat"}),
                kv("gen_ai.input.messages", {"arrayValue": {"values": [message("user", QUERY)]}}),
                kv("gen_ai.output.messages", {"arrayValue": {"values": [message("assistant", RESPONSE)]}}),
            ],
        },
        {
            "traceId": trace_id,
            "spanId": "00f067aa0ba902b7",
            "name": "POST /chat",
            "startTimeUnixNano": "0",
            "endTimeUnixNano": "5",
            "attributes": [kv("http.route", {"stringValue": "/chat"})],
        },
    ]
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    from agent.otlp.decode import decode_request

    out = assembler().add(decode_request(body, "json").spans)
    (interaction,) = out.interactions
    assert (interaction.query, interaction.response, interaction.route) == (QUERY, RESPONSE, "/chat")
    assert [(c.content, c.id, c.score) for c in interaction.chunks] == [
        (d, f"d{i}", 0.5) for i, d in enumerate(DOCS)
    ]
    assert interaction.span_id == "c7ad6b7169203331"


@pytest.mark.parametrize(
    "value",
    [
        '{"score": 0.5}', "[1, 2]", '"text"', "3", "true", "null", "NaN", "-Infinity",
        ' {"a": 1}', '{"a": 1}\n', '\t[1]\r\n', '{"a": 1} {"b": 2}', '{"a": 1} x', '\ufeff{"a": 1}',
        "\x0b1", "{", "[" * 100_000, "plain text", " ", "",
    ],
)  # fmt: skip
def test_parse_json_reads_what_json_loads_reads(value: str) -> None:
    # Its fast path decodes a document that fills the string; json.loads decides the rest.
    try:
        expected = json.loads(value)
    except (ValueError, RecursionError):
        expected = None
    assert repr(parse_json(value)) == repr(expected)
