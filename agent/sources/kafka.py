"""Kafka source: a consumer group reading OTLP requests as the Collector's `kafka` exporter writes them.

One message value is one ExportTraceServiceRequest (`otlp_proto` or `otlp_json` encoding); the
message key (the trace id with `partition_traces_by_id`) is never relied on. Delivery is
at-least-once: offsets are committed only up to the pipeline's low watermark, i.e. once every
sampled interaction built from the messages before them is scored or dead-lettered. Replicas
share partitions through the consumer group; duplicates after a rebalance or a crash are caught
by the pipeline's idempotency keys.

kafka-python's consumer is blocking, so polls run in a worker thread; everything else (decode,
assemble, commit bookkeeping) runs on the event loop, and the consumer is only touched by one
thread at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from agent.otlp.decode import KAFKA_ENCODINGS, UndecodableError, decode_kafka_value
from agent.sources.base import Intake
from agent.sources.offsets import OffsetTracker
from agent.telemetry import Telemetry

log = logging.getLogger(__name__)

SOURCE = "kafka"
# Sequence number for messages that leave no work behind (e.g. dead-lettered): always committable.
_FINISHED = -1


@dataclass(frozen=True, slots=True)
class KafkaSourceConfig:
    # Connection options shared with producers: bootstrap_servers, security_protocol, sasl_*, ssl_*.
    connection: Mapping[str, Any]
    topic: str
    group_id: str
    encoding: str = "otlp_proto"
    auto_offset_reset: str = "latest"
    client_id: str = "ragpulse"
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    max_poll_records: int = 500
    # RAG spans are large (several chunks of text each): allow multi-megabyte messages.
    max_partition_fetch_bytes: int = 16 * 1024 * 1024
    fetch_max_bytes: int = 64 * 1024 * 1024
    commit_interval_seconds: float = 1.0
    lag_interval_seconds: float = 5.0

    def consumer_options(self) -> dict[str, Any]:
        return {
            **self.connection,
            "group_id": self.group_id,
            "client_id": self.client_id,
            "auto_offset_reset": self.auto_offset_reset,
            "enable_auto_commit": False,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            "max_poll_records": self.max_poll_records,
            "max_partition_fetch_bytes": self.max_partition_fetch_bytes,
            "fetch_max_bytes": self.fetch_max_bytes,
        }


class _Rebalance(ConsumerRebalanceListener):
    """Runs inside poll(), in the worker thread, while the event loop awaits that poll."""

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._source._on_revoked(set(revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._source._on_assigned(set(assigned))


class KafkaSource:
    name = SOURCE

    def __init__(self, config: KafkaSourceConfig, telemetry: Telemetry) -> None:
        if config.encoding not in KAFKA_ENCODINGS:
            raise ValueError(
                f"kafka encoding must be one of {sorted(KAFKA_ENCODINGS)}, got {config.encoding!r}"
            )
        self._config = config
        self._telemetry = telemetry
        self._offsets = OffsetTracker()
        self._consumer: KafkaConsumer | None = None
        self._intake: Intake | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._paused = False
        self._connected = False
        self._last_commit = 0.0
        self._last_lag = 0.0
        self._lag_partitions: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}  # next offset to read, per partition
        self._owned: set[TopicPartition] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        consumer = await asyncio.to_thread(KafkaConsumer, **self._config.consumer_options())
        consumer.subscribe([self._config.topic], listener=_Rebalance(self))
        self._consumer = consumer
        self._connected = True
        self._task = asyncio.create_task(self._run(), name="kafka-source")
        log.info(
            "consuming %s from %s as group %s (%s)",
            self._config.topic,
            ",".join(self._config.connection["bootstrap_servers"]),
            self._config.group_id,
            self._config.encoding,
        )

    def ready(self) -> bool:
        return self._connected and self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop polling; what was already handed to the pipeline is still committed at shutdown."""
        self._stopping = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def shutdown(self, timeout: float) -> None:
        await self.stop()
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        await self._commit(consumer)
        await asyncio.to_thread(consumer.close, autocommit=False)
        self._connected = False

    # -- the poll loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while not self._stopping:
            try:
                records = await asyncio.to_thread(consumer.poll, 200, self._config.max_poll_records)
            except KafkaError as exc:
                log.warning("kafka poll failed, retrying: %s", exc)
                await asyncio.sleep(1.0)
                continue
            for partition, messages in records.items():
                for message in messages:
                    self._handle(partition, message.offset, message.value)
            self._apply_backpressure(consumer)
            now = time.monotonic()
            if now - self._last_commit >= self._config.commit_interval_seconds:
                self._last_commit = now
                await self._commit(consumer)
            if now - self._last_lag >= self._config.lag_interval_seconds:
                self._last_lag = now
                self._export_lag(consumer)

    def _handle(self, partition: TopicPartition, offset: int, value: bytes | None) -> None:
        intake = self._intake
        assert intake is not None
        self._positions[partition] = offset + 1
        if not value:
            intake.dead_letter(
                "empty_message", f"{partition.topic}/{partition.partition}@{offset} has no value"
            )
            self._offsets.track(partition, offset, _FINISHED)
            return
        try:
            decoded = decode_kafka_value(value, self._config.encoding)
        except UndecodableError as exc:
            intake.dead_letter("undecodable", f"{partition.topic}/{partition.partition}@{offset}: {exc}")
            self._offsets.track(partition, offset, _FINISHED)
            return
        self._offsets.track(partition, offset, intake.accept(decoded, SOURCE))

    def _apply_backpressure(self, consumer: KafkaConsumer) -> None:
        assert self._intake is not None
        accepting = self._intake.accepting()
        if not accepting and not self._paused:
            consumer.pause(*consumer.assignment())
            self._paused = True
            log.info("evaluation queue full: pausing partitions")
        elif accepting and self._paused:
            consumer.resume(*consumer.paused())
            self._paused = False
            log.info("evaluation queue drained: resuming partitions")

    async def _commit(self, consumer: KafkaConsumer) -> None:
        assert self._intake is not None
        commits = self._offsets.committable(self._intake.low_watermark())
        if not commits:
            return
        offsets = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in commits.items()}
        try:
            await asyncio.to_thread(consumer.commit, offsets)
        except KafkaError as exc:
            # The messages will be redelivered to whoever owns the partition; idempotency keys
            # keep them from being scored twice.
            self._telemetry.kafka_commit_failures.inc()
            log.warning("offset commit failed (%s); uncommitted messages will be redelivered", exc)

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._owned |= assigned
        self._telemetry.assigned_partitions.labels(self._config.topic).set(len(self._owned))
        log.info("assigned partitions %s", sorted(tp.partition for tp in assigned))

    def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        self._owned -= revoked
        self._telemetry.assigned_partitions.labels(self._config.topic).set(len(self._owned))
        consumer, intake = self._consumer, self._intake
        if consumer is None or intake is None:
            return
        # Commit what is finished for the partitions we lose; the rest goes to their new owner.
        commits = {
            tp: OffsetAndMetadata(offset, "", -1)
            for tp, offset in self._offsets.committable(intake.low_watermark()).items()
            if tp in revoked
        }
        if commits:
            try:
                consumer.commit(commits)
            except KafkaError as exc:
                log.warning("commit on revoke failed: %s", exc)
        self._offsets.forget(revoked)
        for tp in revoked:
            self._positions.pop(tp, None)
        for tp in revoked & self._lag_partitions:
            self._telemetry.consumer_lag.remove(tp.topic, str(tp.partition))
        self._lag_partitions -= revoked
        log.info("revoked partitions %s", sorted(tp.partition for tp in revoked))

    def _export_lag(self, consumer: KafkaConsumer) -> None:
        # highwater() comes with fetch responses, so lag costs no extra request.
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            position = self._positions.get(tp)
            if highwater is None or position is None:
                continue
            self._telemetry.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(0, highwater - position))
            self._lag_partitions.add(tp)
