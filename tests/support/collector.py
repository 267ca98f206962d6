"""A stand-in for the OpenTelemetry Collector of the Kafka deployment: an OTLP/HTTP receiver
(protobuf, as the OpenTelemetry SDKs send by default) whose exporter writes what it receives to a
Kafka topic as deploy/otel-collector/config.yaml's `kafka` exporter does (`encoding: otlp_proto`,
`partition_traces_by_id: true`): one ExportTraceServiceRequest per trace, keyed by the trace id.

Apps and the prober point their OTLP exporters at `endpoint`, exactly as they would at the
Collector, so their spans reach the agent only through the broker.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kafka import KafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.support.net import free_port


def split_by_trace(request: ExportTraceServiceRequest) -> Iterator[tuple[bytes, ExportTraceServiceRequest]]:
    """(trace id, the request's spans of that trace with their resource and scope), per trace."""
    traces: dict[bytes, ExportTraceServiceRequest] = {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            by_trace: dict[bytes, list[Span]] = {}
            for span in scope_spans.spans:
                by_trace.setdefault(span.trace_id, []).append(span)
            for trace_id, spans in by_trace.items():
                traces.setdefault(trace_id, ExportTraceServiceRequest()).resource_spans.append(
                    ResourceSpans(
                        resource=resource_spans.resource,
                        schema_url=resource_spans.schema_url,
                        scope_spans=[
                            ScopeSpans(
                                scope=scope_spans.scope, schema_url=scope_spans.schema_url, spans=spans
                            )
                        ],
                    )
                )
    yield from traces.items()


class KafkaCollector:
    """OTLP/HTTP in on a free port, one Kafka message per trace out to `topic`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.port = free_port()
        self.messages = 0  # written to the topic
        self.spans = 0
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 * 1024 * 1024)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT (or probes_otlp_endpoint) would name."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_url(self) -> str:
        return f"{self.endpoint}/v1/traces"

    def start(self) -> KafkaCollector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._producer.close()

    def __enter__(self) -> KafkaCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def export(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for trace_id, part in split_by_trace(request):
            count = sum(len(s.spans) for r in part.resource_spans for s in r.scope_spans)
            # Written before the sender hears 200, as the Collector's exporter without a queue.
            self._producer.send(self.topic, key=trace_id.hex().encode(), value=part.SerializeToString()).get(
                10
            )
            with self._lock:
                self.messages += 1
                self.spans += count

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or "protobuf" not in self.headers.get("content-type", ""):
                    self.send_response(404 if self.path != "/v1/traces" else 415)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                collector.export(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        return Handler
