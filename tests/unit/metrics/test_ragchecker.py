"""RAGChecker claim metrics: the published example, hand-made edge cases, properties."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.metrics.ragchecker import (
    ClaimCheck,
    RagCheckerScores,
    aggregate_ragchecker,
    claim_check_from_verdicts,
    ragchecker_scores,
)
from tests.support.repo import SHARED_DATA

CHECKING_OUTPUTS = SHARED_DATA / "ragchecker_examples" / "checking_outputs.json"

needs_ragchecker_example = pytest.mark.skipif(
    not CHECKING_OUTPUTS.is_file(),
    reason=f"shared RAGChecker example not found at {CHECKING_OUTPUTS}",
)

METRIC_NAMES = [field.name for field in dataclasses.fields(RagCheckerScores)]
GENERATOR_METRICS = [
    "faithfulness",
    "hallucination",
    "self_knowledge",
    "noise_sensitivity_in_relevant",
    "noise_sensitivity_in_irrelevant",
]


@cache
def _example() -> dict[str, Any]:
    return json.loads(CHECKING_OUTPUTS.read_text())


def _check_of(item: dict[str, Any]) -> ClaimCheck:
    return claim_check_from_verdicts(
        item["answer2response"],
        item["response2answer"],
        item["retrieved2response"],
        item["retrieved2answer"],
        n_chunks=len(item["retrieved_context"]),
    )


# --- the published example ---------------------------------------------------------------------


@needs_ragchecker_example
@pytest.mark.parametrize("index", [0, 1])
def test_per_item_metrics_match_ragchecker(index: int) -> None:
    item = _example()["results"][index]
    scores = ragchecker_scores(_check_of(item))
    expected = item["metrics"]
    assert set(expected) == set(METRIC_NAMES)
    # Per-item metrics are fractions in the file, not percentages.
    assert dataclasses.asdict(scores) == pytest.approx(expected, abs=1e-12)


@needs_ragchecker_example
def test_aggregate_matches_ragchecker_report() -> None:
    example = _example()
    aggregate = aggregate_ragchecker([ragchecker_scores(_check_of(item)) for item in example["results"]])
    # The top-level report is grouped, scaled by 100 and rounded to one decimal.
    reported = {name: value for group in example["metrics"].values() for name, value in group.items()}
    assert set(reported) == set(aggregate)
    percentages = {name: round(value * 100, 1) for name, value in aggregate.items() if value is not None}
    assert percentages == reported


@needs_ragchecker_example
def test_n_chunks_is_inferred_from_the_matrices() -> None:
    item = _example()["results"][0]
    inferred = claim_check_from_verdicts(
        item["answer2response"],
        item["response2answer"],
        item["retrieved2response"],
        item["retrieved2answer"],
    )
    assert inferred == _check_of(item)
    assert inferred.n_chunks == 4


# --- hand-made cases ----------------------------------------------------------------------------


def _check(
    answer2response: list[bool],
    response2answer: list[bool],
    retrieved2response: list[list[bool]],
    retrieved2answer: list[list[bool]],
    n_chunks: int,
) -> ClaimCheck:
    return ClaimCheck(
        answer2response=answer2response,
        response2answer=response2answer,
        retrieved2response=retrieved2response,
        retrieved2answer=retrieved2answer,
        n_chunks=n_chunks,
    )


T, F = True, False


def test_small_worked_example() -> None:
    # Chunk 0 entails gt claim 0 (relevant); chunk 1 entails no gt claim (irrelevant).
    check = _check(
        answer2response=[T, T, F, F],
        response2answer=[T, F, F],
        retrieved2response=[[T, F], [F, F], [F, T], [F, F]],
        retrieved2answer=[[T, F], [F, F], [F, F]],
        n_chunks=2,
    )
    scores = ragchecker_scores(check)
    expected = {
        "precision": 0.5,
        "recall": 1 / 3,
        "f1": 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3),
        "claim_recall": 1 / 3,
        "context_precision": 0.5,
        "faithfulness": 0.5,
        "hallucination": 0.25,
        "self_knowledge": 0.25,
        "context_utilization": 1.0,
        "noise_sensitivity_in_relevant": 0.0,
        "noise_sensitivity_in_irrelevant": 0.25,
    }
    assert dataclasses.asdict(scores) == pytest.approx(expected, abs=1e-12)


def test_claim_entailed_by_relevant_and_irrelevant_chunk_counts_as_relevant_noise_only() -> None:
    # Response claim 1 is incorrect and entailed by chunk 0 (relevant) and chunk 1 (irrelevant);
    # RAGChecker's implementation attributes it to the relevant chunk only.
    check = _check(
        answer2response=[T, F],
        response2answer=[T],
        retrieved2response=[[T, F], [T, T]],
        retrieved2answer=[[T, F]],
        n_chunks=2,
    )
    scores = ragchecker_scores(check)
    assert scores.noise_sensitivity_in_relevant == 0.5
    assert scores.noise_sensitivity_in_irrelevant == 0.0


def test_no_response_claims() -> None:
    check = _check([], [T, F], [], [[T], [F]], n_chunks=1)
    scores = ragchecker_scores(check)
    assert scores.precision is None
    assert scores.f1 is None
    for name in GENERATOR_METRICS:
        assert getattr(scores, name) is None, name
    # The gt side is still defined.
    assert scores.recall == 0.5
    assert scores.claim_recall == 0.5
    assert scores.context_precision == 1.0
    assert scores.context_utilization == 1.0


def test_no_gt_claims() -> None:
    check = _check([T], [], [[T]], [], n_chunks=1)
    scores = ragchecker_scores(check)
    assert scores.recall is None
    assert scores.f1 is None
    assert scores.claim_recall is None
    assert scores.context_precision is None
    assert scores.context_utilization is None
    # Chunk relevance is defined by the gt claims: without them the noise split is undefined,
    # not 1.0 / 0.0.
    assert scores.noise_sensitivity_in_relevant is None
    assert scores.noise_sensitivity_in_irrelevant is None
    assert scores.precision == 1.0
    assert scores.faithfulness == 1.0
    incorrect = ragchecker_scores(_check([F], [], [[T]], [], n_chunks=1))
    assert incorrect.noise_sensitivity_in_relevant is None
    assert incorrect.noise_sensitivity_in_irrelevant is None


def test_no_chunks() -> None:
    check = _check([T, F], [T], [[], []], [[]], n_chunks=0)
    scores = ragchecker_scores(check)
    assert scores.precision == 0.5
    assert scores.recall == 1.0
    assert scores.f1 == pytest.approx(2 / 3)
    # Retrieving nothing is a real retrieval failure ...
    assert scores.claim_recall == 0.0
    # ... but there is no retrieved context to be precise about or for the generator to use.
    assert scores.context_precision is None
    assert scores.context_utilization is None
    for name in GENERATOR_METRICS:
        assert getattr(scores, name) is None, name


def test_no_gt_claim_found_in_context_leaves_utilisation_undefined() -> None:
    check = _check([T], [T], [[F]], [[F]], n_chunks=1)
    scores = ragchecker_scores(check)
    assert scores.context_utilization is None
    assert scores.claim_recall == 0.0
    assert scores.context_precision == 0.0


def test_everything_entailed() -> None:
    check = _check([T, T], [T, T, T], [[T, T], [T, T]], [[T, T]] * 3, n_chunks=2)
    scores = ragchecker_scores(check)
    assert scores == RagCheckerScores(
        precision=1.0,
        recall=1.0,
        f1=1.0,
        claim_recall=1.0,
        context_precision=1.0,
        faithfulness=1.0,
        hallucination=0.0,
        self_knowledge=0.0,
        context_utilization=1.0,
        noise_sensitivity_in_relevant=0.0,
        noise_sensitivity_in_irrelevant=0.0,
    )


def test_nothing_entailed() -> None:
    check = _check([F], [F], [[F]], [[F]], n_chunks=1)
    scores = ragchecker_scores(check)
    assert scores.precision == 0.0
    assert scores.recall == 0.0
    assert scores.f1 == 0.0
    assert scores.hallucination == 1.0
    assert scores.faithfulness == 0.0
    assert scores.self_knowledge == 0.0


# --- aggregation --------------------------------------------------------------------------------


def test_aggregate_skips_undefined_values() -> None:
    defined = ragchecker_scores(_check([T], [T], [[T]], [[T]], n_chunks=1))
    no_chunks = ragchecker_scores(_check([F], [F], [[]], [[]], n_chunks=0))
    aggregate = aggregate_ragchecker([defined, no_chunks])
    assert list(aggregate) == METRIC_NAMES
    assert aggregate["precision"] == 0.5
    assert aggregate["faithfulness"] == 1.0  # undefined for the second item
    assert aggregate["context_precision"] == 1.0


def test_aggregate_of_nothing_is_undefined() -> None:
    assert aggregate_ragchecker([]) == dict.fromkeys(METRIC_NAMES)


def test_aggregate_f1_is_the_mean_of_item_f1() -> None:
    items = [
        ragchecker_scores(_check([T], [T, F, F], [[T]], [[T]] * 3, n_chunks=1)),
        ragchecker_scores(_check([T, F, F], [T], [[T]] * 3, [[T]], n_chunks=1)),
    ]
    aggregate = aggregate_ragchecker(items)
    assert aggregate["f1"] == pytest.approx(0.5)
    assert aggregate["precision"] == pytest.approx(2 / 3)
    assert aggregate["recall"] == pytest.approx(2 / 3)


# --- parsing and validation ---------------------------------------------------------------------


def test_verdict_strings() -> None:
    check = claim_check_from_verdicts(
        ["Entailment", " entailment ", "Neutral", "Contradiction"],
        ["ENTAILMENT"],
        [["Entailment"], ["Neutral"], ["Contradiction"], ["Entailment"]],
        [["Neutral"]],
    )
    assert check.answer2response == (T, T, F, F)
    assert check.response2answer == (T,)
    assert check.retrieved2response == ((T,), (F,), (F,), (T,))
    assert check.retrieved2answer == ((F,),)
    assert check.n_chunks == 1


@pytest.mark.parametrize("bad", [None, "", "Entailed", "yes", True])
def test_unknown_verdict_is_an_error(bad: object) -> None:
    with pytest.raises(ValueError, match=r"retrieved2answer\[0\]\[1\]"):
        claim_check_from_verdicts([], ["Neutral"], [], [["Neutral", bad]])  # type: ignore[list-item]


def test_n_chunks_required_without_claims() -> None:
    with pytest.raises(ValueError, match="n_chunks is required"):
        claim_check_from_verdicts([], [], [], [])
    check = claim_check_from_verdicts([], [], [], [], n_chunks=3)
    assert ragchecker_scores(check) == RagCheckerScores(*[None] * len(METRIC_NAMES))


def test_shape_mismatches_are_rejected() -> None:
    with pytest.raises(ValueError, match="retrieved2response has 1 rows but there are 2 claims"):
        ClaimCheck([T, F], [], [[T]], [], n_chunks=1)
    with pytest.raises(ValueError, match=r"retrieved2answer\[1\] has 1 verdicts, expected 2"):
        ClaimCheck([], [T, T], [], [[T, F], [T]], n_chunks=2)
    with pytest.raises(ValueError, match="n_chunks"):
        ClaimCheck([], [], [], [], n_chunks=-1)


def test_non_boolean_results_are_rejected() -> None:
    with pytest.raises(ValueError, match="booleans"):
        ClaimCheck([T, None], [], [[T], [F]], [], n_chunks=1)  # type: ignore[list-item]


def test_claim_check_is_immutable_and_normalised() -> None:
    check = ClaimCheck([1, 0], [T], [[1], [0]], [[True]], n_chunks=1)  # type: ignore[list-item]
    assert check.answer2response == (T, F)
    assert check.retrieved2response == ((T,), (F,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.n_chunks = 2  # type: ignore[misc]
    assert hash(check) == hash(ClaimCheck([T, F], [T], [[T], [F]], [[T]], n_chunks=1))


# --- properties ---------------------------------------------------------------------------------


@st.composite
def claim_checks(draw: st.DrawFn) -> ClaimCheck:
    n_chunks = draw(st.integers(min_value=0, max_value=4))
    n_resp = draw(st.integers(min_value=0, max_value=6))
    n_gt = draw(st.integers(min_value=0, max_value=6))
    row = st.lists(st.booleans(), min_size=n_chunks, max_size=n_chunks)
    return ClaimCheck(
        answer2response=draw(st.lists(st.booleans(), min_size=n_resp, max_size=n_resp)),
        response2answer=draw(st.lists(st.booleans(), min_size=n_gt, max_size=n_gt)),
        retrieved2response=draw(st.lists(row, min_size=n_resp, max_size=n_resp)),
        retrieved2answer=draw(st.lists(row, min_size=n_gt, max_size=n_gt)),
        n_chunks=n_chunks,
    )


@given(claim_checks())
def test_scores_are_fractions(check: ClaimCheck) -> None:
    for name, value in dataclasses.asdict(ragchecker_scores(check)).items():
        assert value is None or 0.0 <= value <= 1.0, name


@given(claim_checks())
def test_faithfulness_hallucination_self_knowledge_partition_claims(check: ClaimCheck) -> None:
    scores = ragchecker_scores(check)
    if scores.faithfulness is None:
        assert scores.hallucination is None
        assert scores.self_knowledge is None
        return
    assert scores.hallucination is not None
    assert scores.self_knowledge is not None
    assert scores.precision is not None
    total = scores.faithfulness + scores.hallucination + scores.self_knowledge
    assert total == pytest.approx(1.0)
    # Self-knowledge plus hallucination cover the claims found in no chunk; precision counts
    # the correct ones, so self-knowledge can never exceed it.
    assert scores.self_knowledge <= scores.precision + 1e-12
