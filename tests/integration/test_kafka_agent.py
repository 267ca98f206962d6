"""`ragpulse run` with RAGPULSE_SOURCE=kafka against a real Kafka-protocol broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.kafka_agent import kafka_agent, wait_committed
from tests.support.kafka_broker import Broker, produce_otlp, produce_raw
from tests.support.spans import PATTERNS, record_spans

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(broker: Broker) -> str:
    return broker.create_topic(partitions=3)


@pytest.fixture
def group() -> str:
    return f"ragpulse-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def agent(broker: Broker, topic: str, group: str) -> Iterator[AgentProcess]:
    process = kafka_agent(broker, topic, group)
    try:
        process.wait_ready()
        yield process
    finally:
        process.kill()


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_collector_messages_are_scored_and_committed(
    broker: Broker, topic: str, group: str, encoding: str
) -> None:
    agent = kafka_agent(broker, topic, group, RAGPULSE_KAFKA_ENCODING=encoding)
    try:
        agent.wait_ready()
        spans = record_spans(9)
        assert produce_otlp(broker.bootstrap, topic, spans, encoding=encoding) == 9
        produce_raw(broker.bootstrap, topic, [b"\x0a\x05abc" if encoding == "otlp_proto" else b"{oops", b""])

        labels = {"service": "kafka-app", "metric": "context_precision"}
        scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count", **labels) == 9, timeout=40)
        assert scrape.value("ragpulse_spans_received_total", source="kafka") == 9
        assert scrape.total("ragpulse_score_count", **labels) == 9
        assert scrape.total("ragpulse_score_sum", **labels) == pytest.approx(
            3 * sum(PATTERNS.values()), abs=1e-5
        )
        assert scrape.value("ragpulse_dead_letters_total", reason="undecodable") == 1
        assert scrape.value("ragpulse_dead_letters_total", reason="empty_message") == 1

        # 11 messages in all; every one is finished, so every offset gets committed.
        committed = wait_committed(broker, group, topic, 11)
        assert sum(committed.values()) == 11, committed
        lag = agent.wait_for(
            lambda s: s.total("ragpulse_consumer_lag") == 0 and s.value("ragpulse_consumer_lag") is not None
        )
        assert lag.value("ragpulse_consumer_lag") is not None
        assert agent.stop() == 0, agent.log()
    finally:
        agent.kill()


def test_results_topic_carries_evaluations_beside_the_trace(broker: Broker, topic: str, group: str) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from tests.support.kafka_broker import consume_all

    results_topic = broker.create_topic(partitions=1)
    agent = kafka_agent(broker, topic, group, RAGPULSE_RESULTS_TOPIC=results_topic)
    try:
        agent.wait_ready()
        spans = record_spans(3)
        produce_otlp(broker.bootstrap, topic, spans)
        messages = consume_all(broker.bootstrap, results_topic, expected=3)
    finally:
        agent.stop()
        agent.kill()
    assert len(messages) == 3
    evaluated = {(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")): s for s in spans}
    seen = set()
    for value in messages:
        request = ExportTraceServiceRequest.FromString(value)
        (resource_spans,) = request.resource_spans
        resource = {kv.key: kv.value for kv in resource_spans.resource.attributes}
        assert resource["ragpulse.agent"].bool_value is True
        (span,) = resource_spans.scope_spans[0].spans
        key = (span.trace_id.hex(), span.parent_span_id.hex())
        assert key in evaluated, "the evaluation span is a child of the evaluated span"
        seen.add(key)
        attributes = {kv.key: kv.value for kv in span.attributes}
        score = attributes["evaluations.context_precision.score"].double_value
        assert round(score, 4) in {round(v, 4) for v in PATTERNS.values()}
        assert "input.value" not in attributes and "output.value" not in attributes  # no text by default
        events = {
            event_attributes["gen_ai.evaluation.name"].string_value: event_attributes
            for event in span.events
            if event.name == "gen_ai.evaluation.result"
            for event_attributes in [{kv.key: kv.value for kv in event.attributes}]
        }
        # The lexical judge's default set (answer relevancy off: at chance, docs/judges.md).
        assert set(events) == {"context_precision", "context_relevancy", "faithfulness"}
        assert events["context_precision"]["gen_ai.evaluation.score.value"].double_value == score
    assert seen == set(evaluated)
