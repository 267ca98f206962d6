"""Read the results topic for the interactions agents marked for labelling (`ragpulse label-queue`).

Each result is an OTLP `ragpulse.evaluation` span (agent/exporters/kafka_results.py); marked ones
carry `ragpulse.label.requested`, `ragpulse.label.weight` and `ragpulse.label.reason`, and one
`evaluations.<metric>.score` per defined score. The topic is read from the beginning to the end
offsets seen at start, without a consumer group (nothing is committed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agent.trust.label_sampling import REASON_ATTRIBUTE, REQUESTED_ATTRIBUTE, WEIGHT_ATTRIBUTE


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def marked_rows(message: bytes) -> tuple[list[dict[str, Any]], int]:
    """Queue lines for the marked results in one message, and how many results it held."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(message)
    rows: list[dict[str, Any]] = []
    results = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                results += 1
                attributes = {kv.key: _value(kv.value) for kv in span.attributes}
                if attributes.get(REQUESTED_ATTRIBUTE) is not True:
                    continue
                scores = {
                    key[len("evaluations.") : -len(".score")]: value
                    for key, value in attributes.items()
                    if key.startswith("evaluations.") and key.endswith(".score")
                }
                for metric, score in sorted(scores.items()):
                    row = {
                        "interaction_id": attributes.get("ragpulse.interaction.id"),
                        "service": attributes.get("ragpulse.service"),
                        "route": attributes.get("ragpulse.route"),
                        "metric": metric,
                        "score": score,
                        "weight": attributes.get(WEIGHT_ATTRIBUTE, 1.0),
                        "reason": attributes.get(REASON_ATTRIBUTE),
                        "label": None,
                    }
                    for key, name in (("input.value", "query"), ("output.value", "response")):
                        if key in attributes:
                            row[name] = attributes[key]
                    rows.append(row)
    return rows, results


def read_marked(
    connection: Mapping[str, Any], topic: str, wait_seconds: float
) -> tuple[list[dict[str, Any]], int]:
    """Every marked result on `topic` up to its current end; (rows, results read). `connection`
    holds kafka-python's connection options (agent.infra.kafka_connect.kafka_connection)."""
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
        rows: list[dict[str, Any]] = []
        read = 0
        while any(consumer.position(tp) < end[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the topic's end was not reached in {wait_seconds:.0f}s")
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    found, results = marked_rows(record.value)
                    rows.extend(found)
                    read += results
        return rows, read
    finally:
        consumer.close()
