"""Judge outages: nothing is lost, nothing is recorded as an error, and the judge is not hammered.

Real parts: the Tansu (or testcontainers) broker, a redis-server, the test judge server behind
litellm, agents as subprocesses. Faults are injected at the judge server (500s, 429 with
Retry-After, hanging requests) and switched off at run time.
"""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.kafka_agent import scored_ids, start_agent, wait_committed, wait_for_results
from tests.support.kafka_broker import Broker, produce_otlp
from tests.support.llm_server import FakeLLMServer
from tests.support.net import http_get, http_post
from tests.support.redis_server import RedisServer
from tests.support.spans import openinference_single_span, record_spans

pytestmark = pytest.mark.integration

METRICS = "context_precision,context_relevancy,faithfulness,answer_relevancy"


def test_judge_failing_for_a_stretch_then_healthy_scores_everything_and_records_no_error(
    broker: Broker, redis: RedisServer
) -> None:
    topic, results = broker.create_topic(partitions=3), broker.create_topic(partitions=1)
    group = f"outage-{uuid.uuid4().hex[:8]}"
    spans = record_spans(24, service="outage-app")
    expected = {f"{s.context.trace_id:032x}:{s.context.span_id:016x}" for s in spans}
    with FakeLLMServer(latency=0.05) as judge:
        agent = start_agent(
            broker, topic, results, group, redis, judge,
            RAGPULSE_METRICS=METRICS,
            RAGPULSE_JUDGE_MAX_RETRIES="1",
            RAGPULSE_JUDGE_BREAKER_FAILURES="3",
            RAGPULSE_JUDGE_BREAKER_COOLDOWN_SECONDS="2",
        )  # fmt: skip
        try:
            produce_otlp(broker.bootstrap, topic, spans[:8])
            agent.wait_for(lambda s: s.total("ragpulse_score_count") == 8 * 4, timeout=60)
            judge.fail_always("500")
            produce_otlp(broker.bootstrap, topic, spans[8:])
            scrape = agent.wait_for(
                lambda s: (
                    s.value("ragpulse_intake_paused", reason="judge_unavailable") == 1
                    and s.total("ragpulse_evaluations_deferred_total") >= 1
                ),
                timeout=60,
            )
            assert scrape.value("ragpulse_intake_paused", reason="judge_unavailable") == 1
            status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
            assert status == 503 and b"judge: not ready" in body
            time.sleep(6)  # a stretch of failures, with the breaker opening and probing
            during = agent.wait_for(lambda s: True)
            assert during.total("ragpulse_evaluations_total", outcome="error") == 0
            assert sum(broker.committed(group, topic).values()) < 24  # deferred work stays uncommitted
            calls_during_outage = judge.stats.faults["500"]

            judge.fail_always(None)
            counts = scored_ids(wait_for_results(broker, results, len(expected), timeout=90))
            assert set(counts) == expected
            assert all(n == 1 for n in counts.values())
            scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") == 24 * 4, timeout=30)
            assert scrape.total("ragpulse_evaluations_total", outcome="error") == 0
            assert scrape.total("ragpulse_score_count") == 24 * 4
            assert scrape.value("ragpulse_intake_paused", reason="judge_unavailable") == 0
            assert sum(wait_committed(broker, group, topic, 24).values()) == 24
            # The breaker and the gate kept the outage cheap: a few probes, not a call per retry
            # of every interaction (16 interactions were waiting through the whole stretch).
            assert calls_during_outage < 40, calls_during_outage
            assert agent.stop() == 0
        finally:
            agent.kill()


def otlp_agent(judge: FakeLLMServer, **extra: str) -> AgentProcess:
    return AgentProcess(
        env={
            "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
            "RAGPULSE_JUDGE_API_BASE": judge.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
            "RAGPULSE_METRICS": METRICS,
            "RAGPULSE_JUDGE_SELF_CHECK": "false",
            **extra,
        }
    )


def send_interactions(agent: AgentProcess, count: int, salt: str = "") -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "judge-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for i in range(count):
        openinference_single_span(
            tracer,
            query=f"What is the capital of France? {salt}{i}",
            chunks=[f"Paris is the capital of France ({salt}{i}).", "Bananas are yellow."],
            response="Paris is the capital of France.",
        )
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()


def test_retry_after_from_the_judge_is_honoured() -> None:
    with FakeLLMServer() as judge:
        judge.retry_after = 3
        judge.script("429", "429")
        agent = otlp_agent(judge)
        try:
            agent.wait_ready(timeout=60)
            send_interactions(agent, 1)
            scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") == 4, timeout=60)
            assert scrape.total("ragpulse_score_count") == 4
            assert scrape.total("ragpulse_evaluations_total", outcome="error") == 0
            arrivals = judge.stats.arrivals
            assert [fault for _, fault in arrivals[:3]] == ["429", "429", None]
            gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(arrivals)]
            # Every call after a 429 waited at least the Retry-After it was given.
            assert all(gap >= 3 - 0.05 for gap in gaps[:2]), gaps
            assert agent.stop() == 0
        finally:
            agent.kill()


def test_a_hanging_judge_opens_the_breaker_and_work_resumes_when_it_answers() -> None:
    with FakeLLMServer(hang_seconds=30) as judge:
        judge.fail_always("timeout")
        agent = otlp_agent(
            judge,
            RAGPULSE_JUDGE_TIMEOUT_SECONDS="1",
            RAGPULSE_JUDGE_MAX_RETRIES="0",
            RAGPULSE_JUDGE_BREAKER_FAILURES="2",
            RAGPULSE_JUDGE_BREAKER_COOLDOWN_SECONDS="3",
        )
        try:
            agent.wait_ready(timeout=60)
            send_interactions(agent, 4)
            # Timeouts count: the breaker opens and readiness says so within seconds.
            deadline = time.monotonic() + 30
            status, body = 200, b""
            while time.monotonic() < deadline:
                status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
                if status == 503:
                    break
                time.sleep(0.2)
            assert status == 503 and b"judge: not ready" in body
            scrape = agent.wait_for(lambda s: s.total("ragpulse_evaluations_deferred_total") >= 1)
            assert scrape.total("ragpulse_evaluations_deferred_total") >= 1
            status, _, headers = http_post(agent.traces_url, b"", {"Content-Type": "application/x-protobuf"})
            assert status == 503 and int(headers["Retry-After"]) >= 1

            judge.fail_always(None)
            scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") == 16, timeout=60)
            assert scrape.total("ragpulse_score_count") == 16
            assert scrape.total("ragpulse_evaluations_total", outcome="error") == 0
            assert agent.stop() == 0
        finally:
            agent.kill()


def test_a_misconfigured_judge_is_reported_at_start_and_permanent_failures_are_errors() -> None:
    with FakeLLMServer() as judge:
        judge.fail_always("400")
        agent = AgentProcess(
            env={
                "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
                "RAGPULSE_JUDGE_API_BASE": judge.api_base,
                "RAGPULSE_JUDGE_API_KEY": "test-key",
                "RAGPULSE_METRICS": "context_precision",
            }
        )
        try:
            agent.wait_ready(timeout=60)
            deadline = time.monotonic() + 30
            while "judge self-check failed" not in agent.log() and time.monotonic() < deadline:
                time.sleep(0.2)
            line = next(x for x in agent.log().splitlines() if "judge self-check failed" in x)
            assert "judge openai/judge-test: request rejected (bad_request, HTTP 400)" in line
            assert "'response_format' of type 'json_schema' is not supported" in line
            assert "RAGPULSE_JUDGE_API_BASE" in line
            send_interactions(agent, 3)
            scrape = agent.wait_for(lambda s: s.total("ragpulse_evaluations_total", outcome="error") == 3)
            # A permanent failure is recorded as an error (never as a score), and logged once.
            assert scrape.total("ragpulse_evaluations_total", outcome="error") == 3
            assert scrape.total("ragpulse_score_count") == 0
            assert agent.log().count("request rejected (bad_request") <= 3  # self-check, then once
            assert agent.stop() == 0
        finally:
            agent.kill()


def test_a_rejected_key_is_named_at_start_and_readyz_says_the_judge_is_not_ready() -> None:
    """A 401 is no outage: it is named once with what to set, never retried, and /readyz answers
    503 for the judge (the reason line needs build.py's readiness check to pass judge.problem())."""
    with FakeLLMServer() as judge:
        judge.fail_always("401")
        agent = AgentProcess(
            env={
                "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
                "RAGPULSE_JUDGE_API_BASE": judge.api_base,
                "RAGPULSE_JUDGE_API_KEY": "test-key",
                "RAGPULSE_METRICS": "context_precision",
            }
        )
        try:
            deadline = time.monotonic() + 60
            while "judge self-check failed" not in agent.log() and time.monotonic() < deadline:
                time.sleep(0.2)
            line = next(x for x in agent.log().splitlines() if "judge self-check failed" in x)
            assert "credentials missing or rejected (auth, HTTP 401): Incorrect API key provided" in line
            assert "check the key in RAGPULSE_JUDGE_API_KEY (it is used instead of OPENAI_API_KEY)" in line
            assert judge.stats.calls == 1  # never retried
            status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
            assert status == 503 and b"judge: not ready" in body, body
            judge.fail_always(None)  # the key works again: the next call that succeeds clears it
            assert agent.stop() == 0
        finally:
            agent.kill()
