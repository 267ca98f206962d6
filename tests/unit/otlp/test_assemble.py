"""TraceAssembler: buffering by trace, emission rules, bounds, labels and loop protection."""

from __future__ import annotations

import time

import pytest

from agent.config import AssemblySettings
from agent.otlp import SELF_RESOURCE_ATTRIBUTE, assemble, mark_own_telemetry
from agent.otlp.assemble import (
    DUPLICATE,
    EVICTED,
    INCOMPLETE,
    LATE,
    MAX_CHUNK_BYTES,
    MAX_SPANS_PER_TRACE,
    MAX_TRACES,
    NOT_RAG,
    PIECE_OVERHEAD_BYTES,
    SELF,
)
from agent.series_budget import OVERFLOW
from tests.support.otlp import (
    CONVENTIONS,
    Clock,
    Recorder,
    assembler,
    decoded,
    otlp_json,
    protobuf,
    set_all,
    total,
)
from tests.support.spans import DOCS, QUERY, RESPONSE, hexid, openinference_single_span, rag_trace


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (2, 0, 1), (1, 2, 0)])
def test_spans_split_across_requests_in_any_order(order: tuple[int, ...]) -> None:
    recorder = Recorder()
    ids = rag_trace(recorder)
    spans = recorder.spans()  # end order: retriever, llm, root
    a = assembler()
    reports = []
    for position, index in enumerate(order):
        report = a.add(decoded([spans[index]]))
        reports.append(report)
        if position < 2:
            # Nothing is emitted before the trace is complete, even when the root came first.
            assert report.interactions == [] and report.buffered_spans == position + 1
    out = total(reports)
    (interaction,) = out.interactions
    assert interaction.span_id == ids["llm"]
    assert [c.content for c in interaction.chunks] == DOCS
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert out.assembled_spans == 3 and not out.skipped and out.buffered_spans == 0


def test_protobuf_and_json_requests_of_one_trace_mix() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    retriever, llm, root = recorder.spans()
    a = assembler()
    from agent.otlp.decode import decode_request

    first = a.add(decode_request(otlp_json([retriever, llm]), "json").spans)
    second = a.add(decode_request(protobuf([root]), "protobuf").spans)
    assert first.interactions == [] and len(second.interactions) == 1


def test_without_a_root_the_trace_is_assembled_after_the_bounded_wait() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    retriever, llm, _root = recorder.spans()
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    assert a.add(decoded([retriever, llm])).interactions == []
    clock.now = 4.0
    assert a.add([]).buffered_spans == 2
    assert a.expire(4.9).interactions == []
    out = a.expire(5.0)
    (interaction,) = out.interactions
    # Without the root, the query is the retriever's.
    assert interaction.query == QUERY + " (as retrieved)" and interaction.response == RESPONSE
    assert out.assembled_spans == 2 and out.buffered_spans == 0


def test_an_incomplete_trace_is_counted_when_the_wait_ends() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    retriever, _llm, root = recorder.spans()
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    out = a.add(decoded([retriever, root]))  # the root arrived but the model call did not
    assert out.interactions == [] and out.buffered_spans == 2
    out = a.expire(5.0)
    assert out.interactions == [] and out.skipped == {INCOMPLETE: 2} and out.buffered_spans == 0


def test_flush_accounts_for_everything_buffered() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    retriever, llm, _root = recorder.spans()
    a = assembler()
    a.add(decoded([retriever]))
    a.add(decoded([llm]))
    out = a.flush()
    assert len(out.interactions) == 1 and out.assembled_spans == 2 and out.buffered_spans == 0


def test_one_interaction_per_model_call_with_the_documents_it_saw() -> None:
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("agent") as root:
        set_all(root, {"openinference.span.kind": "AGENT", "input.value": QUERY})
        with tracer.start_as_current_span("rewrite") as rewrite:  # no retrieval before it
            set_all(rewrite, {"openinference.span.kind": "LLM", "output.value": "password reset steps"})
        for step, docs in enumerate((DOCS[:1], DOCS[1:])):
            with tracer.start_as_current_span(f"retrieve-{step}") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(docs):
                    retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
            with tracer.start_as_current_span(f"answer-{step}") as llm:
                set_all(llm, {"openinference.span.kind": "LLM", "output.value": f"answer {step}"})
    spans = recorder.spans()
    out = assembler().add(decoded(spans))
    by_name = {s.name: format(s.context.span_id, "016x") for s in spans}
    assert [(i.span_id, [c.content for c in i.chunks], i.response, i.query) for i in out.interactions] == [
        (by_name["answer-0"], DOCS[:1], "answer 0", QUERY),
        (by_name["answer-1"], DOCS[1:], "answer 1", QUERY),
    ]
    # root, two retrievers, two answers; the rewrite call had no context
    assert out.assembled_spans == 5 and out.skipped == {NOT_RAG: 1}


def test_nested_llm_spans_make_one_interaction_named_by_the_innermost() -> None:
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("query") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY})
        with tracer.start_as_current_span("retrieve") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            retriever.set_attribute("retrieval.documents.0.document.content", DOCS[0])
        with tracer.start_as_current_span("LLM.predict") as outer:
            set_all(outer, {"openinference.span.kind": "LLM", "output.value": RESPONSE})
            with tracer.start_as_current_span("LLM.complete") as inner:
                set_all(inner, {"openinference.span.kind": "LLM", "output.value": RESPONSE})
    out = assembler().add(decoded(recorder.spans()))
    (interaction,) = out.interactions
    assert interaction.span_id == hexid(inner)
    assert out.assembled_spans == 4 and not out.skipped


def test_a_single_span_inside_a_request_span_waits_for_the_root_and_takes_its_route() -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("POST /v1/ask") as server:
        server.set_attribute("http.route", "/v1/ask")
        openinference_single_span(recorder.tracer, query=QUERY, chunks=DOCS, response=RESPONSE)
    rag_span, server_span = recorder.spans()
    a = assembler()
    assert a.add(decoded([rag_span])).interactions == []  # it has a parent: wait for the trace
    out = a.add(decoded([server_span]))
    (interaction,) = out.interactions
    assert interaction.route == "/v1/ask" and interaction.span_id == format(rag_span.context.span_id, "016x")
    assert out.skipped == {NOT_RAG: 1}


def test_route_label_cardinality_is_capped() -> None:
    recorder = Recorder()
    for route in ("/a", "/b", "/c", "/a"):
        rag_trace(recorder, route=route)
    out = assembler(max_label_values=2).add(decoded(recorder.spans()))
    assert [i.route for i in out.interactions] == ["/a", "/b", OVERFLOW, "/a"]


def test_route_attributes_are_tried_in_order_and_the_root_name_is_the_fallback() -> None:
    recorder = Recorder()
    rag_trace(recorder, root_name="answer_question")
    rag_trace(recorder, route="/ask")
    out = assembler(route_attributes=("app.route", "http.route")).add(decoded(recorder.spans()))
    assert [i.route for i in out.interactions] == ["answer_question", "/ask"]


def test_services_come_from_the_resource() -> None:
    one, two = Recorder("billing-bot"), Recorder("docs-bot")
    rag_trace(one)
    rag_trace(two)
    out = assembler().add(decoded(one.spans()) + decoded(two.spans()))
    assert sorted(i.service for i in out.interactions) == ["billing-bot", "docs-bot"]


def test_the_agents_own_spans_are_never_assembled() -> None:
    own = Recorder("ragpulse", **{SELF_RESOURCE_ATTRIBUTE: "true"})
    rag_trace(own)  # e.g. a judge call traced by litellm's instrumentation in the agent's process
    app = Recorder("rag-app")
    rag_trace(app)
    out = assembler().add(decoded(own.spans()) + decoded(app.spans()))
    assert [i.service for i in out.interactions] == ["rag-app"]
    assert out.skipped == {SELF: 3} and out.assembled_spans == 3


def test_max_traces_evicts_the_oldest_and_counts_it() -> None:
    recorder = Recorder()
    for _ in range(3):
        rag_trace(recorder)
    spans = recorder.spans()
    a = assembler(max_traces=2)
    reports = [a.add(decoded([spans[i]])) for i in (0, 3, 6)]  # three retrievers, no roots yet
    assert reports[-1].evictions == {MAX_TRACES: 1} and reports[-1].skipped == {EVICTED: 1}
    assert reports[-1].buffered_traces == 2
    out = a.add(decoded([spans[i] for i in (4, 5, 7, 8)]))
    assert len(out.interactions) == 2 and out.buffered_traces == 0
    # The evicted trace is closed: its LLM and root are late, never a trace without documents.
    late = a.add(decoded([spans[1], spans[2]]))
    assert late.interactions == [] and late.skipped == {LATE: 2} and late.buffered_traces == 0
    assert a.flush().skipped == {}


def test_max_spans_per_trace_drops_later_spans_and_counts_them() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    out = assembler(max_spans_per_trace=2).add(decoded(recorder.spans()))
    assert out.evictions == {MAX_SPANS_PER_TRACE: 1} and out.skipped[EVICTED] == 1
    assert out.buffered_spans == 2


def test_max_chunk_bytes_evicts_oldest_traces() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    rag_trace(recorder)
    spans = recorder.spans()
    # What one retriever holds: its text, and its piece.
    size = (
        sum(len(d) for d in DOCS) + len(QUERY + " (as retrieved)") + PIECE_OVERHEAD_BYTES + len("retriever")
    )
    a = assembler(max_chunk_bytes=size + 10)
    assert a.add(decoded([spans[0]])).evictions == {}
    out = a.add(decoded([spans[3]]))
    assert out.evictions == {MAX_CHUNK_BYTES: 1} and out.skipped == {EVICTED: 1} and out.buffered_spans == 1


def test_a_redelivered_span_is_counted_once() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    retriever, llm, root = recorder.spans()
    a = assembler()
    a.add(decoded([retriever]))
    again = a.add(decoded([retriever, llm]))
    assert again.skipped == {DUPLICATE: 1}
    assert len(a.add(decoded([root])).interactions) == 1


def test_non_rag_traffic_is_not_buffered() -> None:
    recorder = Recorder()
    with (
        recorder.tracer.start_as_current_span("GET /health"),
        recorder.tracer.start_as_current_span("SELECT 1"),
    ):
        pass
    out = assembler().add(decoded(recorder.spans()))
    assert out.skipped == {NOT_RAG: 2} and out.buffered_traces == 0


def test_the_agent_marks_its_process_so_the_sdk_tags_its_own_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"OTEL_RESOURCE_ATTRIBUTES": "team=search"}
    mark_own_telemetry(environ)
    mark_own_telemetry(environ)  # idempotent
    assert environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=search,ragpulse.agent=true"
    # An SDK set up later in the agent's process (e.g. litellm's callback) tags its resource:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", environ["OTEL_RESOURCE_ATTRIBUTES"])
    own = Recorder("ragpulse")
    assert own.provider.resource.attributes[SELF_RESOURCE_ATTRIBUTE] == "true"
    rag_trace(own)
    assert assembler().add(decoded(own.spans())).skipped == {SELF: 3}


# -- every buffered span counts towards the byte bound ----------------------------------------------


def busy_trace(recorder: Recorder, noise: int, *, llm: bool = True) -> None:
    """An HTTP root → CHAIN → RETRIEVER, `noise` non-RAG spans (DB calls, HTTP), then the LLM call."""
    tracer = recorder.tracer
    with tracer.start_as_current_span("POST /ask") as http:
        http.set_attribute("http.route", "/ask")
        with tracer.start_as_current_span("chain") as chain:
            set_all(chain, {"openinference.span.kind": "CHAIN", "input.value": QUERY})
            with tracer.start_as_current_span("retriever") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(DOCS):
                    retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
            for i in range(noise):
                with tracer.start_as_current_span(f"SELECT chunk {i}") as db:
                    db.set_attribute("db.system", "postgresql")
            if llm:
                with tracer.start_as_current_span("llm") as call:
                    set_all(call, {"openinference.span.kind": "LLM", "output.value": RESPONSE})


def _trace_bodies(traces: int, noise: int) -> list[list[bytes]]:
    """Per trace, its spans as the SDK exports them: in end order, 200 per request."""
    bodies = []
    for _ in range(traces):
        recorder = Recorder()
        busy_trace(recorder, noise)
        spans = recorder.spans()
        bodies.append([protobuf(spans[i : i + 200]) for i in range(0, len(spans), 200)])
    return bodies


def test_non_rag_spans_of_open_traces_count_towards_the_byte_bound() -> None:
    from agent.otlp.decode import decode_request

    bodies = _trace_bodies(traces=6, noise=1_000)
    bound = 2 * 1_000 * PIECE_OVERHEAD_BYTES  # room for about two such traces
    a = assembler(max_chunk_bytes=bound, max_spans_per_trace=2_000)
    evictions = 0
    for trace in bodies:
        for body in trace[:-1]:  # everything but the last request (the LLM call and the roots)
            out = a.add(decode_request(body, "protobuf").spans)
            assert out.buffered_bytes <= bound
            evictions += out.evictions[MAX_CHUNK_BYTES]
    assert evictions >= 3  # six 1,000-span traces cannot all be held in room for two
    assert a.add([]).buffered_traces <= 2


def test_the_byte_estimate_covers_the_memory_really_held() -> None:
    import gc
    import tracemalloc

    from agent.otlp.decode import decode_request

    bodies = _trace_bodies(traces=10, noise=1_000)
    a = assembler(max_spans_per_trace=2_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for trace in bodies:
            for body in trace[:-1]:
                spans = decode_request(body, "protobuf").spans
                out = a.add(spans)
                del spans
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert out.buffered_traces == 10
    # The estimate must not undercount (a bound that undercounts bounds nothing), nor wildly overcount.
    assert held <= out.buffered_bytes <= 3 * held, (held, out.buffered_bytes)


def test_non_rag_spans_cannot_push_the_llm_span_out_of_a_full_trace() -> None:
    from agent.otlp.decode import decode_request

    recorder = Recorder()
    busy_trace(recorder, noise=50)
    spans = recorder.spans()  # end order: retriever, 50 DB spans, llm, chain, http root
    a = assembler(max_spans_per_trace=10)
    out = a.add(decode_request(protobuf(spans[:51]), "protobuf").spans)
    assert out.evictions == {MAX_SPANS_PER_TRACE: 40}  # links beyond the quota of 10 are not held
    out = a.add(decode_request(protobuf(spans[51:]), "protobuf").spans)
    assert [(i.query, i.response, i.route) for i in out.interactions] == [(QUERY, RESPONSE, "/ask")]
    assert out.buffered_traces == 0 and out.buffered_bytes == 0


def test_a_retrieval_that_found_nothing_is_an_interaction_without_context() -> None:
    """An index that lost its documents must show: the answer is assembled with no chunks and one
    empty search (judged metrics skip it; the signals count it, agent/signals.py)."""
    recorder = Recorder()
    ids = rag_trace(recorder, docs=())
    out = assembler().add(decoded(recorder.spans()))
    (interaction,) = out.interactions
    assert interaction.span_id == ids["llm"] and interaction.chunks == ()
    assert (interaction.query, interaction.response) == (QUERY, RESPONSE)
    assert (interaction.searches, interaction.empty_searches) == (1, 1)


def test_a_retrieval_whose_text_is_not_recorded_is_not_an_empty_one() -> None:
    recorder = Recorder()
    rag_trace(recorder, docs=(), doc_ids=("doc-1", "doc-2"))  # hits by id only: context unknown
    assert assembler().add(decoded(recorder.spans())).interactions == []


def test_a_chain_without_a_retriever_is_no_interaction() -> None:
    """Only a retrieval that ran makes an answer without context an interaction."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("chain") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        with recorder.tracer.start_as_current_span("llm") as llm:
            set_all(llm, {"openinference.span.kind": "LLM", "output.value": RESPONSE})
    out = assembler().add(decoded(recorder.spans()))
    assert out.interactions == []


def test_build_makes_the_assembler_its_settings_section_describes() -> None:
    section = AssemblySettings(route_attributes=("app.route",), wait_seconds=5.0, max_traces=1)
    a = assemble.build(section, CONVENTIONS, lambda service, route: (service, route), capture=("http.route",))
    recorder = Recorder()
    for _ in range(3):
        rag_trace(recorder, route="/ask", root_name="answer")
    spans = recorder.spans()
    (interaction,) = a.add(decoded(spans[0:3])).interactions
    # http.route is not a route attribute of this section (the root's name is the fallback), and
    # it is captured for the keep rules.
    assert interaction.route == "answer" and interaction.attributes == {"http.route": "/ask"}
    assert a.add(decoded([spans[3]])).evictions == {}
    assert a.add(decoded([spans[6]])).evictions == {MAX_TRACES: 1}  # one trace buffered at most
    started = time.monotonic()
    assert a.expire(started + 4.0).skipped == {}  # within the 5 s wait
    assert a.expire(started + 5.5).skipped == {INCOMPLETE: 1}
