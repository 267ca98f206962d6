"""Decide which interactions get judged.

Decisions are a pure function of the trace id, so every replica of the agent makes the same
choice for the same trace without talking to the others. The trace id is hashed rather than read
directly so that our rate is independent of any upstream `TraceIdRatioBased` head sampling,
which keys on the trace id's low bits.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from agent.model import RagInteraction, SamplingDecision

_SPACE = 1 << 64


def trace_fraction(trace_id: str) -> float:
    """Map a trace id to a stable, uniform point in [0, 1)."""
    digest = hashlib.blake2b(trace_id.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SPACE


class Sampler(Protocol):
    def decide(self, interaction: RagInteraction) -> SamplingDecision: ...

    def ratio(self, service: str) -> float:
        """The effective sampling ratio for a service, exported as ragpulse_sample_ratio."""
        ...


class TraceIdRatioSampler:
    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sample rate must be within [0, 1], got {rate}")
        self._rate = rate

    def decide(self, interaction: RagInteraction) -> SamplingDecision:
        if trace_fraction(interaction.trace_id) < self._rate:
            return SamplingDecision(True, "rate")
        return SamplingDecision(False, "rate")

    def ratio(self, service: str) -> float:
        return self._rate
