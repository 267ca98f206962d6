"""Where drift detector state outlives the process: Redis when configured (agent/exporters/drift.py
for the judged scores, agent/signals.py for the signals), in memory for tests.

One key per series, `ragpulse:v1:drift:["service","route","metric"]`; a signal's series names
its metric `signal:<name>` (no judged metric starts so), so both share one namespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

SeriesKey = tuple[str, str, str]  # service, route, metric
DRIFT_KEY_PREFIX = "ragpulse:v1:drift:"


class DriftStore(Protocol):
    """Where detector state outlives the process."""

    async def load(self, key: SeriesKey) -> Mapping[str, Any] | None:
        """The saved state of one series, or None if there is none."""
        ...

    async def save(self, states: Mapping[SeriesKey, Mapping[str, Any]]) -> None:
        """Save the states of several series at once."""
        ...


class RedisDriftStore:
    """One Redis key per series, `ragpulse:v1:drift:["service","route","metric"]`, a JSON value with
    a TTL renewed on every save (series that stop receiving scores disappear)."""

    def __init__(self, redis: Any, ttl_seconds: int, prefix: str = DRIFT_KEY_PREFIX) -> None:
        self._redis = redis
        self._ttl = ttl_seconds
        self._prefix = prefix

    def _key(self, key: SeriesKey) -> str:
        return self._prefix + json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))

    async def load(self, key: SeriesKey) -> Mapping[str, Any] | None:
        raw = await self._redis.get(self._key(key))
        if raw is None:
            return None
        state = json.loads(raw)
        if not isinstance(state, dict):
            raise ValueError("drift state is not a JSON object")
        return state

    async def save(self, states: Mapping[SeriesKey, Mapping[str, Any]]) -> None:
        if not states:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, state in states.items():
                pipe.set(self._key(key), json.dumps(state, separators=(",", ":")), ex=self._ttl)
            await pipe.execute()


class MemoryDriftStore:
    """In-process store, for tests."""

    def __init__(self) -> None:
        self.states: dict[SeriesKey, Mapping[str, Any]] = {}

    async def load(self, key: SeriesKey) -> Mapping[str, Any] | None:
        return self.states.get(key)

    async def save(self, states: Mapping[SeriesKey, Mapping[str, Any]]) -> None:
        for key, state in states.items():
            self.states[key] = json.loads(json.dumps(state))  # what Redis would give back
