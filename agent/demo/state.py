"""What the demo's live view and its report read while the demo runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.demo.traffic import Phase, Schedule
from agent.report.live import Watch, sample_total
from agent.scoreboard import Scoreboard, SeriesKey


@dataclass
class DemoState(Watch):
    """What the live view and the report read: the agent's watch, plus the demo's traffic."""

    schedule: Schedule
    duration: float | None
    judge: str
    # The metrics scored and why (the judge's default leaves out what it measures at chance).
    metrics: tuple[str, ...] = ()
    metrics_note: str = ""
    phase: Phase = Phase.HEALTHY
    phase_started: dict[int, float] = field(default_factory=dict)
    baseline_size: int = 150  # scores per series a drift detector learns its baseline from
    window: int = 50  # recent scores its window test compares with the baseline
    default_regression: bool = True  # the regression at 40% of --duration (no --regress-after)
    # Scores per series when the regression was injected: was the baseline learnt by then?
    scores_at_injection: dict[SeriesKey, int] | None = None

    @property
    def recorder(self) -> Scoreboard:
        return self.board

    def sample_total(self, name: str) -> float:
        return sample_total(self.registry, name)
