"""Event-loop stalls under hostile and oversized input, and the scrape size at the series budget.

Sends, to a running agent (or one this script starts with the embedded defaults), one after the
other while /healthz is polled every 20 ms:

1. a ~200 KB span (a 12 KB response and five 36 KB chunks), judged by the configured judge;
2. a 32 MiB-class OTLP/protobuf body (2,000 spans of 15 KB attributes), three times;
3. hostile bodies: 2 KB and 200 KB of nested JSON, nested attribute values, random bytes, a body
   that claims gzip and is not, a gzip bomb;
4. a 31 MiB body of 4,500 single-span RAG interactions (decoded, assembled and sampled).

With --kafka, the same kinds of input as Kafka messages, each case against a fresh agent consuming
from a real Kafka-protocol broker (tests/support/kafka_broker.py), timed until every offset is
committed (every interaction scored or dead-lettered):

5. one 31 MiB message of 4,500 RAG interactions (fetch limits raised to take it whole);
6. four 14 MiB messages of 2,000 RAG interactions each, one per partition, so one poll holds all;
7. a 16 MiB message of random bytes (dead-lettered as undecodable);
8. 20,000 small messages of one interaction each, with sampling off (intake throughput).

Reports, per phase, the longest /healthz round trip seen by the client and the agent's own
`ragpulse_event_loop_lag_max_seconds` (longest stall since start); then, with --series, the
/metrics size after 100 services x 100 routes of interactions at the default series budget.

    python benchmarks/loop_stall.py                       # starts an agent
    python benchmarks/loop_stall.py --otlp http://127.0.0.1:4318 --metrics http://127.0.0.1:9464
    python benchmarks/loop_stall.py --series              # also the scrape size at the budget
    python benchmarks/loop_stall.py --kafka-only          # only the Kafka cases
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.harness import Benchmark, line, seeded
from tests.support.agent_process import AgentProcess
from tests.support.net import scrape
from tests.support.spans import openinference_single_span

if TYPE_CHECKING:
    from tests.support.kafka_broker import Broker

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def healthz_poller(metrics: str) -> Iterator[list[float]]:
    """Round trips of GET /healthz every 20 ms while the block runs (a failure counts as inf)."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{metrics}/healthz", timeout=120) as response:
                    ok = response.status == 200
            except OSError:
                ok = False
            latencies.append(time.perf_counter() - started if ok else float("inf"))
            time.sleep(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        done.set()
        thread.join()


def tracer(service: str) -> tuple[InMemorySpanExporter, object]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, provider.get_tracer("bench")


def large_span() -> bytes:
    rng = seeded(5)
    words = ["Paris", "France", "capital", "river", "Seine", "museum", "Louvre", "1889", "tower", "city"]

    def text(size: int) -> str:
        out: list[str] = []
        while sum(len(s) + 1 for s in out) < size:
            out.append(" ".join(rng.choice(words) for _ in range(10)).capitalize() + ".")
        return " ".join(out)

    memory, tr = tracer("bench-large")
    openinference_single_span(
        tr, query="Tell me about Paris.", chunks=[text(36_000) for _ in range(5)], response=text(12_000)
    )
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def rag_bulk_body(count: int = 4_500, service: str = "bench-rag-bulk") -> bytes:
    """~31 MiB of 4,500 single-span RAG interactions (five 1.3 KB chunks each)."""
    memory, tr = tracer(service)
    chunk = "Paris is the capital of France. " * 40
    for i in range(count):
        openinference_single_span(
            tr,
            query=f"Question {i} about Paris?",
            chunks=[f"chunk {k} {chunk}" for k in range(5)],
            response="Paris is the capital.",
        )
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def bulk_body() -> bytes:
    memory, tr = tracer("bench-bulk")
    for i in range(2_000):
        with tr.start_as_current_span(f"db {i}") as span:  # type: ignore[attr-defined]
            span.set_attribute("db.statement", "x" * 15_000)
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def hostile() -> list[tuple[bytes, dict[str, str]]]:
    deep_value = (
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", '
        '"spanId": "eee19b7ec3c1b174", "attributes": [{"key": "k", "value": '
        + '{"kvlistValue": {"values": [{"key": "k", "value": ' * 300
        + '{"stringValue": "x"}'
        + "}]}}" * 300
        + "}]}]}]}]}"
    ).encode()
    return [
        (b"[" * 1_000 + b"]" * 1_000, JSON),
        (b"[" * 100_000 + b"]" * 100_000, JSON),
        (deep_value, JSON),
        (seeded(1).randbytes(1 << 20), PROTOBUF),
        (b"not gzip" * 1000, {**PROTOBUF, "Content-Encoding": "gzip"}),
        (gzip.compress(b"\x00" * (64 << 20)), {**PROTOBUF, "Content-Encoding": "gzip"}),
    ]


def wait_until(metrics: str, predicate: Callable[[object], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate(scrape(f"{metrics}/metrics")):
            return
        time.sleep(0.2)


def phase(name: str, otlp: str, metrics: str, run: Callable[[], None]) -> None:
    with healthz_poller(metrics) as latencies:
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
    lag = scrape(f"{metrics}/metrics").value("ragpulse_event_loop_lag_max_seconds")
    worst = max(latencies, default=float("nan")) * 1000
    stall = (lag or 0.0) * 1000
    line(
        f"{name:<28} {elapsed:7.1f}s  healthz polls {len(latencies):5d}  "
        f"longest healthz {worst:8.1f} ms  agent's longest stall so far {stall:8.1f} ms",
        flush=True,
    )


def series(otlp: str, metrics: str) -> None:
    before = scrape(f"{metrics}/metrics").total("ragpulse_interactions_total")
    for s in range(100):
        memory, tr = tracer(f"svc-{s}")
        for r in range(100):
            openinference_single_span(
                tr,
                query="What is the capital of France?",
                chunks=["Paris is the capital of France."],
                response="The capital is Paris.",
                attributes={"http.route": f"/r/{r}"},
            )
        body = encode_spans(memory.get_finished_spans()).SerializeToString()
        while (status := post(f"{otlp}/v1/traces", body, PROTOBUF)) == 503:  # intake paused: retry
            time.sleep(1.0)
        assert status == 200, status
    wait_until(
        metrics,
        lambda s: (
            s.total("ragpulse_interactions_total") >= before + 10_000  # type: ignore[attr-defined]
            and s.value("ragpulse_evaluation_queue_depth") == 0
        ),  # type: ignore[attr-defined]
        600,
    )
    started = time.perf_counter()
    with urllib.request.urlopen(f"{metrics}/metrics", timeout=60) as response:
        body = response.read()
    elapsed = time.perf_counter() - started
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    labelled = [line for line in lines if 'service="' in line]
    pairs = {
        (line.split('service="')[1].split('"')[0], line.split('route="')[1].split('"')[0])
        for line in labelled
        if 'route="' in line
    }
    line(
        f"series budget: {len(pairs)} (service, route) pairs, {len(lines)} samples "
        f"({len(labelled)} with a service label), /metrics {len(body) / 1e6:.2f} MB, "
        f"scraped in {elapsed * 1000:.0f} ms"
    )


def healthy(metrics: str) -> bool:
    try:
        with urllib.request.urlopen(f"{metrics}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def committed(broker: Broker, group: str, topic: str, expected: int) -> None:
    """Wait until the group committed `expected` offsets: every message scored or dead-lettered."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if sum(broker.committed(group, topic).values()) >= expected:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{topic}: offsets not all committed")


def kafka_phases() -> None:
    """The Kafka cases (see the module docstring), each against a fresh agent and topic."""
    from kafka import KafkaProducer

    from tests.support.kafka_broker import FAST_GROUP_ENV, kafka_broker

    big = 64 * 2**20
    rag_bulk = rag_bulk_body(service="bench-kafka-bulk")
    rag_14 = [rag_bulk_body(2_000, service=f"bench-kafka-14-{i}") for i in range(4)]
    small_memory, small_tracer = tracer("bench-kafka-small")
    openinference_single_span(
        small_tracer, query="Capital of France?", chunks=["Paris is the capital of France."] * 3,
        response="Paris.",
    )  # fmt: skip
    small = encode_spans(small_memory.get_finished_spans()).SerializeToString()
    junk = seeded(2).randbytes(16 * 2**20)
    fetch_all = {
        "RAGPULSE_KAFKA_MAX_PARTITION_FETCH_BYTES": str(big),
        "RAGPULSE_KAFKA_FETCH_MAX_BYTES": str(big),
    }
    cases: list[tuple[str, int, list[bytes], dict[str, str]]] = [
        (f"kafka {len(rag_bulk) / 2**20:.0f} MiB message, RAG", 1, [rag_bulk], fetch_all),
        (f"kafka 4 x {len(rag_14[0]) / 2**20:.0f} MiB, one poll", 4, rag_14, fetch_all),
        ("kafka 16 MiB undecodable", 1, [junk], fetch_all),
        ("kafka 20,000 small, unsampled", 1, [small] * 20_000, {"RAGPULSE_SAMPLE_RATE": "0"}),
    ]
    with tempfile.TemporaryDirectory() as logs, kafka_broker(Path(logs)) as broker:
        for name, partitions, values, env in cases:
            topic = broker.create_topic(partitions=partitions)
            group = f"bench-{uuid.uuid4().hex[:8]}"
            # Written before the agent starts, so the phase times the agent, not the producer.
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=big)
            try:
                for i, value in enumerate(values):
                    producer.send(topic, value=value, partition=i % partitions)
                producer.flush(120)
            finally:
                producer.close()
            agent = AgentProcess(
                env={
                    "RAGPULSE_SOURCE": "kafka",
                    "RAGPULSE_KAFKA_BOOTSTRAP": broker.bootstrap,
                    "RAGPULSE_KAFKA_TOPIC": topic,
                    "RAGPULSE_KAFKA_GROUP_ID": group,
                    "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
                    "RAGPULSE_KAFKA_COMMIT_INTERVAL_SECONDS": "0.2",
                    **FAST_GROUP_ENV,
                    **env,
                }
            )
            try:
                metrics = f"http://127.0.0.1:{agent.metrics_port}"
                # /healthz answers before the consumer has joined its group (that takes seconds).
                while not healthy(metrics):
                    time.sleep(0.05)
                phase(name, "", metrics, functools.partial(committed, broker, group, topic, len(values)))
            finally:
                agent.stop()
                agent.kill()


def main() -> None:
    bench = Benchmark(__doc__, seed=0)
    parser = bench.parser
    parser.add_argument("--otlp", help="OTLP/HTTP base URL of a running agent (default: start one)")
    parser.add_argument("--metrics", help="metrics base URL of a running agent")
    parser.add_argument("--series", action="store_true", help="also measure /metrics at the series budget")
    parser.add_argument(
        "--series-only", action="store_true", help="only measure /metrics at the series budget"
    )
    parser.add_argument("--kafka", action="store_true", help="also the Kafka cases (starts a broker)")
    parser.add_argument("--kafka-only", action="store_true", help="only the Kafka cases")
    args = bench.parse()
    if args.kafka_only:
        kafka_phases()
        return

    agent = None
    if args.otlp is None:
        agent = AgentProcess(env={"RAGPULSE_OTLP_MAX_BODY_BYTES": str(32 * 2**20)})
        agent.wait_ready()
        otlp, metrics = f"http://127.0.0.1:{agent.otlp_port}", f"http://127.0.0.1:{agent.metrics_port}"
    else:
        otlp, metrics = args.otlp.rstrip("/"), (args.metrics or "http://127.0.0.1:9464").rstrip("/")
    try:
        if args.series_only:
            series(otlp, metrics)
            return
        large, bulk = large_span(), bulk_body()
        line(f"large span body {len(large) / 1e3:.0f} KB, bulk body {len(bulk) / 2**20:.1f} MiB")
        before = scrape(f"{metrics}/metrics").total("ragpulse_evaluations_total", service="bench-large")

        def judge_large() -> None:
            assert post(f"{otlp}/v1/traces", large, PROTOBUF) == 200
            wait_until(
                metrics,
                lambda s: s.total("ragpulse_evaluations_total", service="bench-large") > before,  # type: ignore[attr-defined]
                600,
            )

        phase("200 KB span, judged", otlp, metrics, judge_large)
        statuses: list[int] = []
        phase(
            "32 MiB body x3",
            otlp,
            metrics,
            lambda: statuses.extend(post(f"{otlp}/v1/traces", bulk, PROTOBUF) for _ in range(3)),
        )
        line(f"bulk body statuses: {statuses}")
        statuses.clear()
        phase(
            "hostile bodies",
            otlp,
            metrics,
            lambda: statuses.extend(post(f"{otlp}/v1/traces", b, h) for b, h in hostile()),
        )
        line(f"hostile body statuses: {statuses} (5xx: {sum(s >= 500 for s in statuses)})")
        rag_bulk = rag_bulk_body()
        phase(
            f"{len(rag_bulk) / 2**20:.0f} MiB of RAG spans",
            otlp,
            metrics,
            lambda: statuses.append(post(f"{otlp}/v1/traces", rag_bulk, PROTOBUF)),
        )
        line(f"RAG body status: {statuses[-1]}")
        if args.series:
            series(otlp, metrics)
    finally:
        if agent is not None:
            agent.stop()
            agent.kill()
    if args.kafka:
        kafka_phases()


if __name__ == "__main__":
    main()
