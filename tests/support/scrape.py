"""One /metrics scrape after traffic of a given shape, through the agent's own instruments.

The agent bounds its labels with one budget on (service, route) pairs (`max_label_pairs`, 500;
`max_label_values`, 100 routes per service; more become `__other__`, agent/series_budget.py), and
drift series for at most `drift_max_series` (2000) (service, route, metric) triples. `scrape`
fills a real `Telemetry` with every series the pipeline creates for each pair it sees:
interactions and sampled counters, the sample ratio per service, the signals of every interaction
(a real `SignalRecorder`: agent/signals.py), and per metric the evaluations counter, the score
histogram and the drift gauges; then it renders the exposition exactly as /metrics does.
Used by benchmarks/scrape_size.py and by the test of the scrape's size at the budget.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest

from agent.config import Settings
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, RagInteraction
from agent.series_budget import SeriesBudget
from agent.signals import SignalRecorder
from agent.telemetry import Telemetry


@dataclass(frozen=True)
class Scrape:
    pairs: int
    body: bytes

    @property
    def samples(self) -> int:
        """Sample lines of the exposition (comments excluded)."""
        return sum(1 for line in self.body.splitlines() if line and not line.startswith(b"#"))

    @property
    def gzipped(self) -> int:
        """Bytes on the wire: Prometheus asks for gzip."""
        return len(gzip.compress(self.body))


def scrape(services: int, routes_per_service: int, shared_routes: bool) -> Scrape:
    """The scrape after one interaction of every (service, route) of that shape, scored on every
    streaming metric; `shared_routes` gives every service the same route names."""
    defaults = Settings()
    budget = SeriesBudget(defaults.series.max_pairs, defaults.series.max_routes)
    drift_cap = defaults.drift.max_series
    telemetry = Telemetry(CollectorRegistry())
    signals = SignalRecorder(telemetry.signals)
    drift_series = 0
    pairs: set[tuple[str, str]] = set()
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
            # Every streaming metric: an LLM judge's default set, the largest (the local judges'
            # leaves answer relevancy out).
            for metric in STREAMING_METRICS:
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
    return Scrape(len(pairs), generate_latest(telemetry.registry))
