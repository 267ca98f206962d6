"""Delivery: the promises between intake and export, kept apart from the pipeline's wiring.

- `WorkLedger`: which intake sequence numbers still have unfinished work, hence the low watermark
  that Kafka offsets are committed up to, and the age of the oldest unfinished input.
- `Leases`: exactly-once scoring within the dedupe window. Each attempt leases the interaction id
  under its own token (a duplicate in the same replica is BUSY too), renews its lease while it
  works, and marks the id done after export. A local guard covers the replica when the shared
  store (Redis) is down, and done marks that could not be written are written when it is back.
- `JudgeGate`: after a retryable judge failure (open breaker, timeout, 5xx, 429) the gate closes:
  intake pauses (`judge_unavailable`), the interaction is put back, and one probe at a time is
  let through after a backoff (at least the judge's Retry-After). A probe that gets an answer
  opens the gate again.
- `Delivery.deliver`: one queued job through lease → gate → evaluate → export → done, returning
  whether it is finished or must be retried.

Nothing here knows about Kafka or HTTP; sources see only the Intake contract
(agent/sources/base.py) that the pipeline implements on top of these pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import socket
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.config import IdempotencySettings
from agent.evaluate import Evaluation
from agent.idempotency import IdempotencyStore, LeaseOutcome, MemoryIdempotency, RedisIdempotency
from agent.infra.throttled_log import ThrottledLog
from agent.judges.base import JudgeError
from agent.model import MetricResult, Outcome, RagInteraction, SamplingDecision
from agent.telemetry import EvaluationTelemetry

log = logging.getLogger(__name__)

_LOG_INTERVAL = 30.0


# -- Work ledger -----------------------------------------------------------------------------------


class WorkLedger:
    """Unfinished work per intake sequence number, for the low watermark and the oldest-age gauge.

    Every accepted request is `begin`-ed with its sequence number (in increasing order); each
    sampled interaction built from it is `add`-ed under that number and `finish`-ed once scored
    (or dead-lettered). Event-loop only, except `watermark`, which any thread may read.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight: Counter[int] = Counter()
        self._started: deque[tuple[int, float]] = deque()  # (sequence, intake time) at or above the mark
        self._next = 0
        self.pending = 0  # interactions queued or under evaluation
        self.idle = asyncio.Event()
        self.idle.set()
        self.watermark = 0

    def begin(self) -> int:
        sequence = self._next
        self._next += 1
        self._started.append((sequence, self._clock()))
        return sequence

    def add(self, sequence: int) -> None:
        self._in_flight[sequence] += 1
        self.pending += 1
        self.idle.clear()

    def finish(self, sequence: int) -> None:
        self.pending -= 1
        self._in_flight[sequence] -= 1
        if not self._in_flight[sequence]:
            del self._in_flight[sequence]
        if not self._in_flight:
            self.idle.set()

    def publish(self, oldest_buffered: int | None) -> int:
        """Recompute the low watermark: the oldest sequence still queued, evaluated or buffered."""
        candidates = [self._next]
        if self._in_flight:
            candidates.append(min(self._in_flight))
        if oldest_buffered is not None:
            candidates.append(oldest_buffered)
        self.watermark = min(candidates)
        while self._started and self._started[0][0] < self.watermark:
            self._started.popleft()
        return self.watermark

    def oldest_age(self) -> float:
        """Seconds since the oldest unfinished input was taken in (0 when all is finished)."""
        if not self._started or self._started[0][0] >= self._next:
            return 0.0
        return max(0.0, self._clock() - self._started[0][1])


# -- Leases ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lease:
    interaction_id: str
    token: str
    shared: bool  # False when the shared store was down and only the local guard holds it


class Leases:
    """Leases on interaction ids for exactly-once scoring (see module docstring)."""

    def __init__(
        self,
        store: IdempotencyStore,
        owner: str,
        *,
        lease_seconds: float,
        done_seconds: float,
        errors: Callable[[], None] = lambda: None,
        max_local: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._owner = owner
        self._tokens = itertools.count()
        self._renew_every = max(0.05, lease_seconds / 3)
        self._done_seconds = done_seconds
        self._errors = errors
        self._max_local = max_local
        self._clock = clock
        self._held: dict[str, Lease] = {}  # leases held by attempts in this replica
        self._done: OrderedDict[str, float] = OrderedDict()  # ids this replica scored, with time
        self._unwritten: OrderedDict[str, None] = OrderedDict()  # done marks the store did not take
        self._log = ThrottledLog(log, _LOG_INTERVAL)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._maintain(), name="leases")

    async def flush(self) -> None:
        """Write the done marks the store did not take yet."""
        await self._write_done_marks()

    async def shutdown(self, timeout: float) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await asyncio.wait_for(self._write_done_marks(), max(timeout, 0.1))
        except TimeoutError:
            log.warning("shutdown: done marks not written: the idempotency store did not answer in time")

    def held(self) -> int:
        return len(self._held)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._errors()
        self._log.warning(
            "idempotency", "idempotency store: %s failed (%s); this replica still scores each id once, "
            "replicas may overlap until it is back", what, exc,
        )  # fmt: skip

    def _recently_done(self, interaction_id: str) -> bool:
        done_at = self._done.get(interaction_id)
        return done_at is not None and self._clock() - done_at < self._done_seconds

    async def acquire(self, interaction_id: str) -> Lease | LeaseOutcome:
        """A Lease to evaluate, or LeaseOutcome.DONE / LeaseOutcome.BUSY."""
        if interaction_id in self._held:
            return LeaseOutcome.BUSY  # another copy is being evaluated here right now
        if self._recently_done(interaction_id):
            return LeaseOutcome.DONE
        token = f"{self._owner}:{next(self._tokens)}"
        # Held locally before the first await, so a copy arriving meanwhile is BUSY.
        lease = Lease(interaction_id, token, shared=True)
        self._held[interaction_id] = lease
        try:
            outcome = await self._store.acquire(interaction_id, token)
        except asyncio.CancelledError:
            del self._held[interaction_id]
            raise
        except Exception as exc:
            # Losing the score would be worse than a possible overlap with another replica.
            self._failed("lease", exc)
            lease = Lease(interaction_id, token, shared=False)
            self._held[interaction_id] = lease
            return lease
        if outcome is not LeaseOutcome.GRANTED:
            del self._held[interaction_id]
            return outcome
        self._log.recovered("idempotency", "idempotency store works again")
        return lease

    async def complete(self, lease: Lease) -> None:
        self._held.pop(lease.interaction_id, None)
        self._done[lease.interaction_id] = self._clock()
        self._done.move_to_end(lease.interaction_id)
        while len(self._done) > self._max_local:
            self._done.popitem(last=False)
        try:
            await self._store.complete(lease.interaction_id)
        except Exception as exc:
            self._failed("marking an id scored", exc)
            self._unwritten[lease.interaction_id] = None
            while len(self._unwritten) > self._max_local:
                self._unwritten.popitem(last=False)

    async def release(self, lease: Lease) -> None:
        if self._held.get(lease.interaction_id) is lease:
            del self._held[lease.interaction_id]
        if not lease.shared:
            return
        try:
            await self._store.release(lease.interaction_id, lease.token)
        except Exception as exc:  # the lease runs out by itself
            self._failed("release", exc)

    async def _maintain(self) -> None:
        """Renew the leases of running attempts; write done marks the store missed."""
        while True:
            await asyncio.sleep(self._renew_every)
            for lease in list(self._held.values()):
                if not lease.shared:
                    continue
                try:
                    if not await self._store.renew(lease.interaction_id, lease.token):
                        self._log.warning(
                            "lease_lost",
                            "lost the lease on %s while evaluating it (lease ran out); "
                            "raise idempotency_lease_seconds above the longest evaluation",
                            lease.interaction_id,
                        )
                except Exception as exc:
                    self._failed("lease renewal", exc)
                    break
            await self._write_done_marks()

    async def _write_done_marks(self) -> None:
        while self._unwritten:
            interaction_id = next(iter(self._unwritten))
            try:
                await self._store.complete(interaction_id)
            except Exception:
                return  # still down: try again on the next round
            self._unwritten.pop(interaction_id, None)


# -- Judge gate --------------------------------------------------------------------------------


class JudgeGate:
    """Closed while the judge fails retryably; lets one probe through after a backoff."""

    def __init__(
        self,
        *,
        base_delay: float = 1.0,
        max_delay: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base_delay
        self._max = max_delay
        self._clock = clock
        self._open = asyncio.Event()
        self._open.set()
        self._until = 0.0
        self._failures = 0
        self._probing = False
        self.successes = 0  # answers received since start (to tell a poison interaction)
        self.last_reason: str | None = None

    @property
    def failing(self) -> bool:
        return not self._open.is_set()

    def retry_after(self) -> float:
        """Seconds until the next probe (what a refused sender is told), at least 1."""
        return max(1.0, self._until - self._clock()) if self.failing else 1.0

    def failed(self, error: JudgeError, *, probe: bool = True) -> float:
        """A retryable failure: close the gate (or keep it closed) for a backoff; returns the delay.

        Only the first failure and failed probes lengthen the backoff: calls that were already in
        flight when the judge went away fail together and say nothing new.
        """
        if probe or not self.failing:
            self._failures += 1
        backoff = min(self._max, self._base * 2 ** min(self._failures - 1, 16))
        delay = max(backoff * random.uniform(0.8, 1.2), error.retry_after or 0.0)
        if not self.failing:
            log.warning(
                "judge unavailable (%s): pausing intake; interactions are retried, never recorded as "
                "errors, while it fails this way",
                error.reason,
            )
        self._open.clear()
        self._until = max(self._until, self._clock() + delay)
        if probe:
            self._probing = False
        self.last_reason = error.reason
        return delay

    def succeeded(self) -> None:
        self.successes += 1
        self._probing = False
        if self.failing:
            log.warning("judge answers again: resuming intake")
        self._failures = 0
        self._open.set()

    def release_probe(self) -> None:
        """The probe learnt nothing (no judge call was needed): let another one through."""
        self._probing = False

    def nothing_waiting(self) -> None:
        """No work is left to probe with (e.g. the deferred ones were scored elsewhere): open, so
        intake resumes and the next interaction is the probe (the judge's breaker still guards)."""
        if self.failing:
            self._probing = False
            self._open.set()

    async def admit(self) -> bool:
        """Wait until work may reach the judge; True when this caller is the probe."""
        while self.failing:
            wait = self._until - self._clock()
            if wait <= 0 and not self._probing:
                self._probing = True
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._open.wait(), min(wait, 0.5) if wait > 0 else 0.5)
        return False


# -- One job through delivery --------------------------------------------------------------------


KEPT_BY_RATE = SamplingDecision(True, "rate")


@dataclass(slots=True)
class Job:
    """A kept interaction waiting for evaluation, with the intake sequence it came from, the
    sampling decision that kept it and the name of its route (agent/pipeline.py)."""

    origin: int
    interaction: RagInteraction
    decision: SamplingDecision = KEPT_BY_RATE
    route: str = "production"
    deferrals: int = 0  # retryable judge failures so far
    successes_at_first_deferral: int = -1


class DeliveryCounters(Protocol):
    def duplicate(self) -> None: ...

    def deferred(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Retry:
    """Put the job back after `delay` seconds."""

    delay: float


FINISHED = None


@dataclass
class Delivery:
    """LeaseOutcome, gate, evaluate, export and mark done one job; see `deliver`."""

    leases: Leases
    gate: JudgeGate
    counters: DeliveryCounters
    busy_retry_seconds: float = 1.0
    # A job deferred this many times while other interactions got answers is not an outage but
    # an interaction the judge cannot take (e.g. it always times out): record the error.
    max_deferrals: int = 5
    _log: ThrottledLog = field(default_factory=lambda: ThrottledLog(log, _LOG_INTERVAL))

    async def deliver(
        self,
        job: Job,
        evaluate: Callable[[Job], Awaitable[Evaluation]],
        export: Callable[[Job, Sequence[MetricResult]], Awaitable[bool]],
    ) -> Retry | None:
        """FINISHED (None) once scored, recorded as a permanent error, or found already scored;
        else a Retry. Cancellation (shutdown) hands the lease back."""
        interaction = job.interaction
        probe = await self.gate.admit()
        lease = await self.leases.acquire(interaction.interaction_id)
        if not isinstance(lease, Lease):
            if probe:
                self.gate.release_probe()
            if lease is LeaseOutcome.DONE:
                self.counters.duplicate()
                return FINISHED
            return Retry(self.busy_retry_seconds)
        try:
            evaluation = await evaluate(job)
            results: Sequence[MetricResult] = evaluation.results
            failure = evaluation.retryable
            if failure is not None:
                if self._keeps_failing(job):
                    results = self._give_up(job, failure, results)
                else:
                    if job.deferrals == 0:
                        job.successes_at_first_deferral = self.gate.successes
                    job.deferrals += 1
                    self.gate.failed(failure, probe=probe)
                    self.counters.deferred(failure.reason)
                    await self.leases.release(lease)
                    return Retry(0.0)  # the gate paces the retry
            elif any(r.outcome is not Outcome.SKIPPED for r in results):
                self.gate.succeeded()
            elif probe:
                self.gate.release_probe()
            if not await export(job, results):
                await self.leases.release(lease)
                return Retry(self.busy_retry_seconds)
        except asyncio.CancelledError:
            if probe:
                self.gate.release_probe()
            await self.leases.release(lease)
            raise
        await self.leases.complete(lease)
        return FINISHED

    def _keeps_failing(self, job: Job) -> bool:
        others_answered = job.deferrals and self.gate.successes > job.successes_at_first_deferral
        return job.deferrals + 1 >= self.max_deferrals and bool(others_answered)

    def _give_up(self, job: Job, failure: JudgeError, results: Sequence[MetricResult]) -> list[MetricResult]:
        self._log.warning(
            "poison",
            "interaction %s failed %d times (%s) while the judge answered others; recording error "
            "outcomes instead of retrying it forever",
            job.interaction.interaction_id,
            job.deferrals + 1,
            failure.reason,
        )
        reason = f"judge kept failing on this interaction ({failure.reason}): {failure}"
        return [
            r if r.outcome is not Outcome.ERROR else MetricResult.error(r.metric, reason, judge=r.judge)
            for r in results
        ]


def build(
    section: IdempotencySettings, counters: EvaluationTelemetry, *, redis: Any = None, max_deferrals: int = 5
) -> Delivery:
    """Delivery with leases of `section` in Redis when there is a client (shared by the replicas),
    else in this process; the leases name this replica (host, process and a random part, so two
    agents of one process differ)."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    store: IdempotencyStore
    if redis is not None:
        store = RedisIdempotency(redis, owner, section.lease_seconds, section.ttl_seconds)
    else:
        store = MemoryIdempotency(owner, section.lease_seconds, section.ttl_seconds)
    leases = Leases(
        store,
        owner,
        lease_seconds=section.lease_seconds,
        done_seconds=section.ttl_seconds,
        errors=counters.idempotency_errors.inc,
    )
    return Delivery(leases, JudgeGate(), counters, max_deferrals=max_deferrals)
