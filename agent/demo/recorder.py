"""What `ragpulse demo` shows and reports: an in-process exporter that keeps per-second score means,
the lowest-scored recent interactions and the time of the first score, bounded in memory."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from agent.model import MetricResult, Outcome, RagInteraction


@dataclass(frozen=True, slots=True)
class Scored:
    at: float  # seconds since the demo started
    service: str
    route: str
    query: str
    scores: dict[str, float]

    @property
    def lowest(self) -> tuple[str, float]:
        return min(self.scores.items(), key=lambda kv: kv[1])


class Recorder:
    """Exporter (agent.exporters.base) that watches evaluated interactions."""

    def __init__(
        self, started: float, bin_seconds: float = 2.0, recent: int = 300, time_scale: float = 1.0
    ) -> None:
        self._started = started
        # Demo seconds per wall-clock second (`ragpulse demo --time-scale`): every time the demo
        # shows or reports is on the demo's clock.
        self.time_scale = time_scale
        self.bin_seconds = bin_seconds
        self.first_score_at: float | None = None
        self.scored = 0
        # bin index → metric → [sum, count]
        self._bins: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
        self._recent: deque[Scored] = deque(maxlen=recent)

    def restart_clock(self, started: float) -> None:
        """Count from `started` (the moment traffic starts: the agent is up)."""
        self._started = started

    def elapsed(self) -> float:
        """Demo seconds since the start."""
        return (time.monotonic() - self._started) * self.time_scale

    async def start(self) -> None:
        """Nothing to connect."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing held."""

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        scores = {r.metric: r.value for r in results if r.outcome is Outcome.OK and r.value is not None}
        if not scores:
            return
        at = self.elapsed()
        if self.first_score_at is None:
            self.first_score_at = at
        self.scored += 1
        bucket = self._bins[int(at // self.bin_seconds)]
        for metric, value in scores.items():
            bucket[metric][0] += value
            bucket[metric][1] += 1
        self._recent.append(Scored(at, interaction.service, interaction.route, interaction.query, scores))

    def metrics(self) -> list[str]:
        return sorted({m for bucket in self._bins.values() for m in bucket})

    def timeline(self) -> tuple[list[float], dict[str, list[float | None]]]:
        """Bin mid-times and, per metric, the mean score of each bin (None when empty)."""
        if not self._bins:
            return [], {}
        last = max(self._bins)
        indices = range(last + 1)
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
        return sorted(recent, key=lambda s: sum(s.scores.values()) / len(s.scores))[:n]
