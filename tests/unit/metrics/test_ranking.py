"""Ranking metrics: worked examples, edge cases, trec_eval test vectors and properties."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.metrics.ranking import (
    context_precision_at_k,
    hit_rate_at_k,
    mean_reciprocal_rank,
    ndcg_at_k,
    precision_at_k,
    rank_trec_run,
    recall_at_k,
    reciprocal_rank,
)
from tests.support.repo import SHARED_DATA

TREC_DIR = SHARED_DATA / "trec_eval_test_vectors"


# --- worked examples (seed 002) ----------------------------------------------------------------

SEED_RETRIEVED = ["doc1", "doc3", "doc5", "doc2", "doc7"]
SEED_RELEVANT = ["doc1", "doc2", "doc4"]
SEED_GRADES = {"doc1": 3, "doc2": 2, "doc3": 0, "doc4": 1, "doc5": 0}
SEED_NDCG_RANKING = ["doc1", "doc3", "doc2", "doc5", "doc4"]


def test_recall_at_k_seed_example() -> None:
    assert recall_at_k(SEED_RETRIEVED, SEED_RELEVANT, 3) == pytest.approx(1 / 3)
    assert recall_at_k(SEED_RETRIEVED, SEED_RELEVANT, 5) == pytest.approx(2 / 3)


def test_precision_at_k_seed_example() -> None:
    assert precision_at_k(SEED_RETRIEVED, SEED_RELEVANT, 3) == pytest.approx(1 / 3)
    assert precision_at_k(SEED_RETRIEVED, SEED_RELEVANT, 5) == pytest.approx(0.4)


def test_reciprocal_rank_seed_example() -> None:
    assert reciprocal_rank(["doc3", "doc1", "doc5"], ["doc1", "doc2"]) == 0.5


def test_ndcg_seed_example_linear() -> None:
    # The seed text prints "~0.85"; the formula it implements gives 0.9212.
    dcg = 3 + 2 / math.log2(4) + 1 / math.log2(6)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    value = ndcg_at_k(SEED_NDCG_RANKING, SEED_GRADES, 5)
    assert value is not None
    assert value == pytest.approx(dcg / ideal, abs=1e-12)
    assert round(value, 4) == 0.9212


def test_ndcg_seed_example_exponential() -> None:
    dcg = 7 + 3 / math.log2(4) + 1 / math.log2(6)
    ideal = 7 + 3 / math.log2(3) + 1 / math.log2(4)
    value = ndcg_at_k(SEED_NDCG_RANKING, SEED_GRADES, 5, gain="exponential")
    assert value is not None
    assert value == pytest.approx(dcg / ideal, abs=1e-12)
    assert round(value, 4) == 0.9461


def test_hit_rate_at_k() -> None:
    assert hit_rate_at_k(SEED_RETRIEVED, SEED_RELEVANT, 1) == 1.0
    assert hit_rate_at_k(["doc3", "doc5", "doc1"], SEED_RELEVANT, 2) == 0.0
    assert hit_rate_at_k(["doc3", "doc5", "doc1"], SEED_RELEVANT, 3) == 1.0


def test_mean_reciprocal_rank() -> None:
    retrieved = [["a", "b"], ["x", "y", "b"], ["z"]]
    relevant = [{"a"}, {"b"}, {"q"}]
    assert mean_reciprocal_rank(retrieved, relevant) == pytest.approx((1 + 1 / 3 + 0) / 3)


# --- edge cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1])
@pytest.mark.parametrize("metric", [precision_at_k, recall_at_k, hit_rate_at_k])
def test_binary_at_k_rejects_non_positive_k(metric, k: int) -> None:
    with pytest.raises(ValueError, match="k must be a positive integer"):
        metric(["a"], {"a"}, k)


@pytest.mark.parametrize("k", [0, -3])
def test_ndcg_rejects_non_positive_k(k: int) -> None:
    with pytest.raises(ValueError, match="k must be a positive integer"):
        ndcg_at_k(["a"], {"a": 1}, k)


def test_ndcg_rejects_unknown_gain() -> None:
    with pytest.raises(ValueError, match="gain"):
        ndcg_at_k(["a"], {"a": 1}, 1, gain="cubic")  # type: ignore[arg-type]


def test_empty_retrieved_is_a_real_zero() -> None:
    assert precision_at_k([], {"a"}, 5) == 0.0
    assert recall_at_k([], {"a"}, 5) == 0.0
    assert hit_rate_at_k([], {"a"}, 5) == 0.0
    assert reciprocal_rank([], {"a"}) == 0.0
    assert ndcg_at_k([], {"a": 2}, 5) == 0.0


def test_no_relevant_documents_is_undefined() -> None:
    # trec_eval reports 0 for all of these; a query the corpus cannot answer says nothing
    # about the retriever, so it is None here.
    assert precision_at_k(["a", "b"], set(), 2) is None
    assert recall_at_k(["a", "b"], [], 2) is None
    assert hit_rate_at_k(["a", "b"], (), 2) is None
    assert reciprocal_rank(["a", "b"], set()) is None
    assert ndcg_at_k(["a", "b"], {}, 2) is None
    assert ndcg_at_k(["a", "b"], {"a": 0, "b": -1}, 2) is None


def test_k_larger_than_the_list_keeps_k_as_precision_denominator() -> None:
    assert precision_at_k(["a", "x"], {"a", "b"}, 10) == pytest.approx(0.1)
    assert recall_at_k(["a", "x"], {"a", "b"}, 10) == 0.5
    assert hit_rate_at_k(["x", "a"], {"a", "b"}, 10) == 1.0
    # Ideal DCG: both relevant docs at ranks 1 and 2; only one was retrieved, at rank 1.
    assert ndcg_at_k(["a", "x"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_all_retrieved_relevant() -> None:
    retrieved = ["a", "b", "c"]
    assert precision_at_k(retrieved, set(retrieved), 3) == 1.0
    assert recall_at_k(retrieved, set(retrieved), 3) == 1.0
    assert reciprocal_rank(retrieved, set(retrieved)) == 1.0
    assert ndcg_at_k(retrieved, dict.fromkeys(retrieved, 1), 3) == pytest.approx(1.0)


def test_none_retrieved_relevant() -> None:
    retrieved = ["x", "y", "z"]
    relevant = {"a"}
    assert precision_at_k(retrieved, relevant, 3) == 0.0
    assert recall_at_k(retrieved, relevant, 3) == 0.0
    assert hit_rate_at_k(retrieved, relevant, 3) == 0.0
    assert reciprocal_rank(retrieved, relevant) == 0.0
    assert ndcg_at_k(retrieved, {"a": 3, "x": 0}, 3) == 0.0


def test_duplicated_relevant_id_counts_once() -> None:
    retrieved = ["a", "a", "x"]
    assert precision_at_k(retrieved, {"a", "b"}, 3) == pytest.approx(1 / 3)
    assert recall_at_k(retrieved, {"a", "b"}, 3) == 0.5
    assert reciprocal_rank(["x", "a", "a"], {"a"}) == 0.5
    # The repeat earns nothing but still occupies rank 2, so "b" is discounted as rank 3.
    expected = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["a", "a", "b"], {"a": 1, "b": 1}, 3) == pytest.approx(expected)
    assert ndcg_at_k(["a", "a", "a"], {"a": 1}, 3) == pytest.approx(1.0)


def test_relevant_ids_given_as_list_with_repeats() -> None:
    assert recall_at_k(["a"], ["a", "a", "b"], 1) == 0.5


def test_ndcg_negative_grades_count_as_zero() -> None:
    assert ndcg_at_k(["bad", "good"], {"bad": -1, "good": 2}, 2) == pytest.approx(1 / math.log2(3))


def test_ndcg_unjudged_documents_have_zero_gain() -> None:
    assert ndcg_at_k(["unjudged", "a"], {"a": 1}, 2) == pytest.approx(1 / math.log2(3))


def test_ndcg_ideal_uses_judged_documents_that_were_not_retrieved() -> None:
    value = ndcg_at_k(["b"], {"a": 3, "b": 1}, 2)
    assert value == pytest.approx(1 / (3 + 1 / math.log2(3)))


def test_mean_reciprocal_rank_skips_undefined_queries() -> None:
    assert mean_reciprocal_rank([["a"], ["b"]], [{"a"}, set()]) == 1.0
    assert mean_reciprocal_rank([["a"]], [set()]) is None
    assert mean_reciprocal_rank([], []) is None


def test_mean_reciprocal_rank_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError, match="2 retrieved lists but 1 relevant"):
        mean_reciprocal_rank([["a"], ["b"]], [{"a"}])


def test_rank_trec_run_sorts_by_score_then_docno_descending() -> None:
    scored = [("d1", 1.0), ("d3", 2.0), ("d2", 2.0), ("d0", 0.5)]
    assert rank_trec_run(scored) == ["d3", "d2", "d1", "d0"]


# --- context precision@K ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([0, 1, 1, 0, 0], 0.5833),
        ([1, 1, 0, 1, 0], 0.9167),
        ([0, 0, 1, 1, 1], 0.4778),
        ([1, 0], 1.0),
        ([0, 1], 0.5),
        ([1, 0, 0], 1.0),
        ([True, False, True], 0.8333),
    ],
)
def test_context_precision_worked_examples(verdicts: list[int], expected: float) -> None:
    value = context_precision_at_k(verdicts)
    assert value is not None
    assert round(value, 4) == expected


def test_context_precision_exact_value() -> None:
    assert context_precision_at_k([0, 0, 1, 1, 1]) == pytest.approx((1 / 3 + 2 / 4 + 3 / 5) / 3)


def test_context_precision_edge_cases() -> None:
    assert context_precision_at_k([]) is None
    assert context_precision_at_k([0, 0, 0]) == 0.0
    assert context_precision_at_k([1, 1, 1]) == 1.0


@pytest.mark.parametrize("bad", [None, 2, -1, 0.5, "1"])
def test_context_precision_rejects_unknown_verdicts(bad: object) -> None:
    with pytest.raises(ValueError, match="rank 2"):
        context_precision_at_k([1, bad, 0])  # type: ignore[list-item]


# --- trec_eval test vectors ---------------------------------------------------------------------

needs_trec = pytest.mark.skipif(
    not TREC_DIR.is_dir(), reason=f"shared trec_eval test vectors not found at {TREC_DIR}"
)

# (output file, qrels file, minimum grade counted as relevant by the binary measures)
TREC_CASES = {
    "aq": ("out.test.aq", "qrels.test", 1),
    "aql": ("out.test.aql", "qrels.rel_level", 2),
    "meas_params": ("out.test.meas_params", "qrels.test", 1),
}
MEASURES = {
    "P": re.compile(r"P_(\d+)"),
    "recall": re.compile(r"recall_(\d+)"),
    "success": re.compile(r"success_(\d+)"),
    "recip_rank": re.compile(r"recip_rank()"),
    "ndcg_cut": re.compile(r"ndcg_cut_(\d+)"),
}


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    grades: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        topic, _, docno, grade = line.split()
        grades[topic][docno] = int(grade)
    return dict(grades)


def _read_run(path: Path) -> dict[str, list[str]]:
    scored: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        topic, _, docno, _rank, score, _run = line.split()
        scored[topic].append((docno, float(score)))
    return {topic: rank_trec_run(docs) for topic, docs in scored.items()}


def _read_trec_output(path: Path, measure: re.Pattern[str]) -> dict[tuple[str, str], float]:
    """(measure name, topic or "all") → value, for the measures matching ``measure``."""
    values: dict[tuple[str, str], float] = {}
    for line in path.read_text().splitlines():
        name, topic, value = line.split()
        if measure.fullmatch(name):
            values[(name, topic)] = float(value)
    return values


def _as_trec(value: float | None) -> float:
    # trec_eval scores a topic without relevant documents as 0 where these metrics say None.
    # Every topic in these vectors has relevant documents, so this only guards the comparison.
    return 0.0 if value is None else value


def _ours(
    family: str, cutoff: int, ranking: list[str], grades: dict[str, int], min_grade: int
) -> float | None:
    relevant = {doc for doc, grade in grades.items() if grade >= min_grade}
    if family == "P":
        return precision_at_k(ranking, relevant, cutoff)
    if family == "recall":
        return recall_at_k(ranking, relevant, cutoff)
    if family == "success":
        return hit_rate_at_k(ranking, relevant, cutoff)
    if family == "recip_rank":
        return reciprocal_rank(ranking, relevant)
    # NDCG uses the raw grades, not the -l threshold.
    return ndcg_at_k(ranking, grades, cutoff)


@needs_trec
@pytest.mark.parametrize(
    ("case", "family"),
    [
        (case, family)
        for case in sorted(TREC_CASES)
        for family in sorted(MEASURES)
        # The custom-cutoff command line asks for no recip_rank.
        if (case, family) != ("meas_params", "recip_rank")
    ],
)
def test_trec_eval_vectors(case: str, family: str) -> None:
    output_file, qrels_file, min_grade = TREC_CASES[case]
    qrels = _read_qrels(TREC_DIR / qrels_file)
    runs = _read_run(TREC_DIR / "results.test")
    expected = _read_trec_output(TREC_DIR / output_file, MEASURES[family])
    assert expected, f"{output_file} reports no {family} measure"

    topics = sorted(qrels)
    assert {topic for _, topic in expected} == {*topics, "all"}
    mismatches = []
    for name in sorted({name for name, _ in expected}):
        match = MEASURES[family].fullmatch(name)
        assert match is not None
        cutoff = int(match.group(1) or 0)
        per_topic = {
            topic: _as_trec(_ours(family, cutoff, runs[topic], qrels[topic], min_grade)) for topic in topics
        }
        per_topic["all"] = math.fsum(per_topic.values()) / len(topics)
        mismatches += [
            (name, topic, value, expected[(name, topic)])
            for topic, value in per_topic.items()
            if abs(value - expected[(name, topic)]) > 5e-5
        ]
    assert mismatches == []


@needs_trec
def test_trec_eval_vectors_cover_the_documented_measures() -> None:
    # Guards against a vacuous pass: the files hold the values the README promises.
    counts = {
        case: sum(len(_read_trec_output(TREC_DIR / output, pattern)) for pattern in MEASURES.values())
        for case, (output, _, _) in TREC_CASES.items()
    }
    # aq/aql: 4 rows (3 topics + all) x (9 P + 9 recall + 3 success + 1 recip_rank + 9 ndcg).
    # meas_params: 4 rows x (3 P + 2 recall + 3 success + 3 ndcg_cut).
    assert counts == {"aq": 124, "aql": 124, "meas_params": 44}


@needs_trec
def test_rank_trec_run_reproduces_the_runs_rank_column_including_ties() -> None:
    scored: dict[str, list[tuple[str, float]]] = defaultdict(list)
    by_rank_column: dict[str, list[tuple[int, str]]] = defaultdict(list)
    tied_scores = 0
    for line in (TREC_DIR / "results.test").read_text().splitlines():
        topic, _, docno, rank, score, _ = line.split()
        scored[topic].append((docno, float(score)))
        by_rank_column[topic].append((int(rank), docno))
    for topic, docs in scored.items():
        scores = [score for _, score in docs]
        tied_scores += len(scores) - len(set(scores))
        assert rank_trec_run(docs) == [docno for _, docno in sorted(by_rank_column[topic])]
    assert tied_scores > 0, "expected tied scores in results.test"


@needs_trec
def test_mean_reciprocal_rank_matches_trec_eval_all_row() -> None:
    qrels = _read_qrels(TREC_DIR / "qrels.test")
    runs = _read_run(TREC_DIR / "results.test")
    topics = sorted(qrels)
    expected = _read_trec_output(TREC_DIR / "out.test.aq", MEASURES["recip_rank"])
    mrr = mean_reciprocal_rank(
        [runs[t] for t in topics],
        [{doc for doc, grade in qrels[t].items() if grade >= 1} for t in topics],
    )
    assert mrr == pytest.approx(expected[("recip_rank", "all")], abs=5e-5)


# --- properties ---------------------------------------------------------------------------------

doc_ids = st.text(alphabet="abcdefgh", min_size=1, max_size=2)
rankings = st.lists(doc_ids, max_size=12)
relevant_sets = st.sets(doc_ids, min_size=1, max_size=8)
cutoffs = st.integers(min_value=1, max_value=15)


@given(rankings, relevant_sets, cutoffs)
def test_binary_metrics_are_fractions(ranking: list[str], relevant: set[str], k: int) -> None:
    for metric in (precision_at_k, recall_at_k, hit_rate_at_k):
        value = metric(ranking, relevant, k)
        assert value is not None
        assert 0.0 <= value <= 1.0
    rr = reciprocal_rank(ranking, relevant)
    assert rr is not None
    assert 0.0 <= rr <= 1.0


@given(rankings, relevant_sets, cutoffs)
def test_recall_is_monotone_in_k(ranking: list[str], relevant: set[str], k: int) -> None:
    at_k, at_next = recall_at_k(ranking, relevant, k), recall_at_k(ranking, relevant, k + 1)
    assert at_k is not None
    assert at_next is not None
    assert at_k <= at_next


@given(rankings, relevant_sets, cutoffs)
def test_hit_rate_agrees_with_reciprocal_rank(ranking: list[str], relevant: set[str], k: int) -> None:
    rr = reciprocal_rank(ranking, relevant)
    assert hit_rate_at_k(ranking, relevant, k) == (1.0 if rr and 1 / rr <= k else 0.0)


grade_maps = st.dictionaries(doc_ids, st.integers(min_value=-1, max_value=4), max_size=10)


@given(grade_maps, cutoffs, st.sampled_from(["linear", "exponential"]))
def test_ndcg_of_ideal_ordering_is_one(grades: dict[str, int], k: int, gain: str) -> None:
    ideal = sorted(grades, key=lambda doc: grades[doc], reverse=True)
    value = ndcg_at_k(ideal, grades, k, gain=gain)  # type: ignore[arg-type]
    if any(grade > 0 for grade in grades.values()):
        assert value == pytest.approx(1.0)
    else:
        assert value is None


@given(rankings, grade_maps, cutoffs)
def test_ndcg_is_a_fraction(ranking: list[str], grades: dict[str, int], k: int) -> None:
    value = ndcg_at_k(ranking, grades, k)
    assert value is None or 0.0 <= value <= 1.0 + 1e-12


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_context_precision_is_a_fraction_and_sorting_is_optimal(verdicts: list[bool]) -> None:
    value = context_precision_at_k(verdicts)
    assert value is not None
    assert 0.0 <= value <= 1.0
    best = context_precision_at_k(sorted(verdicts, reverse=True))
    assert best is not None
    assert value <= best
    assert best == (1.0 if any(verdicts) else 0.0)
