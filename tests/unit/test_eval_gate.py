"""The quality gate's checks (agent.offline.gate): one line each, a missing score never a pass,
"worse" only when the paired interval excludes 0."""

from __future__ import annotations

import pytest

from agent.offline.gate import CI_LOW, Threshold, check_gate_metrics, check_not_worse, check_threshold
from agent.offline.run import UnknownMetric
from agent.offline.summary import NO_DIFFERENCE, WORSE, MetricComparison, MetricSummary


def summary(
    mean: float | None, low: float | None = None, high: float | None = None, **kw: int
) -> MetricSummary:
    count = kw.get("count", 10 if mean is not None else 0)
    return MetricSummary("faithfulness", mean, count, kw.get("undefined", 0), kw.get("errors", 0), low, high)


def test_a_threshold_compares_the_mean_and_names_mean_ci_and_threshold() -> None:
    failed = check_threshold(summary(0.612, 0.54, 0.69), Threshold("faithfulness", 0.8))
    assert not failed.passed
    assert (
        failed.line
        == "faithfulness: mean 0.612 is under the threshold 0.800 (95% CI 0.540 – 0.690, 10 scores)"
    )
    passed = check_threshold(summary(0.8, 0.7, 0.9), Threshold("faithfulness", 0.8))
    assert passed.passed and "mean 0.800 meets the threshold 0.800" in passed.line


def test_on_the_ci_a_mean_above_the_threshold_can_fail() -> None:
    s = summary(0.85, 0.78, 0.91)
    assert check_threshold(s, Threshold("faithfulness", 0.8)).passed
    strict = check_threshold(s, Threshold("faithfulness", 0.8, CI_LOW))
    assert not strict.passed
    assert strict.line.startswith("faithfulness: 95% CI lower bound 0.780 is under the threshold 0.800")
    one_score = check_threshold(summary(0.9, count=1), Threshold("faithfulness", 0.5, CI_LOW))
    assert not one_score.passed and "no 95% CI (1 score; needs 2)" in one_score.line


def test_no_defined_score_fails_the_gate_and_says_so() -> None:
    none = check_threshold(summary(None, undefined=4, errors=1), Threshold("faithfulness", 0.1))
    assert not none.passed
    assert none.line == (
        "faithfulness: no defined score (4 of 4 items undefined, 1 of them judge errors); "
        "threshold 0.100 not met"
    )
    missing = check_threshold(None, Threshold("context_recall", 0.5))
    assert not missing.passed and "context_recall: not scored" in missing.line


@pytest.mark.parametrize(
    "text", ["faithfulness", "faithfulness=", "faithfulness=high", "=0.8", "faithfulness=1.5"]
)
def test_a_threshold_is_metric_equals_a_share(text: str) -> None:
    with pytest.raises(ValueError, match="expects METRIC=MIN"):
        Threshold.parse(text)
    assert Threshold.parse(" faithfulness = 0.8") == Threshold("faithfulness", 0.8)


def test_gate_metrics_are_checked_with_a_suggestion() -> None:
    with pytest.raises(UnknownMetric, match=r"unknown metric 'faithfulnes': did you mean faithfulness\?"):
        check_gate_metrics([Threshold("faithfulnes", 0.8)], [], k=5)
    with pytest.raises(UnknownMetric, match="did you mean context_precision"):
        check_gate_metrics([], ["context_precison"], k=5)
    with pytest.raises(ValueError, match="ragchecker_hallucination: lower is better"):
        check_gate_metrics([Threshold("ragchecker_hallucination", 0.2)], [], k=5)
    check_gate_metrics([Threshold("ndcg_at_10", 0.5)], ["ragchecker_hallucination"], k=10)


def comparison(
    difference: float, low: float, high: float, verdict: str, higher: bool = True
) -> MetricComparison:
    return MetricComparison("faithfulness", 20, 0.9, 0.9 + difference, difference, low, high, verdict, higher)


def test_worse_fails_only_when_the_interval_excludes_zero() -> None:
    significant = check_not_worse(comparison(-0.3, -0.4, -0.2, WORSE), "faithfulness")
    assert not significant.passed
    assert significant.line == (
        "faithfulness: B is worse than A (B − A -0.300, 95% CI -0.400 – -0.200, 20 pairs: "
        "the interval excludes 0)"
    )
    noise = check_not_worse(comparison(-0.05, -0.15, 0.0, NO_DIFFERENCE), "faithfulness")
    assert noise.passed and "worse than A's but not significant" in noise.line
    better = check_not_worse(comparison(0.05, -0.01, 0.1, NO_DIFFERENCE), "faithfulness")
    assert better.passed and "B is not worse than A" in better.line
    # Lower is better: a rise is the worse direction.
    rise = check_not_worse(comparison(0.05, -0.01, 0.1, NO_DIFFERENCE, higher=False), "faithfulness")
    assert rise.passed and "not significant" in rise.line
    nothing = check_not_worse(None, "faithfulness")
    assert not nothing.passed and "cannot tell" in nothing.line


def test_assert_quality_raises_the_gate_lines_and_refuses_what_it_cannot_check() -> None:
    from agent.offline.run import EvalResults
    from agent.offline.summary import JudgeUsage
    from agent.quality import assert_quality

    results = EvalResults(
        (), (), (), (summary(0.612, 0.54, 0.69),), JudgeUsage(), "lexical", ("faithfulness",)
    )
    with pytest.raises(AssertionError) as failed:
        assert_quality(results, faithfulness=0.8)
    assert str(failed.value) == (
        "quality gate failed:\n"
        "  faithfulness: mean 0.612 is under the threshold 0.800 (95% CI 0.540 – 0.690, 10 scores)"
    )
    assert_quality(results, faithfulness=0.6)
    with pytest.raises(AssertionError, match=r"95% CI lower bound 0\.540 is under the threshold 0\.600"):
        assert_quality(results, on="ci_low", faithfulness=0.6)
    with pytest.raises(UnknownMetric, match="did you mean faithfulness"):
        assert_quality(results, faithfulnes=0.6)
    with pytest.raises(ValueError, match="at least one metric"):
        assert_quality(results)
    with pytest.raises(ValueError, match="between 0 and 1"):
        assert_quality(results, faithfulness=80)
