"""Coverage and width of prediction-powered intervals with a deliberately biased judge.

    python benchmarks/ppi_simulation.py [--windows 1000] [--judged 5000] [--seed 13]

Each simulated window holds `judged` interactions with a true quality q ~ Beta(5, 2) (mean 5/7);
a human label is q itself ("graded": e.g. the share of supported claims) or a coin with
probability q ("binary"); the judge scores q + 0.1 + N(0, 0.1), clipped to [0, 1], so it
overstates quality by ~0.08 on average. A uniform random subset of `labels` interactions is
labelled. Per label count it prints, over all windows, how often each 95% interval covers the
true mean 5/7 and its mean width: PPI (λ = 1), PPI++ (λ tuned), labels only, and the judge's own
mean (naive). docs/trust.md quotes its output.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.trust.ppi import Estimate, JudgedMoments, LabelledMoments, judge_mean, ppi_mean
from benchmarks.harness import Benchmark, line

TRUE_MEAN = 5 / 7  # mean of Beta(5, 2)
ESTIMATORS = ("ppi", "ppi++", "labels", "judge")


@dataclass(frozen=True)
class Summary:
    estimator: str
    labels: int
    coverage: float
    mean_width: float
    mean_estimate: float


def simulate_window(
    rng: np.random.Generator, judged: int, labels: int, *, binary: bool, bias: float = 0.1, noise: float = 0.1
) -> dict[str, Estimate | None]:
    quality = rng.beta(5, 2, judged)
    scores = np.clip(quality + bias + rng.normal(0.0, noise, judged), 0.0, 1.0)
    truth = (rng.random(judged) < quality).astype(float) if binary else quality
    chosen = rng.choice(judged, size=labels, replace=False)
    all_judged = JudgedMoments.from_sums(judged, scores.sum(), np.square(scores).sum())
    labelled = LabelledMoments()
    for label, score in zip(truth[chosen].tolist(), scores[chosen].tolist(), strict=True):
        labelled.add(label, score)
    return {
        "ppi": ppi_mean(all_judged, labelled, tuning="ppi"),
        "ppi++": ppi_mean(all_judged, labelled, tuning="ppi++"),
        "labels": ppi_mean(all_judged, labelled, tuning="labels"),
        "judge": judge_mean(all_judged),
    }


def simulate(
    windows: int, judged: int, labels: int, *, binary: bool = False, seed: int = 13
) -> dict[str, Summary]:
    rng = np.random.default_rng(seed)
    found: dict[str, list[Estimate]] = {name: [] for name in ESTIMATORS}
    for _ in range(windows):
        for name, estimate in simulate_window(rng, judged, labels, binary=binary).items():
            assert estimate is not None
            found[name].append(estimate)
    return {
        name: Summary(
            estimator=name,
            labels=labels,
            coverage=sum(e.low <= TRUE_MEAN <= e.high for e in estimates) / windows,
            mean_width=float(np.mean([e.width for e in estimates])),
            mean_estimate=float(np.mean([e.mean for e in estimates])),
        )
        for name, estimates in found.items()
    }


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.split("\n\n")[0], seed=13)
    parser = bench.parser
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--judged", type=int, default=5000)
    parser.add_argument("--labels", type=int, nargs="+", default=[50, 100, 200, 400, 800])
    args = bench.parse()
    line(f"true mean {TRUE_MEAN:.4f}; {args.windows} windows of {args.judged} judged interactions")
    for binary in (False, True):
        kind = "binary" if binary else "graded"
        line(f"\n{kind} labels")
        line(
            "| labels | PPI++ width | PPI++ coverage | PPI width | PPI coverage | labels-only width "
            "| labels-only coverage | judge mean coverage |"
        )
        line("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.labels:
            s = simulate(args.windows, args.judged, n, binary=binary, seed=args.seed)
            cells = [
                f"{s['ppi++'].mean_width:.3f}", f"{s['ppi++'].coverage:.1%}",
                f"{s['ppi'].mean_width:.3f}", f"{s['ppi'].coverage:.1%}",
                f"{s['labels'].mean_width:.3f}", f"{s['labels'].coverage:.1%}", f"{s['judge'].coverage:.1%}",
            ]  # fmt: skip
            line(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
