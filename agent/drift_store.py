"""Where drift detector state outlives the process: Redis when configured (agent/exporters/drift.py
for the judged scores, agent/signals.py for the signals), in memory for tests.

One key per series, `ragpulse:v1:drift:["service","route","metric"]`; a signal's series names
its metric `signal:<name>` (no judged metric starts so), so both share one namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agent.infra.lifecycle import Periodic
from agent.infra.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

SeriesKey = tuple[str, str, str]  # service, route, metric
DRIFT_KEY_PREFIX = "ragpulse:v1:drift:"
_ERROR_LOG_INTERVAL = 30.0


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


class Snapshots(Protocol):
    """A detector as the saver sees it (agent/drift.py DriftDetector)."""

    def snapshot(self) -> dict[str, Any]: ...


class StateSaver:
    """What every keeper of drift detectors (the judged scores', agent/exporters/drift.py; the
    signals', agent/signals.py) does with their state: remember the series changed since the last
    save, save them every `interval` seconds and at shutdown, keep what failed for the next attempt.
    A detector dropped before it was saved stays here until saved, and `pending` gives its state to
    whoever takes the series up again. Failures never reach the caller: they are counted
    (`on_error(operation)`) and logged at a bounded rate.
    """

    def __init__(
        self, store: DriftStore, interval: float, on_error: Callable[[str], None], name: str
    ) -> None:
        self.store = store
        self._on_error = on_error
        self._name = name  # e.g. "drift state", "signal drift state"
        self._changed: dict[SeriesKey, Snapshots] = {}
        self._saving = Periodic(f"{name} save", interval, self.save)
        self._errors = ThrottledLog(log, _ERROR_LOG_INTERVAL)

    def changed(self, key: SeriesKey, detector: Snapshots) -> None:
        self._changed[key] = detector

    def dropped(self, key: SeriesKey) -> dict[str, Any] | None:
        """The unsaved state of a series whose detector its keeper dropped (call it only for a
        series the keeper holds no detector of), taken back from the next save."""
        detector = self._changed.pop(key, None)
        return None if detector is None else detector.snapshot()

    async def save(self) -> None:
        if not self._changed:
            return
        changed, self._changed = self._changed, {}
        states = {key: detector.snapshot() for key, detector in changed.items()}
        try:
            await self.store.save(states)
        except Exception as exc:
            for key, detector in changed.items():  # a change made meanwhile is newer: it wins
                self._changed.setdefault(key, detector)
            self.error("save", f"cannot save {self._name} of {len(states)} series, will retry: {exc!r}")

    def error(self, operation: str, message: str) -> None:
        self._on_error(operation)
        self._errors.warning(
            operation, "%s (ragpulse_drift_state_errors_total counts them; check Redis)", message
        )

    async def start(self) -> None:
        self._saving.start()

    async def shutdown(self, timeout: float) -> None:
        """Save what changed since the last periodic save."""
        await self._saving.stop()
        try:
            await asyncio.wait_for(self.save(), max(timeout, 0.1))
        except TimeoutError:
            self.error("save", f"{self._name} not saved at shutdown: Redis did not answer in time")
