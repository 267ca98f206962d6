"""Each convention, recorded with the real SDK and encoded with the real OTLP encoder, assembled."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from ragpulse_instrument import record_interaction

from agent.model import Chunk
from agent.otlp.assemble import NOT_RAG
from tests.otlp_support import Recorder, assembler, decoded, set_all
from tests.support import openinference_single_span

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
            # A vector-DB instrumentor's query span: one db.query.result event per hit.
            with tracer.start_as_current_span("chroma.query") as db:
                db.set_attribute("db.system", "chroma")
                for i, doc in enumerate(DOCS):
                    db.add_event(
                        "db.query.result",
                        {
                            "db.query.result.id": f"c{i}",
                            "db.query.result.score": 1.0 - i / 4,
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
        assert [(c.id, c.score) for c in interaction.chunks] == [("c0", 1.0), ("c1", 0.75), ("c2", 0.5)]
    else:
        assert [(c.id, c.score) for c in interaction.chunks] == [(f"v{i}", 0.5) for i in range(3)]
    assert interaction.response == RESPONSE
    assert interaction.route == "RetrievalQA.workflow"
    assert interaction.session_id == "s-1"
    llm = next(s for s in recorder.spans() if s.name == "openai.chat")
    assert interaction.span_id == format(llm.context.span_id, "016x")
    assert out.assembled_spans == 3 and not out.skipped


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
