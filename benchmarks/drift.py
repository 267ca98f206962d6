"""False-alarm rate and detection delay of the drift detector, with its default settings.

Streams of context-precision scores are simulated the way they arise: k=5 chunks, each useful
with probability p, CP@5 computed from the verdicts (a lumpy, bounded distribution, sd ≈ 0.3),
plus a smooth Beta stream for comparison. A "drop" lowers the stream's mean by 0.15 by lowering p
(or, for the Beta stream, its first shape parameter) to the value that gives exactly that mean.

    python benchmarks/drift.py [--stationary 1000000] [--trials 300]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import DriftSettings
from agent.drift import DriftDetector
from agent.metrics import context_precision_at_k
from benchmarks.harness import Benchmark, line, seeded

Stream = Callable[[random.Random], float]


def cp_stream(p: float, k: int = 5) -> Stream:
    def draw(rng: random.Random) -> float:
        value = context_precision_at_k([rng.random() < p for _ in range(k)])
        assert value is not None
        return value

    return draw


def beta_stream(a: float, b: float) -> Stream:
    return lambda rng: rng.betavariate(a, b)


def mean_of(stream: Stream, n: int = 200_000) -> float:
    rng = seeded(99)
    return statistics.fmean(stream(rng) for _ in range(n))


def solve(make: Callable[[float], Stream], lo: float, hi: float, target: float) -> float:
    """Parameter in [lo, hi] whose stream mean is `target` (means increase with the parameter)."""
    for _ in range(30):
        mid = (lo + hi) / 2
        if mean_of(make(mid), 40_000) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def false_alarms(stream: Stream, samples: int, config: DriftSettings, seed: int) -> tuple[int, int]:
    """Alarm onsets (rising edges) in a stationary stream, and scores seen after the baseline."""
    rng = random.Random(seed)
    detector = DriftDetector(config)
    onsets, alarmed, judged = 0, False, 0
    for _ in range(samples):
        state = detector.update(stream(rng))
        if not state.ready:
            continue
        judged += 1
        if state.detected and not alarmed:
            onsets += 1
        alarmed = state.detected
    return onsets, judged


def detection_delay(
    before: Stream, after: Stream, config: DriftSettings, seed: int, warmup: int = 1000
) -> int | None:
    rng = random.Random(seed)
    detector = DriftDetector(config)
    for _ in range(warmup):
        if detector.update(before(rng)).detected:
            return None  # a false alarm before the change: not a detection
    for delay in range(1, 5000):
        if detector.update(after(rng)).detected:
            return delay
    return None


def main() -> None:
    bench = Benchmark(__doc__, seed=0)
    parser = bench.parser
    parser.add_argument("--stationary", type=int, default=1_000_000, help="scores per stationary stream")
    parser.add_argument("--streams", type=int, default=3, help="independent stationary streams per kind")
    parser.add_argument("--trials", type=int, default=300, help="change-point trials per stream kind")
    args = bench.parse()
    config = DriftSettings()
    line(f"drift detector defaults: {DriftDetector(config).params}")

    p0 = 0.6
    base_cp = mean_of(cp_stream(p0))
    p1 = solve(cp_stream, 0.0, p0, base_cp - 0.15)
    base_beta = mean_of(beta_stream(4.0, 2.0))
    a1 = solve(lambda a: beta_stream(a, 2.0), 0.5, 4.0, base_beta - 0.15)
    kinds = {
        f"CP@5 verdicts p={p0} → p={p1:.3f}": (cp_stream(p0), cp_stream(p1)),
        f"Beta(4,2) → Beta({a1:.2f},2)": (beta_stream(4.0, 2.0), beta_stream(a1, 2.0)),
    }
    line()
    header = f"{'stream':<36} {'mean→after':>12} {'sd':>5} {'false alarms':>22}"
    line(f"{header} {'delay p50':>9} {'p95':>5} {'missed':>6}")
    for name, (before, after) in kinds.items():
        rng = seeded(5)
        sample = [before(rng) for _ in range(50_000)]
        after_mean = mean_of(after)
        started = time.perf_counter()
        runs = [
            false_alarms(before, args.stationary, config, seed=bench.seed + 11 + s)
            for s in range(args.streams)
        ]
        onsets, judged = sum(r[0] for r in runs), sum(r[1] for r in runs)
        elapsed = time.perf_counter() - started
        delays = [
            detection_delay(before, after, config, seed=bench.seed + 1000 + t) for t in range(args.trials)
        ]
        found = sorted(d for d in delays if d is not None)
        p50 = found[len(found) // 2] if found else float("nan")
        p95 = found[int(len(found) * 0.95) - 1] if found else float("nan")
        line(
            f"{name:<36} {statistics.fmean(sample):.3f}→{after_mean:.3f} {statistics.pstdev(sample):5.2f} "
            f"{onsets:>4} in {judged:>9,} scores {p50:>9} {p95:>5} {len(delays) - len(found):>6}"
        )
        line(f"{'':<36} ({judged / elapsed:,.0f} updates/s on one core)")


if __name__ == "__main__":
    main()
