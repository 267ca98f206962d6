"""Prediction-powered inference (PPI) of a mean: the judge scores everything, humans label a few.

The estimate of the true mean θ of a metric over N judged interactions, n of which carry a human
label Y beside the judge's score Ŷ, is (Angelopoulos, Bates, Fannjiang, Jordan and Zrnic,
"Prediction-powered inference", Science 382, 2023; with the power-tuning λ of Angelopoulos,
Duchi and Zrnic, "PPI++: Efficient prediction-powered inference", arXiv:2311.01453, 2023)

    θ̂ = λ · mean_N(Ŷ) + mean_n(Y − λ·Ŷ)            (the second term is the "rectifier")
    Var(θ̂) ≈ λ² · Var(Ŷ) / N + Var(Y − λ·Ŷ) / n     (CLT interval θ̂ ± z_{1−α/2} · sd)

λ = 1 is the original PPI estimator, λ = 0 the classical labels-only mean, and the tuned
λ* = Cov(Y, Ŷ) / ((1 + n/N) · Var(Ŷ)), clipped to [0, 1], minimises the variance, so the interval
is asymptotically never wider than the labels-only one, however poor the judge. The rectifier
removes the judge's bias whatever it is; the interval is valid as long as the labelled
interactions are a random sample of the judged ones (see docs/trust.md).

When labelled interactions were drawn with unequal probabilities π_i (low-confidence verdicts
oversampled), each carries the weight w_i = 1/π_i and the rectifier is the weighted (Hájek)
mean Σ w·r / Σ w, with the linearised variance Σ w²·(r − r̄)² / (Σ w)².

Everything is computed from running sums (`JudgedMoments`, `LabelledMoments`), so the stream keeps
a few floats per series and window, and offline code and the stream share the same formulas.
Pure Python: no numpy needed on the agent's hot path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

Tuning = Literal["ppi", "ppi++", "labels"]

MIN_LABELS = 2  # a variance needs two labels; callers usually ask for many more


class JudgedMoments:
    """Running sums of the judge's scores over every judged interaction of a series and window."""

    __slots__ = ("count", "total", "total_sq")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0

    @classmethod
    def from_sums(cls, count: int, total: float, total_sq: float) -> JudgedMoments:
        """From sums computed elsewhere (e.g. by numpy over a large array)."""
        moments = cls()
        moments.count, moments.total, moments.total_sq = count, float(total), float(total_sq)
        return moments

    def add(self, score: float) -> None:
        self.count += 1
        self.total += score
        self.total_sq += score * score

    def merge(self, other: JudgedMoments) -> None:
        self.count += other.count
        self.total += other.total
        self.total_sq += other.total_sq

    @property
    def mean(self) -> float:
        return self.total / self.count

    @property
    def variance(self) -> float:
        """Population variance (the n/(n−1) correction is negligible at the sizes that matter)."""
        return max(self.total_sq / self.count - self.mean**2, 0.0)


class LabelledMoments:
    """Running weighted sums over labelled interactions: label y, judge score s, weight w = 1/π."""

    __slots__ = ("count", "w", "w2", "w2s", "w2ss", "w2y", "w2ys", "w2yy", "ws", "wss", "wy", "wys")

    def __init__(self) -> None:
        self.count = 0
        self.w = self.wy = self.ws = self.wss = self.wys = 0.0
        self.w2 = self.w2y = self.w2s = self.w2yy = self.w2ys = self.w2ss = 0.0

    def add(self, label: float, score: float, weight: float = 1.0) -> None:
        if not weight > 0 or not math.isfinite(weight):
            raise ValueError(f"sampling weight must be positive and finite, got {weight!r}")
        w, w2 = weight, weight * weight
        self.count += 1
        self.w += w
        self.wy += w * label
        self.ws += w * score
        self.wss += w * score * score
        self.wys += w * label * score
        self.w2 += w2
        self.w2y += w2 * label
        self.w2s += w2 * score
        self.w2yy += w2 * label * label
        self.w2ys += w2 * label * score
        self.w2ss += w2 * score * score

    def merge(self, other: LabelledMoments) -> None:
        self.count += other.count
        for name in self.__slots__[1:]:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def rectifier(self, lam: float) -> tuple[float, float]:
        """Weighted mean of r = y − λ·s and the variance of that mean (Hájek, linearised)."""
        mean = (self.wy - lam * self.ws) / self.w
        # Σ w²·(r − mean)², expanded so that only running sums are needed.
        w2rr = self.w2yy - 2 * lam * self.w2ys + lam * lam * self.w2ss
        w2r = self.w2y - lam * self.w2s
        spread = max(w2rr - 2 * mean * w2r + mean * mean * self.w2, 0.0)
        # Bessel's n/(n−1), so that equal weights give the textbook s²/n.
        variance = spread / (self.w * self.w) * self.count / (self.count - 1)
        return mean, variance

    def covariance(self) -> float:
        """Weighted covariance of label and judge score among the labelled interactions."""
        return self.wys / self.w - (self.wy / self.w) * (self.ws / self.w)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its (1 − alpha) confidence interval, and what it was computed from."""

    mean: float
    low: float
    high: float
    labelled: int
    judged: int
    lam: float  # 1 = PPI, 0 = labels only, in between = power-tuned

    @property
    def width(self) -> float:
        return self.high - self.low


def _clip(value: float) -> float:
    # Scores and labels live in [0, 1], so is their mean: clipping never excludes the truth.
    return min(max(value, 0.0), 1.0)


def _z(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return NormalDist().inv_cdf(1 - alpha / 2)


def tuned_lambda(judged: JudgedMoments, labelled: LabelledMoments) -> float:
    """PPI++'s variance-minimising λ for the mean, clipped to [0, 1]."""
    variance = judged.variance
    if variance <= 0:
        return 0.0  # a constant judge carries no information
    lam = labelled.covariance() / ((1 + labelled.count / judged.count) * variance)
    return min(max(lam, 0.0), 1.0)


def ppi_mean(
    judged: JudgedMoments, labelled: LabelledMoments, *, alpha: float = 0.05, tuning: Tuning = "ppi++"
) -> Estimate | None:
    """The prediction-powered estimate of the true mean; None with fewer than two labels.

    `tuning`: "ppi" (λ = 1, Angelopoulos et al. 2023), "ppi++" (λ tuned, the default) or
    "labels" (λ = 0: the classical interval from the labels alone, for comparison).
    """
    if labelled.count < MIN_LABELS or labelled.w <= 0:
        return None
    if tuning == "labels" or judged.count == 0:
        lam = 0.0
    elif tuning == "ppi":
        lam = 1.0
    else:
        lam = tuned_lambda(judged, labelled)
    rectifier, rectifier_variance = labelled.rectifier(lam)
    imputed = lam * judged.mean if lam else 0.0
    imputed_variance = lam * lam * judged.variance / judged.count if lam else 0.0
    mean = imputed + rectifier
    half = _z(alpha) * math.sqrt(imputed_variance + rectifier_variance)
    return Estimate(
        mean=_clip(mean),
        low=_clip(mean - half),
        high=_clip(mean + half),
        labelled=labelled.count,
        judged=judged.count,
        lam=lam,
    )


def judge_mean(judged: JudgedMoments, *, alpha: float = 0.05) -> Estimate | None:
    """The naive estimate: the judge's own mean and its CLT interval, blind to the judge's bias."""
    if judged.count < MIN_LABELS:
        return None
    half = _z(alpha) * math.sqrt(judged.variance / (judged.count - 1))
    mean = judged.mean
    return Estimate(_clip(mean), _clip(mean - half), _clip(mean + half), 0, judged.count, 1.0)


def moments(
    labels: Sequence[float],
    labelled_scores: Sequence[float],
    all_scores: Iterable[float],
    weights: Sequence[float] | None = None,
) -> tuple[JudgedMoments, LabelledMoments]:
    """Running sums from arrays: `all_scores` are the judge's scores of every judged interaction."""
    if len(labels) != len(labelled_scores) or (weights is not None and len(weights) != len(labels)):
        raise ValueError("labels, their scores and weights must have the same length")
    judged = JudgedMoments()
    for score in all_scores:
        judged.add(float(score))
    labelled = LabelledMoments()
    for i, (label, score) in enumerate(zip(labels, labelled_scores, strict=True)):
        labelled.add(float(label), float(score), 1.0 if weights is None else float(weights[i]))
    return judged, labelled


def ppi_mean_ci(
    labels: Sequence[float],
    labelled_scores: Sequence[float],
    all_scores: Iterable[float],
    *,
    weights: Sequence[float] | None = None,
    alpha: float = 0.05,
    tuning: Tuning = "ppi++",
) -> Estimate | None:
    """`ppi_mean` over arrays (labels, the judge's scores of those items, the judge's scores of all)."""
    judged, labelled = moments(labels, labelled_scores, all_scores, weights)
    return ppi_mean(judged, labelled, alpha=alpha, tuning=tuning)
