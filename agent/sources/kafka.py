"""Kafka source: a consumer group reading OTLP requests as the Collector's `kafka` exporter writes them.

One message value is one ExportTraceServiceRequest (`otlp_proto` or `otlp_json` encoding); the
message key (the trace id with `partition_traces_by_id`) is never relied on. Delivery is
at-least-once: offsets are committed only up to the pipeline's low watermark, i.e. once every
sampled interaction built from the messages before them is scored or dead-lettered. Replicas
share partitions through the consumer group; duplicates after a rebalance or a crash are caught
by the pipeline's idempotency keys.

kafka-python's consumer is blocking, so polls and commits run in a worker thread. Message values
larger than `DECODE_INLINE_BYTES` are decoded in a decoding thread of this source, and a decoded
message reaches the pipeline in slices of whole traces with the event loop free in between;
a poll's messages are handled in order, one at a time, giving the loop a turn every few
milliseconds (agent/sources/handover.py), so /healthz, /readyz and /metrics keep answering while
a 30 MiB message is taken in. A message's offset is tracked only once all of it was handed over,
with the sequence number of its last slice, so per-partition order and the commit rule hold.

kafka-python 3.x runs the rebalance listener on its own IO thread, where nothing may block: the
listener commits finished offsets of revoked partitions with an awaited commit_async and shares
the tracker under a lock. Offsets leave the tracker only once a commit covering them succeeded.
A rebalance revokes every partition first (eager protocol), and kafka-python keeps the fetch
position of each partition the member gets back, whose messages are therefore not delivered
again: the offsets of revoked partitions are kept until the new assignment, then kept for the
partitions that came back and forgotten for the others (their next owner reads them again, and
messages of theirs still being handled are not tracked). While intake is paused (evaluation
queue full, judge unavailable) every owned partition is paused, including partitions assigned
later.

A broker absent or late at start-up is waited for (agent/infra/waiting.py): `start` tries once,
then the consumer task keeps trying at growing intervals, with one log line per attempt, and
`ready()` stays False until the consumer is connected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from agent.config import KafkaSettings
from agent.infra.kafka_connect import kafka_connection, open_kafka
from agent.infra.throttled_log import ThrottledLog
from agent.infra.waiting import Dependencies, Waiter
from agent.otlp.decode import DecodedRequest, UndecodableError, decode_kafka_value
from agent.sources.base import Intake
from agent.sources.handover import DECODE_INLINE_BYTES, LoopTurns, slices
from agent.sources.offsets import OffsetTracker
from agent.telemetry import KafkaTelemetry

log = logging.getLogger(__name__)

SOURCE = "kafka"
# Sequence number for messages that leave no work behind (e.g. dead-lettered): always committable.
_FINISHED = -1


_CLIENT_ID = "ragpulse"
_MAX_POLL_RECORDS = 500
_LAG_INTERVAL_SECONDS = 5.0


def consumer_options(kafka: KafkaSettings) -> dict[str, Any]:
    # RAG spans are large (several chunks of text each): the fetch sizes allow multi-megabyte messages.
    return {
        **kafka_connection(kafka),
        "group_id": kafka.group_id,
        "client_id": _CLIENT_ID,
        "auto_offset_reset": kafka.auto_offset_reset,
        "enable_auto_commit": False,
        "session_timeout_ms": kafka.session_timeout_ms,
        "heartbeat_interval_ms": kafka.heartbeat_interval_ms,
        "max_poll_interval_ms": kafka.max_poll_interval_ms,
        "max_poll_records": _MAX_POLL_RECORDS,
        "max_partition_fetch_bytes": kafka.max_partition_fetch_bytes,
        "fetch_max_bytes": kafka.fetch_max_bytes,
    }


class _Rebalance(AsyncConsumerRebalanceListener):
    """Runs on kafka-python's IO thread (3.x), inside its event loop: nothing here may block.

    On revoke it commits what is finished for the partitions being given up with an awaited
    `commit_async` (the IO loop sends it before rejoining), then leaves the rest of the
    bookkeeping to the source's poll loop through `_events`.
    """

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._source._on_revoked(set(revoked), commit=True)

    async def on_partitions_lost(self, lost: Any) -> None:
        # The group already gave them to someone else: committing now could move their offsets back.
        await self._source._on_revoked(set(lost), commit=False)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._source._on_assigned(set(assigned))


class KafkaSource:
    name = SOURCE

    def __init__(
        self,
        settings: KafkaSettings,
        telemetry: KafkaTelemetry,
        on_fatal: Callable[[], None] | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self._config = settings
        self._telemetry = telemetry
        # The tracker and the owned set are shared with the IO thread's rebalance listener.
        self._lock = threading.Lock()
        self._offsets = OffsetTracker()
        self._owned: set[TopicPartition] = set()
        # Revoked by a rebalance that has not assigned partitions yet: offsets kept until then.
        self._held: set[TopicPartition] = set()
        self._unowned_since: float = time.monotonic()
        self._revoked: deque[set[TopicPartition]] = deque()  # for the poll loop's bookkeeping
        # Bumped for a partition each time its offsets are forgotten: a message polled under an
        # older generation belongs to a past ownership and is not tracked.
        self._generations: dict[TopicPartition, int] = {}
        self._decoder: ThreadPoolExecutor | None = None
        self._consumer: KafkaConsumer | None = None
        self._intake: Intake | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._connected = False
        self._last_commit = 0.0
        self._last_lag = 0.0
        self._lag_partitions: set[TopicPartition] = set()
        self._pause_reason: str | None = None
        # flush() callers waiting for the poll loop's next commit (the consumer is not thread
        # safe: only the poll loop calls it).
        self._flushes: list[asyncio.Future[None]] = []
        self._log = ThrottledLog(log, 30.0)
        # A consumer task that dies ends the process gracefully (SIGTERM: finished offsets are
        # committed) so that its supervisor restarts it; a replica that silently stops consuming
        # while its liveness probe says 200 is the failure this avoids.
        self._on_fatal = on_fatal or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        servers = ",".join(settings.bootstrap)
        self.dependency = (dependencies or Dependencies()).add("Kafka", servers)
        self._waiter = Waiter(self.dependency, self._open_consumer)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        # One thread: decoding holds the interpreter lock, a second one would not go faster.
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-decode")
        if await self._waiter.try_once():
            self._subscribe(self._waiter.result)
        # Else the consumer task waits for the broker first (one log line per attempt).
        self._task = asyncio.create_task(self._connect_and_run(), name="kafka-source")
        self._task.add_done_callback(self._task_ended)

    async def _open_consumer(self) -> KafkaConsumer:
        return await open_kafka(
            KafkaConsumer, consumer_options(self._config), lambda c: c.close(autocommit=False)
        )

    def _subscribe(self, consumer: KafkaConsumer | None) -> None:
        assert consumer is not None
        consumer.subscribe([self._config.topic], listener=_Rebalance(self))
        self._consumer = consumer
        self._connected = True
        self._unowned_since = time.monotonic()
        log.info(
            "consuming %s from %s as group %s (%s)",
            self._config.topic,
            ",".join(self._config.bootstrap),
            self._config.group_id,
            self._config.encoding,
        )

    async def _connect_and_run(self) -> None:
        if self._consumer is None:
            self._subscribe(await self._waiter.until_up())
        await self._run()

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopping:
            return
        exc = task.exception()
        log.critical(
            "the Kafka consumer task died (%r); stopping the agent so that its supervisor restarts it",
            exc,
            exc_info=exc,
        )
        self._on_fatal()

    def ready(self) -> bool:
        """Connected, consuming, and owning partitions (or not for longer than a session timeout)."""
        if not (self._connected and self._task is not None and not self._task.done()):
            return False
        with self._lock:
            owned = bool(self._owned)
        grace = self._config.session_timeout_ms / 1000.0
        return owned or time.monotonic() - self._unowned_since < grace

    async def flush(self) -> None:
        """Commit the finished offsets now, not at the next `commit_interval_seconds`: returns
        once the poll loop has handed its current poll to the pipeline and committed (or failed
        to: a failed commit is counted, and a failed poll commits nothing). Nothing to do before
        the consumer is connected or once it stopped."""
        task = self._task
        if self._consumer is None or task is None or task.done() or self._stopping:
            return
        done = asyncio.get_running_loop().create_future()
        self._flushes.append(done)
        # The loop ending (stop, or a fatal error) releases the waiter as well.
        await asyncio.wait({done, task}, return_when=asyncio.FIRST_COMPLETED)

    def _take_flushes(self) -> list[asyncio.Future[None]]:
        flushes, self._flushes = self._flushes, []
        return flushes

    def _flushed(self, flushes: list[asyncio.Future[None]]) -> None:
        for done in flushes:
            if not done.done():
                done.set_result(None)

    async def stop(self) -> None:
        """Stop polling; what was already handed to the pipeline is still committed at shutdown."""
        self._stopping = True
        if self._task is not None:
            if self._consumer is None:
                self._task.cancel()  # still waiting for the broker: nothing to finish
            await asyncio.gather(self._task, return_exceptions=True)

    async def shutdown(self, timeout: float) -> None:
        await self.stop()
        decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.shutdown(wait=False)
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        await self._commit(consumer)
        # Closing revokes our partitions (the listener commits once more) and leaves the group.
        await asyncio.to_thread(consumer.close, autocommit=False)
        self._connected = False

    # -- the poll loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while not self._stopping:
            try:
                await self._step(consumer)
            except KafkaError as exc:
                self._log.warning("poll", "kafka poll failed, retrying: %s", exc)
                self._flushed(self._take_flushes())  # a flush does not wait for the broker
                await asyncio.sleep(1.0)
            except Exception:  # stage boundary: log, and keep the consumer alive
                log.exception("kafka source step failed; retrying in 1s")
                self._flushed(self._take_flushes())
                await asyncio.sleep(1.0)

    async def _step(self, consumer: KafkaConsumer) -> None:
        records = await asyncio.to_thread(consumer.poll, 200, _MAX_POLL_RECORDS)
        self._forget_revoked()
        with self._lock:
            generations = {tp: self._generations.get(tp, 0) for tp in records}
        turns = LoopTurns()
        for partition, messages in records.items():
            for message in messages:
                if self._stopping or self._is_stale(partition, generations[partition]):
                    # Untracked, so never committed: redelivered to whoever owns the partition next.
                    break
                await self._handle(partition, generations[partition], message.offset, message.value, turns)
        del records
        self._apply_backpressure(consumer)
        now = time.monotonic()
        # Waiters of flush() so far: their commit starts now (a later one waits for the next).
        flushes = self._take_flushes()
        try:
            if flushes or now - self._last_commit >= self._config.commit_interval_seconds:
                self._last_commit = now
                await self._commit(consumer)
        finally:
            self._flushed(flushes)
        if now - self._last_lag >= _LAG_INTERVAL_SECONDS:
            self._last_lag = now
            await self._export_lag(consumer)

    def _is_stale(self, partition: TopicPartition, generation: int) -> bool:
        with self._lock:
            return self._generations.get(partition, 0) != generation

    async def _handle(
        self, partition: TopicPartition, generation: int, offset: int, value: bytes | None, turns: LoopTurns
    ) -> None:
        """Decode one message, hand it to the pipeline, and track its offset (in partition order)."""
        intake = self._intake
        assert intake is not None
        where = f"{partition.topic}/{partition.partition}@{offset}"
        sequence = _FINISHED
        if not value:
            intake.dead_letter("empty_message", f"{where} has no value")
        else:
            decoded = await self._decode(where, value, turns)
            if decoded is not None:
                sequence = await self._hand_over(where, decoded, turns)
        with self._lock:
            if self._generations.get(partition, 0) != generation:
                return  # given up while it was handled: its offset is the next owner's
            self._offsets.track(partition, offset, sequence)

    async def _decode(self, where: str, value: bytes, turns: LoopTurns) -> DecodedRequest | None:
        """The decoded message, or None once it is dead-lettered (with its reason)."""
        intake = self._intake
        assert intake is not None
        encoding = self._config.encoding
        try:
            if len(value) <= DECODE_INLINE_BYTES or self._decoder is None:
                await turns.turn()
                return decode_kafka_value(value, encoding)
            loop = asyncio.get_running_loop()
            decoded = await loop.run_in_executor(self._decoder, decode_kafka_value, value, encoding)
            turns.reset()
            return decoded
        except UndecodableError as exc:
            intake.dead_letter("undecodable", f"{where}: {exc}")
        except Exception as exc:
            # A defect in the decoder (it raises UndecodableError for any bad input): dead-lettered
            # like a defect behind intake, so the message is accounted for, not skipped untracked.
            log.exception("decoding failed on %s; dead-lettered", where)
            intake.dead_letter("internal_error", f"{where}: {exc!r}")
        return None

    async def _hand_over(self, where: str, decoded: DecodedRequest, turns: LoopTurns) -> int:
        """Give the pipeline the message in slices of whole traces, with loop turns in between.

        Returns the sequence number of the last slice taken: every slice's work is finished once
        the low watermark passes it (sequence numbers only grow), or _FINISHED if none was taken.
        """
        intake = self._intake
        assert intake is not None
        sequence = _FINISHED
        try:
            for part in slices(decoded):
                await turns.turn()
                sequence = intake.accept(part, SOURCE)
        except Exception as exc:
            # A defect behind the consumer: this message is dead-lettered (its offset is then
            # committable once the slices already taken are finished) instead of skipped
            # untracked, which would let a later commit pass over it, or retried forever, which
            # would block the partition.
            log.exception("intake failed on %s; dead-lettered", where)
            intake.dead_letter("internal_error", f"{where}: {exc!r}")
        return sequence

    def _apply_backpressure(self, consumer: KafkaConsumer) -> None:
        """Pause every owned partition while intake is paused (including ones assigned since)."""
        assert self._intake is not None
        reason = self._intake.pause_reason()
        if reason is not None:
            unpaused = set(consumer.assignment()) - set(consumer.paused())
            if unpaused:
                consumer.pause(*unpaused)
            if self._pause_reason != reason:
                log.info("intake paused (%s): pausing partitions; offsets stay uncommitted", reason)
        elif self._pause_reason is not None:
            consumer.resume(*consumer.paused())
            log.info("intake resumed: resuming partitions")
        self._pause_reason = reason

    async def _commit(self, consumer: KafkaConsumer) -> None:
        assert self._intake is not None
        with self._lock:
            commits = {
                tp: offset
                for tp, offset in self._offsets.committable(self._intake.low_watermark()).items()
                if tp in self._owned
            }
        if not commits:
            return
        offsets = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in commits.items()}
        try:
            await asyncio.to_thread(consumer.commit, offsets)
        except KafkaError as exc:
            # Kept in the tracker: offered again on the next round. Messages are redelivered to
            # whoever owns the partition next; idempotency keys keep them from being scored twice.
            self._telemetry.commit_failures.inc()
            self._log.warning(
                "commit", "offset commit failed (%s); retrying, uncommitted messages may be redelivered", exc
            )
            return
        with self._lock:
            self._offsets.committed(commits)

    # -- rebalances (called on kafka-python's IO thread) ------------------------------------------

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        with self._lock:
            # Partitions revoked and given back kept their fetch position: their offsets stay.
            # The others went to another member, which reads their uncommitted messages again.
            self._forget(self._held - assigned)
            self._held.clear()
            self._owned |= assigned
            owned = len(self._owned)
        self._telemetry.assigned_partitions.labels(self._config.topic).set(owned)
        log.info("assigned partitions %s", sorted(tp.partition for tp in assigned))

    async def _on_revoked(self, revoked: set[TopicPartition], *, commit: bool) -> None:
        consumer, intake = self._consumer, self._intake
        commits: dict[TopicPartition, int] = {}
        if commit and consumer is not None and intake is not None:
            with self._lock:
                commits = {
                    tp: offset
                    for tp, offset in self._offsets.committable(intake.low_watermark()).items()
                    if tp in revoked
                }
        if commits:
            # Finished offsets go before we give the partitions up; the rest is redelivered to the
            # new owner, if it is another member (and de-duplicated by the idempotency keys).
            # Awaited, never blocking.
            offsets = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in commits.items()}
            try:
                await consumer.commit_async(offsets)  # type: ignore[union-attr]
            except Exception as exc:
                self._telemetry.commit_failures.inc()
                self._log.warning(
                    "revoke_commit", "commit on revoke failed (%s); the new owner redoes it", exc
                )
            else:
                with self._lock:
                    self._offsets.committed(commits)
        with self._lock:
            self._owned -= revoked
            owned = len(self._owned)
            if not self._owned:
                self._unowned_since = time.monotonic()
            # No commit on the poll loop covers partitions we do not own (see _commit). Revoked
            # ones may come back with their fetch position, so their offsets wait for the
            # assignment; lost ones were given to others already, and are forgotten now.
            if commit:
                self._held |= revoked
            else:
                self._held -= revoked
                self._forget(revoked)
        self._revoked.append(revoked)
        self._telemetry.assigned_partitions.labels(self._config.topic).set(owned)
        log.info("revoked partitions %s", sorted(tp.partition for tp in revoked))

    def _forget(self, partitions: set[TopicPartition]) -> None:
        """Under the lock: drop the offsets of partitions given up, and move them to a new
        generation, so that messages polled before are not tracked after."""
        self._offsets.forget(partitions)
        for tp in partitions:
            self._generations[tp] = self._generations.get(tp, 0) + 1

    def _forget_revoked(self) -> None:
        """On the event loop: drop the lag series of partitions given up."""
        while self._revoked:
            revoked = self._revoked.popleft()
            for tp in revoked & self._lag_partitions:
                if tp not in self._owned:
                    self._telemetry.consumer_lag.remove(tp.topic, str(tp.partition))
                    self._lag_partitions.discard(tp)

    async def _export_lag(self, consumer: KafkaConsumer) -> None:
        """Lag = high watermark − committed offset: a stuck commit shows, not only a slow read."""
        with self._lock:
            owned = set(self._owned)
        for tp in owned:
            highwater = consumer.highwater(tp)  # comes with fetch responses: no extra request
            if highwater is None:
                continue
            with self._lock:
                committed = self._offsets.last_committed(tp)
            if committed is None:
                try:
                    found = await asyncio.to_thread(consumer.committed, tp)
                except KafkaError:
                    continue
                if found is None:
                    continue
                with self._lock:
                    self._offsets.set_committed(tp, found)
                committed = found
            self._telemetry.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                max(0, highwater - committed)
            )
            self._lag_partitions.add(tp)


def build(
    section: KafkaSettings, telemetry: KafkaTelemetry, dependencies: Dependencies | None = None
) -> KafkaSource:
    return KafkaSource(section, telemetry, dependencies=dependencies)
