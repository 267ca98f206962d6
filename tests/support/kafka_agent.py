"""Agents consuming a Kafka topic as a consumer group, their committed offsets, and the results
topic read back (the durable record of what was scored)."""

from __future__ import annotations

import collections
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.agent_process import AgentProcess
from tests.support.kafka_broker import FAST_GROUP_ENV, Broker, consume_all
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import RedisServer


def kafka_agent(broker: Broker, topic: str, group: str, **extra: str) -> AgentProcess:
    """An agent (not yet ready) consuming `topic` from the earliest offset, committing often."""
    env = {
        "RAGPULSE_SOURCE": "kafka",
        "RAGPULSE_KAFKA_BOOTSTRAP": broker.bootstrap,
        "RAGPULSE_KAFKA_TOPIC": topic,
        "RAGPULSE_KAFKA_GROUP_ID": group,
        "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
        "RAGPULSE_KAFKA_COMMIT_INTERVAL_SECONDS": "0.2",
        **FAST_GROUP_ENV,
        **extra,
    }
    return AgentProcess(env=env)


def wait_committed(
    broker: Broker, group: str, topic: str, expected_total: int, timeout: float = 20.0
) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        committed = broker.committed(group, topic)
        if sum(committed.values()) >= expected_total:
            break
        time.sleep(0.2)
    return committed


def start_agent(
    broker: Broker,
    topic: str,
    results: str,
    group: str,
    redis: RedisServer,
    judge: FakeLLMServer,
    *,
    wait: bool = True,
    **extra: str,
) -> AgentProcess:
    """A Kafka agent judging context precision through the test LLM server, with Redis for the
    idempotency keys, publishing what it scored to the `results` topic."""
    settings = {
        "RAGPULSE_RESULTS_TOPIC": results,
        "RAGPULSE_REDIS_URL": redis.url,
        "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
        "RAGPULSE_JUDGE_API_BASE": judge.api_base,
        "RAGPULSE_JUDGE_API_KEY": "test-key",
        "RAGPULSE_METRICS": "context_precision",
        "RAGPULSE_EVAL_CONCURRENCY": "4",
        "RAGPULSE_IDEMPOTENCY_LEASE_SECONDS": "3",
        "RAGPULSE_JUDGE_SELF_CHECK": "false",
        **extra,
    }
    agent = kafka_agent(broker, topic, group, **settings)
    if wait:
        agent.wait_ready(timeout=60)
    return agent


def scored_ids(values: list[bytes]) -> collections.Counter[str]:
    """How often each interaction id appears among the results topic's messages."""
    counts: collections.Counter[str] = collections.Counter()
    for value in values:
        (span,) = ExportTraceServiceRequest.FromString(value).resource_spans[0].scope_spans[0].spans
        attributes = {kv.key: kv.value.string_value for kv in span.attributes}
        counts[attributes["ragpulse.interaction.id"]] += 1
    return counts


def wait_for_results(broker: Broker, topic: str, expected: int, timeout: float) -> list[bytes]:
    deadline = time.monotonic() + timeout
    values: list[bytes] = []
    while time.monotonic() < deadline:
        values = consume_all(broker.bootstrap, topic, expected=expected, timeout=2)
        if len(scored_ids(values)) >= expected:
            break
    return values
