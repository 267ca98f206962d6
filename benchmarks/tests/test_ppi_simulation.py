"""benchmarks/ppi_simulation.py: the intervals of agent/trust/ppi.py cover the true mean with a biased
judge, as docs/trust.md quotes."""

from __future__ import annotations

import pytest

from benchmarks.ppi_simulation import TRUE_MEAN, simulate


def test_simulation_biased_judge_coverage_and_width() -> None:
    """1,000 windows of 5,000 judged interactions, 200 labels each, judge biased by +0.1."""
    summary = simulate(windows=1000, judged=5000, labels=200, seed=13)
    for name in ("ppi", "ppi++"):
        assert 0.93 <= summary[name].coverage <= 0.97, (name, summary[name])
        assert summary[name].mean_estimate == pytest.approx(TRUE_MEAN, abs=0.003)
    # The judge's own mean is off by ~0.08 with a tight interval: it almost never covers the truth.
    assert summary["judge"].coverage < 0.01
    assert summary["judge"].mean_estimate - TRUE_MEAN > 0.05
    assert summary["ppi"].mean_width < 0.75 * summary["labels"].mean_width
    assert summary["ppi++"].mean_width <= summary["ppi"].mean_width
    assert 0.93 <= summary["labels"].coverage <= 0.97


def test_simulation_binary_labels_still_cover() -> None:
    summary = simulate(windows=1000, judged=5000, labels=200, binary=True, seed=17)
    assert 0.93 <= summary["ppi++"].coverage <= 0.97
    assert summary["ppi++"].mean_width < summary["labels"].mean_width
    assert summary["judge"].coverage < 0.01
