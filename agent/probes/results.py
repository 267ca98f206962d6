"""Record probe results in the probe series only (ragpulse_probe_*), never in production's.

An item passes when every one of the pass metrics it was scored on (context recall and answer
correctness by default) is at least the pass score; it fails when one is below; it is an error
when a judge error left one unscored; it is skipped when none of them applied.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.config import ProbeSettings
from agent.model import Evaluated, MetricResult, Outcome, RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.probes.scoring import REFERENCE_METRICS
from agent.telemetry import ProbeTelemetry

OTHER = "__other__"  # the probe_set label of sets beyond probes_max_sets

PASS, FAIL, ERROR, SKIPPED = "pass", "fail", "error", "skipped"


class ProbeResults:
    """The probes' exporter, and the observer of their route that counts probe interactions
    assembled and probe traces that failed to assemble: every probe series shares one bound on
    `probe_set` (`probes_max_sets`)."""

    def __init__(
        self,
        telemetry: ProbeTelemetry,
        settings: ProbeSettings | None = None,
        pass_metrics: tuple[str, ...] = REFERENCE_METRICS,
    ) -> None:
        settings = settings or ProbeSettings()
        self._telemetry = telemetry
        self._pass_score = settings.pass_score
        self._max_sets = settings.max_sets
        self._pass_metrics = pass_metrics
        self._sets: set[str] = set()

    def _label(self, probe_set: str) -> str:
        if probe_set in self._sets:
            return probe_set
        if len(self._sets) >= self._max_sets:
            return OTHER
        self._sets.add(probe_set)
        return probe_set

    def assembled(self, probe_set: str) -> None:
        self._telemetry.interactions.labels(self._label(probe_set)).inc()

    def failed(self, probe_set: str, reason: str, count: int = 1) -> None:
        self._telemetry.failures.labels(self._label(probe_set), reason).inc(count)

    # -- Observer (the probe route's) --------------------------------------------------------------

    def on_spans(self, spans: Sequence[Span], source: str = "") -> None:
        """Not observed."""

    def on_assembly(self, assembly: Assembly) -> None:
        """Probe traces that could not be assembled, by probe set and reason."""
        for (probe_set, reason), count in assembly.probe_failures.items():
            self.failed(probe_set, reason, count)

    def on_interaction(self, interaction: RagInteraction) -> None:
        if interaction.probe is not None:
            self.assembled(interaction.probe.probe_set)

    def on_evaluated(self, evaluated: Evaluated) -> None:
        """Not observed: `export` records the scores."""

    # -- Exporter -----------------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def flush(self) -> None:
        """Nothing held: the series are scraped."""

    async def export(self, evaluated: Evaluated) -> None:
        interaction, results = evaluated.interaction, evaluated.results
        if interaction.probe is None:
            return
        probe_set = self._label(interaction.probe.probe_set)
        for result in results:
            if result.outcome is Outcome.OK and result.value is not None:
                self._telemetry.score.labels(probe_set, result.metric).observe(result.value)
        self._telemetry.items.labels(probe_set, self.outcome(results)).inc()

    def outcome(self, results: Sequence[MetricResult]) -> str:
        graded = [r for r in results if r.metric in self._pass_metrics]
        if any(r.outcome is Outcome.ERROR for r in graded):
            return ERROR
        scored = [r.value for r in graded if r.value is not None]
        if not scored:
            return SKIPPED
        return PASS if min(scored) >= self._pass_score else FAIL

    async def shutdown(self, timeout: float) -> None:
        return None
