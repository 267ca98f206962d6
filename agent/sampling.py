"""Decide which interactions get judged.

Decisions are a pure function of the trace id and the current budget factor, so every replica
makes the same choice for the same trace without talking to the others. The trace id is hashed
rather than read directly so that our rate is independent of any upstream `TraceIdRatioBased`
head sampling, which keys on the trace id's low bits.

Order of precedence: keep rules (always judged, e.g. a user's negative feedback), then the rate
of the most specific `service/route`, `service` or default entry, scaled by the budget factor.
"""

from __future__ import annotations

import hashlib
import operator
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.config import SamplingSettings
from agent.model import AttributeValue, RagInteraction, SamplingDecision

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


# -- keep rules -------------------------------------------------------------------------------------

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_RULE = re.compile(
    r"^\s*(?P<attr>[\w.\-]+)\s*(?:(?P<op>==|!=|<=|>=|<|>)\s*(?P<value>.+?)|\s(?P<exists>exists))\s*$"
)


def _literal(text: str) -> str | float | bool:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class KeepRule:
    """`attribute OP literal` or `attribute exists`.

    Examples: `feedback.score < 0`, `user.feedback == "negative"`, `error.type exists`.
    """

    text: str
    attribute: str
    op: str
    value: str | float | bool | None

    @classmethod
    def parse(cls, text: str) -> KeepRule:
        match = _RULE.match(text)
        if match is None:
            raise ValueError(
                f"keep rule {text!r} is not `attribute OP value` (OP one of == != < <= > >=) "
                "or `attribute exists`"
            )
        if match["exists"]:
            return cls(text, match["attr"], "exists", None)
        return cls(text, match["attr"], match["op"], _literal(match["value"]))

    def matches(self, attributes: Mapping[str, AttributeValue]) -> bool:
        actual = attributes.get(self.attribute)
        if self.op == "exists":
            return actual is not None
        if actual is None:
            return False
        expected = self.value
        if isinstance(expected, float) and not isinstance(actual, bool) and isinstance(actual, (int, float)):
            return _OPERATORS[self.op](float(actual), expected)
        if isinstance(expected, float):
            return False  # a number compared with a non-number never matches
        if isinstance(expected, bool):
            return _OPERATORS[self.op](actual, expected) if isinstance(actual, bool) else False
        return _OPERATORS[self.op](str(actual), expected) if self.op in ("==", "!=") else False


# -- rates ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RateTable:
    """Base rates: `service/route=rate` beats `service=rate` beats the default."""

    default: float
    by_service: Mapping[str, float]
    by_route: Mapping[tuple[str, str], float]

    @classmethod
    def parse(cls, default: float, entries: Sequence[str]) -> RateTable:
        by_service: dict[str, float] = {}
        by_route: dict[tuple[str, str], float] = {}
        for entry in entries:
            target, sep, raw = entry.rpartition("=")
            try:
                rate = float(raw)
            except ValueError:
                rate = -1.0
            if not sep or not target or not 0.0 <= rate <= 1.0:
                raise ValueError(f"sample rate entry {entry!r} is not `service=RATE` or `service/route=RATE`")
            service, slash, route = target.partition("/")
            if slash:
                by_route[(service, route)] = rate
            else:
                by_service[service] = rate
        return cls(default, by_service, by_route)

    def rate(self, service: str, route: str) -> float:
        rate = self.by_route.get((service, route))
        if rate is None:
            rate = self.by_service.get(service, self.default)
        return rate


class BudgetFactor(Protocol):
    def factor(self) -> float:
        """Multiplier in (0, 1] that the judge budget currently allows."""
        ...


class FullBudget:
    def factor(self) -> float:
        return 1.0


# Reason of a decision that dropped an interaction the base rate would have kept: the judge budget
# lowered the rate (counted in ragpulse_interactions_rejected_total).
BUDGET_REASON = "budget"
# A keep rule matched but its cap was reached, and the rate did not keep it either.
KEEP_CAP_REASON = "keep_cap"
THROTTLED_REASONS = frozenset({BUDGET_REASON, KEEP_CAP_REASON})


class KeepCap:
    """A token bucket: at most `per_minute` keep-rule decisions per minute, bursts up to that."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = per_minute / 60.0
        self._capacity = per_minute
        self._tokens = per_minute
        self._clock = clock
        self._last = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class RuleSampler:
    """Keep rules first (within their own cap), then the rate scaled by the judge budget."""

    def __init__(
        self,
        rates: RateTable,
        keep_rules: Sequence[KeepRule] = (),
        budget: BudgetFactor | None = None,
        *,
        keep_per_minute: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rates = rates
        self._keep_rules = tuple(keep_rules)
        self._budget = budget or FullBudget()
        # Keep rules bypass the budget; their own cap stops a flood of matches (e.g. an outage that
        # makes every answer fail `feedback.score < 0`) from spending without limit.
        self._keep_cap = KeepCap(keep_per_minute, clock) if keep_per_minute is not None else None

    def decide(self, interaction: RagInteraction) -> SamplingDecision:
        capped = False
        for rule in self._keep_rules:
            if rule.matches(interaction.attributes):
                if self._keep_cap is None or self._keep_cap.take():
                    # Kept by the rule; `uniform` says whether the rate would have kept it too.
                    return SamplingDecision(True, f"rule: {rule.text}", self._rate_keeps(interaction))
                capped = True  # over the keep cap: sampled like any other interaction
                break
        base = self._rates.rate(interaction.service, interaction.route)
        point = trace_fraction(interaction.trace_id)
        if point < base * self._budget.factor():
            return SamplingDecision(True, "rate")
        if capped:
            return SamplingDecision(False, KEEP_CAP_REASON)
        return SamplingDecision(False, BUDGET_REASON if point < base else "rate")

    @property
    def rule_attributes(self) -> tuple[str, ...]:
        """The attributes the keep rules read: assembled interactions must carry them."""
        return tuple(rule.attribute for rule in self._keep_rules)

    def _rate_keeps(self, interaction: RagInteraction) -> bool:
        rate = self._rates.rate(interaction.service, interaction.route) * self._budget.factor()
        return trace_fraction(interaction.trace_id) < rate

    def ratio(self, service: str) -> float:
        return self._rates.by_service.get(service, self._rates.default) * self._budget.factor()


class TraceIdRatioSampler(RuleSampler):
    """One rate for everything."""

    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sample rate must be within [0, 1], got {rate}")
        super().__init__(RateTable(rate, {}, {}))


def build(section: SamplingSettings, budget: BudgetFactor) -> RuleSampler:
    """The sampler of `section` (rates and keep rules checked at start-up by agent/build.py)."""
    return RuleSampler(
        RateTable.parse(section.rate, section.rates),
        [KeepRule.parse(rule) for rule in section.keep_rules],
        budget,
        keep_per_minute=section.keep_max_per_minute,
    )
