"""The quality gate: thresholds on an evaluation's summary, and "B is not worse than A".

Each check gives one line, the same whether `ragpulse eval` prints it or `assert_quality`
raises it. A threshold compares the mean (what DeepEval-style thresholds compare) or, when asked,
the lower bound of the mean's 95% interval (a stricter gate: it fails unless the set shows the
mean is at least the threshold). A metric with no defined score fails the gate: no evidence is
not a pass. "Worse" is the comparison's verdict: the paired-bootstrap interval of B − A lies on
the bad side of 0 (direction flipped for lower-is-better metrics); a worse mean whose interval
contains 0 passes, and its line says "not significant".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.model import Criterion
from agent.offline.evaluate import LOWER_IS_BETTER
from agent.offline.run import check_metric_names
from agent.offline.summary import WORSE, MetricComparison, MetricSummary

MEAN, CI_LOW = "mean", "ci_low"


@dataclass(frozen=True)
class Threshold:
    """`metric` must reach `minimum` on its mean (`on=MEAN`) or its 95% CI's lower bound."""

    metric: str
    minimum: float
    on: str = MEAN

    @classmethod
    def parse(cls, text: str, on: str = MEAN) -> Threshold:
        """`METRIC=MIN`, e.g. `faithfulness=0.8`; ValueError with a readable reason otherwise."""
        name, sep, value = text.partition("=")
        try:
            minimum = float(value)
        except ValueError:
            minimum = float("nan")
        if not sep or not name.strip() or not 0.0 <= minimum <= 1.0:
            raise ValueError(
                f"expects METRIC=MIN with MIN between 0 and 1, e.g. faithfulness=0.8; got {text!r}"
            )
        return cls(name.strip(), minimum, on)


@dataclass(frozen=True)
class GateCheck:
    """One check of the gate and its line."""

    metric: str
    passed: bool
    line: str


def _ci(low: float | None, high: float | None, signed: bool = False) -> str:
    if low is None or high is None:
        return "no 95% CI"
    form = "{:+.3f}" if signed else "{:.3f}"
    return f"95% CI {form.format(low)} – {form.format(high)}"


def check_threshold(summary: MetricSummary | None, threshold: Threshold) -> GateCheck:
    name, minimum = threshold.metric, threshold.minimum
    if summary is None:
        return GateCheck(
            name, False,
            f"{name}: not scored (no item carries its inputs, or it is not among the metrics scored); "
            f"threshold {minimum:.3f} not met",
        )  # fmt: skip
    if summary.mean is None:
        total = summary.count + summary.undefined
        errors = f", {summary.errors} of them judge errors" if summary.errors else ""
        return GateCheck(
            name, False,
            f"{name}: no defined score ({summary.undefined} of {total} items undefined{errors}); "
            f"threshold {minimum:.3f} not met",
        )  # fmt: skip
    scores = f"{summary.count} score{'s' if summary.count != 1 else ''}"
    ci = _ci(summary.ci_low, summary.ci_high)
    if threshold.on == CI_LOW:
        if summary.ci_low is None:
            return GateCheck(
                name, False,
                f"{name}: mean {summary.mean:.3f}, no 95% CI ({scores}; needs 2); threshold {minimum:.3f} "
                "on the CI's lower bound not met",
            )  # fmt: skip
        passed = summary.ci_low >= minimum
        verb = "meets" if passed else "is under"
        return GateCheck(
            name, passed,
            f"{name}: 95% CI lower bound {summary.ci_low:.3f} {verb} the threshold {minimum:.3f} "
            f"(mean {summary.mean:.3f}, {ci}, {scores})",
        )  # fmt: skip
    passed = summary.mean >= minimum
    verb = "meets" if passed else "is under"
    return GateCheck(
        name, passed, f"{name}: mean {summary.mean:.3f} {verb} the threshold {minimum:.3f} ({ci}, {scores})"
    )


def check_thresholds(summaries: Iterable[MetricSummary], thresholds: Sequence[Threshold]) -> list[GateCheck]:
    by_metric = {s.metric: s for s in summaries}
    return [check_threshold(by_metric.get(t.metric), t) for t in thresholds]


def check_not_worse(comparison: MetricComparison | None, metric: str) -> GateCheck:
    """Fails only when B is worse than A with the paired interval of B − A excluding 0."""
    if comparison is None or comparison.mean_difference is None:
        return GateCheck(
            metric, False, f"{metric}: no pair with both scores defined; cannot tell whether B is worse"
        )
    c = comparison
    difference = c.mean_difference or 0.0
    ci = _ci(c.ci_low, c.ci_high, signed=True)
    facts = f"B − A {difference:+.3f}, {ci}, {c.pairs} pairs"
    if c.verdict == WORSE:
        return GateCheck(metric, False, f"{metric}: B is worse than A ({facts}: the interval excludes 0)")
    worse_mean = difference < 0 if c.higher_is_better else difference > 0
    if worse_mean:
        return GateCheck(metric, True, f"{metric}: B's mean is worse than A's but not significant ({facts})")
    return GateCheck(metric, True, f"{metric}: B is not worse than A ({facts})")


def check_comparisons(comparisons: Iterable[MetricComparison], metrics: Sequence[str]) -> list[GateCheck]:
    by_metric = {c.metric: c for c in comparisons}
    return [check_not_worse(by_metric.get(m), m) for m in metrics]


def failure_message(checks: Sequence[GateCheck]) -> str:
    """The AssertionError's text: one line per failed check."""
    failed = [c.line for c in checks if not c.passed]
    return "quality gate failed:\n" + "\n".join(f"  {line}" for line in failed)


def check_gate_metrics(
    thresholds: Sequence[Threshold], worse: Sequence[str], k: int, criteria: Sequence[Criterion] = ()
) -> None:
    """Raises ValueError (UnknownMetric for a typo, with a suggestion) for a metric the gate
    cannot check: unknown (the custom `criteria` are known), or lower-is-better under a minimum."""
    check_metric_names([t.metric for t in thresholds], k, criteria=criteria)
    check_metric_names(worse, k, criteria=criteria)
    for t in thresholds:
        if t.metric in LOWER_IS_BETTER:
            raise ValueError(
                f"{t.metric}: lower is better, so a minimum cannot gate it (gate it as not worse)"
            )
