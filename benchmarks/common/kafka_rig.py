"""A steady Kafka producer, a /healthz stall probe and a scored agent, for the fault benchmarks
(benchmarks/soak.py, benchmarks/broker_outage.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from kafka import KafkaProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.harness import line
from tests.support.agent_process import AgentProcess
from tests.support.kafka_broker import FAST_GROUP_ENV, Broker
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import RedisServer
from tests.support.spans import openinference_single_span


def log(message: str) -> None:
    line(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def start_agent(broker: Broker, topic: str, results: str, group: str, redis: RedisServer,
                judge: FakeLLMServer) -> AgentProcess:  # fmt: skip
    agent = AgentProcess(
        env={
            "RAGPULSE_SOURCE": "kafka",
            "RAGPULSE_KAFKA_BOOTSTRAP": broker.bootstrap,
            "RAGPULSE_KAFKA_TOPIC": topic,
            "RAGPULSE_KAFKA_GROUP_ID": group,
            "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
            "RAGPULSE_KAFKA_COMMIT_INTERVAL_SECONDS": "0.5",
            **FAST_GROUP_ENV,
            "RAGPULSE_RESULTS_TOPIC": results,
            "RAGPULSE_REDIS_URL": redis.url,
            "RAGPULSE_JUDGE_MODEL": "openai/judge-soak",
            "RAGPULSE_JUDGE_API_BASE": judge.api_base,
            "RAGPULSE_JUDGE_API_KEY": "soak",
            "RAGPULSE_JUDGE_MAX_RETRIES": "1",
            "RAGPULSE_JUDGE_BREAKER_FAILURES": "3",
            "RAGPULSE_JUDGE_BREAKER_COOLDOWN_SECONDS": "5",
            "RAGPULSE_IDEMPOTENCY_LEASE_SECONDS": "10",
            "RAGPULSE_EVAL_CONCURRENCY": "8",
        }
    )
    agent.wait_ready(timeout=90)
    return agent


class Producer(threading.Thread):
    """Single-span interactions at a steady rate, each with its own trace id."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        super().__init__(name="producer", daemon=True)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, retries=2**31 - 1,
                                       max_in_flight_requests_per_connection=1, acks="all",
                                       delivery_timeout_ms=600_000, request_timeout_ms=30_000)  # fmt: skip
        self._topic = topic
        self._interval = 1.0 / rate
        self._halt = threading.Event()
        self.sent: set[str] = set()
        self.failed = 0
        self._provider = TracerProvider(resource=Resource.create({"service.name": "soak"}))
        self._memory = InMemorySpanExporter()
        self._provider.add_span_processor(SimpleSpanProcessor(self._memory))
        self._tracer = self._provider.get_tracer("soak")

    def run(self) -> None:
        n = 0
        next_at = time.monotonic()
        while not self._halt.is_set():
            n += 1
            openinference_single_span(
                self._tracer,
                query=f"What does the soak say about item {n}?",
                chunks=[f"Item {n} is about Paris, the capital of France.", "Bananas are yellow."],
                response=f"Item {n} is about Paris.",
            )
            (span,) = self._memory.get_finished_spans()
            self._memory.clear()
            interaction_id = f"{span.context.trace_id:032x}:{span.context.span_id:016x}"
            future = self._producer.send(
                self._topic,
                key=f"{span.context.trace_id:032x}".encode(),
                value=encode_spans([span]).SerializeToString(),
            )
            future.add_callback(lambda _, i=interaction_id: self.sent.add(i))
            future.add_errback(lambda _: setattr(self, "failed", self.failed + 1))
            next_at += self._interval
            self._halt.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self._producer.flush(120)
        self._producer.close(30)


class StallProbe:
    """Polls /healthz of the current agent every 100 ms from another process; keeps the longest
    answer time over all the agents it watched."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_at = 0.0  # time.time() of the longest answer
        self.samples = 0
        self._process: subprocess.Popen[str] | None = None

    def watch(self, agent: AgentProcess | None) -> None:
        self._collect()
        if agent is not None:
            url = f"http://127.0.0.1:{agent.metrics_port}/healthz"
            self._process = subprocess.Popen(
                [sys.executable, "-c", _PROBE, url], stdout=subprocess.PIPE, text=True
            )

    def _collect(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        out, _ = process.communicate(timeout=35)
        longest, at, samples = out.split()
        self.samples += int(samples)
        if float(longest) > self.longest:
            self.longest, self.longest_at = float(longest), float(at)

    def stop(self) -> None:
        self._collect()


# The probe runs in a process of its own: a thread of this process would share its interpreter
# lock with the producer, the results consumer and the judge server, and time their work as the
# agent's (a broker freeze measured 0.24 s from a thread here, 0.035 s from curl at the same time).
_PROBE = r"""
import signal, sys, time, urllib.request
url, longest, at, samples = sys.argv[1], 0.0, 0.0, 0
def report(*_):
    line(longest, at, samples, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, report)
while True:
    time.sleep(0.1)
    started = time.monotonic()
    try:
        urllib.request.urlopen(url, timeout=30).read()
    except OSError:
        continue  # restarting: not a stall
    took = time.monotonic() - started
    samples += 1
    if took > longest:
        longest, at = took, time.time()
"""
