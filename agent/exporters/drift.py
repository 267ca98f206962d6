"""Aggregate: per (service, route, metric) score streams fed to drift detectors.

An Exporter like any other, so the pipeline hands it every evaluated interaction; it keeps one
DriftDetector per series (bounded: the least recently updated series is dropped beyond
`max_series`) and publishes `ragpulse_drift_score` and `ragpulse_drift_detected`.

With a `DriftStore` (Redis when configured), detector state survives restarts and rebalances: a
series' state is loaded the first time this process sees the series, and saved every
`save_interval` seconds while it changes, and at shutdown. Each replica runs its own detectors over
the share of the stream it receives; the saved state is the last writer's, which is what a
replica that starts or takes over resumes from instead of learning the baseline again.
Store failures never fail an export: the detector carries on in memory, and errors are counted
(ragpulse_drift_state_errors_total) and logged at a bounded rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import Any

from agent.config import DriftSettings
from agent.drift import DriftDetector
from agent.drift_store import DriftStore, RedisDriftStore, SeriesKey, StateSaver
from agent.model import Evaluated, Outcome
from agent.telemetry import DriftTelemetry

log = logging.getLogger(__name__)

_ERROR_LOG_INTERVAL = 30.0


class DriftAggregator:
    def __init__(
        self, telemetry: DriftTelemetry, settings: DriftSettings, *, store: DriftStore | None = None
    ) -> None:
        self._telemetry = telemetry
        self._settings = settings
        self._max_series = settings.max_series
        self._detectors: OrderedDict[SeriesKey, DriftDetector] = OrderedDict()
        self._alarmed: set[SeriesKey] = set()
        self._loading: dict[SeriesKey, asyncio.Future[DriftDetector]] = {}
        self._saver = (
            StateSaver(
                store,
                settings.save_interval_seconds,
                lambda operation: telemetry.state_errors.labels(operation).inc(),
                "drift state",
            )
            if store is not None
            else None
        )

    async def export(self, evaluated: Evaluated) -> None:
        interaction = evaluated.interaction
        for result in evaluated.results:
            if result.outcome is not Outcome.OK or result.value is None:
                continue  # undefined and failed scores say nothing about quality
            key = (interaction.service, interaction.route, result.metric)
            detector = await self._detector(key)
            state = detector.update(result.value)
            if self._saver is not None:
                self._saver.changed(key, detector)
            if not state.ready:
                continue
            self._telemetry.score.labels(*key).set(round(state.score, 4))
            self._telemetry.detected.labels(*key).set(1.0 if state.detected else 0.0)
            if state.detected and key not in self._alarmed:
                self._alarmed.add(key)
                log.warning(
                    "drift: %s dropped from %.3f to %.3f (service=%s route=%s, p=%.1e)",
                    result.metric,
                    state.baseline_mean,
                    state.window_mean,
                    key[0],
                    key[1],
                    state.p_value,
                )
            elif not state.detected and key in self._alarmed:
                self._alarmed.discard(key)
                log.info("drift cleared: %s (service=%s route=%s)", result.metric, key[0], key[1])

    async def _detector(self, key: SeriesKey) -> DriftDetector:
        detector = self._detectors.get(key)
        if detector is not None:
            self._detectors.move_to_end(key)
            return detector
        if self._saver is None:
            return self._keep(key, DriftDetector(self._settings))
        loading = self._loading.get(key)
        if loading is not None:  # another worker is loading this series: share its result
            return await asyncio.shield(loading)
        future: asyncio.Future[DriftDetector] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            detector = self._keep(key, await self._load(key))
            future.set_result(detector)
        finally:
            del self._loading[key]
            if not future.done():
                future.cancel()
        return detector

    async def _load(self, key: SeriesKey) -> DriftDetector:
        assert self._saver is not None
        try:
            saved = self._saver.dropped(key) or await self._saver.store.load(key)
            if saved is not None:
                return DriftDetector.restore(self._settings, saved)
        except Exception as exc:  # a store outage or a bad value must not fail the export
            self._saver.error("load", f"cannot load drift state of {key}, learning afresh: {exc!r}")
        return DriftDetector(self._settings)

    def _keep(self, key: SeriesKey, detector: DriftDetector) -> DriftDetector:
        self._detectors[key] = detector
        if len(self._detectors) > self._max_series:
            # An evicted detector not saved yet stays with the saver until it is.
            old, _ = self._detectors.popitem(last=False)
            self._alarmed.discard(old)
            for gauge in (self._telemetry.score, self._telemetry.detected):
                with contextlib.suppress(KeyError):  # never exported: baseline not complete
                    gauge.remove(*old)
        return detector

    async def save(self) -> None:
        """Save every series changed since the last save (a no-op without a store)."""
        if self._saver is not None:
            await self._saver.save()

    async def start(self) -> None:
        if self._saver is not None:
            await self._saver.start()

    async def flush(self) -> None:
        await self.save()

    async def shutdown(self, timeout: float) -> None:
        """Save what changed since the last periodic save."""
        if self._saver is not None:
            await self._saver.shutdown(timeout)


def build(section: DriftSettings, telemetry: DriftTelemetry, redis: Any = None) -> DriftAggregator:
    """The judged scores' drift detectors; their state in Redis when there is a client."""
    store = RedisDriftStore(redis, section.state_ttl_seconds) if redis is not None else None
    return DriftAggregator(telemetry, section, store=store)
