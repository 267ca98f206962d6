"""How well a judge's scores agree with human labels: pure functions over arrays.

Labels are 1 for good (faithful, relevant) and 0 for the problem; graded labels count as good at
>= 0.5. AUROC measures ranking (does a good interaction score above a bad one), balanced accuracy
and the F1 of the problem class measure the verdict at a threshold ("score < threshold" flags a
problem). Every figure comes with a percentile bootstrap 95% interval (resampling items), because
a few hundred labels leave a wide margin and the report must show it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from scipy.stats import rankdata

# The plain verdict on an AUROC interval ("useful", "weak", "at chance", "worse than chance"), which
# `calibrate` prints; the judges' declarations (agent/judges/standing.py) rate themselves by it.
from agent.judges.standing import AT_CHANCE as AT_CHANCE
from agent.judges.standing import INVERTED as INVERTED
from agent.judges.standing import UNKNOWN as UNKNOWN
from agent.judges.standing import USEFUL as USEFUL
from agent.judges.standing import USEFUL_AUROC as USEFUL_AUROC
from agent.judges.standing import WEAK as WEAK
from agent.judges.standing import auroc_verdict as auroc_verdict

Array = NDArray[np.float64]
Values = Sequence[float] | NDArray[Any]  # labels, scores or 0/1 verdicts

# The verdict thresholds documented in docs/judges.md: "good" at or above.
DEFAULT_THRESHOLDS = {"faithfulness": 1.0, "context_relevancy": 1e-9, "answer_relevancy": 0.5}


def plain(value: float) -> str:
    """A number in plain decimals (0.000000001, never 1e-09), without trailing zeros."""
    from decimal import Decimal

    text = f"{Decimal(repr(float(value))):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def threshold_for(metric: str) -> float:
    return DEFAULT_THRESHOLDS.get(metric, 0.5)


def binary(labels: Values) -> NDArray[np.int_]:
    return (np.asarray(labels, dtype=float) >= 0.5).astype(int)


def auroc(labels: Values, scores: Values) -> float | None:
    """P(score of a random good item > score of a random bad one), ties half; None with one class."""
    y = binary(labels)
    s = np.asarray(scores, dtype=float)
    positives = int(y.sum())
    negatives = len(y) - positives
    if not positives or not negatives:
        return None
    ranks = rankdata(s)  # average ranks: ties count half (Mann-Whitney U)
    u = ranks[y == 1].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def balanced_accuracy(labels: Values, predicted: Values) -> float | None:
    """Mean of the recall of each class; None when a class is missing (empty input included)."""
    y = binary(labels)
    p = np.asarray(predicted, dtype=int)
    if y.all() or not y.any():
        return None
    return float((p[y == 1].mean() + (1 - p[y == 0]).mean()) / 2)


def problem_f1(labels: Values, predicted: Values) -> float | None:
    """F1 of the problem class (label 0: unfaithful, irrelevant) — RAGTruth's hallucination F1.

    None when there is no problem among the labels and none is predicted (empty input included)."""
    y = binary(labels)
    p = np.asarray(predicted, dtype=int)
    tp = int(((y == 0) & (p == 0)).sum())
    fp = int(((y == 1) & (p == 0)).sum())
    fn = int(((y == 0) & (p == 1)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


def brier(labels: Values, probabilities: Values) -> float:
    y = np.asarray(labels, dtype=float)
    return float(np.mean((np.asarray(probabilities, dtype=float) - y) ** 2))


def expected_calibration_error(labels: Values, probabilities: Values, bins: int = 10) -> float:
    """Σ over equal-width bins of |mean label − mean probability| weighted by the bin's share."""
    y = np.asarray(labels, dtype=float)
    p = np.asarray(probabilities, dtype=float)
    index = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.mean() * abs(y[inside].mean() - p[inside].mean())
    return float(total)


@dataclass(frozen=True, slots=True)
class Judged:
    """A labelled case as a judge scored it: the metric's value (None when undefined: no claim, so
    nothing unsupported or off-topic) and the judge's graded score (None when it gives none)."""

    metric: str
    label: int  # 1 = faithful / relevant
    value: float | None
    graded: float | None


@dataclass(frozen=True, slots=True)
class AgreementRow:
    """One line of a judge's agreement table on a labelled set: AUROC of the metric value and of
    the graded score (None unless every case has one), balanced accuracy at the documented
    threshold, and for faithfulness the hallucination F1 (the problem class: unfaithful)."""

    data: str
    metric: str
    items: int
    positives: int
    auroc: float | None
    graded_auroc: float | None
    balanced_accuracy: float | None
    hallucination_f1: float | None


def agreement_table(data: str, judged: Sequence[Judged]) -> list[AgreementRow]:
    """A row per metric of DEFAULT_THRESHOLDS that the set labels, in that order: the table of
    benchmarks/judge_agreement.py, whose levels the tests pin on the shared samples."""
    rows = []
    for metric, threshold in DEFAULT_THRESHOLDS.items():
        cases = [j for j in judged if j.metric == metric]
        if not cases:
            continue
        labels = [j.label for j in cases]
        # An undefined value counts as good: a response without claims has nothing unsupported.
        values = [1.0 if j.value is None else j.value for j in cases]
        graded = [j.graded for j in cases]
        predicted = [int(v >= threshold) for v in values]
        rows.append(
            AgreementRow(
                data=data,
                metric=metric,
                items=len(cases),
                positives=sum(labels),
                auroc=auroc(labels, values),
                graded_auroc=auroc(labels, [g for g in graded if g is not None])
                if all(g is not None for g in graded)
                else None,
                balanced_accuracy=balanced_accuracy(labels, predicted),
                hallucination_f1=problem_f1(labels, predicted) if metric == "faithfulness" else None,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Interval:
    value: float | None
    low: float | None
    high: float | None


def bootstrap(
    statistic: Callable[[Array, Array], float | None],
    labels: Array,
    scores: Array,
    *,
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Interval:
    """The statistic and its percentile bootstrap interval (resamples where it is undefined are dropped)."""
    value = statistic(labels, scores)
    if value is None:
        return Interval(None, None, None)
    rng = np.random.default_rng(seed)
    n = len(labels)
    draws = []
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        found = statistic(labels[pick], scores[pick])
        if found is not None:
            draws.append(found)
    if len(draws) < resamples // 2:
        return Interval(value, None, None)  # too few defined resamples to say anything
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return Interval(value, float(low), float(high))


Item = TypeVar("Item")


def grouped_bootstrap(
    statistic: Callable[[list[Item]], float | None],
    groups: Sequence[Sequence[Item]],
    *,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Interval:
    """The statistic over every item and its percentile bootstrap interval, resampling whole groups.

    Items of one group are not independent (the responses to one question are judged against the
    same passages), so a resample draws `len(groups)` groups with replacement and pools their
    items. The bounds are the order statistics at `alpha / 2` and `1 - alpha / 2` of the defined
    draws (a resample where the statistic is None is dropped). No groups, or a statistic that is
    undefined on the pooled items, give Interval(None, None, None); no defined draw gives
    Interval(value, None, None). Never 0 for "undefined".
    """
    value = statistic([item for group in groups for item in group])
    if not groups or value is None:
        return Interval(None, None, None)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        picked = [item for group in rng.choices(groups, k=len(groups)) for item in group]
        found = statistic(picked)
        if found is not None:
            draws.append(found)
    if not draws:
        return Interval(value, None, None)
    draws.sort()
    return Interval(value, draws[int(alpha / 2 * len(draws))], draws[int((1 - alpha / 2) * len(draws)) - 1])


@dataclass(frozen=True, slots=True)
class Agreement:
    """A judge against human labels on one metric."""

    metric: str
    items: int
    positives: int  # labels >= 0.5 (good)
    threshold: float
    auroc: Interval
    balanced_accuracy: Interval
    problem_f1: Interval
    brier: float
    ece: float

    def as_dict(self) -> dict[str, object]:
        def interval(i: Interval) -> dict[str, float | None]:
            return {"value": i.value, "low": i.low, "high": i.high}

        return {
            "metric": self.metric,
            "items": self.items,
            "positives": self.positives,
            "threshold": self.threshold,
            "auroc": interval(self.auroc),
            "balanced_accuracy": interval(self.balanced_accuracy),
            "problem_f1": interval(self.problem_f1),
            "brier": self.brier,
            "ece": self.ece,
        }


def agreement(
    metric: str,
    labels: Sequence[float],
    scores: Sequence[float],
    *,
    threshold: float | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """Agreement of raw judge scores with labels; `threshold` defaults to the documented one."""
    y = np.asarray(labels, dtype=float)
    s = np.asarray(scores, dtype=float)
    if len(y) != len(s) or not len(y):
        raise ValueError("labels and scores must be non-empty and of the same length")
    cut = threshold_for(metric) if threshold is None else threshold

    def predicted(values: Array) -> NDArray[np.int_]:
        return (values >= cut).astype(int)

    return Agreement(
        metric=metric,
        items=len(y),
        positives=int(binary(y).sum()),
        threshold=cut,
        auroc=bootstrap(auroc, y, s, resamples=resamples, seed=seed),
        balanced_accuracy=bootstrap(
            lambda a, b: balanced_accuracy(a, predicted(b)), y, s, resamples=resamples, seed=seed
        ),
        problem_f1=bootstrap(lambda a, b: problem_f1(a, predicted(b)), y, s, resamples=resamples, seed=seed),
        brier=brier(binary(y), np.clip(s, 0.0, 1.0)),
        ece=expected_calibration_error(binary(y), np.clip(s, 0.0, 1.0)),
    )
