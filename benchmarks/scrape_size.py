"""Size of one /metrics scrape at the default series budget.

The agent bounds its labels with one budget on (service, route) pairs (`max_label_pairs`, 500;
`max_label_values`, 100 routes per service; more become `__other__`, agent/series_budget.py SeriesBudget),
and drift series for at most `drift_max_series` (2000) (service, route, metric) triples. This
fills a real `Telemetry` (the agent's own instruments) with every series the pipeline creates
for each (service, route) pair it sees: interactions and sampled counters, the sample ratio per
service, the signals of every interaction (agent/signals.py: retrieval score, chunk, size and
overlap histograms, empty-retrieval and refusal counters, signal drift gauges), and per metric the
evaluations counter, the score histogram and the drift gauges. Then
it renders the exposition exactly as /metrics does, plain and gzipped (Prometheus asks for gzip).

    python benchmarks/scrape_size.py
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, generate_latest

from agent.config import Settings
from agent.model import Chunk, RagInteraction
from agent.series_budget import SeriesBudget
from agent.signals import SignalRecorder
from agent.telemetry import Telemetry
from benchmarks.harness import Benchmark, line

METRICS = Settings().metrics


def exposition(services: int, routes_per_service: int, shared_routes: bool) -> tuple[int, int, int, int]:
    """(pairs, sample lines, bytes, gzipped bytes) of a scrape after traffic of that shape."""
    defaults = Settings()
    budget = SeriesBudget(defaults.series.max_pairs, defaults.series.max_routes)
    drift_cap = defaults.drift.max_series
    telemetry = Telemetry(CollectorRegistry())
    signals = SignalRecorder(telemetry.signals)
    drift_series = 0
    pairs = set()
    for s in range(services):
        for r in range(routes_per_service):
            route = f"/route-{r}" if shared_routes else f"/service-{s}/route-{r}"
            service, route = budget(f"service-{s}", route)
            if (service, route) in pairs:
                continue
            pairs.add((service, route))
            telemetry.sampling.interactions.labels(service, route).inc()
            telemetry.sampling.sampled.labels(service, route).inc()
            telemetry.sampling.ratio.labels(service).set(1.0)
            signals.record(
                RagInteraction(
                    trace_id=f"{len(pairs):032x}",
                    span_id=f"{len(pairs):016x}",
                    query="How do refunds work?",
                    chunks=(
                        Chunk("Refunds take five days.", "doc-1", 0.82),
                        Chunk("Returns are free.", "doc-2", 0.7),
                    ),
                    response="Refunds take five days.",
                    service=service,
                    route=route,
                    searches=1,
                )
            )
            for metric in METRICS:
                telemetry.evaluation.evaluations.labels(service, route, metric, "ok").inc()
                telemetry.evaluation.score.labels(service, route, metric).observe(0.8)
                if drift_series < drift_cap:
                    drift_series += 1
                    telemetry.drift.score.labels(service, route, metric).set(0.0)
                    telemetry.drift.detected.labels(service, route, metric).set(0.0)
    for name in ("ok", "error"):
        telemetry.judge.requests.labels("lexical", name).inc()
    telemetry.judge.latency.labels("lexical").observe(0.01)
    for metric, value in defaults.alerts.thresholds.items():
        service, _, name = metric.rpartition("/")
        telemetry.drift.quality_threshold.labels(service, name).set(value)
    body = generate_latest(telemetry.registry)
    lines = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return len(pairs), lines, len(body), len(gzip.compress(body))


def main() -> None:
    Benchmark(__doc__).parse()
    shapes = [
        ("1 service, 1 route", 1, 1, True),
        ("10 services x 10 routes", 10, 10, False),
        ("100 services x 1 route", 100, 1, False),
        ("100 services x 100 routes (the pair budget)", 100, 100, True),
    ]
    line(f"{'shape':<46} {'pairs':>6} {'samples':>8} {'bytes':>11} {'gzip':>9}")
    for title, services, routes, shared in shapes:
        pairs, lines, size, packed = exposition(services, routes, shared)
        line(f"{title:<46} {pairs:>6} {lines:>8} {size / 1e6:>9.2f}MB {packed / 1e3:>7.0f}kB")


if __name__ == "__main__":
    main()
