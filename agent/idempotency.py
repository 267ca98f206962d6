"""Score each interaction once, even when Kafka delivers it twice.

Redelivery after a crash and overlap after a rebalance are normal under at-least-once delivery.
Before evaluating, a worker leases the interaction id with a lease (SET NX with a TTL, in Redis
so that all replicas see it) under a token unique to that attempt; after exporting the scores it
marks the id done for a long TTL. A lease held by any other token is BUSY, including one held by
another attempt in the same replica (a duplicate that arrives while the first copy is still being
evaluated); the worker waits and retries. The holder renews its lease while it works, so a long
evaluation keeps its lease, and a lease whose holder died is picked up when its lease runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol


class LeaseOutcome(StrEnum):
    GRANTED = "granted"  # ours to evaluate
    DONE = "done"  # already scored: skip
    BUSY = "busy"  # another attempt holds the lease: retry later


class IdempotencyStore(Protocol):
    """Leases, leases and done marks of interaction ids, shared by every replica that scores."""

    async def acquire(self, interaction_id: str, token: str) -> LeaseOutcome:
        """Take the id for the attempt `token` unless it is done or held by another token."""
        ...

    async def renew(self, interaction_id: str, token: str) -> bool:
        """Extend the lease held by `token`; False when it is no longer held by it."""
        ...

    async def complete(self, interaction_id: str) -> None:
        """Mark the id scored for the done TTL."""
        ...

    async def release(self, interaction_id: str, token: str) -> None:
        """Give up a lease without scoring (deferral, shutdown), so another attempt can take it now."""
        ...


class MemoryIdempotency:
    """Per-process store for the embedded default (one replica)."""

    def __init__(self, owner: str, lease_seconds: float, done_seconds: float, max_entries: int = 200_000,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._owner = owner
        self._lease = lease_seconds
        self._done = done_seconds
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[str, float]] = {}

    async def acquire(self, interaction_id: str, token: str) -> LeaseOutcome:
        now = self._clock()
        entry = self._entries.get(interaction_id)
        if entry is not None and entry[1] > now:
            if entry[0] == "done":
                return LeaseOutcome.DONE
            if entry[0] != token:
                return LeaseOutcome.BUSY
        if len(self._entries) >= self._max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[1] > now}
            while len(self._entries) >= self._max_entries:
                self._entries.pop(next(iter(self._entries)))
        self._entries[interaction_id] = (token, now + self._lease)
        return LeaseOutcome.GRANTED

    async def renew(self, interaction_id: str, token: str) -> bool:
        entry = self._entries.get(interaction_id)
        if entry is None or entry[0] != token:
            return False
        self._entries[interaction_id] = (token, self._clock() + self._lease)
        return True

    async def complete(self, interaction_id: str) -> None:
        self._entries[interaction_id] = ("done", self._clock() + self._done)

    async def release(self, interaction_id: str, token: str) -> None:
        entry = self._entries.get(interaction_id)
        if entry is not None and entry[0] == token:
            del self._entries[interaction_id]


# Take the key when absent; report done, or busy when another token holds it.
_ACQUIRE = """
local value = redis.call('GET', KEYS[1])
if not value or value == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 'granted'
end
if value == 'done' then return 'done' end
return 'busy'
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisIdempotency:
    def __init__(self, client: Any, owner: str, lease_seconds: float, done_seconds: float,
                 prefix: str = "ragpulse:scored:") -> None:  # fmt: skip
        self._client = client
        self._owner = owner
        self._lease_ms = int(lease_seconds * 1000)
        self._done_ms = int(done_seconds * 1000)
        self._prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    async def acquire(self, interaction_id: str, token: str) -> LeaseOutcome:
        result = await self._acquire(keys=[self._prefix + interaction_id], args=[token, self._lease_ms])
        return LeaseOutcome(result.decode() if isinstance(result, bytes) else result)

    async def renew(self, interaction_id: str, token: str) -> bool:
        return bool(await self._renew(keys=[self._prefix + interaction_id], args=[token, self._lease_ms]))

    async def complete(self, interaction_id: str) -> None:
        await self._client.set(self._prefix + interaction_id, "done", px=self._done_ms)

    async def release(self, interaction_id: str, token: str) -> None:
        await self._release(keys=[self._prefix + interaction_id], args=[token])
