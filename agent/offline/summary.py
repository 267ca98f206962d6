"""Aggregate item scores: per metric the mean with a 95% bootstrap interval, and A/B comparisons.

Intervals are bootstrap intervals of the mean: BCa (bias-corrected and accelerated, Efron 1987,
as `scipy.stats.bootstrap` computes it), falling back to the percentile method when BCa is
undefined (e.g. when every resample falls on one side of the mean). They are computed here with
numpy alone: the mean's jackknife has a closed form, and importing scipy.stats would cost more
than the whole computation. A metric's undefined values (None) are counted, never
averaged as 0. The per-metric summary is one dataclass and `summary.json` is written by one
function, so further estimators (e.g. prediction-powered intervals from human labels) add fields
and a writer argument, not a new format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from agent.offline.evaluate import LOWER_IS_BETTER, ItemResult, VerdictDetail, verdict_details

CONFIDENCE = 0.95
RESAMPLES = 2000
WEAKEST_SHOWN = 10  # items in the report's and summary.json's weakest
SEED = 20240601  # fixed so that a report is reproducible


def bootstrap_mean_ci(
    values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float] | None:
    """Bootstrap confidence interval of the mean (BCa, else percentile); None with fewer than two
    values. The interval need not contain the mean: BCa shifts it towards where a skewed
    distribution's mean tends to lie."""
    if len(values) < 2:
        return None
    data = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(data)):
        return None
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])  # every resample has the same mean
    n = len(data)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    alpha = (1 - confidence) / 2
    quantiles = _bca_quantiles(data, means, alpha)
    if quantiles is None:
        quantiles = (alpha, 1 - alpha)  # percentile method
    low, high = np.quantile(means, quantiles)
    return float(low), float(high)


def _bca_quantiles(data: np.ndarray, means: np.ndarray, alpha: float) -> tuple[float, float] | None:
    """The BCa interval's ends as quantiles of the resampled means; None where BCa is undefined."""
    normal = NormalDist()
    observed = float(data.mean())
    # Bias correction: where the observed mean lies among the resampled ones (ties count half).
    share = (np.count_nonzero(means < observed) + np.count_nonzero(means <= observed)) / (2 * len(means))
    if not 0 < share < 1:
        return None
    z0 = normal.inv_cdf(share)
    # Acceleration from the jackknife means (leave-one-out), in closed form for the mean.
    jackknife = (data.sum() - data) / (len(data) - 1)
    deviations = jackknife.mean() - jackknife
    spread = float(np.sum(deviations**2))
    if spread == 0:
        return None
    acceleration = float(np.sum(deviations**3)) / (6 * spread**1.5)
    ends = []
    for z in (normal.inv_cdf(alpha), normal.inv_cdf(1 - alpha)):
        denominator = 1 - acceleration * (z0 + z)
        if denominator <= 0:
            return None
        ends.append(normal.cdf(z0 + (z0 + z) / denominator))
    low, high = ends
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


@dataclass(frozen=True)
class MetricSummary:
    """One metric over an evaluation set."""

    metric: str
    mean: float | None
    count: int  # items with a defined score
    undefined: int  # items where the score is undefined (None), errors included
    errors: int  # of which: judge failures
    ci_low: float | None
    ci_high: float | None
    higher_is_better: bool = True


def summarise(results: Sequence[ItemResult], metrics: Sequence[str]) -> list[MetricSummary]:
    summaries = []
    for metric in metrics:
        values = [v for r in results if (v := r.scores.get(metric)) is not None]
        errors = sum(1 for r in results if metric in r.errors)
        ci = bootstrap_mean_ci(values)
        summaries.append(
            MetricSummary(
                metric=metric,
                mean=float(np.mean(values)) if values else None,
                count=len(values),
                undefined=len(results) - len(values),
                errors=errors,
                ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None,
                higher_is_better=metric not in LOWER_IS_BETTER,
            )
        )
    return summaries


def write_summary(
    path: Path,
    summaries: Sequence[MetricSummary],
    *,
    items: int,
    bad_lines: int,
    judge: str,
    source: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write summary.json: run facts and one object per metric (MetricSummary's fields)."""
    document = summary_document(
        summaries, items=items, bad_lines=bad_lines, judge=judge, source=source, extra=extra
    )
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document


def summary_document(
    summaries: Sequence[MetricSummary],
    *,
    items: int,
    bad_lines: int,
    judge: str,
    source: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What summary.json holds."""
    document: dict[str, Any] = {
        "source": source,
        "items": items,
        "bad_lines": bad_lines,
        "judge": judge,
        "confidence": CONFIDENCE,
        "metrics": {s.metric: _rounded(asdict(s)) for s in summaries},
        **(extra or {}),
    }
    return document


def weakest(
    results: Sequence[ItemResult], metrics: Sequence[str], n: int = WEAKEST_SHOWN
) -> list[ItemResult]:
    """Items with the lowest mean of their defined scores (lower-is-better metrics left out)."""
    ranked = []
    for r in results:
        values = [v for m in metrics if m not in LOWER_IS_BETTER and (v := r.scores.get(m)) is not None]
        if values:
            ranked.append((sum(values) / len(values), r.item.line, r))
    return [r for _, _, r in sorted(ranked, key=lambda t: (t[0], t[1]))[:n]]


def weakest_document(
    results: Sequence[ItemResult], metrics: Sequence[str], judge: str
) -> list[dict[str, Any]]:
    """summary.json's `weakest`: the items the report lists as weakest, with their defined scores
    and the judge's verdicts obtained while scoring them (built-in questions and criteria)."""
    return [
        {
            "id": r.item.id,
            "line": r.item.line,
            "scores": {
                m: round(v, 6) for m in metrics if (v := r.scores.get(m)) is not None and math.isfinite(v)
            },
            "verdicts": [_verdict_json(d) for d in verdict_details(r, judge)],
        }
        for r in weakest(results, metrics)
    ]


def _verdict_json(detail: VerdictDetail) -> dict[str, Any]:
    found: dict[str, Any] = {
        "question": detail.question,
        "about": detail.subject,
        "verdict": detail.answer or ("yes" if detail.value else "no"),
        "passes": detail.value,
        "score": None if detail.score is None else round(detail.score, 6),
    }
    if detail.reason:
        found["reason"] = detail.reason
    return found


def _rounded(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in values.items() if k != "metric"}


# -- A/B comparison --------------------------------------------------------------------------------

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no detectable difference"


@dataclass(frozen=True)
class MetricComparison:
    """B minus A on the items both scored; the verdict says how B compares with A."""

    metric: str
    pairs: int
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    higher_is_better: bool = True


def pair_results(
    a: Sequence[ItemResult], b: Sequence[ItemResult]
) -> tuple[list[tuple[ItemResult, ItemResult]], str]:
    """Pairs of results for the same question: by `id` when both files give ids that match, else
    by question text. Returns the pairs and what they were paired by."""
    by_id = {r.item.id: r for r in b}
    pairs = [(r, by_id[r.item.id]) for r in a if r.item.id in by_id]
    explicit_ids = all(r.item.id_given for r in (*a, *b))
    if explicit_ids and pairs:
        return pairs, "id"
    by_question = {r.item.question.strip(): r for r in b}
    pairs = [(r, by_question[q]) for r in a if (q := r.item.question.strip()) in by_question]
    return pairs, "question"


def compare(pairs: Sequence[tuple[ItemResult, ItemResult]], metrics: Sequence[str]) -> list[MetricComparison]:
    comparisons = []
    for metric in metrics:
        both = [
            (va, vb)
            for ra, rb in pairs
            if (va := ra.scores.get(metric)) is not None and (vb := rb.scores.get(metric)) is not None
        ]
        higher = metric not in LOWER_IS_BETTER
        if not both:
            comparisons.append(
                MetricComparison(metric, 0, None, None, None, None, None, NO_DIFFERENCE, higher)
            )
            continue
        differences = [vb - va for va, vb in both]
        # Resampling the paired differences is the paired bootstrap: a pair stays together.
        ci = bootstrap_mean_ci(differences)
        verdict = NO_DIFFERENCE
        if ci is not None and (ci[0] > 0 or ci[1] < 0):
            improved = (ci[0] > 0) == higher
            verdict = BETTER if improved else WORSE
        comparisons.append(
            MetricComparison(
                metric=metric,
                pairs=len(both),
                mean_a=float(np.mean([va for va, _ in both])),
                mean_b=float(np.mean([vb for _, vb in both])),
                mean_difference=float(np.mean(differences)),
                ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None,
                verdict=verdict,
                higher_is_better=higher,
            )
        )
    return comparisons


def write_comparison(
    path: Path, comparisons: Sequence[MetricComparison], *, a: str, b: str, paired_by: str, pairs: int
) -> dict[str, Any]:
    document = {
        "a": a,
        "b": b,
        "paired_by": paired_by,
        "pairs": pairs,
        "confidence": CONFIDENCE,
        "verdicts_describe": "b compared with a",
        "metrics": {c.metric: _rounded(asdict(c)) for c in comparisons},
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document


@dataclass(frozen=True)
class ItemChange:
    """One question scored in A and in B: `change` is the mean of B − A over the metrics both
    scored, signed so that a positive change is an improvement (lower-is-better metrics flip)."""

    a: ItemResult
    b: ItemResult
    change: float
    metrics: tuple[str, ...]


def item_changes(
    pairs: Sequence[tuple[ItemResult, ItemResult]], metrics: Sequence[str], n: int = 10
) -> tuple[list[ItemChange], list[ItemChange]]:
    """The `n` items that got most worse from A to B, and the `n` that got most better (the
    items an A/B decision turns on); unchanged items are in neither list."""
    changes = []
    for a, b in pairs:
        both = [m for m in metrics if a.scores.get(m) is not None and b.scores.get(m) is not None]
        if not both:
            continue
        signed = [
            (b.scores[m] - a.scores[m]) * (-1 if m in LOWER_IS_BETTER else 1)  # type: ignore[operator]
            for m in both
        ]
        changes.append(ItemChange(a, b, math.fsum(signed) / len(signed), tuple(both)))
    worse = sorted((c for c in changes if c.change < -1e-9), key=lambda c: (c.change, c.a.item.line))
    better = sorted((c for c in changes if c.change > 1e-9), key=lambda c: (-c.change, c.a.item.line))
    return worse[:n], better[:n]


@dataclass(frozen=True)
class JudgeUsage:
    """What scoring cost: judge questions asked (`calls`, of which `failed`), tokens, and USD as
    litellm prices it (None when it has no price for any call; `unpriced_calls` counts those)."""

    calls: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    unpriced_calls: int = 0

    def minus(self, before: JudgeUsage) -> JudgeUsage:
        """This total less an earlier one (the share of one file of a comparison)."""
        cost = None
        if self.cost_usd is not None:
            cost = self.cost_usd - (before.cost_usd or 0.0)
        return JudgeUsage(
            self.calls - before.calls,
            self.failed - before.failed,
            self.prompt_tokens - before.prompt_tokens,
            self.completion_tokens - before.completion_tokens,
            cost,
            self.unpriced_calls - before.unpriced_calls,
        )

    def describe(self, judge: str) -> str:
        """One line for the terminal."""
        if self.calls == 0:
            return f"judge {judge}: no calls"
        tokens = self.prompt_tokens + self.completion_tokens
        if not tokens:
            cost = "no tokens (a local judge)"
        elif self.cost_usd is None or (self.unpriced_calls and not self.cost_usd):
            cost = "cost unknown (litellm has no price for this model)"
        else:
            unpriced = f" ({self.unpriced_calls} calls unpriced)" if self.unpriced_calls else ""
            cost = f"${self.cost_usd:.4f}{unpriced}"
        return (
            f"judge {judge}: {self.calls} calls ({self.failed} failed), "
            f"{self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens, {cost}"
        )

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}
