"""Cost of the label hook on intake: PpiAggregator.on_spans over decoded spans.

    python benchmarks/label_hook.py [--seconds 3]

Spans like the intake benchmark's (an OpenInference retriever with 5 chunks of ~800 characters,
recorded by the real SDK, encoded by the real OTLP encoder, decoded by ragpulse), none of them
carrying annotations (the common case), and the same spans each with one human annotation.
Prints nanoseconds per span; compare with benchmarks/intake.py's spans per second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agent.config import TrustSettings
from agent.model import Span
from agent.otlp.decode import decode_request
from agent.telemetry import TrustTelemetry
from agent.trust.aggregator import PpiAggregator
from benchmarks.harness import Benchmark, line


def spans(count: int, annotated: bool) -> list[Span]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(count):
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("input.value", f"question {i}")
            for k in range(5):
                span.set_attribute(f"retrieval.documents.{k}.document.content", "lorem ipsum " * 66)
                span.set_attribute(f"retrieval.documents.{k}.document.score", 0.5)
            if annotated:
                span.set_attribute("annotations.0.annotation.name", "faithfulness")
                span.set_attribute("annotations.0.annotation.score", 1.0)
                span.set_attribute("annotations.0.annotation.annotator_kind", "HUMAN")
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    return decode_request(body, "protobuf").spans


def per_span_ns(aggregator: PpiAggregator, batch: list[Span], seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        aggregator.on_spans(batch)
        done += len(batch)
    return (time.perf_counter() - start) / done * 1e9


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.splitlines()[0])
    parser = bench.parser
    parser.add_argument("--seconds", type=float, default=3.0)
    args = bench.parse()
    aggregator = PpiAggregator(TrustTelemetry(CollectorRegistry()), TrustSettings(label_sample_rate=0.1))
    for annotated in (False, True):
        ns = per_span_ns(aggregator, spans(50, annotated), args.seconds)
        line(f"{'annotated' if annotated else 'plain':>9} spans: {ns:8.0f} ns per span")


if __name__ == "__main__":
    main()
