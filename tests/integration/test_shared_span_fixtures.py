"""The real-world span fixtures (../shared/data/otel_spans): real instrumentors' traces assembled.

Each trace was emitted by an unmodified instrumentor from PyPI (LlamaIndex and LangChain under
OpenInference, LangChain under OpenLLMetry) and encoded by the real OTLP encoder; the manifest
holds the query, the three passages in order and the response each trace must assemble to.
"""

from __future__ import annotations

import json
import random

import pytest

from agent.otlp.assemble import NOT_RAG, Assembly, Labeller, TraceAssembler
from agent.otlp.conventions.known import known_conventions
from agent.otlp.decode import decode_request
from agent.series_budget import SeriesBudget
from tests.support.repo import SHARED_DATA

SPANS = SHARED_DATA / "otel_spans"
STACKS = {
    "llamaindex_openinference": (
        "ragtruth-qa-llamaindex",
        "RetrieverQueryEngine.query",
        "ReplayLLM.complete",
    ),
    "langchain_openinference": ("ragtruth-qa-langchain", "RunnableSequence", "FakeListChatModel"),
    "langchain_openllmetry": (
        "ragtruth-qa-langchain-openllmetry",
        "RunnableSequence.workflow",
        "FakeListChatModel.chat",
    ),
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not SPANS.is_dir(), reason="shared span fixtures are not present"),
]


def assembler(wait: float = 30.0, clock=None, metadata: tuple[str, ...] = ()) -> TraceAssembler:  # type: ignore[no-untyped-def]
    return TraceAssembler(
        known_conventions(metadata),
        Labeller(("http.route",), SeriesBudget(10_000, 100)),
        wait_seconds=wait,
        max_traces=100,
        max_spans_per_trace=100,
        max_chunk_bytes=64 * 1024 * 1024,
        **({"clock": clock} if clock else {}),
    )


def manifest(stack: str) -> list[dict]:
    return [json.loads(line) for line in (SPANS / f"{stack}.manifest.jsonl").read_text().splitlines()]


def bodies(stack: str, encoding: str) -> dict[str, bytes]:
    """trace id -> one ExportTraceServiceRequest, as the file holds it."""
    if encoding == "protobuf":
        return {p.stem: p.read_bytes() for p in sorted((SPANS / f"{stack}_otlp_pb").glob("*.pb"))}
    out = {}
    for line in (SPANS / f"{stack}.otlp.jsonl").read_text().splitlines():
        first = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        out[first["traceId"]] = line.encode()
    return out


def merged(*assemblies: Assembly) -> Assembly:
    total = Assembly()
    for a in assemblies:
        total.interactions.extend(a.interactions)
        total.assembled_spans += a.assembled_spans
        total.skipped.update(a.skipped)
    total.buffered_spans = assemblies[-1].buffered_spans
    return total


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_each_fixture_trace_assembles_to_its_manifest(stack: str, encoding: str) -> None:
    service, route, llm_span = STACKS[stack]
    expected = {row["trace_id"]: row for row in manifest(stack)}
    requests = bodies(stack, encoding)
    assert sorted(requests) == sorted(expected)
    a = assembler()
    for trace_id, body in requests.items():
        decoded = decode_request(body, encoding)  # type: ignore[arg-type]
        assert decoded.rejected == []
        assert len(decoded.spans) == expected[trace_id]["span_count"]
        out = a.add(decoded.spans)
        # The root closes each trace: everything is accounted for at once, nothing stays buffered.
        assert out.buffered_spans == 0
        assert out.assembled_spans + sum(out.skipped.values()) == len(decoded.spans)
        assert set(out.skipped) <= {NOT_RAG}
        (interaction,) = out.interactions
        row = expected[trace_id]
        assert interaction.trace_id == trace_id
        assert interaction.query == row["expected_query"]
        assert [c.content for c in interaction.chunks] == row["expected_chunks"]
        assert interaction.response == row["expected_response"]
        assert interaction.service == service
        assert interaction.route == route
        llm = next(s for s in decoded.spans if s.name == llm_span)
        assert interaction.span_id == llm.span_id
        assert interaction.end_time_unix_nano == llm.end_time_unix_nano


def test_retrieval_scores_and_ids_come_through_where_the_instrumentor_records_them() -> None:
    for stack in ("llamaindex_openinference", "langchain_openinference"):
        rows = {row["trace_id"]: row for row in manifest(stack)}
        for trace_id, body in bodies(stack, "protobuf").items():
            (interaction,) = assembler().add(decode_request(body, "protobuf").spans).interactions
            ids = [f"ragtruth-{rows[trace_id]['source_id']}-p{i}" for i in (1, 2, 3)]
            # LlamaIndex records document.id and document.score; the LangChain instrumentor
            # records neither, and the score is read from the document's metadata JSON.
            assert [c.id for c in interaction.chunks] == (
                ids if stack.startswith("llamaindex") else [None] * 3
            )
            assert all(isinstance(c.score, float) and 0 <= c.score <= 1 for c in interaction.chunks)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_document_metadata_comes_through_from_each_instrumentor(stack: str) -> None:
    """The retriever's documents carry `{"source", "passage_index"}` metadata (JSON under
    OpenInference, inside the documents JSON under OpenLLMetry): read when configured."""
    for body in bodies(stack, "protobuf").values():
        spans = decode_request(body, "protobuf").spans
        (interaction,) = assembler(metadata=("source", "passage_index")).add(spans).interactions
        assert [c.metadata for c in interaction.chunks] == [
            (("source", "MS MARCO via RAGTruth"), ("passage_index", str(i))) for i in (1, 2, 3)
        ]
        (plain,) = assembler().add(spans).interactions
        assert all(c.metadata == () for c in plain.chunks)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_spans_split_across_messages_and_shuffled_assemble_the_same(stack: str) -> None:
    """Each span in its own request, in a shuffled order: the trace waits, then assembles."""
    rows = {row["trace_id"]: row for row in manifest(stack)}
    now = [0.0]
    a = assembler(wait=5.0, clock=lambda: now[0])
    reports = []
    rng = random.Random(7)
    all_spans = [
        s for body in bodies(stack, "protobuf").values() for s in decode_request(body, "protobuf").spans
    ]
    rng.shuffle(all_spans)
    for span in all_spans:
        reports.append(a.add([span]))
    now[0] = 10.0
    reports.append(a.expire(now[0]))
    total = merged(*reports)
    assert total.buffered_spans == 0
    assert total.assembled_spans + sum(total.skipped.values()) == len(all_spans)
    assert sorted(i.trace_id for i in total.interactions) == sorted(rows)
    for interaction in total.interactions:
        row = rows[interaction.trace_id]
        assert interaction.query == row["expected_query"]
        assert [c.content for c in interaction.chunks] == row["expected_chunks"]
        assert interaction.response == row["expected_response"]


def one_request_per_span(body: bytes) -> list[bytes]:
    """Split a fixture request into one request per span (same resource and scope), root first."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    out = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in reversed(scope_spans.spans):  # fixtures list spans in end order: reverse it
                single = ExportTraceServiceRequest()
                rs = single.resource_spans.add()
                rs.resource.CopyFrom(resource_spans.resource)
                ss = rs.scope_spans.add()
                ss.scope.CopyFrom(scope_spans.scope)
                ss.spans.add().CopyFrom(span)
                out.append(single.SerializeToString())
    return out


@pytest.mark.integration
def test_the_agent_assembles_fixture_traces_sent_span_by_span_and_without_roots() -> None:
    """Through the real agent: each span its own OTLP/HTTP request, roots first (out of order);
    for the LangChain + OpenInference traces the roots are withheld, so only the bounded wait
    assembles them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from tests.support.agent_process import AgentProcess
    from tests.support.net import http_post

    agent = AgentProcess(env={"RAGPULSE_ASSEMBLY_WAIT_SECONDS": "1"})
    sent = 0
    try:
        agent.wait_ready()
        for stack in sorted(STACKS):
            for body in bodies(stack, "protobuf").values():
                for request in one_request_per_span(body):
                    span = (
                        ExportTraceServiceRequest.FromString(request)
                        .resource_spans[0]
                        .scope_spans[0]
                        .spans[0]
                    )
                    if stack == "langchain_openinference" and not span.parent_span_id:
                        continue
                    status, _, _ = http_post(
                        agent.traces_url, request, {"Content-Type": "application/x-protobuf"}
                    )
                    assert status == 200
                    sent += 1
        scrape = agent.wait_for(
            lambda s: (
                s.total("ragpulse_interactions_total") == 24
                and s.value("ragpulse_assembler_buffered_spans") == 0
            ),
            timeout=30,
        )
    finally:
        agent.kill()
    for stack, (service, route, _) in STACKS.items():
        if stack == "langchain_openinference":
            route = "FakeListChatModel"  # no root: the outermost known ancestor of the call is itself
        assert scrape.value("ragpulse_interactions_total", service=service, route=route) == 8, stack
    assert scrape.value("ragpulse_spans_received_total", source="otlp_http") == sent
    assert sent == (
        scrape.value("ragpulse_spans_assembled_total")
        + scrape.total("ragpulse_spans_skipped_total")
        + scrape.total("ragpulse_dead_letters_total")
    )
