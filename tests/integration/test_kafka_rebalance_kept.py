"""A partition that comes back to the same member after a rebalance keeps its unfinished offsets.

kafka-python 3.x revokes every partition before a rebalance (eager protocol) but keeps the fetch
position of each partition the member is given again, so those messages are not delivered again.
The source must then keep tracking the messages it already handed over: forgetting them at the
revoke would leave their offsets uncommitted for good (the commit stuck below the end while their
work is done) or, once later messages are finished, let a commit pass over work still in flight.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from kafka import KafkaConsumer, KafkaProducer
from prometheus_client import CollectorRegistry

from agent.config import KafkaSettings
from agent.otlp.decode import DecodedRequest
from agent.sources.kafka import KafkaSource
from agent.telemetry import KafkaTelemetry
from tests.support.kafka_broker import Broker
from tests.support.otlp import OpenIntake

pytestmark = pytest.mark.integration

EMPTY_REQUEST = b'{"resourceSpans": []}'
PER_PARTITION = 4
WAIT = 60.0
GROUP_TIMING = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "max_poll_interval_ms": 10000}


class HeldIntake(OpenIntake):
    """Takes every request; none is finished until `finish()` (its low watermark stays at 0)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.finished = False

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.accepted += 1
        return self.accepted

    def low_watermark(self) -> int:
        return self.accepted + 1 if self.finished else 0

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        raise AssertionError(f"nothing here is a dead letter: {reason} {detail}")


class Member(threading.Thread):
    """A second consumer-group member that joins, polls, and never commits."""

    def __init__(self, broker: Broker, topic: str, group: str) -> None:
        super().__init__(name="second-member", daemon=True)
        self.consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False, **GROUP_TIMING
        )
        self.consumer.subscribe([topic])
        self.done = threading.Event()
        self.owned: set[int] = set()

    def run(self) -> None:
        while not self.done.is_set():
            self.consumer.poll(200)
            self.owned = {tp.partition for tp in self.consumer.assignment()}

    def leave(self) -> None:
        self.done.set()
        self.join(20)
        self.consumer.close(autocommit=False)


def test_a_partition_kept_across_a_rebalance_is_committed_to_its_end_once_its_work_is_done(
    broker: Broker,
) -> None:
    topic = broker.create_topic(partitions=2)
    group = f"ragpulse-kept-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for partition in (0, 1):
            for _ in range(PER_PARTITION):
                producer.send(topic, value=EMPTY_REQUEST, partition=partition).get(10)
    finally:
        producer.close()
    registry = CollectorRegistry()
    config = KafkaSettings(
        bootstrap=(broker.bootstrap,),
        topic=topic,
        group_id=group,
        encoding="otlp_json",
        auto_offset_reset="earliest",
        commit_interval_seconds=0.2,
        **GROUP_TIMING,
    )

    def owned() -> float:
        return registry.get_sample_value("ragpulse_kafka_assigned_partitions", {"topic": topic}) or 0.0

    async def until(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.1)

    async def scenario() -> tuple[int, dict[int, int]]:
        intake = HeldIntake()
        source = KafkaSource(config, KafkaTelemetry(registry), on_fatal=lambda: None)
        await source.start(intake)
        member: Member | None = None
        try:
            # Every message handed over and tracked, none finished: nothing committable yet.
            await until(lambda: intake.accepted >= 2 * PER_PARTITION and owned() == 2, "the backlog")
            # A second member joins: both partitions are revoked, and one comes back.
            member = await asyncio.to_thread(Member, broker, topic, group)
            member.start()
            await until(lambda: owned() == 1 and len(member.owned) == 1, "the rebalance")  # type: ignore[union-attr]
            (kept,) = {0, 1} - member.owned
            # The work of every message is done now: the kept partition is committed to its end.
            intake.finished = True
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                committed = await asyncio.to_thread(broker.committed, group, topic)
                if committed.get(kept) == PER_PARTITION:
                    break
                await asyncio.sleep(0.2)
        finally:
            await source.shutdown(5.0)
            if member is not None:
                await asyncio.to_thread(member.leave)
        return kept, committed

    kept, committed = asyncio.run(scenario())
    # Before: the revoke forgot the kept partition's offsets, so its commit stayed at 0.
    assert committed.get(kept) == PER_PARTITION, (kept, committed)
