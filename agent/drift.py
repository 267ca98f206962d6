"""Drift detection on a stream of scores in [0, 1]: has the mean dropped below its baseline?

Two tests must agree before an alarm, which keeps noise from paging anyone:
- a one-sided CUSUM on standardised scores, z = (μ₀ − x) / σ₀, S ← max(0, S + z − k), which
  accumulates evidence of a downward shift quickly and forgets isolated bad scores;
- a one-sided Welch test between the baseline sample and the recent window, which confirms that
  the recent mean is really lower and not just a run of bad luck.

The baseline is learnt from the first `baseline_size` scores, then keeps adapting slowly (an
exponential average over about `baseline_horizon` scores) while the CUSUM sees no evidence of a
shift, so that a baseline learnt from an unlucky first sample corrects itself and slow seasonal
movement does not alarm, while a sudden drop is caught long before it could be absorbed. Slow
decline over days is for the Prometheus alert rules that compare long windows.

An alarm has hysteresis: it is raised when both tests agree and then held until the CUSUM falls
below half its threshold (the level at which the baseline adapts again), not dropped the moment
one score brings S under h or the window's p-value over alpha. Without it a detector at the
threshold raises and clears its alarm on alternate scores, several times within one batch.

`score`, exported for dashboards, is S / h: 1.0 is the CUSUM's alarm threshold.
Pure logic: no clocks, no I/O. `snapshot()` and `DriftDetector.restore()` turn a detector's state
into a JSON-able mapping and back, so that agent/exporters/drift.py can keep it in Redis across restarts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.config import DriftSettings

STATE_VERSION = 1


# The algorithm's own constants; the operator's knobs are DriftSettings (agent/config.py).
# `benchmarks/drift.py` measures the delay and the silence on noise they trade (docs/drift.md).
_SLACK = 0.375  # CUSUM slack, in baseline standard deviations
_BASELINE_HORIZON = 5000  # scores the adapting baseline averages over
_MIN_SIGMA = 0.05  # smallest σ₀ used, so a constant baseline does not turn every wobble into a large z
_CLEAR = 0.5  # an alarm holds until the score (S / h) falls below this; the baseline adapts below it too


@dataclass(frozen=True, slots=True)
class _Parameters:
    baseline_size: int
    baseline_horizon: int
    window: int
    slack: float
    threshold: float
    alpha: float
    min_sigma: float


def _parameters(settings: DriftSettings, batch: int) -> _Parameters:
    """For means of `batch` values: the same baseline and window in values, and the smallest σ
    scaled as a mean's (σ/√batch)."""
    if batch == 1:
        return _Parameters(
            settings.baseline_size, _BASELINE_HORIZON, settings.window, _SLACK, settings.threshold,
            settings.alpha, _MIN_SIGMA,
        )  # fmt: skip
    return _Parameters(
        baseline_size=max(10, settings.baseline_size // batch),
        baseline_horizon=max(10, _BASELINE_HORIZON // batch),
        window=max(5, settings.window // batch),
        slack=_SLACK,
        threshold=settings.threshold,
        alpha=settings.alpha,
        min_sigma=_MIN_SIGMA / math.sqrt(batch),
    )


@dataclass(frozen=True, slots=True)
class DriftState:
    ready: bool  # baseline complete
    score: float  # CUSUM statistic over its threshold; ≥ 1 means the CUSUM alarms
    detected: bool  # raised: CUSUM alarm confirmed by the window test; held while score ≥ 0.5
    baseline_mean: float | None
    window_mean: float | None
    p_value: float | None


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


class DriftDetector:
    """Detects a downward shift in the mean of one score stream (one service, route and metric)."""

    def __init__(self, settings: DriftSettings | None = None, *, batch: int = 1) -> None:
        """`batch`: each value given to `update` is the mean of that many scores (agent/signals.py)."""
        self.settings = settings or DriftSettings()
        self.batch = batch
        self.params = _parameters(self.settings, batch)
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0  # Welford's running sum of squared deviations while learning the baseline
        self._variance = 0.0
        self._cusum = 0.0
        self._alarmed = False
        self._window: deque[float] = deque(maxlen=self.params.window)
        self._window_sum = 0.0
        self._window_squares = 0.0

    @property
    def baseline_ready(self) -> bool:
        return self._n >= self.params.baseline_size

    def _sigma(self) -> float:
        return max(math.sqrt(self._variance), self.params.min_sigma)

    def update(self, value: float) -> DriftState:
        config = self.params
        if not self.baseline_ready:
            self._n += 1
            delta = value - self._mean
            self._mean += delta / self._n
            self._m2 += delta * (value - self._mean)
            if self._n > 1:
                self._variance = self._m2 / (self._n - 1)
            return DriftState(False, 0.0, False, None, None, None)

        if len(self._window) == self._window.maxlen:
            oldest = self._window[0]
            self._window_sum -= oldest
            self._window_squares -= oldest * oldest
        self._window.append(value)
        self._window_sum += value
        self._window_squares += value * value

        sigma = self._sigma()
        z = (self._mean - value) / sigma
        # Capped so that recovery after a long incident takes as long as detection did.
        self._cusum = min(max(0.0, self._cusum + z - config.slack), 2.0 * config.threshold)
        score = self._cusum / config.threshold
        if score < _CLEAR:
            # No evidence of a shift: let the baseline follow slowly (EW mean and variance).
            weight = 1.0 / config.baseline_horizon
            delta = value - self._mean
            self._mean += weight * delta
            self._variance = (1.0 - weight) * (self._variance + weight * delta * delta)

        window_mean = self._window_sum / len(self._window)
        p_value = None
        if len(self._window) >= 2:
            n = len(self._window)
            # Running sums keep each update O(1); clamp the rounding error of the subtraction.
            window_var = max(0.0, (self._window_squares - n * window_mean * window_mean) / (n - 1))
            standard_error = math.sqrt(
                sigma**2 / config.baseline_size + max(window_var, config.min_sigma**2) / len(self._window)
            )
            p_value = _normal_sf((self._mean - window_mean) / standard_error)
        if self._alarmed:
            self._alarmed = score >= _CLEAR
        else:
            self._alarmed = score >= 1.0 and p_value is not None and p_value < config.alpha
        return DriftState(True, score, self._alarmed, self._mean, window_mean, p_value)

    def snapshot(self) -> dict[str, Any]:
        """The detector's state as plain JSON values (restore with `DriftDetector.restore`)."""
        return {
            "version": STATE_VERSION,
            "n": self._n,
            "mean": self._mean,
            "m2": self._m2,
            "variance": self._variance,
            "cusum": self._cusum,
            "alarmed": self._alarmed,
            "window": list(self._window),
            # The running sums, so that a restored detector continues bit for bit.
            "window_sum": self._window_sum,
            "window_squares": self._window_squares,
        }

    @classmethod
    def restore(cls, settings: DriftSettings, state: Mapping[str, Any], *, batch: int = 1) -> DriftDetector:
        """A detector that carries on from `state`.

        Raises:
            ValueError: the state is not one `snapshot()` wrote (start afresh instead).
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown drift state version {state.get('version')!r}")
        detector = cls(settings, batch=batch)
        try:
            detector._n = int(state["n"])
            detector._mean = float(state["mean"])
            detector._m2 = float(state["m2"])
            detector._variance = float(state["variance"])
            detector._cusum = float(state["cusum"])
            # Absent from states saved before alarms held: the next score raises it again if due.
            detector._alarmed = bool(state.get("alarmed", False))
            window = [float(v) for v in state["window"]]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed drift state: {exc!r}") from None
        values = (detector._n, detector._mean, detector._m2, detector._variance, detector._cusum, *window)
        if detector._n < 0 or not all(math.isfinite(v) for v in values):
            raise ValueError("malformed drift state: negative count or non-finite value")
        # A window longer than configured now keeps its most recent scores.
        detector._window.extend(window)
        if len(detector._window) == len(window) and "window_sum" in state:
            detector._window_sum = float(state["window_sum"])
            detector._window_squares = float(state["window_squares"])
        else:
            detector._window_sum = sum(detector._window)
            detector._window_squares = sum(v * v for v in detector._window)
        return detector
