"""Redis killed and restarted under a Kafka agent with an LLM judge: judge calls per interaction do
not change, errors are logged at a bounded rate, and the cache and keys work again promptly."""

from __future__ import annotations

import time
import uuid

import pytest
import redis as redis_py

from tests.support.kafka_agent import start_agent
from tests.support.kafka_broker import Broker, produce_otlp
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import RedisServer
from tests.support.spans import record_spans

pytestmark = pytest.mark.integration

METRICS = "context_precision,context_relevancy,faithfulness,answer_relevancy"


def test_redis_down_costs_no_extra_judge_calls_and_recovers_promptly(
    broker: Broker, redis: RedisServer
) -> None:
    topic, results = broker.create_topic(partitions=2), broker.create_topic(partitions=1)
    group = f"redis-{uuid.uuid4().hex[:8]}"
    batches = [record_spans(10, service=f"redis-app-{n}") for n in range(3)]
    with FakeLLMServer(latency=0.05) as judge:
        agent = start_agent(broker, topic, results, group, redis, judge, RAGPULSE_METRICS=METRICS)
        try:

            def scored(n: int) -> None:
                scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") >= n * 4, timeout=60)
                assert scrape.total("ragpulse_score_count") == n * 4

            produce_otlp(broker.bootstrap, topic, batches[0])
            scored(10)
            healthy_calls = judge.stats.calls
            assert healthy_calls == 10  # one combined call per interaction

            redis.kill()
            produce_otlp(broker.bootstrap, topic, batches[1])
            scored(20)
            assert judge.stats.calls - healthy_calls == 10  # still one call each with Redis down
            down = agent.wait_for(lambda s: True)
            assert down.total("ragpulse_judge_cache_errors_total") > 0
            assert down.total("ragpulse_evaluations_total", outcome="error") == 0

            redis.start()
            time.sleep(1.5)  # the cache's back-off after a failure
            errors_before = agent.wait_for(lambda s: True).total("ragpulse_judge_cache_errors_total")
            produce_otlp(broker.bootstrap, topic, batches[2])
            scored(30)
            assert judge.stats.calls - healthy_calls == 20
            after = agent.wait_for(lambda s: True)
            # Pooled connections to the old server were replaced at once, not failed one by one.
            assert after.total("ragpulse_judge_cache_errors_total") == errors_before
            # The third batch's verdicts and done marks are in the restarted Redis.
            plain = redis_py.Redis(port=redis.port)
            assert len(plain.keys("ragpulse:v1:verdict:*")) > 0
            assert len(plain.keys("ragpulse:scored:*")) >= 10
            log = agent.log()
            # One line per failing part per interval, not one per operation.
            assert 1 <= log.count("verdict cache: Redis") <= 4, log
            assert log.count("idempotency store:") <= 4, log
            assert agent.stop() == 0
        finally:
            agent.kill()
