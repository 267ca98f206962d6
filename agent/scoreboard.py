"""What a live view shows: per-bin score means, the lowest-scored recent interactions and the time
of the first score, kept in memory and bounded (`recent` interactions, `max_bins` bins).

An in-process exporter (agent.exporters.base) that the composition root puts after the configured
ones: `ragpulse demo` (its view and report) and `ragpulse run --live` (agent/report/live.py) read it.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from agent.model import Evaluated, MetricResult, Outcome

SeriesKey = tuple[str, str, str]  # service, route, metric (`signal:<name>` for a signal)


def sample_total(registry: CollectorRegistry, name: str) -> float:
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


def drift_alarms(registry: CollectorRegistry) -> list[SeriesKey]:
    """Series whose drift alarm is on now: judged scores and signals (`signal:<name>`, measured on
    every interaction without a judge)."""
    firing = []
    for family in registry.collect():
        if family.name not in ("ragpulse_drift_detected", "ragpulse_signal_drift_detected"):
            continue
        for sample in family.samples:
            if sample.value >= 1.0:
                labels = sample.labels
                metric = labels["metric"] if "metric" in labels else f"signal:{labels['signal']}"
                firing.append((labels["service"], labels["route"], metric))
    return firing


@dataclass(frozen=True, slots=True)
class Scored:
    """One scored interaction as a live view lists it."""

    at: float  # seconds since the board's clock started
    service: str
    route: str
    query: str
    scores: dict[str, float]
    trace_id: str = ""
    failing: tuple[
        str, ...
    ] = ()  # the verdicts behind low scores, e.g. "context_precision: #2 #3 not useful"

    @property
    def lowest(self) -> tuple[str, float]:
        return min(self.scores.items(), key=lambda kv: kv[1])

    @property
    def mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores)


_VERDICT_WORDS = {"context_precision": "not useful", "context_relevancy": "not relevant"}


def failing_verdicts(results: list[MetricResult] | tuple[MetricResult, ...]) -> tuple[str, ...]:
    """The negative verdicts and judge errors of one interaction, one short phrase per metric:
    chunks by rank (1 = first) that a context metric's judge said no to, and errors by reason."""
    phrases = []
    for result in results:
        if result.outcome is Outcome.ERROR:
            phrases.append(f"{result.metric}: judge error {result.reason}".rstrip())
        elif result.chunk_verdicts:
            ranks = [f"#{rank}" for rank, v in enumerate(result.chunk_verdicts, start=1) if v is False]
            if ranks:
                word = _VERDICT_WORDS.get(result.metric, "no")
                phrases.append(f"{result.metric}: {' '.join(ranks)} {word}")
        elif result.outcome is Outcome.OK and result.value is not None and result.value < 0.5:
            phrases.append(f"{result.metric}: {result.value:.2f}")
    return tuple(phrases)


class Scoreboard:
    """Exporter (agent.exporters.base) that watches evaluated interactions."""

    def __init__(
        self,
        started: float,
        bin_seconds: float = 2.0,
        recent: int = 300,
        max_bins: int = 1800,
        time_scale: float = 1.0,
    ) -> None:
        self._started = started
        # Shown seconds per wall-clock second (`ragpulse demo --time-scale`): every time the demo
        # shows or reports is on the demo's clock.
        self.time_scale = time_scale
        self.bin_seconds = bin_seconds
        self.first_score_at: float | None = None
        self.scored = 0
        self._max_bins = max_bins
        # bin index → metric → [sum, count]; the oldest bins are dropped beyond max_bins.
        self._bins: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
        self._recent: deque[Scored] = deque(maxlen=recent)
        # Scores per series so far: what a drift detector has seen (its baseline counts them).
        self._per_series: dict[SeriesKey, int] = defaultdict(int)

    def restart_clock(self, started: float) -> None:
        """Count from `started` (the moment traffic starts: the agent is up)."""
        self._started = started

    def elapsed(self) -> float:
        """Seconds since the start, on the shown clock."""
        return (time.monotonic() - self._started) * self.time_scale

    async def start(self) -> None:
        """Nothing to connect."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing held."""

    async def flush(self) -> None:
        """Nothing held."""

    async def export(self, evaluated: Evaluated) -> None:
        interaction = evaluated.interaction
        scores = {
            r.metric: r.value for r in evaluated.results if r.outcome is Outcome.OK and r.value is not None
        }
        if not scores:
            return
        at = self.elapsed()
        if self.first_score_at is None:
            self.first_score_at = at
        self.scored += 1
        index = int(at // self.bin_seconds)
        bucket = self._bins[index]
        for metric, value in scores.items():
            bucket[metric][0] += value
            bucket[metric][1] += 1
            self._per_series[(interaction.service, interaction.route, metric)] += 1
        while len(self._bins) > self._max_bins:
            del self._bins[min(self._bins)]
        self._recent.append(
            Scored(
                at, interaction.service, interaction.route, interaction.query, scores,
                interaction.trace_id, failing_verdicts(tuple(evaluated.results)),
            )
        )  # fmt: skip

    def scores_per_series(self) -> dict[SeriesKey, int]:
        """How many scores each (service, route, metric) series has had so far."""
        return dict(self._per_series)

    def metrics(self) -> list[str]:
        return sorted({m for bucket in self._bins.values() for m in bucket})

    def timeline(self) -> tuple[list[float], dict[str, list[float | None]]]:
        """Bin mid-times and, per metric, the mean score of each bin (None when empty)."""
        if not self._bins:
            return [], {}
        indices = range(min(self._bins), max(self._bins) + 1)
        times = [(i + 0.5) * self.bin_seconds for i in indices]
        series: dict[str, list[float | None]] = {}
        for metric in self.metrics():
            values: list[float | None] = []
            for i in indices:
                total, count = (
                    self._bins[i][metric] if i in self._bins and metric in self._bins[i] else (0.0, 0)
                )
                values.append(total / count if count else None)
            series[metric] = values
        return times, series

    def mean_since(self, seconds: float) -> dict[str, float]:
        """Mean score per metric over the recent interactions of the last `seconds`."""
        horizon = self.elapsed() - seconds
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for scored in reversed(self._recent):
            if scored.at < horizon:
                break
            for metric, value in scored.scores.items():
                sums[metric][0] += value
                sums[metric][1] += 1
        return {m: s / n for m, (s, n) in sums.items() if n}

    def lowest(self, n: int = 5, seconds: float = 30.0) -> list[Scored]:
        horizon = self.elapsed() - seconds
        recent = [s for s in self._recent if s.at >= horizon]
        # By the interaction's mean score: one metric that is low everywhere does not crowd out the rest.
        return sorted(recent, key=lambda s: s.mean)[:n]
