"""What `ragpulse run` says about its traffic in the log: one line when a service's first spans
arrive, and a one-line summary per period while traffic flows (none for a quiet period).

    first spans from service checkout (otlp_http): 12 spans, 1 interaction
    last 60s: 1200 spans, 400 interactions, 96 scored; means context_precision=0.812 ...; drift alarms: 0

An observer (agent/observers.py) on the production route: it counts on the intake's hot path (a
dict update per request and per interaction) and logs from its own timer, never per item.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from agent.config import ActivitySettings
from agent.infra.lifecycle import Periodic
from agent.model import Evaluated, Outcome, RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.scoreboard import drift_alarms

log = logging.getLogger("ragpulse.activity")

MAX_SERVICES = 1000  # services remembered as seen; beyond it, new ones are not announced


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass
class Period:
    """What arrived since the last summary."""

    spans: int = 0
    interactions: int = 0
    scored: int = 0
    sums: dict[str, list[float]] = field(default_factory=dict)  # metric → [sum, count]

    def means(self) -> dict[str, float]:
        return {metric: total / count for metric, (total, count) in sorted(self.sums.items()) if count}


def summary_line(period: Period, seconds: float, alarms: int) -> str | None:
    """The summary of one period, or None when nothing arrived in it."""
    if not period.spans and not period.interactions and not period.scored:
        return None
    means = " ".join(f"{m}={v:.3f}" for m, v in period.means().items())
    return (
        f"last {seconds:g}s: {_plural(period.spans, 'span')}, "
        f"{_plural(period.interactions, 'interaction')}, {period.scored} scored; "
        f"means {means or '-'}; drift alarms: {alarms}"
    )


class Activity:
    """Observer: first-spans lines and the periodic summary. The drift alarms on now are read from
    `registry` (ragpulse_drift_detected, ragpulse_signal_drift_detected) when a summary is due."""

    def __init__(self, section: ActivitySettings, registry: CollectorRegistry) -> None:
        self._interval = section.summary_seconds
        self._registry = registry
        self._spans: Counter[str] = Counter()  # per service, since its first spans were announced
        self._interactions: Counter[str] = Counter()
        self._sources: dict[str, str] = {}  # service → the source that read its first spans
        self._unannounced: list[str] = []
        self._period = Period()
        self._timer = Periodic("activity-summary", self._interval, self._tick)

    # -- Observer --------------------------------------------------------------------------------

    def on_spans(self, spans: Sequence[Span], source: str) -> None:
        self._period.spans += len(spans)
        if not spans:
            return
        # The spans of one request share a few resources, in runs: counted per run, the service
        # name read once per run.
        resource, run = spans[0].resource, 0
        for span in spans:
            if span.resource is not resource:
                self._count(resource.service_name, run, source)
                resource, run = span.resource, 0
            run += 1
        self._count(resource.service_name, run, source)

    def _count(self, service: str, spans: int, source: str) -> None:
        if service not in self._sources:
            if len(self._sources) >= MAX_SERVICES:
                return
            self._sources[service] = source
            self._unannounced.append(service)
        self._spans[service] += spans

    def on_assembly(self, assembly: Assembly) -> None:
        for interaction in assembly.interactions:
            self._interactions[interaction.service] += 1
        # Announced after the spans' own assembly step, so the line says whether they made an interaction.
        for service in self._unannounced:
            log.info(
                "first spans from service %s (%s): %s, %s",
                service,
                self._sources[service],
                _plural(self._spans[service], "span"),
                _plural(self._interactions[service], "interaction"),
            )
        self._unannounced.clear()

    def on_interaction(self, interaction: RagInteraction) -> None:
        self._period.interactions += 1

    def on_evaluated(self, evaluated: Evaluated) -> None:
        sums = self._period.sums
        scored = False
        for result in evaluated.results:
            if result.outcome is Outcome.OK and result.value is not None:
                entry = sums.setdefault(result.metric, [0.0, 0])
                entry[0] += result.value
                entry[1] += 1
                scored = True
        self._period.scored += scored

    # -- Lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._interval > 0:
            self._timer.start()

    async def _tick(self) -> None:
        self.summarise()

    def summarise(self) -> str | None:
        """Log the summary of the period that ends now (nothing when it was quiet); start the next."""
        period, self._period = self._period, Period()
        try:
            line = summary_line(period, self._interval, len(drift_alarms(self._registry)))
        except Exception:  # a failed read of the alarms must not stop the summaries
            log.exception("activity summary failed")
            return None
        if line is not None:
            log.info("%s", line)
        return line

    async def flush(self) -> None:
        """Nothing held: the summary is a log line, not data."""

    async def shutdown(self, timeout: float) -> None:
        await self._timer.stop()


def build(section: ActivitySettings, registry: CollectorRegistry) -> Activity:
    return Activity(section, registry)
