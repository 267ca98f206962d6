"""Kafka faults: rebalances with a backlog in flight, SIGTERM with half-assembled traces, and a
duplicate delivered while the first copy is still being evaluated.

Real parts: the Tansu (or testcontainers) broker, a redis-server, the test judge server behind
litellm, agents as subprocesses; results are read back from the results topic.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
import redis as redis_py

from tests.support.kafka_agent import kafka_agent, scored_ids, start_agent, wait_committed, wait_for_results
from tests.support.kafka_broker import Broker, consume_all, produce_otlp, produce_raw
from tests.support.llm_server import FakeLLMServer
from tests.support.otlp import Recorder, protobuf
from tests.support.redis_server import RedisServer
from tests.support.spans import rag_trace, record_spans

pytestmark = pytest.mark.integration


def owned(agent, topic: str) -> float:  # type: ignore[no-untyped-def]
    return agent.wait_for(lambda s: True).value("ragpulse_kafka_assigned_partitions", topic=topic) or 0.0


def test_a_member_joining_and_leaving_during_a_backlog_loses_and_repeats_nothing(
    broker: Broker, redis: RedisServer
) -> None:
    topic, results = broker.create_topic(partitions=4), broker.create_topic(partitions=1)
    group = f"rebalance-{uuid.uuid4().hex[:8]}"
    spans = record_spans(60, service="rebalance-app")
    expected = {f"{s.context.trace_id:032x}:{s.context.span_id:016x}" for s in spans}
    # A slow judge (2 interactions a second over 2 workers) keeps the backlog in flight for about
    # 30 s: while the second member starts, joins and scores.
    with FakeLLMServer(latency=1.0) as judge:
        first = start_agent(broker, topic, results, group, redis, judge, RAGPULSE_EVAL_CONCURRENCY="2")
        second = None
        try:
            deadline = time.monotonic() + 30
            while owned(first, topic) != 4 and time.monotonic() < deadline:
                time.sleep(0.2)
            produce_otlp(broker.bootstrap, topic, spans)
            first.wait_for(lambda s: s.total("ragpulse_score_count") >= 5, timeout=60)
            # A second member joins while most of the backlog is still in flight...
            second = start_agent(broker, topic, results, group, redis, judge, RAGPULSE_EVAL_CONCURRENCY="2")
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and not (owned(second, topic) and owned(first, topic)):
                time.sleep(0.2)
            assert owned(second, topic) > 0 and owned(first, topic) > 0
            second.wait_for(lambda s: s.total("ragpulse_score_count") >= 1, timeout=30)
            # ...and leaves again before the backlog is done.
            scored = [a.wait_for(lambda s: True).total("ragpulse_score_count") for a in (first, second)]
            assert scored[1] >= 1 and sum(scored) < len(expected), scored
            assert second.stop() == 0, second.log()
            judge.latency = 0.0  # joined and left with the backlog in flight: the rest may go fast
            counts = scored_ids(wait_for_results(broker, results, len(expected), timeout=120))
            assert set(counts) == expected
            assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
            # Committed offsets reach the end, and the remaining member owns every partition.
            assert sum(wait_committed(broker, group, topic, 60, timeout=90).values()) == 60
            deadline = time.monotonic() + 30
            while owned(first, topic) != 4 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert owned(first, topic) == 4
            lag = first.wait_for(lambda s: s.total("ragpulse_consumer_lag") == 0, timeout=60)
            assert lag.total("ragpulse_consumer_lag") == 0
            assert first.stop() == 0
        finally:
            first.kill()
            if second is not None:
                second.kill()


def test_sigterm_leaves_half_assembled_traces_uncommitted_for_the_next_owner(broker: Broker) -> None:
    topic = broker.create_topic(partitions=2)
    group = f"sigterm-{uuid.uuid4().hex[:8]}"
    recorder = Recorder(service="sigterm-app")
    roles = [rag_trace(recorder) for _ in range(4)]
    spans = recorder.spans()
    root_ids = {ids["root"] for ids in roles}
    llm_ids = {ids["llm"] for ids in roles}
    by_trace: dict[int, list] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    agent = kafka_agent(broker, topic, group, RAGPULSE_METRICS="context_precision")
    try:
        agent.wait_ready(timeout=60)
        # Retriever and LLM spans first; each trace's root will come in a later message.
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for trace_id, trace_spans in by_trace.items():
            head = [s for s in trace_spans if format(s.context.span_id, "016x") not in root_ids]
            producer.send(topic, key=format(trace_id, "032x").encode(), value=protobuf(head)).get(10)
        producer.flush()
        agent.wait_for(lambda s: s.value("ragpulse_assembler_buffered_traces") == 4, timeout=30)
        assert agent.stop(signal.SIGTERM) == 0, agent.log()
    finally:
        agent.kill()
    # Nothing of those traces was scored or committed: they were not complete.
    assert sum(broker.committed(group, topic).values()) == 0

    restarted = kafka_agent(broker, topic, group, RAGPULSE_METRICS="context_precision")
    try:
        restarted.wait_ready(timeout=60)
        for trace_id, trace_spans in by_trace.items():
            tail = [s for s in trace_spans if format(s.context.span_id, "016x") in root_ids]
            producer.send(topic, key=format(trace_id, "032x").encode(), value=protobuf(tail)).get(10)
        producer.close()
        scrape = restarted.wait_for(lambda s: s.total("ragpulse_score_count") == 4, timeout=40)
        assert scrape.total("ragpulse_score_count") == 4
        # Each interaction is the LLM span with the retriever's chunks, assembled from both messages.
        assert scrape.total("ragpulse_spans_assembled_total") == 12
        assert sum(wait_committed(broker, group, topic, 8).values()) == 8
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    assert len(llm_ids) == 4


def test_a_duplicate_delivered_during_evaluation_is_scored_once_and_the_lease_is_renewed(
    broker: Broker, redis: RedisServer
) -> None:
    topic, results = broker.create_topic(partitions=1), broker.create_topic(partitions=1)
    group = f"dup-{uuid.uuid4().hex[:8]}"
    (span,) = record_spans(1, service="dup-app")
    interaction_id = f"{span.context.trace_id:032x}:{span.context.span_id:016x}"
    message = protobuf([span])
    with FakeLLMServer(latency=5.0) as judge:
        agent = start_agent(
            broker, topic, results, group, redis, judge, RAGPULSE_IDEMPOTENCY_LEASE_SECONDS="1.5"
        )
        try:
            produce_raw(broker.bootstrap, topic, [message])
            deadline = time.monotonic() + 30
            while judge.stats.calls < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert judge.stats.calls == 1
            # The same message again while the first copy waits on the slow judge.
            produce_raw(broker.bootstrap, topic, [message])
            time.sleep(3.0)  # twice the lease: without renewal another attempt could take it
            held = redis_py.Redis(port=redis.port).get(f"ragpulse:scored:{interaction_id}")
            assert held is not None and held != b"done"
            values = wait_for_results(broker, results, 1, timeout=30)
            # The duplicate finished too (recognised), and published nothing.
            scrape = agent.wait_for(lambda s: (s.value("ragpulse_duplicates_total") or 0) >= 1, timeout=20)
            counts = scored_ids(consume_all(broker.bootstrap, results, expected=2, timeout=2))
            assert counts == {interaction_id: 1}, counts
            assert len(values) >= 1
            assert scrape.value("ragpulse_duplicates_total") == 1
            assert scrape.total("ragpulse_score_count") == 1
            assert judge.stats.calls == 1
            assert sum(wait_committed(broker, group, topic, 2).values()) == 2
            assert agent.stop() == 0
        finally:
            agent.kill()
