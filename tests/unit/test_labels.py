"""The series budget: one limit on (service, route) pairs bounds every series labelled by both."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.series_budget import OVERFLOW, PAIR, ROUTE, SeriesBudget


def test_100_services_by_100_routes_stay_within_the_budget() -> None:
    overflows: Counter[str] = Counter()
    budget = SeriesBudget(
        max_pairs=500, max_routes_per_service=100, on_overflow=lambda kind: overflows.update([kind])
    )
    calls = [(f"svc-{s}", f"/route/{r}") for s in range(100) for r in range(100)]
    out = [budget(*call) for call in calls]
    assert len(set(out)) <= 501 and budget.pairs == 500
    passed = sum(1 for call, labels in zip(calls, out, strict=True) if call == labels)
    assert sum(overflows.values()) == len(calls) - passed  # every folded interaction is counted
    assert overflows[PAIR] > 0


def test_a_service_with_too_many_routes_keeps_its_name_and_others_keep_room() -> None:
    overflows: Counter[str] = Counter()
    budget = SeriesBudget(
        max_pairs=50, max_routes_per_service=10, on_overflow=lambda kind: overflows.update([kind])
    )
    flooding = [budget("scraper", f"/page/{i}") for i in range(1_000)]
    assert len(set(flooding)) == 11
    assert flooding[10:] == [("scraper", OVERFLOW)] * 990
    assert overflows == {ROUTE: 990}
    # A well-behaved service arriving later still gets its own labels.
    assert budget("billing", "/invoice") == ("billing", "/invoice")


def test_known_pairs_keep_their_labels_after_the_budget_is_spent() -> None:
    budget = SeriesBudget(max_pairs=2, max_routes_per_service=5)
    assert budget("a", "/1") == ("a", "/1")
    assert budget("b", "/1") == ("b", "/1")
    assert budget("c", "/1") == (OVERFLOW, OVERFLOW)
    assert budget("a", "/2") == (OVERFLOW, OVERFLOW)
    assert budget("a", "/1") == ("a", "/1")


def test_invalid_budgets_are_refused() -> None:
    with pytest.raises(ValueError):
        SeriesBudget(0, 1)


@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=400),
    st.integers(1, 40),
    st.integers(1, 10),
)
def test_distinct_pairs_never_exceed_the_budget_plus_one(
    calls: list[tuple[int, int]], max_pairs: int, max_routes: int
) -> None:
    budget = SeriesBudget(max_pairs, max_routes)
    out = [budget(f"s{s}", f"/r{r}") for s, r in calls]
    assert len(set(out)) <= max_pairs + 1
    # Per service (other than the overflow service): at most max_routes routes and one overflow.
    per_service = Counter(service for service, _ in set(out) if service != OVERFLOW)
    assert all(count <= max_routes + 1 for count in per_service.values())
    # A label that passed is the real one or an overflow, never someone else's.
    for (s, r), (service, route) in zip(calls, out, strict=True):
        assert service in (f"s{s}", OVERFLOW) and route in (f"/r{r}", OVERFLOW)
