"""Crash and scale-out under at-least-once delivery: each interaction is scored exactly once.

Real parts throughout: the Tansu (or testcontainers) Kafka broker, a redis-server process for the
idempotency keys, the test LLM server behind litellm as the judge, and agents as subprocesses.
Results are read back from the results topic, the durable record of what was scored.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.support.kafka_agent import scored_ids, start_agent, wait_for_results
from tests.support.kafka_broker import Broker, consume_all, produce_otlp
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import RedisServer
from tests.support.spans import record_spans

pytestmark = pytest.mark.integration


@pytest.fixture
def judge() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(latency=0.4) as server:
        yield server


def test_agent_killed_mid_stream_and_restarted_scores_every_interaction_once(
    broker: Broker, redis: RedisServer, judge: FakeLLMServer
) -> None:
    topic, results = broker.create_topic(partitions=3), broker.create_topic(partitions=1)
    group = f"crash-{uuid.uuid4().hex[:8]}"
    spans = record_spans(40, service="crash-app")
    expected = {f"{s.context.trace_id:032x}:{s.context.span_id:016x}" for s in spans}

    first = start_agent(broker, topic, results, group, redis, judge)
    try:
        produce_otlp(broker.bootstrap, topic, spans)
        # Let it score part of the stream, then kill it without warning.
        first.wait_for(lambda s: s.total("ragpulse_score_count") >= 8, timeout=60)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
    finally:
        first.kill()
    done_before = scored_ids(consume_all(broker.bootstrap, results, expected=len(expected), timeout=3))
    assert 0 < len(done_before) < len(expected), "the kill must land mid-stream"

    judge.latency = 0.0  # the kill landed: the rest of the stream need not be slow
    second = start_agent(broker, topic, results, group, redis, judge)
    try:
        values = wait_for_results(broker, results, len(expected), timeout=120)
        counts = scored_ids(values)
        assert set(counts) == expected
        assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
        # Redelivered messages whose interactions were already scored were recognised as such.
        scrape = second.wait_for(
            lambda s: (
                s.total("ragpulse_score_count") + s.total("ragpulse_duplicates_total")
                >= len(expected) - len(done_before)
            )
        )
        assert scrape.total("ragpulse_score_count") == len(expected) - len(done_before)
        assert second.stop() == 0
    finally:
        second.kill()


def test_two_replicas_share_partitions_and_score_each_interaction_once(
    broker: Broker, redis: RedisServer, judge: FakeLLMServer
) -> None:
    topic, results = broker.create_topic(partitions=4), broker.create_topic(partitions=1)
    group = f"pair-{uuid.uuid4().hex[:8]}"
    # Started together (each imports the judge's client for seconds), then both awaited.
    replicas = [start_agent(broker, topic, results, group, redis, judge, wait=False) for _ in range(2)]
    try:
        for replica in replicas:
            replica.wait_ready(timeout=60)
        # Both replicas own partitions before traffic starts.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owned = [
                r.wait_for(lambda s: True).value("ragpulse_kafka_assigned_partitions", topic=topic)
                for r in replicas
            ]
            if all(owned) and sum(owned) == 4:  # type: ignore[arg-type]
                break
            time.sleep(0.5)
        assert all(owned) and sum(owned) == 4, owned  # type: ignore[arg-type]

        spans = record_spans(30, service="pair-app")
        produce_otlp(broker.bootstrap, topic, spans)
        counts = scored_ids(wait_for_results(broker, results, 30, timeout=120))
        assert len(counts) == 30 and all(n == 1 for n in counts.values())
        scored = [r.wait_for(lambda s: True).total("ragpulse_score_count") for r in replicas]
        assert sum(scored) == 30 and all(n > 0 for n in scored), scored
    finally:
        # Stop one at a time: a group whose last two members leave together can wedge the test broker.
        for replica in replicas:
            replica.stop()
            replica.kill()
