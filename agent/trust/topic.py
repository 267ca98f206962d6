"""Read results (the Kafka results topic, or a local results file) for the interactions agents
marked for labelling (`ragpulse label-queue`).

Each result is an OTLP `ragpulse.evaluation` span (agent/exporters/kafka_results.py); marked ones
carry `ragpulse.label.requested`, `ragpulse.label.weight` and `ragpulse.label.reason`, and one
`evaluations.<metric>.score` per defined score. The topic is read from the beginning to the end
offsets seen at start, without a consumer group (nothing is committed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.trust.label_sampling import REASON_ATTRIBUTE, REQUESTED_ATTRIBUTE, WEIGHT_ATTRIBUTE

_DOCUMENTS = "ragpulse.documents."


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def result_rows(request: Any, *, marked_only: bool = True) -> tuple[list[dict[str, Any]], int]:
    """One queue line per result in `request` (an ExportTraceServiceRequest of result spans), only
    the marked ones when `marked_only`; and how many results it held.

    A line holds the interaction once: its ids, service and route, `scores` and `labels` (null,
    for a person to fill in) by metric, the text when the results carry it, `explanations` by
    metric where the judge's answer says more than its score (a custom criterion's "answered 2 of
    5"), and its documents in rank order with the judge's verdicts on each (`useful`, `relevant`)."""
    rows: list[dict[str, Any]] = []
    results = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                results += 1
                attributes = span_attributes(span)
                marked = attributes.get(REQUESTED_ATTRIBUTE) is True
                if marked_only and not marked:
                    continue
                scores = {
                    key[len("evaluations.") : -len(".score")]: value
                    for key, value in sorted(attributes.items())
                    if key.startswith("evaluations.") and key.endswith(".score")
                }
                if not scores:
                    continue
                row: dict[str, Any] = {
                    "interaction_id": attributes.get("ragpulse.interaction.id"),
                    "trace_id": span.trace_id.hex(),
                    "service": attributes.get("ragpulse.service"),
                    "route": attributes.get("ragpulse.route"),
                    "scores": scores,
                    "labels": dict.fromkeys(scores),
                }
                if marked:
                    row["weight"] = attributes.get(WEIGHT_ATTRIBUTE, 1.0)
                    row["reason"] = attributes.get(REASON_ATTRIBUTE)
                for key, name in (("input.value", "query"), ("output.value", "response")):
                    if key in attributes:
                        row[name] = attributes[key]
                explanations = {
                    metric: attributes[f"evaluations.{metric}.explanation"]
                    for metric in scores
                    if f"evaluations.{metric}.explanation" in attributes
                }
                if explanations:  # what the judge answered, where a score alone does not say it
                    row["explanations"] = explanations
                documents = result_documents(attributes)
                if documents:
                    row["documents"] = documents
                rows.append(row)
    return rows, results


def span_attributes(span: Any) -> dict[str, Any]:
    """A result span's attributes as plain Python values."""
    return {kv.key: _value(kv.value) for kv in span.attributes}


def result_documents(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`ragpulse.documents.<N>.*` back into one object per document, in rank order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(_DOCUMENTS):
            continue
        number, _, field = key[len(_DOCUMENTS) :].partition(".")
        if number.isdigit() and field:
            found.setdefault(int(number), {})[field] = value
    return [found[n] for n in sorted(found)]


def marked_rows(message: bytes) -> tuple[list[dict[str, Any]], int]:
    """Queue lines for the marked results in one message, and how many results it held."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return result_rows(ExportTraceServiceRequest.FromString(message))


def results_files(path: Path) -> list[Path]:
    """`path` and its rotated files (agent/exporters/results_file.py), oldest first."""
    rotated = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            rotated.append((int(suffix), candidate))
    return [p for _, p in sorted(rotated, reverse=True)] + ([path] if path.exists() else [])


def file_requests(path: Path, problems: list[str]) -> Iterator[Any]:
    """The ExportTraceServiceRequests of a results file and its rotated files (OTLP/JSON lines),
    oldest first; a line that is not one is added to `problems` by file and line. Raises
    FileNotFoundError when there is none of them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from agent.infra.otlp_json import from_line

    files = results_files(path)
    if not files:
        raise FileNotFoundError(2, "No such file or directory", str(path))

    def requests() -> Iterator[Any]:
        for file in files:
            with file.open(encoding="utf-8", errors="replace") as lines:
                for number, text in enumerate(lines, start=1):
                    if not text.strip():
                        continue
                    try:
                        request = from_line(text, ExportTraceServiceRequest())
                    except Exception as exc:  # a torn last line or a foreign file: say where, go on
                        problems.append(
                            f"{file}: line {number}: not an OTLP/JSON result ({type(exc).__name__})"
                        )
                        continue
                    yield request

    return requests()


def read_results_file(path: Path, *, marked_only: bool) -> tuple[list[dict[str, Any]], int, list[str]]:
    """Queue lines from a results file and its rotated files (OTLP/JSON lines): (rows, results read,
    problems by file and line). Raises FileNotFoundError when there is none of them."""
    rows: list[dict[str, Any]] = []
    read = 0
    problems: list[str] = []
    for request in file_requests(path, problems):
        found, results = result_rows(request, marked_only=marked_only)
        rows.extend(found)
        read += results
    return rows, read, problems


def read_marked(
    connection: Mapping[str, Any], topic: str, wait_seconds: float
) -> tuple[list[dict[str, Any]], int]:
    """Every marked result on `topic` up to its current end; (rows, results read). `connection`
    holds kafka-python's connection options (agent.infra.kafka_connect.kafka_connection)."""
    rows: list[dict[str, Any]] = []
    read = 0
    for message in topic_messages(connection, topic, wait_seconds):
        found, results = marked_rows(message)
        rows.extend(found)
        read += results
    return rows, read


def topic_messages(connection: Mapping[str, Any], topic: str, wait_seconds: float) -> list[bytes]:
    """Every message on `topic` from its beginning to the end offsets seen at start, without a
    consumer group (nothing is committed). RuntimeError when the topic is not found or its end is
    not reached within `wait_seconds`."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **connection, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        deadline = time.monotonic() + wait_seconds
        partitions = consumer.partitions_for_topic(topic)
        while partitions is None and time.monotonic() < deadline:
            time.sleep(0.2)
            partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            raise RuntimeError(f"topic {topic!r} not found")
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = consumer.end_offsets(assigned)
        messages: list[bytes] = []
        while any(consumer.position(tp) < end[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the topic's end was not reached in {wait_seconds:.0f}s")
            for records in consumer.poll(timeout_ms=500).values():
                messages.extend(record.value for record in records)
        return messages
    finally:
        consumer.close()
