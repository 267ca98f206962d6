"""The judge canary: has the judge moved on a frozen human-labelled set?

A run is the judge's scores on the frozen items (asked again, past the verdict cache) and the
human labels; per metric it gives the agreement (AUROC, balanced accuracy at the metric's verdict
threshold, from agent/trust/agreement.py) and the mean score. It is compared with the last
accepted run: the judge moved when a statistic dropped by more than `max_agreement_drop` or the
mean shifted by more than `max_mean_shift`. The first run is accepted; a run that moved is not,
until an operator accepts it (`ragpulse canary --accept`).

The accepted run keeps a fingerprint of the frozen set it was measured on (items and labels):
a run on a set that changed since measures something else, so it is refused, never compared
(an edited item would otherwise read as a judge that moved).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agent.config import CanarySettings
from agent.telemetry import CanaryTelemetry

STATISTICS = ("auroc", "balanced_accuracy")


@dataclass(frozen=True, slots=True)
class MetricRun:
    """One metric of one run: statistics may be None (one label class only)."""

    items: int
    mean: float
    auroc: float | None
    balanced_accuracy: float | None


def metric_run(metric: str, labels: Sequence[float], scores: Sequence[float]) -> MetricRun:
    """The agreement and mean of the judge's `scores` against human `labels` (same order)."""
    from agent.trust.agreement import auroc, balanced_accuracy, threshold_for

    threshold = threshold_for(metric)
    verdicts = [1 if s >= threshold else 0 for s in scores]
    return MetricRun(
        items=len(scores),
        mean=math.fsum(scores) / len(scores),
        auroc=auroc(labels, scores),
        balanced_accuracy=balanced_accuracy(labels, verdicts),
    )


@dataclass(frozen=True, slots=True)
class Comparison:
    """A run against the accepted one: per metric the mean shift and the statistics' drops."""

    moved: bool
    mean_shift: Mapping[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


def compare(
    run: Mapping[str, MetricRun], accepted: Mapping[str, MetricRun] | None, config: CanarySettings
) -> Comparison:
    if accepted is None:
        return Comparison(False, dict.fromkeys(run, 0.0))
    shifts: dict[str, float] = {}
    reasons: list[str] = []
    for metric, now in run.items():
        before = accepted.get(metric)
        if before is None:
            continue
        shift = now.mean - before.mean
        shifts[metric] = shift
        if abs(shift) > config.max_mean_shift:
            reasons.append(f"{metric}: mean shifted {shift:+.3f}")
        for statistic in STATISTICS:
            then, current = getattr(before, statistic), getattr(now, statistic)
            if then is not None and current is not None and then - current > config.max_agreement_drop:
                reasons.append(f"{metric}: {statistic} {then:.3f} -> {current:.3f}")
    return Comparison(bool(reasons), shifts, tuple(reasons))


def set_fingerprint(items: Iterable[Mapping[str, object]], labels: Iterable[Sequence[object]]) -> str:
    """A short hash of the frozen set as it is judged: each item's inputs and each label's
    (id, metric, value), whatever their order or line numbers in the files."""
    canonical = {
        "items": sorted(json.dumps(item, sort_keys=True, default=list) for item in items),
        "labels": sorted(json.dumps(list(label), default=str) for label in labels),
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:16]


class CanaryState:
    """The last accepted run and the last run, in a small JSON file."""

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path

    def accepted_fingerprint(self) -> str | None:
        """The fingerprint of the set the accepted run was measured on (None: no accepted run, or
        one saved before fingerprints were kept)."""
        found = self.load().get("accepted_fingerprint")
        return found if isinstance(found, str) else None

    def load(self) -> dict[str, object]:
        try:
            loaded = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def accepted(self) -> tuple[dict[str, MetricRun] | None, float | None]:
        state = self.load()
        runs = state.get("accepted")
        if not isinstance(runs, dict):
            return None, None
        at = state.get("accepted_at")
        return {m: MetricRun(**v) for m, v in runs.items()}, float(at) if isinstance(
            at, (int, float)
        ) else None

    def save(
        self,
        run: Mapping[str, MetricRun],
        comparison: Comparison,
        *,
        accept: bool,
        judge: str,
        fingerprint: str | None = None,
    ) -> dict[str, object]:
        state = self.load()
        now = time.time()
        since = state.get("accepted_at")
        last: dict[str, object] = {
            "at": now,
            "judge": judge,
            "runs": {m: asdict(r) for m, r in run.items()},
            "moved": comparison.moved,
            "reasons": list(comparison.reasons),
            "fingerprint": fingerprint,
        }
        if comparison.moved and not accept:
            # Drift alarms from the last accepted run on may be the judge's, not the app's.
            last["possibly_judge_drift_since"] = since
        state["last"] = last
        if accept or "accepted" not in state:
            state["accepted"] = {m: asdict(r) for m, r in run.items()}
            state["accepted_at"] = now
            state["accepted_judge"] = judge
            state["accepted_fingerprint"] = fingerprint
        elif state.get("accepted_fingerprint") is None:
            # A state file from before fingerprints: the set it was accepted on is this one.
            state["accepted_fingerprint"] = fingerprint
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.write_text(json.dumps(state, indent=2) + "\n")
        return last


def record(
    telemetry: CanaryTelemetry,
    run: Mapping[str, MetricRun],
    comparison: Comparison,
    *,
    accepted: bool = False,
) -> None:
    """The run's gauges. An accepted run is the new reference: the judge has not moved from it."""
    for metric, result in run.items():
        for statistic in STATISTICS:
            value = getattr(result, statistic)
            if value is not None:
                telemetry.agreement.labels(metric, statistic).set(value)
        telemetry.mean_shift.labels(metric).set(comparison.mean_shift.get(metric, 0.0))
    telemetry.moved.set(1 if comparison.moved and not accepted else 0)
    telemetry.last_run.set(time.time())
