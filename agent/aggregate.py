"""Aggregate: per (service, route, metric) score streams fed to drift detectors.

An Exporter like any other, so the pipeline hands it every evaluated interaction; it keeps one
DriftDetector per series (bounded: the least recently updated series is dropped beyond
`max_series`) and publishes `ragpulse_drift_score` and `ragpulse_drift_detected`.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence

from agent.drift import DriftConfig, DriftDetector
from agent.model import MetricResult, Outcome, RagInteraction
from agent.telemetry import Telemetry

log = logging.getLogger(__name__)

SeriesKey = tuple[str, str, str]  # service, route, metric


class DriftAggregator:
    def __init__(self, telemetry: Telemetry, config: DriftConfig, max_series: int = 2000) -> None:
        self._telemetry = telemetry
        self._config = config
        self._max_series = max_series
        self._detectors: OrderedDict[SeriesKey, DriftDetector] = OrderedDict()
        self._alarmed: set[SeriesKey] = set()

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        for result in results:
            if result.outcome is not Outcome.OK or result.value is None:
                continue  # undefined and failed scores say nothing about quality
            key = (interaction.service, interaction.route, result.metric)
            state = self._detector(key).update(result.value)
            if not state.ready:
                continue
            self._telemetry.drift_score.labels(*key).set(round(state.score, 4))
            self._telemetry.drift_detected.labels(*key).set(1.0 if state.detected else 0.0)
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

    def _detector(self, key: SeriesKey) -> DriftDetector:
        detector = self._detectors.get(key)
        if detector is not None:
            self._detectors.move_to_end(key)
            return detector
        detector = self._detectors[key] = DriftDetector(self._config)
        if len(self._detectors) > self._max_series:
            old, _ = self._detectors.popitem(last=False)
            self._alarmed.discard(old)
            for gauge in (self._telemetry.drift_score, self._telemetry.drift_detected):
                with contextlib.suppress(KeyError):  # never exported: baseline not complete
                    gauge.remove(*old)
        return detector

    async def start(self) -> None:
        """Nothing to connect."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing to flush: gauges are scraped."""
