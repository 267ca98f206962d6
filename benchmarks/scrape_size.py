"""Size of one /metrics scrape at the default series budget.

The agent bounds its labels with one budget on (service, route) pairs (`max_label_pairs`, 500;
`max_label_values`, 100 routes per service; more become `__other__`, agent/series_budget.py SeriesBudget),
and drift series for at most `drift_max_series` (2000) (service, route, metric) triples. For each
traffic shape, tests/support/scrape.py fills a real `Telemetry` (the agent's own instruments) with
every series the pipeline creates for each (service, route) pair it sees: interactions and sampled
counters, the sample ratio per service, the signals of every interaction (agent/signals.py: top-1
retrieval score and overlap histograms, the means of searches, chunk scores, chunks, context and
response size, empty-retrieval and refusal counters, signal drift gauges), and per metric the
evaluations counter, the score histogram and the drift gauges. Then it renders the exposition
exactly as /metrics does, plain and gzipped (Prometheus asks for gzip).
tests/unit/test_telemetry.py holds the pair budget's scrape under 60,000 samples.

    python benchmarks/scrape_size.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Benchmark, line
from tests.support.scrape import scrape


def main() -> None:
    Benchmark(__doc__).parse()
    shapes = [
        ("1 service, 1 route", 1, 1, True),
        ("10 services x 10 routes", 10, 10, False),
        ("100 services x 1 route", 100, 1, False),
        ("100 services x 100 routes (the pair budget)", 100, 100, True),
        ("500 services x 1 route (the pair budget)", 500, 1, False),
    ]
    line(f"{'shape':<46} {'pairs':>6} {'samples':>8} {'bytes':>11} {'gzip':>9}")
    for title, services, routes, shared in shapes:
        result = scrape(services, routes, shared)
        line(
            f"{title:<46} {result.pairs:>6} {result.samples:>8} {len(result.body) / 1e6:>9.2f}MB "
            f"{result.gzipped / 1e3:>7.0f}kB"
        )


if __name__ == "__main__":
    main()
