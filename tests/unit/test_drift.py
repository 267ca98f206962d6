from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client import CollectorRegistry

from agent.aggregate import DriftAggregator
from agent.drift import DriftConfig, DriftDetector
from agent.model import MetricResult, RagInteraction
from agent.telemetry import Telemetry

SMALL = DriftConfig(baseline_size=200, window=50, threshold=8.0, alpha=1e-4)


def feed(detector: DriftDetector, rng: random.Random, mean: float, n: int) -> list[bool]:
    return [detector.update(min(1.0, max(0.0, rng.gauss(mean, 0.2)))).detected for _ in range(n)]


def test_not_ready_until_the_baseline_is_learnt() -> None:
    detector = DriftDetector(SMALL)
    states = [detector.update(0.7) for _ in range(SMALL.baseline_size)]
    assert not any(s.ready for s in states)
    state = detector.update(0.7)
    assert state.ready and state.baseline_mean == pytest.approx(0.7)


def test_stationary_stream_does_not_alarm() -> None:
    rng = random.Random(1)
    detector = DriftDetector(SMALL)
    assert not any(feed(detector, rng, 0.7, 20_000))


def test_drop_of_0_15_is_detected_and_clears_on_recovery() -> None:
    rng = random.Random(2)
    detector = DriftDetector(SMALL)
    feed(detector, rng, 0.7, 1000)
    after = feed(detector, rng, 0.55, 300)
    assert any(after)
    delay = after.index(True) + 1
    assert delay < 150
    assert detector.update(0.55).score >= 1.0
    recovered = feed(detector, rng, 0.7, 1000)
    assert not recovered[-1]


def test_isolated_bad_scores_do_not_alarm() -> None:
    detector = DriftDetector(SMALL)
    rng = random.Random(3)
    feed(detector, rng, 0.7, 500)
    assert not any(detector.update(0.0).detected for _ in range(5))


def test_a_constant_baseline_does_not_alarm_on_small_wobbles() -> None:
    detector = DriftDetector(SMALL)
    for _ in range(300):
        detector.update(1.0)
    assert not any(detector.update(0.98).detected for _ in range(100))


def _interaction(route: str) -> RagInteraction:
    return RagInteraction("ab" * 16, "cd" * 8, "q", (), "r", "svc", route)


def test_aggregator_exports_gauges_and_ignores_undefined_scores() -> None:
    registry = CollectorRegistry()
    aggregator = DriftAggregator(Telemetry(registry), SMALL, max_series=2)
    rng = random.Random(4)
    for i in range(SMALL.baseline_size + 400):
        value = rng.gauss(0.7 if i < SMALL.baseline_size + 100 else 0.4, 0.1)
        asyncio.run(
            aggregator.export(
                _interaction("a"),
                [
                    MetricResult.ok("context_precision", min(1.0, max(0.0, value)), judge="j"),
                    MetricResult.skipped("faithfulness", "no_claims"),
                    MetricResult.error("answer_relevancy", "timeout"),
                ],
            )
        )
    labels = {"service": "svc", "route": "a", "metric": "context_precision"}
    assert registry.get_sample_value("ragpulse_drift_detected", labels) == 1.0
    assert registry.get_sample_value("ragpulse_drift_score", labels) >= 1.0
    for metric in ("faithfulness", "answer_relevancy"):
        assert registry.get_sample_value("ragpulse_drift_score", {**labels, "metric": metric}) is None

    # Series are bounded: a third route evicts the least recently updated one.
    for route in ("b", "c"):
        for _ in range(SMALL.baseline_size + 1):
            asyncio.run(
                aggregator.export(_interaction(route), [MetricResult.ok("context_precision", 0.7, judge="j")])
            )
    assert registry.get_sample_value("ragpulse_drift_score", labels) is None
    assert registry.get_sample_value("ragpulse_drift_score", {**labels, "route": "c"}) == 0.0
