"""Bounded Prometheus labels: the series budget on (service, route) pairs, with `__other__` overflow.

Every series ragpulse exports with `service` and `route` labels (scores, evaluations, interactions,
drift) multiplies the number of (service, route) pairs by a fixed factor (metrics × outcomes ×
buckets), so one limiter on the pair bounds them all. Capping service and route separately would
not: 100 services × 100 routes is 10,000 pairs.

`SeriesBudget` admits at most `max_pairs` distinct pairs, and at most `max_routes_per_service`
routes for one service. A pair over either limit becomes `(service, "__other__")` when that overflow
pair fits in the budget, else `("__other__", "__other__")`; so at most `max_pairs + 1` pairs ever
exist. docs/limits.md gives the series and the scrape size this allows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from agent.config import SeriesSettings
from agent.telemetry import AssemblyTelemetry

OVERFLOW = "__other__"
# What overflowed, as it labels ragpulse_label_overflows_total.
ROUTE = "route"  # the service has max_routes_per_service routes already
PAIR = "pair"  # the budget of (service, route) pairs is spent


class SeriesBudget:
    """Maps (service, route) to a bounded set of label pairs. Not thread-safe: the assembler, its
    only caller, runs on the event loop."""

    def __init__(
        self,
        max_pairs: int,
        max_routes_per_service: int,
        on_overflow: Callable[[str], None] | None = None,
    ) -> None:
        if max_pairs < 1 or max_routes_per_service < 1:
            raise ValueError("the series budget needs at least one pair and one route per service")
        self._max_pairs = max_pairs
        self._max_routes = max_routes_per_service
        self._on_overflow = on_overflow
        self._pairs: set[tuple[str, str]] = set()
        self._routes: Counter[str] = Counter()  # admitted routes per service, overflow pair included

    @property
    def pairs(self) -> int:
        return len(self._pairs)

    def __call__(self, service: str, route: str) -> tuple[str, str]:
        pair = (service, route)
        if pair in self._pairs:
            return pair
        if len(self._pairs) < self._max_pairs and self._routes[service] < self._max_routes:
            self._admit(pair)
            return pair
        kind = PAIR if len(self._pairs) >= self._max_pairs else ROUTE
        if self._on_overflow is not None:
            self._on_overflow(kind)
        overflow = (service, OVERFLOW)
        if overflow in self._pairs:
            return overflow
        # The service's overflow pair is one more pair: it fits while the budget lasts (a service
        # at its route limit may exceed it by this one pair).
        if len(self._pairs) < self._max_pairs:
            self._admit(overflow)
            return overflow
        return OVERFLOW, OVERFLOW

    def _admit(self, pair: tuple[str, str]) -> None:
        self._pairs.add(pair)
        self._routes[pair[0]] += 1


class LabelLimiter:
    """Caps the distinct values of one label (kept for labels without a partner, e.g. `model`)."""

    def __init__(self, max_values: int) -> None:
        self._max_values = max_values
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) < self._max_values:
            self._seen.add(value)
            return value
        return OVERFLOW


def build(section: SeriesSettings, telemetry: AssemblyTelemetry) -> SeriesBudget:
    """The series budget of `section`, counting its overflows by kind (ragpulse_label_overflows_total)."""
    return SeriesBudget(
        section.max_pairs,
        section.max_routes,
        on_overflow=lambda kind: telemetry.label_overflows.labels(kind).inc(),
    )
