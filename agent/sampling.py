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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


class RuleSampler:
    def __init__(
        self, rates: RateTable, keep_rules: Sequence[KeepRule] = (), budget: BudgetFactor | None = None
    ) -> None:
        self._rates = rates
        self._keep_rules = tuple(keep_rules)
        self._budget = budget or FullBudget()

    def decide(self, interaction: RagInteraction) -> SamplingDecision:
        for rule in self._keep_rules:
            if rule.matches(interaction.attributes):
                return SamplingDecision(True, f"rule: {rule.text}")
        rate = self._rates.rate(interaction.service, interaction.route) * self._budget.factor()
        return SamplingDecision(trace_fraction(interaction.trace_id) < rate, "rate")

    def ratio(self, service: str) -> float:
        return self._rates.by_service.get(service, self._rates.default) * self._budget.factor()


class TraceIdRatioSampler(RuleSampler):
    """One rate for everything."""

    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sample rate must be within [0, 1], got {rate}")
        super().__init__(RateTable(rate, {}, {}))
