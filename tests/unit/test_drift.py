from __future__ import annotations

import asyncio
import json
import logging
import random

import pytest
from prometheus_client import CollectorRegistry

from agent.config import DriftSettings
from agent.drift import DriftDetector, DriftState
from agent.drift_store import MemoryDriftStore
from agent.exporters.drift import DriftAggregator
from agent.metrics import context_precision_at_k
from agent.model import MetricResult, RagInteraction
from agent.telemetry import DriftTelemetry
from tests.support.pipeline import evaluated

SMALL = DriftSettings(baseline_size=200, window=50, threshold=8.0, alpha=1e-4)


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


# The demo's drift settings (agent/demo/run.py) and a stream of CP@5 scores whose mean drops by
# about 0.15 after 400 scores: before alarms held, this detector raised its alarm at score 486,
# cleared it at 500, raised it at 501, cleared it at 504, and so on through the drop.
DEMO = DriftSettings(baseline_size=150, window=50)


def _cp_stream(seed: int = 2) -> list[float]:
    rng = random.Random(seed)

    def draw(p: float) -> float:
        value = context_precision_at_k([rng.random() < p for _ in range(5)])
        assert value is not None
        return value

    return [draw(0.6) for _ in range(400)] + [draw(0.45) for _ in range(400)]


def _transitions(states: list[DriftState]) -> list[tuple[int, bool]]:
    changes, alarmed = [], False
    for i, state in enumerate(states):
        if state.detected != alarmed:
            alarmed = state.detected
            changes.append((i, alarmed))
    return changes


def test_an_alarm_is_raised_once_and_held_through_the_drop_not_flapping() -> None:
    detector = DriftDetector(DEMO)
    states = [detector.update(v) for v in _cp_stream()]
    # Raised where both tests first agree (the detection delay is unchanged), then held.
    assert _transitions(states) == [(486, True)]
    assert states[486].score >= 1.0 and states[486].p_value is not None and states[486].p_value < DEMO.alpha
    # Held even where one test alone would have cleared it.
    held = states[487:]
    assert any(s.score < 1.0 or (s.p_value or 0) >= DEMO.alpha for s in held)
    assert all(s.detected for s in held)


def test_a_held_alarm_clears_once_the_cusum_falls_below_half_its_threshold() -> None:
    detector = DriftDetector(DEMO)
    for value in _cp_stream():
        detector.update(value)
    rng = random.Random(5)
    recovered = [
        detector.update(context_precision_at_k([rng.random() < 0.6 for _ in range(5)]) or 0.0)
        for _ in range(600)
    ]
    cleared = next(i for i, state in enumerate(recovered) if not state.detected)
    assert all(state.detected for state in recovered[:cleared])
    assert not any(state.detected for state in recovered[cleared:])  # cleared once, never raised again
    assert recovered[cleared].score < 0.5 <= recovered[cleared - 1].score


def test_one_batch_of_scores_logs_one_alarm_and_no_clearing(caplog: pytest.LogCaptureFixture) -> None:
    """The demo's log showed a series' alarm raised and cleared several times within one
    millisecond: one batch of scores, each one flipping the detector."""
    aggregator = DriftAggregator(DriftTelemetry(CollectorRegistry()), DEMO)
    with caplog.at_level(logging.INFO, logger="agent.exporters.drift"):
        _scores(aggregator, _cp_stream(), metric="context_precision")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("drift: context_precision dropped"), lines


def _interaction(route: str) -> RagInteraction:
    return RagInteraction("ab" * 16, "cd" * 8, "q", (), "r", "svc", route)


def test_aggregator_exports_gauges_and_ignores_undefined_scores() -> None:
    registry = CollectorRegistry()
    aggregator = DriftAggregator(DriftTelemetry(registry), SMALL.model_copy(update={"max_series": 2}))
    rng = random.Random(4)
    for i in range(SMALL.baseline_size + 400):
        value = rng.gauss(0.7 if i < SMALL.baseline_size + 100 else 0.4, 0.1)
        asyncio.run(
            aggregator.export(
                evaluated(
                    _interaction("a"),
                    [
                        MetricResult.ok("context_precision", min(1.0, max(0.0, value)), judge="j"),
                        MetricResult.skipped("faithfulness", "no_claims"),
                        MetricResult.error("answer_relevancy", "timeout"),
                    ],
                )
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
                aggregator.export(
                    evaluated(_interaction(route), [MetricResult.ok("context_precision", 0.7, judge="j")])
                )
            )
    assert registry.get_sample_value("ragpulse_drift_score", labels) is None
    assert registry.get_sample_value("ragpulse_drift_score", {**labels, "route": "c"}) == 0.0


# -- state that survives restarts -------------------------------------------------------------------


def test_a_restored_detector_continues_exactly_where_the_saved_one_was() -> None:
    rng = random.Random(7)
    original = DriftDetector(SMALL)
    feed(original, rng, 0.7, SMALL.baseline_size + 80)
    restored = DriftDetector.restore(SMALL, json.loads(json.dumps(original.snapshot())))
    tail = [min(1.0, max(0.0, rng.gauss(0.45, 0.2))) for _ in range(120)]
    assert [original.update(v) for v in tail] == [restored.update(v) for v in tail]


def test_a_restored_detector_keeps_its_alarm_held() -> None:
    original = DriftDetector(DEMO)
    for value in _cp_stream()[:490]:
        original.update(value)
    assert original.update(_cp_stream()[490]).detected
    restored = DriftDetector.restore(DEMO, json.loads(json.dumps(original.snapshot())))
    tail = _cp_stream()[491:]
    assert [original.update(v) for v in tail] == [restored.update(v) for v in tail]
    assert all(state.detected for state in [restored.update(v) for v in tail[:20]])


@pytest.mark.parametrize(
    "state",
    [{}, {"version": 99}, {"version": 1, "n": "x"}, {"version": 1, "n": 5, "mean": float("nan"),
     "m2": 0, "variance": 0, "cusum": 0, "window": []}, {"version": 1, "n": -1, "mean": 0, "m2": 0,
     "variance": 0, "cusum": 0, "window": []}],
)  # fmt: skip
def test_a_malformed_state_is_refused(state: dict) -> None:
    with pytest.raises(ValueError):
        DriftDetector.restore(SMALL, state)


def _scores(aggregator: DriftAggregator, values: list[float], metric: str = "faithfulness") -> None:
    async def run() -> None:
        for value in values:
            await aggregator.export(evaluated(_interaction("a"), [MetricResult.ok(metric, value, judge="j")]))

    asyncio.run(run())


def test_the_baseline_is_not_relearnt_after_a_restart() -> None:
    store = MemoryDriftStore()
    labels = {"service": "svc", "route": "a", "metric": "faithfulness"}
    first_registry = CollectorRegistry()
    first = DriftAggregator(DriftTelemetry(first_registry), SMALL, store=store)
    _scores(first, [0.7] * SMALL.baseline_size)  # the baseline is learnt; nothing judged yet
    assert first_registry.get_sample_value("ragpulse_drift_score", labels) is None
    asyncio.run(first.shutdown(1.0))  # saves what changed
    assert store.states[("svc", "a", "faithfulness")]["n"] == SMALL.baseline_size

    registry = CollectorRegistry()
    restarted = DriftAggregator(DriftTelemetry(registry), SMALL, store=store)
    _scores(restarted, [0.7])  # one score: ready at once, the baseline came from the store
    assert registry.get_sample_value("ragpulse_drift_score", labels) == 0.0
    # Without the store, one score is one score of a new baseline: nothing exported yet.
    fresh_registry = CollectorRegistry()
    _scores(DriftAggregator(DriftTelemetry(fresh_registry), SMALL), [0.7])
    assert fresh_registry.get_sample_value("ragpulse_drift_score", labels) is None


class FailingStore:
    def __init__(self) -> None:
        self.saves = 0

    async def load(self, key):  # type: ignore[no-untyped-def]
        raise ConnectionError("redis down")

    async def save(self, states):  # type: ignore[no-untyped-def]
        self.saves += 1
        raise ConnectionError("redis down")


def test_a_store_outage_never_fails_an_export_and_is_counted() -> None:
    registry = CollectorRegistry()
    store = FailingStore()
    aggregator = DriftAggregator(DriftTelemetry(registry), SMALL, store=store)
    _scores(aggregator, [0.7] * (SMALL.baseline_size + 1))
    assert registry.get_sample_value("ragpulse_drift_state_errors_total", {"operation": "load"}) == 1
    asyncio.run(aggregator.save())
    asyncio.run(aggregator.save())  # what failed is retried
    assert store.saves == 2
    assert registry.get_sample_value("ragpulse_drift_state_errors_total", {"operation": "save"}) == 2


def test_series_evicted_before_a_save_are_saved_later() -> None:
    store = MemoryDriftStore()
    aggregator = DriftAggregator(
        DriftTelemetry(CollectorRegistry()), SMALL.model_copy(update={"max_series": 1}), store=store
    )

    async def run() -> None:
        for route in ("a", "b"):
            await aggregator.export(
                evaluated(_interaction(route), [MetricResult.ok("faithfulness", 0.5, judge="j")])
            )
        await aggregator.save()

    asyncio.run(run())
    assert set(store.states) == {("svc", "a", "faithfulness"), ("svc", "b", "faithfulness")}
