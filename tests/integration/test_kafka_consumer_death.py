"""A defect behind the Kafka consumer loses nothing silently and never stops consumption; a consumer
task that dies anyway stops the agent so that its supervisor restarts it."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from prometheus_client import CollectorRegistry

from agent.config import KafkaSettings
from agent.otlp.decode import DecodedRequest
from agent.sources.kafka import KafkaSource
from agent.telemetry import KafkaTelemetry
from tests.support.kafka_broker import Broker, produce_raw
from tests.support.otlp import OpenIntake

pytestmark = pytest.mark.integration

EMPTY_REQUEST = b'{"resourceSpans": []}'


class BuggyIntake(OpenIntake):
    """An intake with a defect: the first request it is handed raises; later ones are taken."""

    def __init__(self) -> None:
        self.handed = 0
        self.dead: list[tuple[str, str]] = []

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.handed += 1
        if self.handed == 1:
            raise RuntimeError("a defect behind the consumer")
        return -1  # finished at once

    def low_watermark(self) -> int:
        return 0

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self.dead.append((reason, detail))


def config(broker: Broker, topic: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=(broker.bootstrap,),
        topic=topic,
        group_id=f"ragpulse-defect-{uuid.uuid4().hex[:8]}",
        encoding="otlp_json",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_interval_ms=10000,
        commit_interval_seconds=0.2,
    )


def test_a_defect_behind_the_consumer_dead_letters_the_message_and_consumption_goes_on(
    broker: Broker,
) -> None:
    topic = broker.create_topic(partitions=1)
    produce_raw(broker.bootstrap, topic, [EMPTY_REQUEST] * 3)
    settings = config(broker, topic)

    async def scenario() -> BuggyIntake:
        intake = BuggyIntake()
        source = KafkaSource(settings, KafkaTelemetry(CollectorRegistry()), on_fatal=lambda: None)
        await source.start(intake)
        try:
            for _ in range(600):
                if intake.handed >= 3 and broker.committed(settings.group_id, topic).get(0) == 3:
                    break
                await asyncio.sleep(0.1)
            assert source.ready()
        finally:
            await source.shutdown(5.0)
        return intake

    intake = asyncio.run(scenario())
    assert intake.handed == 3
    assert [reason for reason, _ in intake.dead] == ["internal_error"]
    assert f"{topic}/0@0" in intake.dead[0][1]
    assert broker.committed(settings.group_id, topic) == {0: 3}


def test_a_consumer_task_that_dies_is_logged_and_stops_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    fatal: list[bool] = []
    source = KafkaSource(
        KafkaSettings(bootstrap=("127.0.0.1:9",), topic="t", group_id="g"),
        KafkaTelemetry(CollectorRegistry()),
        on_fatal=lambda: fatal.append(True),
    )

    async def dying() -> None:
        raise RuntimeError("the consumer loop broke")

    async def scenario() -> None:
        task = asyncio.create_task(dying())
        await asyncio.gather(task, return_exceptions=True)
        source._task_ended(task)

    with caplog.at_level(logging.CRITICAL, logger="agent.sources.kafka"):
        asyncio.run(scenario())
    assert fatal == [True]
    assert any("consumer task died" in record.getMessage() for record in caplog.records)
