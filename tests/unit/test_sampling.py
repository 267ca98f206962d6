from __future__ import annotations

import random

import pytest

from agent.model import RagInteraction
from agent.sampling import TraceIdRatioSampler, trace_fraction


def interaction(trace_id: str) -> RagInteraction:
    return RagInteraction(trace_id, "cd" * 8, "q", (), "r", "s", "route")


def test_decisions_are_deterministic_per_trace() -> None:
    a, b = TraceIdRatioSampler(0.3), TraceIdRatioSampler(0.3)
    ids = [f"{random.Random(i).getrandbits(128):032x}" for i in range(200)]
    assert [a.decide(interaction(t)).keep for t in ids] == [b.decide(interaction(t)).keep for t in ids]


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.5, 1.0])
def test_kept_fraction_matches_rate(rate: float) -> None:
    rng = random.Random(7)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(20_000)]
    kept = sum(TraceIdRatioSampler(rate).decide(interaction(t)).keep for t in ids) / len(ids)
    assert kept == pytest.approx(rate, abs=0.015)


def test_rate_is_independent_of_low_trace_id_bits() -> None:
    # Upstream TraceIdRatioBased keeps traces whose low 64 bits are small; our hash must not care.
    rng = random.Random(3)
    ids = [f"{rng.getrandbits(64):016x}{0:016x}" for _ in range(5_000)]
    assert sum(trace_fraction(t) < 0.5 for t in ids) / len(ids) == pytest.approx(0.5, abs=0.03)


def test_invalid_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="within"):
        TraceIdRatioSampler(1.2)
