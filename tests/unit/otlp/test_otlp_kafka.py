"""Kafka message values exactly as the Collector's kafka exporter writes them, decoded.

The exporter writes one ExportTraceServiceRequest per message (`otlp_proto`: its protobuf bytes;
`otlp_json`: OTLP/JSON). With `partition_traces_by_id` it splits each batch by trace so that every
message holds one trace, keyed by the 32-character hex trace id; without it, a message holds the
whole batch and has no key. The decoder never reads the key.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from agent.otlp.decode import UndecodableError, decode_kafka_value
from tests.support.otlp import Recorder, assembler, otlp_json, protobuf, set_all, total

VALUE_ENCODERS = {"otlp_proto": protobuf, "otlp_json": otlp_json}


def record_two_traces() -> Recorder:
    recorder = Recorder("kafka-app")
    for n in range(2):
        with recorder.tracer.start_as_current_span(f"chain-{n}") as root:
            set_all(root, {"openinference.span.kind": "CHAIN", "input.value": f"question {n}"})
            with recorder.tracer.start_as_current_span("retriever") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("retrieval.documents.0.document.content", f"passage {n} " * 50)
            with recorder.tracer.start_as_current_span("llm") as llm:
                set_all(llm, {"openinference.span.kind": "LLM", "output.value": f"answer {n}"})
    return recorder


def kafka_messages(recorder: Recorder, encoding: str, *, partition_traces_by_id: bool) -> list[tuple]:
    """(key, value) pairs as the exporter produces them."""
    spans = recorder.spans()
    encode = VALUE_ENCODERS[encoding]
    if not partition_traces_by_id:
        return [(None, encode(spans))]
    by_trace = defaultdict(list)
    for span in spans:
        by_trace[format(span.context.trace_id, "032x")].append(span)
    return [(trace_id.encode(), encode(group)) for trace_id, group in by_trace.items()]


@pytest.mark.parametrize("partition_traces_by_id", [True, False])
@pytest.mark.parametrize("encoding", sorted(VALUE_ENCODERS))
def test_collector_kafka_message_values_decode_and_assemble(
    encoding: str, partition_traces_by_id: bool
) -> None:
    recorder = record_two_traces()
    messages = kafka_messages(recorder, encoding, partition_traces_by_id=partition_traces_by_id)
    assert len(messages) == (2 if partition_traces_by_id else 1)
    a = assembler()
    reports = []
    for key, value in messages:
        decoded = decode_kafka_value(value, encoding)
        assert decoded.rejected == []
        if key is not None:
            assert {span.trace_id for span in decoded.spans} == {key.decode()}
        reports.append(a.add(decoded.spans))
    out = total(reports)
    assert sorted((i.query, i.response) for i in out.interactions) == [
        ("question 0", "answer 0"),
        ("question 1", "answer 1"),
    ]
    assert all(i.service == "kafka-app" for i in out.interactions)
    assert out.assembled_spans == 6 and out.buffered_spans == 0


@pytest.mark.parametrize("encoding", sorted(VALUE_ENCODERS))
def test_multi_megabyte_message_values_decode(encoding: str) -> None:
    recorder = Recorder()
    chunk = "x" * 800
    for _ in range(50):  # the SDK keeps 128 attributes per span: 50 spans x 100 documents, ~4 MB
        with recorder.tracer.start_as_current_span("retriever") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            for i in range(100):
                retriever.set_attribute(f"retrieval.documents.{i}.document.content", chunk)
    value = VALUE_ENCODERS[encoding](recorder.spans())
    assert len(value) > 4_000_000
    spans = decode_kafka_value(value, encoding).spans
    assert len(spans) == 50
    assert all(span.attributes["retrieval.documents.99.document.content"] == chunk for span in spans)


def test_tombstones_and_bad_values() -> None:
    assert decode_kafka_value(None).spans == []
    with pytest.raises(UndecodableError):
        decode_kafka_value(b"\x0a\x05abc", "otlp_proto")
    with pytest.raises(UndecodableError):
        decode_kafka_value(b"{not json", "otlp_json")
    with pytest.raises(ValueError, match="otlp_proto"):
        decode_kafka_value(b"", "raw")
