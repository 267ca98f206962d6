"""OpenTelemetry SDK set-up shared by the examples: spans go over OTLP/HTTP to a running ragpulse.

This is the only ragpulse-specific part of an app: the standard OTLP exporter, pointed at the
agent's receiver (or at a Collector in front of it).
"""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def tracer_provider(service_name: str, endpoint: str | None = None) -> TracerProvider:
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    endpoint = endpoint.rstrip("/")
    traces = endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces)))
    return provider


PASSAGES = [
    "The Seine flows through the heart of Paris before reaching the English Channel.",
    "Lyon sits where the Rhone and the Saone rivers meet.",
    "The Loire is the longest river entirely in France, at 1,006 kilometres.",
    "Paris has 37 bridges across the Seine.",
    "Marseille is the oldest city in France, founded by Greek sailors around 600 BC.",
]
QUESTIONS = [
    "Which river flows through Paris?",
    "What is the longest river in France?",
    "Which is the oldest city in France?",
]
