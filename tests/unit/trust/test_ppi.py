"""Prediction-powered inference: the formulas, and coverage in a seeded simulation with a biased judge."""

from __future__ import annotations

import math
import random
from statistics import NormalDist, fmean, pvariance, variance

import pytest

from agent.model import MetricResult
from agent.trust.label_sampling import LabelSampler
from agent.trust.ppi import JudgedMoments, LabelledMoments, judge_mean, ppi_mean, ppi_mean_ci

Z = NormalDist().inv_cdf(0.975)


def test_ppi_estimate_is_judge_mean_plus_rectifier_with_the_clt_interval() -> None:
    labels = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    labelled_scores = [0.9, 0.4, 0.8, 0.95, 0.6, 0.7]
    all_scores = [*labelled_scores, 0.85, 0.9, 0.3, 0.75, 0.8, 0.65, 0.9, 0.95]
    estimate = ppi_mean_ci(labels, labelled_scores, all_scores, tuning="ppi")
    assert estimate is not None
    rectifier = [y - s for y, s in zip(labels, labelled_scores, strict=True)]
    mean = fmean(all_scores) + fmean(rectifier)
    sd = math.sqrt(pvariance(all_scores) / len(all_scores) + variance(rectifier) / len(rectifier))
    assert estimate.lam == 1.0
    assert estimate.mean == pytest.approx(mean)
    assert estimate.low == pytest.approx(mean - Z * sd)
    assert estimate.high == pytest.approx(min(1.0, mean + Z * sd))
    assert (estimate.labelled, estimate.judged) == (6, 14)


def test_labels_only_is_the_classical_interval() -> None:
    labels = [0.2, 0.9, 0.4, 0.6, 0.8]
    estimate = ppi_mean_ci(labels, [0.5] * 5, [0.1, 0.9] * 50, tuning="labels")
    assert estimate is not None and estimate.lam == 0.0
    half = Z * math.sqrt(variance(labels) / len(labels))
    assert estimate.mean == pytest.approx(fmean(labels))
    assert (estimate.low, estimate.high) == pytest.approx((fmean(labels) - half, fmean(labels) + half))


def test_tuned_lambda_ignores_a_useless_judge_and_trusts_a_perfect_one() -> None:
    rng = random.Random(5)
    truth = [rng.random() for _ in range(2000)]
    noise = [rng.random() for _ in range(2000)]  # unrelated to the truth
    useless = ppi_mean_ci(truth[:100], noise[:100], noise, tuning="ppi++")
    labels_only = ppi_mean_ci(truth[:100], noise[:100], noise, tuning="labels")
    assert useless is not None and labels_only is not None
    assert useless.lam < 0.3
    assert useless.width <= labels_only.width * 1.02
    perfect = ppi_mean_ci(truth[:100], truth[:100], truth, tuning="ppi++")
    assert perfect is not None and perfect.lam > 0.9
    assert perfect.width < labels_only.width / 3


def test_undefined_without_two_labels() -> None:
    assert ppi_mean_ci([1.0], [0.5], [0.5, 0.6]) is None
    assert ppi_mean_ci([], [], [0.5, 0.6]) is None
    assert judge_mean(JudgedMoments()) is None
    with pytest.raises(ValueError):
        ppi_mean_ci([1.0, 0.0], [0.5], [0.5])
    with pytest.raises(ValueError):
        LabelledMoments().add(1.0, 0.5, weight=0.0)


def test_moments_merge_like_one_pass() -> None:
    a, b, whole = JudgedMoments(), JudgedMoments(), JudgedMoments()
    la, lb, lwhole = LabelledMoments(), LabelledMoments(), LabelledMoments()
    for i in range(50):
        score, label, weight = (i % 7) / 7, float(i % 3 == 0), 1.0 + (i % 4)
        (a if i < 20 else b).add(score)
        whole.add(score)
        (la if i < 20 else lb).add(label, score, weight)
        lwhole.add(label, score, weight)
    a.merge(b)
    la.merge(lb)
    merged, direct = ppi_mean(a, la), ppi_mean(whole, lwhole)
    assert merged is not None and direct is not None
    assert (merged.mean, merged.low, merged.high) == pytest.approx((direct.mean, direct.low, direct.high))


def test_label_draw_is_uniform_deterministic_and_oversamples_the_uncertain_band() -> None:
    sampler = LabelSampler(fraction=0.1, oversample=3.0, uncertain_band=(0.3, 0.7))
    confident = [MetricResult.ok("faithfulness", 0.95, judge="test")]
    uncertain = [MetricResult.ok("faithfulness", 0.5, judge="test"), MetricResult.skipped("x", "no chunks")]
    ids = [f"{i:032x}:{i:016x}" for i in range(20000)]
    drawn = [sampler.decide(i, confident) for i in ids]
    assert sum(d.requested for d in drawn) / len(ids) == pytest.approx(0.1, abs=0.008)
    assert {round(d.weight, 9) for d in drawn} == {10.0}
    assert drawn == [sampler.decide(i, confident) for i in ids]  # same answer on every replica
    oversampled = [sampler.decide(i, uncertain) for i in ids]
    assert sum(d.requested for d in oversampled) / len(ids) == pytest.approx(0.3, abs=0.012)
    assert {(d.reason, round(d.weight, 4)) for d in oversampled} == {("low_confidence", 3.3333)}
    # Whatever is drawn at the low rate is drawn at the higher one too (one uniform per id).
    assert all(o.requested for d, o in zip(drawn, oversampled, strict=True) if d.requested)
    assert not sampler.decide(ids[0], [MetricResult.skipped("faithfulness", "no claims")]).requested
    marks = next(d for d in oversampled if d.requested).attributes()
    assert marks == {
        "ragpulse.label.requested": True,
        "ragpulse.label.weight": 3.333333,
        "ragpulse.label.reason": "low_confidence",
    }


def test_oversampled_low_confidence_labels_are_reweighted_without_bias() -> None:
    """Low-confidence verdicts drawn 4x as often: weighted PPI covers, the unweighted one does not."""
    import numpy as np

    sampler = LabelSampler(fraction=0.04, oversample=4.0, uncertain_band=(0.3, 0.7))
    uncertain_p, _ = sampler.probability([MetricResult.ok("faithfulness", 0.5, judge="test")])
    confident_p, _ = sampler.probability([MetricResult.ok("faithfulness", 0.95, judge="test")])
    assert (uncertain_p, confident_p) == (pytest.approx(0.16), 0.04)
    rng = np.random.default_rng(11)
    # The judge is right when confident (0.05 / 0.95) and wrong half the time in its uncertain band.
    truth = 0.4 * 0.35 + 0.6 * 0.5  # P(good)
    covered = covered_unweighted = 0
    windows, size = 1000, 3000
    for _ in range(windows):
        uncertain = rng.random(size) < 0.4
        score = np.where(uncertain, rng.uniform(0.3, 0.7, size), rng.choice([0.05, 0.95], size))
        good = rng.random(size) < np.where(uncertain, 0.35, score)
        probability = np.where(uncertain, uncertain_p, confident_p)
        drawn = rng.random(size) < probability
        judged = JudgedMoments.from_sums(size, score.sum(), np.square(score).sum())
        weighted, unweighted = LabelledMoments(), LabelledMoments()
        for label, s, p in zip(
            good[drawn].tolist(), score[drawn].tolist(), probability[drawn].tolist(), strict=True
        ):
            weighted.add(float(label), s, 1 / p)
            unweighted.add(float(label), s, 1.0)
        estimate = ppi_mean(judged, weighted, tuning="ppi")
        naive = ppi_mean(judged, unweighted, tuning="ppi")
        assert estimate is not None and naive is not None
        covered += estimate.low <= truth <= estimate.high
        covered_unweighted += naive.low <= truth <= naive.high
    assert 0.93 <= covered / windows <= 0.97
    assert covered_unweighted / windows < 0.8
