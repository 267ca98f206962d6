"""A large Kafka message is taken in without holding the event loop that answers the probes.

The agent runs in this process (so that one message's decode can be held on a threading.Event)
and consumes from a real Kafka-protocol broker. While the decode of a large message is held,
/healthz, /readyz and /metrics must answer; once it is let go, the message is scored (or
dead-lettered, with its reason) and its offset committed, nothing lost and nothing scored twice.
A decoded message also reaches the pipeline in slices with the loop running other work between
them, so assembling and sampling 30 MiB of spans does not stall it either.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

import agent.sources.kafka as kafka_source
from agent.build import build_agent
from agent.config import KafkaSettings, load_settings
from agent.otlp.decode import DecodedRequest
from agent.pipeline import Agent
from agent.server import MetricsServer
from agent.sources.handover import DECODE_INLINE_BYTES, LoopTurns
from agent.sources.kafka import KafkaSource
from agent.telemetry import KafkaTelemetry
from tests.support.kafka_broker import Broker, produce_raw
from tests.support.net import Scrape, http_get, scrape
from tests.support.otlp import OpenIntake, Recorder, protobuf
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

PATTERNS = {(0, 1, 1, 0, 0): 0.5833333, (1, 1, 0, 1, 0): 0.9166667, (0, 0, 1, 1, 1): 0.4777778}
USEFUL = "Paris is the capital of France and its largest city ({})."
USELESS = "Bananas grow in tropical climates and are rich in potassium ({})."
RESPONSE = "The capital of France is Paris."
SERVICE = "offload-app"
PROBE_TIMEOUT = 10.0  # a probe that gets no answer in this long means the loop is held
WAIT = 60.0  # upper bound of every wait for the agent (never reached when all goes well)


def interactions(count: int, first: int = 0) -> bytes:
    """One ExportTraceServiceRequest of `count` single-span interactions cycling through PATTERNS.

    Recorded before any agent starts in this process: an agent marks the process's later
    OpenTelemetry resources as its own (agent.otlp.mark_own_telemetry).
    """
    recorder = Recorder(SERVICE)
    patterns = list(PATTERNS)
    for i in range(first, first + count):
        pattern = patterns[i % len(patterns)]
        chunks = [(USEFUL if v else USELESS).format(f"{i}.{k}") for k, v in enumerate(pattern)]
        query = f"Capital of France? #{i}"
        openinference_single_span(recorder.tracer, query=query, chunks=chunks, response=RESPONSE)
    return protobuf(recorder.spans())


def expected_sum(count: int, first: int = 0) -> float:
    patterns = list(PATTERNS)
    return sum(PATTERNS[patterns[i % len(patterns)]] for i in range(first, first + count))


class HeldDecode:
    """Replaces the Kafka source's decode: values over `size` wait until `release()`."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._real = kafka_source.decode_kafka_value
        self.entered = threading.Event()
        self._released = threading.Event()

    def __call__(self, value: bytes | None, encoding: str = "otlp_proto") -> DecodedRequest:
        if value is not None and len(value) > self._size:
            self.entered.set()
            # Before the change this ran on the event loop, which then answered nothing.
            self._released.wait(WAIT)
        return self._real(value, encoding)

    def release(self) -> None:
        self._released.set()


class InProcessKafkaAgent:
    """`build_agent` with the Kafka source, run on an event loop in a background thread."""

    def __init__(self, broker: Broker, topic: str, group: str) -> None:
        self.registry = CollectorRegistry()
        settings = load_settings(
            environ={
                "RAGPULSE_SOURCE": "kafka",
                "RAGPULSE_KAFKA_BOOTSTRAP": broker.bootstrap,
                "RAGPULSE_KAFKA_TOPIC": topic,
                "RAGPULSE_KAFKA_GROUP_ID": group,
                "RAGPULSE_KAFKA_AUTO_OFFSET_RESET": "earliest",
                "RAGPULSE_KAFKA_COMMIT_INTERVAL_SECONDS": "0.2",
                "RAGPULSE_KAFKA_SESSION_TIMEOUT_MS": "6000",
                "RAGPULSE_KAFKA_HEARTBEAT_INTERVAL_MS": "1000",
                "RAGPULSE_KAFKA_MAX_POLL_INTERVAL_MS": "10000",
                "RAGPULSE_METRICS_LISTEN": "127.0.0.1:0",
            }
        )
        self.agent: Agent = build_agent(settings, self.registry)
        # A consumer task that died would SIGTERM its process: here, that is pytest.
        self.agent.source._on_fatal = lambda: None  # type: ignore[attr-defined]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.agent.start(), self.loop).result(WAIT)
        (server,) = [c for c in self.agent.components if isinstance(c, MetricsServer)]
        self.base = f"http://127.0.0.1:{server.bound_port}"

    def get(self, path: str) -> int:
        """The status of GET path; raises (URLError, timeout) when the loop does not answer."""
        return http_get(f"{self.base}{path}", timeout=PROBE_TIMEOUT)[0]

    def scrape(self) -> Scrape:
        return scrape(f"{self.base}/metrics")

    def wait_for(self, predicate: Callable[[Scrape], bool]) -> Scrape:
        deadline = time.monotonic() + WAIT
        while not predicate(result := self.scrape()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return result

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.agent.shutdown(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def wait_committed(broker: Broker, group: str, topic: str, expected: int) -> dict[int, int]:
    deadline = time.monotonic() + WAIT
    while (committed := broker.committed(group, topic)).get(0, 0) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return committed


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldDecode]:
    hold = HeldDecode(DECODE_INLINE_BYTES)
    monkeypatch.setattr(kafka_source, "decode_kafka_value", hold)
    try:
        yield hold
    finally:
        hold.release()  # never leave the agent's loop (or thread) waiting on a failed test


@pytest.fixture
def group() -> str:
    return f"ragpulse-offload-{uuid.uuid4().hex[:8]}"


def score_count(s: Scrape) -> float:
    return s.total("ragpulse_score_count", service=SERVICE, metric="context_precision")


def test_probes_answer_while_a_large_message_decodes_and_it_is_scored_and_committed_after(
    broker: Broker, group: str, held: HeldDecode
) -> None:
    first, large, last = interactions(1), interactions(300, first=1), interactions(1, first=301)
    assert len(first) <= DECODE_INLINE_BYTES < len(large)
    topic = broker.create_topic(partitions=1)
    produce_raw(broker.bootstrap, topic, [first])
    agent = InProcessKafkaAgent(broker, topic, group)
    try:
        # The small message before: scored and committed as usual.
        assert wait_committed(broker, group, topic, 1) == {0: 1}
        produce_raw(broker.bootstrap, topic, [large, last])
        assert held.entered.wait(WAIT), "the large message was never decoded"

        # Its decode is held: the loop still answers every probe, and nothing of it is counted
        # or committed yet.
        assert agent.get("/healthz") == 200
        assert agent.get("/readyz") == 200
        assert agent.get("/metrics") == 200
        during = agent.scrape()
        assert during.value("ragpulse_spans_received_total", source="kafka") == 1
        assert broker.committed(group, topic) == {0: 1}

        held.release()
        after = agent.wait_for(lambda s: score_count(s) >= 302)
        assert wait_committed(broker, group, topic, 3) == {0: 3}
        after = agent.scrape()
        assert after.value("ragpulse_spans_received_total", source="kafka") == 302
        assert score_count(after) == 302  # every interaction once: none lost, none twice
        total = after.total("ragpulse_score_sum", service=SERVICE, metric="context_precision")
        assert total == pytest.approx(expected_sum(302), abs=1e-4)
        assert (after.value("ragpulse_duplicates_total") or 0) == 0
        assert after.total("ragpulse_dead_letters_total") == 0
    finally:
        held.release()
        agent.stop()


def test_a_large_undecodable_message_is_dead_lettered_with_its_reason_and_committed(
    broker: Broker, group: str, held: HeldDecode, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = b"\xff" * (DECODE_INLINE_BYTES * 4)  # not a protobuf message (wire type 7)
    good = interactions(3, first=400)
    topic = broker.create_topic(partitions=1)
    produce_raw(broker.bootstrap, topic, [garbage, good])
    with caplog.at_level(logging.WARNING, logger="agent.pipeline"):
        agent = InProcessKafkaAgent(broker, topic, group)
        try:
            assert held.entered.wait(WAIT), "the large message was never decoded"
            assert agent.get("/healthz") == 200
            assert agent.get("/metrics") == 200

            held.release()
            after = agent.wait_for(lambda s: score_count(s) >= 3)
            assert wait_committed(broker, group, topic, 2) == {0: 2}
            after = agent.scrape()
        finally:
            held.release()
            agent.stop()
    assert after.value("ragpulse_dead_letters_total", reason="undecodable") == 1
    assert after.total("ragpulse_dead_letters_total") == 1
    assert score_count(after) == 3  # consumption went on past it
    logged = [record.getMessage() for record in caplog.records]
    details = [message for message in logged if message.startswith("dead letter (undecodable)")]
    assert len(details) == 1 and f"{topic}/0@0" in details[0], details


class RecordingIntake(OpenIntake):
    """Takes every request at once and notes, at each accept, how often the loop ran other work."""

    def __init__(self) -> None:
        self.ticks = 0  # advanced by a task that runs whenever the loop is free
        self.accepts: list[tuple[int, int]] = []  # (spans, ticks when accepted)
        self.dead: list[str] = []
        self._sequence = 0

    async def tick(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.accepts.append((len(request.spans), self.ticks))
        self._sequence += 1
        return self._sequence

    def low_watermark(self) -> int:
        return self._sequence + 1  # everything finished at once

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self.dead.append(reason)


def test_a_large_message_reaches_the_pipeline_in_slices_with_the_loop_free_between_them(
    broker: Broker, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A turn after every slice, so that the test does not depend on how fast the machine is.
    monkeypatch.setattr(kafka_source, "LoopTurns", functools.partial(LoopTurns, 0.0))
    spans = 600  # ~740 KB: one message below the test producer's 1 MB request limit
    topic = broker.create_topic(partitions=1)
    produce_raw(broker.bootstrap, topic, [interactions(spans)])
    config = KafkaSettings(
        bootstrap=(broker.bootstrap,),
        topic=topic,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_interval_ms=10000,
        commit_interval_seconds=0.2,
    )

    async def scenario() -> RecordingIntake:
        intake = RecordingIntake()
        ticker = asyncio.create_task(intake.tick())
        source = KafkaSource(config, KafkaTelemetry(CollectorRegistry()), on_fatal=lambda: None)
        await source.start(intake)
        try:
            for _ in range(int(WAIT * 10)):
                if broker.committed(group, topic).get(0) == 1:
                    break
                await asyncio.sleep(0.1)
        finally:
            await source.shutdown(5.0)
            ticker.cancel()
        return intake

    intake = asyncio.run(scenario())
    sizes = [size for size, _ in intake.accepts]
    assert sum(sizes) == spans and len(sizes) > 1 and max(sizes) <= 100, sizes
    ticks = [at for _, at in intake.accepts]
    assert all(later > earlier for earlier, later in itertools.pairwise(ticks)), ticks
    assert intake.dead == []
    assert broker.committed(group, topic) == {0: 1}
