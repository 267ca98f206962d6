"""What the demo's live view and its report read while the demo runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from agent.demo.recorder import Recorder
from agent.demo.traffic import Phase, Schedule


@dataclass
class DemoState:
    """What the live view and the report read."""

    registry: CollectorRegistry
    recorder: Recorder
    schedule: Schedule
    duration: float | None
    judge: str
    phase: Phase = Phase.HEALTHY
    phase_started: dict[int, float] = field(default_factory=dict)
    detections: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def sample_total(self, name: str) -> float:
        total = 0.0
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    total += sample.value
        return total

    def poll_drift(self) -> list[tuple[str, str, str]]:
        """Series whose drift alarm is on now, judged scores and signals (`signal:<name>`, measured
        on every interaction without a judge); records when each first fired."""
        firing = []
        for family in self.registry.collect():
            if family.name not in ("ragpulse_drift_detected", "ragpulse_signal_drift_detected"):
                continue
            for sample in family.samples:
                if sample.value >= 1.0:
                    labels = sample.labels
                    metric = labels["metric"] if "metric" in labels else f"signal:{labels['signal']}"
                    key = (labels["service"], labels["route"], metric)
                    firing.append(key)
                    self.detections.setdefault(key, self.recorder.elapsed())
        return firing
