"""Spans that arrive after their trace was closed, and links that arrive before it opened
(docs/intake.md, "Late spans"), with spans recorded by the real OpenTelemetry SDK."""

from __future__ import annotations

import gc
import itertools
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import set_span_in_context

from agent.otlp import probes
from agent.otlp.assemble import INCOMPLETE, LATE, NOT_RAG, TRACE_MISSING, Assembly
from agent.otlp.buffer import CLOSED_TRACE_BYTES, MAX_WAIT_FACTOR, ClosedTraces, EarlyLinks
from tests.support.otlp import Clock, Recorder, assembler, decoded, set_all
from tests.support.spans import DOCS, QUERY, RESPONSE, rag_trace


def two_calls(recorder: Recorder) -> dict[str, ReadableSpan]:
    """CHAIN root → (retriever → LLM) twice: a trace with two interactions; spans by name."""
    tracer = recorder.tracer
    with tracer.start_as_current_span("chain") as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        for n in (1, 2):
            with tracer.start_as_current_span(f"retriever{n}") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("retrieval.documents.0.document.content", DOCS[n - 1])
            with tracer.start_as_current_span(f"llm{n}") as llm:
                set_all(llm, {"openinference.span.kind": "LLM", "output.value": f"{RESPONSE} ({n})"})
    return {span.name: span for span in recorder.spans()}


def accounted(received: int, reports: list[Assembly]) -> None:
    assembled = sum(r.assembled_spans for r in reports)
    skipped = sum(sum(r.skipped.values()) for r in reports)
    assert received == assembled + skipped + reports[-1].buffered_spans


def test_a_span_arriving_after_its_trace_was_assembled_is_counted_late_never_a_second_interaction() -> None:
    spans = two_calls(Recorder())
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    first = a.add(decoded([spans[n] for n in ("retriever1", "llm1", "chain")]))
    (interaction,) = first.interactions  # the root is in and nothing is missing above a span
    assert interaction.response == f"{RESPONSE} (1)" and first.buffered_traces == 0
    late = a.add(decoded([spans["retriever2"], spans["llm2"]]))
    assert late.interactions == [] and late.skipped == {LATE: 2}
    assert late.buffered_traces == 0 and late.buffered_spans == 0
    clock.now = 60.0  # before: the two opened a trace of their own, assembled after the wait
    reports = [first, late, a.expire(clock.now), a.flush()]
    assert [i for r in reports for i in r.interactions] == [interaction]
    accounted(5, reports)


def test_the_root_request_delivered_again_is_assembled_again_for_the_idempotency_keys() -> None:
    recorder = Recorder()
    rag_trace(recorder)
    spans = recorder.spans()
    a = assembler()
    (first,) = a.add(decoded(spans)).interactions
    # Kafka delivers at least once: the same message again is not late; it makes the same
    # interaction (same trace and span id, so the same idempotency key), scored once downstream.
    again = a.add(decoded(spans))
    assert again.interactions == [first] and LATE not in again.skipped
    # A span the trace never had is late, even with a redelivered root: only the root's request
    # is taken again.
    late = a.add(decoded(spans[:1]))
    assert late.skipped == {LATE: 1} and late.interactions == []


def test_a_trace_whose_spans_keep_arriving_waits_past_the_wait_up_to_its_cap() -> None:
    spans = two_calls(Recorder())
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    # A long run exported in batches every 4 s, children first: the root comes at 12 s.
    for now, names in ((0.0, ["retriever1"]), (4.0, ["llm1"]), (8.0, ["retriever2", "llm2"])):
        clock.now = now
        assert (
            a.expire(now).interactions == [] and a.add(decoded([spans[n] for n in names])).interactions == []
        )
    clock.now = 12.0
    assert a.expire(12.0).buffered_traces == 1  # 12 s after its first span, 4 s after its last
    out = a.add(decoded([spans["chain"]]))
    assert sorted(i.response or "" for i in out.interactions) == [f"{RESPONSE} (1)", f"{RESPONSE} (2)"]
    # Fed more slowly than the wait, a trace is given up on a wait after its last span...
    b = assembler(wait=5.0, clock=clock)
    clock.now = 0.0
    b.add(decoded([spans["retriever1"]]))
    clock.now = 4.0
    b.add(decoded([spans["llm1"]]))
    assert b.expire(8.9).buffered_traces == 1
    assert b.expire(9.0).skipped == {INCOMPLETE: 2}  # no query: the root never came


def test_a_trace_fed_forever_is_given_up_on_after_max_wait_factor_waits() -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("chain"):
        for n in range(MAX_WAIT_FACTOR * 2):
            with recorder.tracer.start_as_current_span(f"retriever{n}") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("retrieval.documents.0.document.content", DOCS[0])
    children = recorder.spans()[:-1]
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    for step, child in enumerate(children):
        clock.now = step * 4.0  # a span every 4 s, within the 5 s wait
        expired = a.expire(clock.now)
        if expired.skipped:
            break
        a.add(decoded([child]))
    assert clock.now == 52.0 and step == 13  # the first tick past 10 waits of 5 s
    assert expired.skipped == {INCOMPLETE: 13} and expired.buffered_traces == 0


def test_a_trace_given_up_on_is_closed_too() -> None:
    recorder = Recorder()
    ids = rag_trace(recorder)
    spans = {hexid_of(s): s for s in recorder.spans()}
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    a.add(decoded([spans[ids["retriever"]]]))
    clock.now = 6.0
    assert a.expire(clock.now).skipped == {INCOMPLETE: 1}  # no model call came within the wait
    late = a.add(decoded([spans[ids["llm"]], spans[ids["root"]]]))
    assert late.interactions == [] and late.skipped == {LATE: 2} and late.buffered_traces == 0


def hexid_of(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def test_spans_of_one_request_are_attached_whatever_their_order() -> None:
    spans = two_calls(Recorder())
    out = assembler().add(decoded([spans[n] for n in ("chain", "llm2", "retriever1", "llm1", "retriever2")]))
    assert sorted(i.response or "" for i in out.interactions) == [f"{RESPONSE} (1)", f"{RESPONSE} (2)"]
    assert LATE not in out.skipped


def test_a_root_that_arrives_alone_and_first_is_kept_for_its_trace() -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("POST /ask") as server:
        server.set_attribute("http.route", "/ask")
        rag_trace(recorder)
    spans = recorder.spans()  # end order: retriever, llm, chain, POST /ask
    a = assembler()
    first = a.add(decoded([spans[-1]]))
    # Nothing RAG: accounted at once and no trace opened, but kept as a link (bounded).
    assert first.skipped == {NOT_RAG: 1} and first.buffered_traces == 0
    out = a.add(decoded(spans[:-1]))
    # Emitted at once (before, the root was dropped: the trace waited out the wait, and its
    # route was the chain's class name).
    (interaction,) = out.interactions
    assert interaction.route == "/ask" and interaction.query == QUERY
    assert [c.content for c in interaction.chunks] == DOCS
    assert out.buffered_traces == 0 and out.assembled_spans == 3


def test_a_probe_span_arriving_after_its_trace_was_assembled_counts_the_probe_missing() -> None:
    prober, app = Recorder("ragpulse-prober"), Recorder("capitals-app")
    with (
        prober.tracer.start_as_current_span(
            "ragpulse.probe",
            context=otel_context.Context(),
            attributes={probes.SET: "golden", probes.ITEM: "g-fr", probes.REFERENCE: "Paris."},
        ) as root,
        app.tracer.start_as_current_span("rag", context=set_span_in_context(root)) as span,
    ):
        span.set_attribute("ragpulse.query", "What is the capital of France?")
        span.set_attribute("ragpulse.chunks", ["Paris is the capital of France."])
        span.set_attribute("ragpulse.response", "Paris.")
    clock = Clock()
    a = assembler(wait=5.0, clock=clock)
    assert a.add(decoded(app.spans())).interactions == []  # waits for the prober's root
    clock.now = 6.0
    (unmarked,) = a.expire(clock.now).interactions
    assert unmarked.probe is None
    late = a.add(decoded(prober.spans()))
    assert late.skipped == {LATE: 1} and late.probe_failures == {("golden", TRACE_MISSING): 1}
    assert late.buffered_traces == 0


def test_closed_trace_ids_are_bounded_oldest_forgotten_first() -> None:
    closed = ClosedTraces(2)
    for trace_id in ("a", "b", "a", "c"):
        closed.add(trace_id, f"root-{trace_id}")
    # "a" was closed again after "b" (a redelivery assembled again), so "b" was the oldest.
    assert "b" not in closed and len(closed) == 2
    assert (closed.root("a"), closed.root("c")) == ("root-a", "root-c")


def test_a_remembered_trace_id_costs_what_the_docs_say() -> None:
    ids = [format(n, "032x") for n in range(20_000)]
    closed = ClosedTraces(len(ids))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for trace_id in ids:
            # The ids are the closed trace's: count their strs as held.
            closed.add(format(int(trace_id, 16), "032x"), trace_id[16:].upper())
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_id = held / len(ids)
    assert CLOSED_TRACE_BYTES / 2 <= per_id <= CLOSED_TRACE_BYTES, per_id


def test_links_of_unopened_traces_are_bounded_oldest_trace_first() -> None:
    early: EarlyLinks[str] = EarlyLinks(3)
    for trace_id, key in (("t1", "a"), ("t1", "b"), ("t2", "c"), ("t2", "d"), ("t3", "e")):
        early.add(trace_id, key, key.upper(), 400)
    assert early.items == 3
    assert early.take("t1") == []  # the oldest trace's links went first
    assert [key for key, _, _ in early.take("t2")] == ["c", "d"]
    assert [(key, item) for key, item, _ in early.take("t3")] == [("e", "E")]
    assert early.items == 0 and len(early) == 0


# Two chain traces under HTTP server spans, recorded once (the SDK is real; hypothesis varies only
# the arrival).
_RECORDER = Recorder()
for _route in ("/ask", "/search"):
    with _RECORDER.tracer.start_as_current_span(f"POST {_route}") as _server:
        _server.set_attribute("http.route", _route)
        with _RECORDER.tracer.start_as_current_span("db.query"):
            pass  # a link that ends first, before anything RAG of its trace
        rag_trace(_RECORDER)
_SPANS = _RECORDER.spans()


def _summary(out: list[Assembly]) -> list[tuple[object, ...]]:
    found = [i for r in out for i in r.interactions]
    return sorted(
        (i.trace_id, i.route, i.query, tuple(c.content for c in i.chunks), i.response) for i in found
    )


@settings(max_examples=200, deadline=None)
@given(order=st.permutations(range(len(_SPANS))), cuts=st.sets(st.integers(1, len(_SPANS) - 1)))
def test_any_arrival_order_and_batching_gives_the_interactions_of_the_export_order(
    order: list[int], cuts: set[int]
) -> None:
    expected = _summary([assembler().add(decoded(_SPANS))])
    arrival = [_SPANS[i] for i in order]
    bounds = [0, *sorted(cuts), len(arrival)]
    a = assembler()
    reports = [a.add(decoded(arrival[lo:hi])) for lo, hi in itertools.pairwise(bounds)]
    reports.append(a.flush())
    assert _summary(reports) == expected and len(expected) == 2
    accounted(len(_SPANS), reports)
