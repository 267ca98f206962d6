"""Which scored interactions to send to humans for labels, and the weight each label carries.

PPI needs the labelled interactions to be a random sample of the judged ones with known
inclusion probabilities. Each scored interaction is drawn independently with probability π
(Poisson sampling, so within every service/route stratum the expected share drawn is π), decided
by a hash of its interaction id: every replica and every exporter takes the same decision, and a
redelivered interaction is drawn again or not at all. The hash is salted so that the draw is
independent of the trace-id hash the scoring sampler uses.

Low-confidence verdicts (a metric value inside `uncertain_band`, where a judge errs most) may be
drawn `oversample` times more often; each label then carries the weight w = 1/π, which the PPI
estimate uses (agent/trust/ppi.py), so the oversampling does not bias it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.model import MetricResult, Outcome

_SALT = b"ragpulse-label-v1:"
_SPACE = float(1 << 64)

LABEL_MARK = "label"  # the name of the draw's Mark on an evaluated interaction (agent/model.py)
# Attributes set on published results (results topic, OTLP) for interactions drawn for labelling.
REQUESTED_ATTRIBUTE = "ragpulse.label.requested"
WEIGHT_ATTRIBUTE = "ragpulse.label.weight"
REASON_ATTRIBUTE = "ragpulse.label.reason"


def label_fraction(interaction_id: str) -> float:
    """A uniform number in [0, 1) fixed by the interaction id."""
    digest = hashlib.blake2b(_SALT + interaction_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SPACE


@dataclass(frozen=True, slots=True)
class LabelRequest:
    """Whether an interaction is drawn for labelling, its inclusion probability and weight 1/π."""

    requested: bool
    probability: float
    reason: str  # "uniform" or "low_confidence"

    @property
    def weight(self) -> float:
        return 1.0 / self.probability if self.probability > 0 else 0.0

    def attributes(self) -> dict[str, str | float | bool]:
        """The span attributes that mark a drawn interaction on published results."""
        if not self.requested:
            return {}
        return {
            REQUESTED_ATTRIBUTE: True,
            WEIGHT_ATTRIBUTE: round(self.weight, 6),
            REASON_ATTRIBUTE: self.reason,
        }


NOT_REQUESTED = LabelRequest(False, 0.0, "off")


@dataclass(frozen=True, slots=True)
class LabelSampler:
    """Draws a fraction of scored interactions for labelling.

    Args:
        fraction: probability that an interaction with confident verdicts is drawn (0 = off).
        oversample: how many times more likely an interaction with a low-confidence verdict is
            drawn (1 = no oversampling); its probability is capped at 1.
        uncertain_band: metric values in [low, high] count as low-confidence.
    """

    fraction: float
    oversample: float = 1.0
    uncertain_band: tuple[float, float] = (0.3, 0.7)

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"label fraction must be in [0, 1], got {self.fraction}")
        if self.oversample < 1.0:
            raise ValueError(f"oversampling factor must be >= 1, got {self.oversample}")
        low, high = self.uncertain_band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"uncertain band must satisfy 0 <= low <= high <= 1, got {self.uncertain_band}")

    @property
    def enabled(self) -> bool:
        return self.fraction > 0.0

    def low_confidence(self, results: Sequence[MetricResult]) -> bool:
        low, high = self.uncertain_band
        return any(
            r.outcome is Outcome.OK and r.value is not None and low <= r.value <= high for r in results
        )

    def probability(self, results: Sequence[MetricResult]) -> tuple[float, str]:
        if self.oversample > 1.0 and self.low_confidence(results):
            return min(1.0, self.fraction * self.oversample), "low_confidence"
        return self.fraction, "uniform"

    def decide(self, interaction_id: str, results: Sequence[MetricResult]) -> LabelRequest:
        """Draw or not; interactions with no defined score are never drawn (nothing to compare)."""
        if not self.enabled or not any(r.outcome is Outcome.OK for r in results):
            return NOT_REQUESTED
        probability, reason = self.probability(results)
        return LabelRequest(label_fraction(interaction_id) < probability, probability, reason)

    def decide_scores(self, interaction_id: str, scores: Mapping[str, float | None]) -> LabelRequest:
        """`decide` over plain {metric: value} rows (offline results files)."""
        results = [
            MetricResult.ok(m, v, judge="") if v is not None else MetricResult.skipped(m, "undefined")
            for m, v in scores.items()
        ]
        return self.decide(interaction_id, results)
