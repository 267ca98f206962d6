"""The agent conformance corpus in other arrivals than recorded (issue 25, docs/intake.md, "Late
spans").

Each stack's recorded spans are replayed (a) one export request at a time as recorded, (b) in the
order they ended, split into requests of a few spans, as a BatchSpanProcessor exports a long run
(children end before their parents, so the root comes last), and (c) in a shuffled order (fixed
seeds), one span per request or requests of random sizes. Each must account for every span, never
let a span that arrives after its trace was assembled form a second interaction, and give exactly
the answers of expected.json.
"""

from __future__ import annotations

import pytest

from agent.otlp.assemble import LATE
from tests.support.corpus import (
    STACKS,
    Replay,
    answers,
    expected,
    in_end_order,
    load,
    longest_trace_seconds,
    over_time,
    replay,
    replay_over_time,
    shuffled,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not STACKS, reason="no agent corpus under tests/fixtures/agents"),
]

SEEDS = range(20)


def _accounted(out: Replay) -> None:
    assert out.received == out.assembled + sum(out.skipped.values()) + out.buffered
    assert out.buffered == 0  # flushed
    # A span arriving after its trace was assembled never makes a second assembly of it.
    assert {trace: reports for trace, reports in out.report_of.items() if len(reports) > 1} == {}


def _recorded_answers(stack: str) -> list[tuple[object, ...]]:
    return [(a["question"], a["response"], a["chunks"], a["sub_queries"]) for a in expected(stack)]


@pytest.mark.parametrize("stack", STACKS or ["none"])
def test_recorded_requests_give_the_expected_answers(stack: str) -> None:
    out = replay(load(stack))
    _accounted(out)
    assert [found[:4] for found in answers(out.interactions)] == _recorded_answers(stack)


@pytest.mark.parametrize("per_request", [1, 3, 16, 512])
@pytest.mark.parametrize("stack", STACKS or ["none"])
def test_batches_in_end_order_give_exactly_the_recorded_result(stack: str, per_request: int) -> None:
    recording = load(stack)
    recorded = replay(recording)
    out = replay(recording, in_end_order(recording, per_request))
    _accounted(out)
    assert answers(out.interactions) == answers(recorded.interactions)
    assert [found[:4] for found in answers(out.interactions)] == _recorded_answers(stack)
    assert out.skipped[LATE] == 0


@pytest.mark.parametrize("stack", STACKS or ["none"])
def test_a_run_longer_than_the_wait_whose_spans_keep_arriving_is_assembled_whole(stack: str) -> None:
    recording = load(stack)
    wait = 30.0
    batches = over_time(recording, wait)
    if longest_trace_seconds(batches) <= wait:
        pytest.skip("one gap between two spans is most of each trace: no stretch outlasts the wait")
    out = replay_over_time(recording, batches, wait)
    _accounted(out)
    assert answers(out.interactions) == answers(replay(recording).interactions)
    assert out.skipped[LATE] == 0


@pytest.mark.parametrize("most_per_request", [1, 7])
@pytest.mark.parametrize("stack", STACKS or ["none"])
def test_any_order_and_split_gives_the_recorded_answers(stack: str, most_per_request: int) -> None:
    recording = load(stack)
    recorded = answers(replay(recording).interactions)
    for seed in SEEDS:
        out = replay(recording, shuffled(recording, seed, most_per_request=most_per_request))
        _accounted(out)
        # (Spans the answers do not need may come after their trace was assembled: counted late.)
        assert answers(out.interactions) == recorded, seed
