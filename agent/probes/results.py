"""Record probe results in the probe series only (ragpulse_probe_*), never in production's.

An item passes when every one of the pass metrics it was scored on (context recall and answer
correctness by default) is at least the pass score; it fails when one is below; it is an error
when a judge error left one unscored; it is skipped when none of them applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.model import MetricResult, Outcome, RagInteraction
from agent.probes.scoring import REFERENCE_METRICS
from agent.telemetry import ProbeTelemetry

OTHER = "__other__"  # the probe_set label of sets beyond probes_max_sets

PASS, FAIL, ERROR, SKIPPED = "pass", "fail", "error", "skipped"


@dataclass(frozen=True, slots=True)
class ProbeResultsConfig:
    pass_score: float = 0.5
    pass_metrics: tuple[str, ...] = REFERENCE_METRICS
    max_sets: int = 20


class ProbeResults:
    """The probes' exporter and counters (the pipeline records assembly and failures here too,
    so every probe series shares one bound on `probe_set`)."""

    def __init__(self, telemetry: ProbeTelemetry, config: ProbeResultsConfig = ProbeResultsConfig()) -> None:
        self._telemetry = telemetry
        self._config = config
        self._sets: set[str] = set()

    def _label(self, probe_set: str) -> str:
        if probe_set in self._sets:
            return probe_set
        if len(self._sets) >= self._config.max_sets:
            return OTHER
        self._sets.add(probe_set)
        return probe_set

    def assembled(self, probe_set: str) -> None:
        self._telemetry.interactions.labels(self._label(probe_set)).inc()

    def failed(self, probe_set: str, reason: str, count: int = 1) -> None:
        self._telemetry.failures.labels(self._label(probe_set), reason).inc(count)

    async def start(self) -> None:
        return None

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        if interaction.probe is None:
            return
        probe_set = self._label(interaction.probe.probe_set)
        for result in results:
            if result.outcome is Outcome.OK and result.value is not None:
                self._telemetry.score.labels(probe_set, result.metric).observe(result.value)
        self._telemetry.items.labels(probe_set, self.outcome(results)).inc()

    def outcome(self, results: Sequence[MetricResult]) -> str:
        graded = [r for r in results if r.metric in self._config.pass_metrics]
        if any(r.outcome is Outcome.ERROR for r in graded):
            return ERROR
        scored = [r.value for r in graded if r.value is not None]
        if not scored:
            return SKIPPED
        return PASS if min(scored) >= self._config.pass_score else FAIL

    async def shutdown(self, timeout: float) -> None:
        return None
