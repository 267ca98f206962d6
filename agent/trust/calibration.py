"""A fitted map from a judge's score to the probability that a human says "good", saved as JSON.

Two methods: isotonic regression (monotone step function, no shape assumed; needs a few hundred
labels) and Platt scaling (a logistic curve in the score; two parameters, steadier on few labels).
Fitting needs numpy/scipy (`pip install ".[trust]"` from the clone); applying a saved calibration is pure
Python, so `ragpulse run` loads one without them.

The file is small and versioned:

    {"format": "ragpulse-calibration", "format_version": 1,
     "calibrations": {"faithfulness": {"metric": ..., "method": "isotonic" | "platt",
        "params": {"x": [...], "y": [...]} | {"a": ..., "b": ...},
        "fitted_on": {"items": ..., "positives": ..., "score_min": ..., "score_max": ...,
                      "judge": ..., "labels": ..., "created": ...},
        "thresholds": [{"target": "precision" | "recall", "goal": 0.9, "threshold": ...,
                        "precision": ..., "recall": ...}]}}}

A threshold flags an interaction as a problem (unfaithful, irrelevant) when its raw score is
below it; precision and recall are those of the problem class on the fitting data (in-sample).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

FORMAT = "ragpulse-calibration"
FORMAT_VERSION = 1
Method = Literal["isotonic", "platt"]
METHODS: tuple[Method, ...] = ("isotonic", "platt")
# Fewer labels than this and an isotonic fit's steps follow the noise of a few labels (docs/trust.md):
# `ragpulse calibrate` refuses it, and its default picks Platt scaling instead.
MIN_ISOTONIC_LABELS = 100


def method_for(labels: int, asked: str = "auto") -> Method:
    """The method to fit on `labels` labels: `asked`, or for "auto" isotonic from
    MIN_ISOTONIC_LABELS labels on and Platt below. Raises ValueError (one line, why) for isotonic
    on too few labels."""
    if asked == "auto":
        return "isotonic" if labels >= MIN_ISOTONIC_LABELS else "platt"
    if asked == "isotonic" and labels < MIN_ISOTONIC_LABELS:
        raise ValueError(
            f"{labels} labels are too few for isotonic calibration (it needs {MIN_ISOTONIC_LABELS}: with "
            "fewer its steps follow the noise); use --method platt or label more"
        )
    if asked not in METHODS:
        raise ValueError(f"unknown calibration method {asked!r}; choose from {METHODS}")
    return asked


class CalibrationError(ValueError):
    """A calibration file is missing, malformed or of an unknown version; the message says which."""


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    target: Literal["precision", "recall"]
    goal: float
    threshold: float | None  # None: no threshold reaches the goal on this data
    precision: float | None
    recall: float | None


@dataclass(frozen=True, slots=True)
class Calibration:
    metric: str
    method: Method
    params: Mapping[str, Any]
    fitted_on: Mapping[str, Any]
    thresholds: tuple[ThresholdChoice, ...] = ()

    def probability(self, score: float) -> float:
        """P(a human labels the interaction good | the judge scored it `score`)."""
        if self.method == "platt":
            z = self.params["a"] * score + self.params["b"]
            return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        xs: Sequence[float] = self.params["x"]
        ys: Sequence[float] = self.params["y"]
        if score <= xs[0]:
            return float(ys[0])
        if score >= xs[-1]:
            return float(ys[-1])
        # Linear between the fitted points, as scikit-learn's IsotonicRegression predicts.
        i = bisect.bisect_right(xs, score)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return float(y0 + (y1 - y0) * (score - x0) / (x1 - x0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "method": self.method,
            "params": dict(self.params),
            "fitted_on": dict(self.fitted_on),
            "thresholds": [
                {"target": t.target, "goal": t.goal, "threshold": t.threshold, "precision": t.precision,
                 "recall": t.recall}
                for t in self.thresholds
            ],
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class CalibrationSet:
    """The calibrations of one judge, one per metric, as saved in one file."""

    calibrations: Mapping[str, Calibration] = field(default_factory=dict)

    def get(self, metric: str) -> Calibration | None:
        return self.calibrations.get(metric)

    def save(self, path: Path) -> None:
        document = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "calibrations": {m: c.as_dict() for m, c in sorted(self.calibrations.items())},
        }
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _calibration(metric: str, raw: Any) -> Calibration:
    if not isinstance(raw, dict):
        raise CalibrationError(f"{metric}: expected an object")
    method = raw.get("method")
    params = raw.get("params")
    if method not in METHODS or not isinstance(params, dict):
        raise CalibrationError(f"{metric}: method must be one of {METHODS} with params")
    if method == "platt" and not all(isinstance(params.get(k), int | float) for k in ("a", "b")):
        raise CalibrationError(f"{metric}: platt params need numbers a and b")
    if method == "isotonic":
        xs, ys = params.get("x"), params.get("y")
        if not (isinstance(xs, list) and isinstance(ys, list) and len(xs) == len(ys) >= 1):
            raise CalibrationError(f"{metric}: isotonic params need lists x and y of equal length")
        if any(b <= a for a, b in itertools.pairwise(xs)):
            raise CalibrationError(f"{metric}: isotonic x must increase strictly")
    thresholds = tuple(
        ThresholdChoice(t["target"], t["goal"], t.get("threshold"), t.get("precision"), t.get("recall"))
        for t in raw.get("thresholds", [])
    )
    return Calibration(metric, method, params, raw.get("fitted_on", {}), thresholds)


def load_calibrations(path: Path) -> CalibrationSet:
    """Read a calibration file; CalibrationError says what is wrong with it."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationError(f"cannot read calibration file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CalibrationError(f"{path}: not a ragpulse calibration file (format != {FORMAT!r})")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise CalibrationError(
            f"{path}: format_version {version!r} is not supported by this ragpulse (expects "
            f"{FORMAT_VERSION}); re-run `ragpulse calibrate` with this version"
        )
    raw = document.get("calibrations")
    if not isinstance(raw, dict):
        raise CalibrationError(f"{path}: no calibrations object")
    try:
        return CalibrationSet({metric: _calibration(metric, c) for metric, c in raw.items()})
    except (KeyError, TypeError) as exc:
        raise CalibrationError(f"{path}: malformed calibration ({exc})") from None


# -- Fitting (numpy/scipy) ------------------------------------------------------------------------


def _fit_isotonic(scores: Any, labels: Any) -> dict[str, list[float]]:
    import numpy as np
    from scipy.optimize import isotonic_regression  # scipy >= 1.12 (pool adjacent violators)

    # Tied scores must get one value: pool them first, weighted by how many they are.
    xs, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=labels)
    fitted = isotonic_regression(sums / counts, weights=counts, increasing=True).x
    return {"x": [round(float(x), 6) for x in xs], "y": [round(float(y), 6) for y in fitted]}


def _fit_platt(scores: Any, labels: Any) -> dict[str, float]:
    import numpy as np
    from scipy.optimize import minimize

    positives = float(labels.sum())
    negatives = len(labels) - positives
    # Platt's smoothed targets keep the fit finite when the classes separate perfectly.
    target = np.where(labels > 0.5, (positives + 1) / (positives + 2), 1 / (negatives + 2))

    def loss(params: Any) -> tuple[float, Any]:
        a, b = params
        z = a * scores + b
        p = 1 / (1 + np.exp(-z))
        value = np.sum(np.logaddexp(0, z) - target * z)
        residual = p - target
        return float(value), np.array([np.sum(residual * scores), np.sum(residual)])

    result = minimize(loss, x0=np.array([1.0, 0.0]), jac=True, method="L-BFGS-B")
    a, b = result.x
    return {"a": round(float(a), 6), "b": round(float(b), 6)}


def choose_thresholds(
    scores: Sequence[float], labels: Sequence[float], goals: Sequence[tuple[str, float]]
) -> tuple[ThresholdChoice, ...]:
    """Raw-score thresholds below which an interaction is flagged as a problem (label < 0.5).

    For a precision goal: the highest threshold whose flags are at least that precise (most
    recall); for a recall goal: the lowest threshold that catches that share of problems (most
    precision).
    """
    problem = [label < 0.5 for label in labels]
    total_problems = sum(problem)
    candidates = sorted(
        set(scores)
    )  # "below the lowest score" flags nothing; no +inf: flag-all is no threshold
    rows = []
    for t in candidates:
        flagged = [p for s, p in zip(scores, problem, strict=True) if s < t]
        tp = sum(flagged)
        precision = tp / len(flagged) if flagged else None
        recall = tp / total_problems if total_problems else None
        rows.append((t, precision, recall))
    choices = []
    for target, goal in goals:
        if target == "precision":
            ok = [r for r in rows if r[1] is not None and r[1] >= goal]
            best = max(ok, key=lambda r: r[0]) if ok else None
        else:
            ok = [r for r in rows if r[2] is not None and r[2] >= goal]
            best = min(ok, key=lambda r: r[0]) if ok else None
        if best is None:
            choices.append(ThresholdChoice(target, goal, None, None, None))  # type: ignore[arg-type]
        else:
            choices.append(ThresholdChoice(target, goal, round(float(best[0]), 6), best[1], best[2]))  # type: ignore[arg-type]
    return tuple(choices)


def fit(
    metric: str,
    scores: Sequence[float],
    labels: Sequence[float],
    *,
    method: Method = "isotonic",
    judge: str | None = None,
    source: str | None = None,
    goals: Sequence[tuple[str, float]] = (("precision", 0.9), ("recall", 0.9)),
) -> Calibration:
    """Fit P(label good | score) on labelled scores (graded labels count as good at >= 0.5)."""
    import numpy as np

    s = np.asarray(scores, dtype=float)
    y = (np.asarray(labels, dtype=float) >= 0.5).astype(float)
    if len(s) != len(y) or len(s) < 2:
        raise ValueError(f"{metric}: need at least two labelled scores, got {len(s)}")
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; choose from {METHODS}")
    params: dict[str, Any] = _fit_isotonic(s, y) if method == "isotonic" else _fit_platt(s, y)
    fitted_on = {
        "items": len(s),
        "positives": int(y.sum()),
        "score_min": round(float(s.min()), 6),
        "score_max": round(float(s.max()), 6),
        "judge": judge,
        "labels": source,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    thresholds = choose_thresholds(list(map(float, s)), list(map(float, y)), goals)
    return Calibration(metric, method, params, fitted_on, thresholds)
