"""Every source's `flush()` hands on what it holds and keeps running (agent/sources/base.py).

- The OTLP receivers (real HTTP and gRPC servers, real clients): a request whose body was read
  and is still being decoded reaches the intake before `flush()` returns.
- Kafka (a real broker): finished offsets are committed by `flush()`, not at the next commit
  interval (an hour here).
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.request
import uuid
from collections.abc import Callable

import grpc
import pytest
from kafka import KafkaProducer
from prometheus_client import CollectorRegistry

from agent.config import KafkaSettings
from agent.otlp.decode import DecodedRequest
from agent.sources.kafka import KafkaSource
from agent.sources.otlp_grpc import SERVICE, OtlpGrpcSource
from agent.sources.otlp_http import OtlpHttpSource
from agent.telemetry import KafkaTelemetry
from tests.support.kafka_broker import Broker
from tests.support.net import free_port
from tests.support.otlp import OpenIntake, Recorder, protobuf
from tests.support.spans import rag_trace

pytestmark = pytest.mark.integration

WAIT = 60.0
TRACES = 1500  # 4,500 spans with their documents, about 2 MB: decoded in a thread, in slices
GROUP_TIMING = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "max_poll_interval_ms": 10000}


class Counting(OpenIntake):
    """Counts the bodies it was asked about (read, before decoding) and the spans it was given;
    its work is finished once `finished` is set."""

    def __init__(self) -> None:
        self.asked = 0
        self.spans = 0
        self.accepted = 0
        self.finished = False

    def pause_reason(self) -> str | None:
        self.asked += 1
        return None

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.spans += len(request.spans)
        self.accepted += 1
        return self.accepted

    def low_watermark(self) -> int:
        return self.accepted + 1 if self.finished else 0

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        raise AssertionError(f"nothing here is a dead letter: {reason} {detail}")


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


@pytest.fixture(scope="module")
def large_request() -> tuple[bytes, int]:
    recorder = Recorder()
    for _ in range(TRACES):
        rag_trace(recorder)
    spans = recorder.spans()
    return protobuf(spans), len(spans)


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return int(response.status)


def _export(endpoint: str, body: bytes) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(f"/{SERVICE}/Export")(body, timeout=WAIT)
    return 0


OK = {"otlp_http": 200, "otlp_grpc": 0}


@pytest.mark.parametrize("receiver", ["otlp_http", "otlp_grpc"])
def test_a_receivers_flush_hands_every_request_read_to_the_intake(
    receiver: str, large_request: tuple[bytes, int]
) -> None:
    body, count = large_request
    recorder = Recorder()
    rag_trace(recorder)
    small = protobuf(recorder.spans())

    async def scenario() -> tuple[int, int, int]:
        intake = Counting()
        source: OtlpHttpSource | OtlpGrpcSource
        if receiver == "otlp_http":
            source = OtlpHttpSource("127.0.0.1", 0, max_body_bytes=64 << 20)
        else:
            source = OtlpGrpcSource("127.0.0.1", free_port(), max_body_bytes=64 << 20)
        await source.start(intake)
        try:
            await source.flush()  # nothing in flight: returns at once
            if isinstance(source, OtlpHttpSource):
                send = functools.partial(_post, f"http://127.0.0.1:{source.bound_port}/v1/traces")
            else:
                send = functools.partial(_export, f"127.0.0.1:{source.bound_port}")
            sent = asyncio.ensure_future(asyncio.to_thread(send, body))
            await until(lambda: intake.asked == 1, "the body to be read")
            before = intake.spans  # being decoded: not handed over yet
            await source.flush()
            handed = intake.spans
            assert await sent == OK[receiver]
            # Still receiving after a flush.
            assert await asyncio.to_thread(send, small) == OK[receiver]
            return before, handed, intake.spans
        finally:
            await source.shutdown(1.0)

    before, handed, total = asyncio.run(scenario())
    assert before < count  # the flush had something to wait for
    assert handed == count and total == count + 3


def test_kafkas_flush_commits_the_finished_offsets_now(broker: Broker) -> None:
    topic = broker.create_topic(partitions=1)
    group = f"ragpulse-flush-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    registry = CollectorRegistry()
    config = KafkaSettings(
        bootstrap=(broker.bootstrap,),
        topic=topic,
        group_id=group,
        encoding="otlp_json",
        auto_offset_reset="earliest",
        commit_interval_seconds=3600,
        **GROUP_TIMING,
    )

    def produce(count: int) -> None:
        for _ in range(count):
            producer.send(topic, value=b'{"resourceSpans": []}', partition=0).get(10)

    async def scenario() -> tuple[dict[int, int], dict[int, int], dict[int, int], int]:
        intake = Counting()
        source = KafkaSource(config, KafkaTelemetry(registry), on_fatal=lambda: None)
        await source.start(intake)
        try:
            await asyncio.to_thread(produce, 3)
            await until(lambda: intake.accepted == 3, "three messages handed over")
            await source.flush()
            unfinished = await asyncio.to_thread(broker.committed, group, topic)
            intake.finished = True
            await asyncio.sleep(0.5)  # a few polls: the interval alone commits nothing for an hour
            waiting = await asyncio.to_thread(broker.committed, group, topic)
            await source.flush()
            flushed = await asyncio.to_thread(broker.committed, group, topic)
            # The source keeps consuming after a flush.
            await asyncio.to_thread(produce, 1)
            await until(lambda: intake.accepted == 4, "a message after the flush")
            return unfinished, waiting, flushed, intake.accepted
        finally:
            await source.shutdown(5.0)
            producer.close()

    unfinished, waiting, flushed, accepted = asyncio.run(scenario())
    assert unfinished == {} and waiting == {}  # nothing finished, then not yet committed
    assert flushed == {0: 3} and accepted == 4
