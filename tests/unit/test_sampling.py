from __future__ import annotations

import random

import pytest

from agent.model import RagInteraction
from agent.sampling import KeepRule, RateTable, RuleSampler, TraceIdRatioSampler, trace_fraction


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


def test_keep_rules_parse_and_match() -> None:
    negative = KeepRule.parse('user.feedback == "negative"')
    low = KeepRule.parse("feedback.score < 0")
    present = KeepRule.parse("error.type exists")
    assert negative.matches({"user.feedback": "negative"})
    assert not negative.matches({"user.feedback": "positive"})
    assert low.matches({"feedback.score": -1}) and low.matches({"feedback.score": -0.5})
    assert not low.matches({"feedback.score": 1}) and not low.matches({"feedback.score": "bad"})
    assert not low.matches({"feedback.score": True})  # bools are not numbers here
    assert present.matches({"error.type": "Timeout"}) and not present.matches({})
    assert KeepRule.parse("flagged == true").matches({"flagged": True})


@pytest.mark.parametrize("text", ["feedback.score", "== 3", "a ~ 3", ""])
def test_malformed_keep_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="keep rule"):
        KeepRule.parse(text)


def test_rate_table_prefers_route_then_service_then_default() -> None:
    table = RateTable.parse(0.5, ["checkout=0.1", "checkout=0.2", "search/ask=1", "search=0"])
    assert table.rate("checkout", "any") == 0.2  # the last entry for a key wins
    assert table.rate("search", "ask") == 1.0
    assert table.rate("search", "other") == 0.0
    assert table.rate("unknown", "x") == 0.5


@pytest.mark.parametrize("entry", ["checkout", "checkout=2", "=0.5", "checkout=abc"])
def test_malformed_rate_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="sample rate entry"):
        RateTable.parse(1.0, [entry])


class FixedBudget:
    def __init__(self, factor: float) -> None:
        self.value = factor

    def factor(self) -> float:
        return self.value


def test_rule_sampler_keeps_rule_matches_and_scales_rates_by_budget() -> None:
    budget = FixedBudget(1.0)
    sampler = RuleSampler(RateTable.parse(0.0, ["svc=0.8"]), [KeepRule.parse("feedback.score < 0")], budget)
    rng = random.Random(9)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(10_000)]

    def kept(service: str) -> float:
        return sum(
            sampler.decide(RagInteraction(t, "cd" * 8, "q", (), "r", service, "x")).keep for t in ids
        ) / len(ids)

    assert kept("svc") == pytest.approx(0.8, abs=0.02)
    assert kept("other") == 0.0
    budget.value = 0.25
    assert kept("svc") == pytest.approx(0.2, abs=0.02)
    assert sampler.ratio("svc") == pytest.approx(0.2)
    flagged = RagInteraction(ids[0], "cd" * 8, "q", (), "r", "other", "x", attributes={"feedback.score": -1})
    decision = sampler.decide(flagged)
    assert decision.keep and decision.reason == "rule: feedback.score < 0"
