"""Intake throughput: decode + extract + assemble, in spans per second on one core.

Batches of 50 realistic spans, each retrieval carrying 5 chunks of ~800 characters, recorded with
the real OpenTelemetry SDK and encoded with the real OTLP encoder, as one ExportTraceServiceRequest
per batch (what one OTLP/HTTP request or one Kafka message holds). Compared with the bare protobuf
parse of the same bytes, the floor any Python intake sits on.

    python benchmarks/intake.py [--seconds 3] [--agents]

--agents adds agent traces (LangGraph-style, one answer given every search) of 18, 78 and 318
spans, with the tool outputs recorded (results matched to their searches by output) and not
(matched by the documents they contain, given in the reverse order the searches ended):
spans/s, and the assembly cost per span, which stays flat as traces grow (linear).

With --receivers it measures the receivers over the wire instead: the OTLP/HTTP and OTLP/gRPC
receivers (the agent's own classes) in this process, fed the multi-span batch by a client in
another process (4 connections, each sending as fast as its answers come back), in spans per
second accepted (decoded and handed to the intake; no assembly).

    python benchmarks/intake.py --receivers [--seconds 10]

With --documents-key KEY every document also carries metadata JSON holding KEY (a source path,
as LlamaIndex and LangChain record it), and each batch is measured twice: with the conventions
not reading metadata (documents_key unset) and reading KEY (documents_key=KEY).

    python benchmarks/intake.py --documents-key source
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf.internal import api_implementation
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.otlp.assemble import Labeller, TraceAssembler
from agent.otlp.conventions.known import known_conventions
from agent.otlp.decode import _pb_value, decode_request
from agent.series_budget import SeriesBudget
from benchmarks.harness import Benchmark, line
from tests.support.otlp import OpenIntake

BATCH = 50
CHUNKS = 5
rng = random.Random(20251122)
WORDS = [
    "tax", "year", "employer", "payroll", "summary", "pension", "deduction", "April", "return", "form",
    "salary", "record", "income", "statement", "policy", "account", "refund", "office", "period", "total",
]  # fmt: skip


def prose(chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:chars]


def tracer() -> tuple[InMemorySpanExporter, object]:
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "bench-rag", "service.version": "1.4.2"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, provider.get_tracer("openinference.instrumentation.langchain")


def _metadata(key: str | None, n: int, i: int, **more: object) -> str | None:
    """A document's metadata JSON: `more`, and `key` (a source path) when one is given."""
    found = {**more, **({key: f"kb/section-{n % 40}/doc-{i}.md", "page": i} if key else {})}
    return json.dumps(found) if found else None


def single_span_batch(key: str | None = None) -> bytes:
    """50 OpenInference single-span interactions: query, 5 x 800-char chunks (id, content, score),
    response, session and model, as an app's hand-written OpenInference span carries them (and
    each document's metadata with `key`, if given)."""
    memory, t = tracer()
    for n in range(BATCH):
        with t.start_as_current_span("rag.query") as span:  # type: ignore[attr-defined]
            span.set_attribute("openinference.span.kind", "CHAIN")
            span.set_attribute("input.value", prose(80))
            span.set_attribute("output.value", prose(400))
            span.set_attribute("session.id", f"session-{n % 7}")
            span.set_attribute("llm.model_name", "gpt-4o-mini")
            for i in range(CHUNKS):
                base = f"retrieval.documents.{i}.document."
                span.set_attribute(base + "id", f"doc-{n}-{i}")
                span.set_attribute(base + "content", prose(800))
                span.set_attribute(base + "score", 0.9 - i / 10)
                if metadata := _metadata(key, n, i):
                    span.set_attribute(base + "metadata", metadata)
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def multi_span_batch(key: str | None = None) -> bytes:
    """10 traces x 5 spans: CHAIN root, RETRIEVER (5 chunks), PROMPT, LLM (prompt holds the chunks),
    output parser, as the OpenInference LangChain instrumentor records a retrieval chain."""
    memory, t = tracer()
    for n in range(BATCH // 5):
        query, answer = prose(80), prose(400)
        chunks = [prose(800) for _ in range(CHUNKS)]
        with t.start_as_current_span("RunnableSequence") as root:  # type: ignore[attr-defined]
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", query)
            root.set_attribute("output.value", answer)
            with t.start_as_current_span("VectorStoreRetriever") as retriever:  # type: ignore[attr-defined]
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("input.value", query)
                for i, text in enumerate(chunks):
                    retriever.set_attribute(f"retrieval.documents.{i}.document.content", text)
                    retriever.set_attribute(
                        f"retrieval.documents.{i}.document.metadata", _metadata(key, n, i, score=0.5)
                    )
            with t.start_as_current_span("ChatPromptTemplate") as prompt:  # type: ignore[attr-defined]
                prompt.set_attribute("openinference.span.kind", "PROMPT")
                prompt.set_attribute("llm.prompt_template.template", "Answer from: {context}\n{question}")
            with t.start_as_current_span("ChatOpenAI") as llm:  # type: ignore[attr-defined]
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.model_name", "gpt-4o-mini")
                llm.set_attribute("llm.input_messages.0.message.role", "system")
                llm.set_attribute("llm.input_messages.0.message.content", "\n\n".join(chunks))
                llm.set_attribute("llm.input_messages.1.message.role", "user")
                llm.set_attribute("llm.input_messages.1.message.content", query)
                llm.set_attribute("llm.output_messages.0.message.role", "assistant")
                llm.set_attribute("llm.output_messages.0.message.content", answer)
                llm.set_attribute("llm.token_count.total", 1400)
            with t.start_as_current_span("StrOutputParser") as parser:  # type: ignore[attr-defined]
                parser.set_attribute("openinference.span.kind", "CHAIN")
                parser.set_attribute("output.value", answer)
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def agent_batch(searches: int, traces: int, tool_output: bool = True, reverse: bool = False) -> bytes:
    """`traces` agent traces of 3 + 5 x `searches` spans, as OpenInference's LangChain
    instrumentor records `create_agent`: a LangGraph root; per search a model node with an LLM
    call that calls the tool, a tools node with a TOOL span (its output the joined documents) and
    the RETRIEVER inside (5 chunks); then the answering call, given every tool result. (The calls
    that only call tools carry the question alone, so a trace's bytes grow linearly.) Without
    `tool_output` the TOOL spans record no output (an instrumentor that keeps none, or hidden
    outputs): every result is then matched to its search by the documents it contains; with
    `reverse` the answering call gets the results in the reverse order their searches ended (as
    parallel tool calls may), the worst case for that matching."""
    memory, t = tracer()
    for _ in range(traces):
        query, answer = prose(80), prose(400)
        messages: list[tuple[str, str, str | None]] = [("user", query, None)]
        with t.start_as_current_span("LangGraph") as root:  # type: ignore[attr-defined]
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.mime_type", "application/json")
            root.set_attribute("input.value", json.dumps({"messages": [{"role": "user", "content": query}]}))
            for n in range(searches):
                chunks = [prose(800) for _ in range(CHUNKS)]
                call_id = f"call_{n}"
                with t.start_as_current_span("model"), t.start_as_current_span("ChatOpenAI") as llm:  # type: ignore[attr-defined]
                    llm.set_attribute("openinference.span.kind", "LLM")
                    llm.set_attribute("llm.input_messages.0.message.role", "user")
                    llm.set_attribute("llm.input_messages.0.message.content", query)
                    base = "llm.output_messages.0.message.tool_calls.0.tool_call."
                    llm.set_attribute(base + "id", call_id)
                    llm.set_attribute(base + "function.name", "search")
                    llm.set_attribute(base + "function.arguments", json.dumps({"query": prose(30)}))
                joined = "\n\n".join(chunks)
                with t.start_as_current_span("tools"), t.start_as_current_span("search") as tool:  # type: ignore[attr-defined]
                    tool.set_attribute("openinference.span.kind", "TOOL")
                    tool.set_attribute("input.value", prose(30))
                    if tool_output:
                        tool.set_attribute("output.value", joined)
                    with t.start_as_current_span("VectorStoreRetriever") as retriever:  # type: ignore[attr-defined]
                        retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                        for i, text in enumerate(chunks):
                            retriever.set_attribute(f"retrieval.documents.{i}.document.content", text)
                messages.append(("tool", joined, call_id))
            if reverse:
                messages = messages[:1] + messages[:0:-1]
            with t.start_as_current_span("model"), t.start_as_current_span("ChatOpenAI") as llm:  # type: ignore[attr-defined]
                llm.set_attribute("openinference.span.kind", "LLM")
                for i, (role, content, call) in enumerate(messages):
                    llm.set_attribute(f"llm.input_messages.{i}.message.role", role)
                    llm.set_attribute(f"llm.input_messages.{i}.message.content", content)
                    if call:
                        llm.set_attribute(f"llm.input_messages.{i}.message.tool_call_id", call)
                llm.set_attribute("llm.output_messages.0.message.role", "assistant")
                llm.set_attribute("llm.output_messages.0.message.content", answer)
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def agents(seconds: float) -> None:
    """Agent traces beside the chain batch: spans/s, and assembly time per span as traces grow."""
    # The SDK keeps 128 attributes per span by default: an answering call given 63 tool results
    # records ~190 (apps with such agents raise the limit the same way).
    os.environ["OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"] = "4096"
    for searches, tool_output in product((3, 15, 63), (True, False)):
        spans_per_trace = 3 + 5 * searches
        traces = max(1, 320 // spans_per_trace)
        body = agent_batch(searches, traces, tool_output, reverse=not tool_output)
        spans = decode_request(body, "protobuf").spans

        def intake(body: bytes = body) -> object:
            return new_assembler().add(decode_request(body, "protobuf").spans)

        first = intake()
        assert len(first.interactions) == traces and not first.buffered_spans, first  # type: ignore[attr-defined]

        def assemble_only(spans: list = spans) -> object:
            return new_assembler().add(spans)

        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            intake()
            runs += 1
        rate_ = runs * len(spans) / (time.perf_counter() - start)
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            assemble_only()
            runs += 1
        per_span = (time.perf_counter() - start) / (runs * len(spans)) * 1e6
        line(
            f"agent traces of {spans_per_trace:3d} spans ({traces:2d}/batch, {len(body) / 1024:4.0f} KiB, "
            f"results matched by {'output' if tool_output else 'content, reversed'}): "
            f"decode+extract+assemble {rate_:8,.0f} spans/s  |  extract+assemble {per_span:5.1f} µs/span"
        )


def agent_intake(body: bytes, keys: tuple[str, ...] = ()) -> Callable[[], object]:
    """The whole synchronous intake of `ragpulse run` as build_agent wires it: decode, assemble,
    the signals on every interaction, sampling (1%) and queueing; nothing is evaluated."""
    from prometheus_client import CollectorRegistry

    from agent.build import build_agent
    from agent.config import Settings

    documents = {"documents_key": keys[0]} if keys else {}
    pipeline = build_agent(Settings(sample_rate=0.01, **documents), CollectorRegistry()).pipeline

    fresh = FreshTraces(body)

    def accept() -> object:
        return pipeline.accept(decode_request(fresh(), "protobuf"), "bench")

    return accept


class FreshTraces:
    """One batch, with new trace ids on every call. The assembler remembers the traces it closed
    and counts their later spans late (docs/intake.md, "Late spans"), so the same batch replayed
    would skip the work measured; writing a counter over the first 8 bytes of each trace id in
    place costs a few µs per batch (the ids are found once, after their protobuf tag)."""

    def __init__(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        ids = {span.trace_id for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans}
        self._body = bytearray(body)
        self._offsets = []
        for trace_id in ids:
            field = b"\x0a\x10" + trace_id  # Span.trace_id: field 1, 16 bytes
            at = body.find(field)
            while at >= 0:
                self._offsets.append(at + 2)
                at = body.find(field, at + 1)
        self._calls = 0

    def __call__(self) -> bytes:
        self._calls += 1
        prefix = self._calls.to_bytes(8, "big")
        for offset in self._offsets:
            self._body[offset : offset + 8] = prefix
        return bytes(self._body)


def new_assembler(keys: tuple[str, ...] = ()) -> TraceAssembler:
    """The assembler as the agent builds it; `keys`: the metadata keys read (documents_key)."""
    return TraceAssembler(
        known_conventions(keys),
        Labeller(("http.route",), SeriesBudget(10_000, 100)),
        wait_seconds=30.0,
        max_traces=10_000,
        max_spans_per_trace=1_000,
        max_chunk_bytes=256 << 20,
    )


def rate(work: Callable[[], object], seconds: float) -> float:
    """Spans per second of CPU time of `work` over one batch, best of three runs: the CPU this
    thread spent, so that other processes on a shared machine change the figure little."""
    best = 0.0
    for _ in range(3):
        runs, start = 0, time.thread_time()
        while (elapsed := time.thread_time() - start) < seconds / 3:
            work()
            runs += 1
        best = max(best, runs * BATCH / elapsed)
    return best


def cpu_per_span(work: Callable[[], object], seconds: float, blocks: int = 20) -> float:
    """CPU time of `work` in µs per span (process time, so other jobs on the machine count
    little), the best of `blocks` blocks of runs: a steadier figure than spans/s on a shared
    machine, for comparing two versions of the code."""
    start = time.perf_counter()
    runs = 0
    while time.perf_counter() - start < seconds / blocks:
        work()
        runs += 1
    best = float("inf")
    for _ in range(blocks):
        begin = time.process_time()
        for _ in range(runs):
            work()
        best = min(best, (time.process_time() - begin) / (runs * BATCH))
    return best * 1e6


class CountingIntake(OpenIntake):
    """Takes every request and counts its spans (what the receivers alone cost)."""

    def __init__(self) -> None:
        self.spans = 0

    def accept(self, request: object, source: str) -> int:
        self.spans += len(request.spans)  # type: ignore[attr-defined]
        return 0

    def low_watermark(self) -> int:
        return 1

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        raise AssertionError(f"dead letter: {reason} {detail}")


def _client(kind: str, port: int, body: bytes, seconds: float, connections: int, done: object) -> None:
    """Child process: send `body` over `connections` connections for `seconds`; report requests."""
    import http.client
    import threading

    import grpc

    from agent.sources.otlp_grpc import SERVICE

    counts = [0] * connections
    deadline = time.monotonic() + seconds

    def http_loop(n: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"Content-Type": "application/x-protobuf"}
        while time.monotonic() < deadline:
            connection.request("POST", "/v1/traces", body, headers)
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status
            counts[n] += 1

    def grpc_loop(n: int) -> None:
        with grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        ) as channel:
            export = channel.unary_unary(f"/{SERVICE}/Export")
            while time.monotonic() < deadline:
                export(body, timeout=30)
                counts[n] += 1

    loop = http_loop if kind == "http" else grpc_loop
    threads = [threading.Thread(target=loop, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.put(sum(counts))  # type: ignore[attr-defined]


def receivers(seconds: float) -> None:
    import asyncio
    import multiprocessing

    from agent.sources.otlp_grpc import OtlpGrpcSource
    from agent.sources.otlp_http import OtlpHttpSource

    body = multi_span_batch()
    line(f"receivers: batch of {BATCH} spans, {len(body) / 1024:.0f} KiB protobuf, 4 client connections")
    context = multiprocessing.get_context("spawn")

    async def measure(kind: str) -> float:
        intake = CountingIntake()
        source: OtlpHttpSource | OtlpGrpcSource
        if kind == "http":
            source = OtlpHttpSource("127.0.0.1", 0, 16 << 20)
        else:
            source = OtlpGrpcSource("127.0.0.1", 0, 16 << 20)
        await source.start(intake)  # type: ignore[arg-type]
        assert source.bound_port is not None
        done = context.Queue()
        client = context.Process(target=_client, args=(kind, source.bound_port, body, seconds, 4, done))
        client.start()
        requests = await asyncio.get_running_loop().run_in_executor(None, done.get)
        client.join()
        await source.shutdown(5)
        assert intake.spans == requests * BATCH, (intake.spans, requests)
        return intake.spans / seconds

    async def both() -> None:
        for kind in ("http", "grpc"):
            rate_ = await measure(kind)
            line(f"OTLP/{kind.upper():4s} receiver: {rate_:9,.0f} spans/s accepted")

    asyncio.run(both())


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.splitlines()[0], seed=20251122)
    parser = bench.parser
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--receivers", action="store_true", help="measure the HTTP and gRPC receivers")
    parser.add_argument(
        "--agents", action="store_true", help="also measure agent traces of 18, 78, 318 spans"
    )
    parser.add_argument(
        "--documents-key",
        metavar="KEY",
        help="documents carry metadata with KEY; measure with it unread and read (documents_key)",
    )
    args = bench.parse()
    rng.seed(args.seed)  # the module-level stream of the span makers
    if args.receivers:
        receivers(args.seconds)
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    backend = api_implementation.Type()
    line(f"protobuf backend: {backend}; batch: {BATCH} spans, {CHUNKS} chunks x ~800 chars")
    key = args.documents_key
    batches = [("single-span", single_span_batch(key)), ("multi-span", multi_span_batch(key))]
    if key:
        line(f"documents carry metadata with {key!r}: each batch with it unread, then read")
    runs = [(label, body, keys) for label, body in batches for keys in ([(), (key,)] if key else [()])]
    for label, body, keys in runs:
        if key:
            label = f"{label} {'read' if keys else 'unread'}"
        assembler = new_assembler(keys)
        first = assembler.add(decode_request(body, "protobuf").spans)
        expected = BATCH if label.startswith("single-span") else BATCH // 5
        assert len(first.interactions) == expected and first.buffered_spans == 0, first

        fresh = FreshTraces(body)

        def intake(fresh: FreshTraces = fresh, assembler: TraceAssembler = assembler) -> object:
            return assembler.add(decode_request(fresh(), "protobuf").spans)

        def full_dicts(body: bytes = body) -> object:
            # The design not taken: every attribute of every span as a Python value.
            request = ExportTraceServiceRequest.FromString(body)
            return [
                {pair.key: _pb_value(pair.value) for pair in span.attributes}
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]

        bare = rate(lambda body=body: ExportTraceServiceRequest.FromString(body), args.seconds)
        whole = rate(intake, args.seconds)
        cpu = cpu_per_span(intake, args.seconds)
        dicts = rate(full_dicts, args.seconds)
        if keys:
            chunk = first.interactions[0].chunks[0]
            assert chunk.meta(key) is not None, chunk
        line(
            f"{label:12s} {len(body) / 1024:6.0f} KiB/batch  "
            f"bare parse {bare:9,.0f} spans/s  |  decode+extract+assemble {whole:8,.0f} spans/s "
            f"({cpu:5.1f} µs CPU/span)  |  parse + every attribute as a dict {dicts:8,.0f} spans/s"
        )
        agent_rate = rate(agent_intake(body, keys), args.seconds)
        line(f"{'':12s} the agent's intake (+ signals, sampling at 1%): {agent_rate:8,.0f} spans/s")
    if args.agents:
        agents(args.seconds)


if __name__ == "__main__":
    main()
