"""Scores into Prometheus: the `ragpulse_score` histogram and `ragpulse_evaluations_total`.

Scores are a histogram, not a gauge of a window mean, so that means across replicas are
`rate(ragpulse_score_sum) / rate(ragpulse_score_count)`. Each observation carries its trace id as
an OpenMetrics exemplar (never a label), so a dashboard leads from a low bucket to the trace;
agent/server.py answers /metrics in the OpenMetrics format, exemplars included, when asked.
"""

from __future__ import annotations

import logging

from agent.model import Evaluated, Outcome, RagInteraction
from agent.telemetry import EvaluationTelemetry

log = logging.getLogger(__name__)


class PrometheusExporter:
    def __init__(self, telemetry: EvaluationTelemetry) -> None:
        self._telemetry = telemetry

    async def export(self, evaluated: Evaluated) -> None:
        interaction = evaluated.interaction
        labels = (interaction.service, interaction.route)
        for result in evaluated.results:
            self._telemetry.evaluations.labels(*labels, result.metric, result.outcome.value).inc()
            if result.outcome is Outcome.OK and result.value is not None:
                self._telemetry.score.labels(*labels, result.metric).observe(
                    result.value, exemplar=trace_exemplar(interaction)
                )

    async def start(self) -> None:
        """Nothing to connect."""

    async def flush(self) -> None:
        """Nothing is buffered: the registry is scraped."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing is buffered: the registry is scraped."""


def trace_exemplar(interaction: RagInteraction) -> dict[str, str]:
    """The exemplar labels of an observation: `trace_id` (and `span_id`), as Grafana's
    `exemplarTraceIdDestinations` and Tempo expect; OpenMetrics caps them at 128 characters."""
    return {"trace_id": interaction.trace_id[:32], "span_id": interaction.span_id[:16]}
