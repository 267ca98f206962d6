"""Reference-based non-LLM metrics: ragas documentation vectors, worked examples, edge cases."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.metrics.ranking import context_precision_at_k
from agent.metrics.reference import (
    context_entities_recall,
    id_context_precision,
    id_context_recall,
    levenshtein_distance,
    levenshtein_similarity,
    nonllm_context_precision,
    nonllm_context_recall,
)
from tests.support.repo import SHARED_DATA

RAGAS_EXAMPLES = SHARED_DATA / "ragas_doc_examples" / "ragas_doc_examples.json"

needs_ragas_examples = pytest.mark.skipif(
    not RAGAS_EXAMPLES.is_file(), reason=f"shared ragas examples not found at {RAGAS_EXAMPLES}"
)


@cache
def _vectors() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(RAGAS_EXAMPLES.read_text())["vectors"])


def _by_family(*families: str) -> list[dict[str, Any]]:
    return [v for v in _vectors() if v["family"] in families]


def _textbook_levenshtein(a: str, b: str) -> int:
    """The two-row dynamic programme, as an independent oracle."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


# --- ragas documentation vectors ----------------------------------------------------------------


@needs_ragas_examples
def test_nonllm_context_precision_vectors() -> None:
    vectors = _by_family("nonllm_context_precision")
    assert vectors
    for vector in vectors:
        inputs = vector["inputs"]
        value = nonllm_context_precision(inputs["retrieved_contexts"], inputs["reference_contexts"])
        # ragas divides by (Σv_k + 1e-10); the exact ratio differs by at most 1e-10.
        assert value == pytest.approx(vector["expected"], abs=1e-6), vector["id"]


@needs_ragas_examples
def test_nonllm_context_recall_vectors() -> None:
    vectors = _by_family("nonllm_context_recall")
    assert vectors
    for vector in vectors:
        inputs = vector["inputs"]
        value = nonllm_context_recall(inputs["retrieved_contexts"], inputs["reference_contexts"])
        assert value == pytest.approx(vector["expected"], abs=1e-12), vector["id"]


@needs_ragas_examples
@pytest.mark.parametrize(
    ("family", "metric"),
    [("id_context_precision", id_context_precision), ("id_context_recall", id_context_recall)],
)
def test_id_based_vectors(family: str, metric: Any) -> None:
    vectors = _by_family(family)
    assert vectors
    for vector in vectors:
        inputs = vector["inputs"]
        value = metric(inputs["retrieved_context_ids"], inputs["reference_context_ids"])
        assert value == pytest.approx(vector["expected"], abs=1e-12), vector["id"]


@needs_ragas_examples
def test_context_entities_recall_vectors_with_given_entities() -> None:
    # Only the vectors that list their extracted entities are deterministic; the others
    # depend on an LLM's entity extraction.
    vectors = [v for v in _by_family("context_entities_recall") if v["deterministic"]]
    assert len(vectors) == 2
    for vector in vectors:
        inputs = vector["inputs"]
        value = context_entities_recall(inputs["reference_entities"], inputs["context_entities"])
        assert value == pytest.approx(vector["expected"], abs=1e-12), vector["id"]


@needs_ragas_examples
def test_levenshtein_string_similarity_vector() -> None:
    # The other string_similarity vectors are BLEU, ROUGE, chrF, exact match and string
    # presence, which this module does not implement.
    vectors = [v for v in _by_family("string_similarity") if "Levenshtein" in v["metric"]]
    assert len(vectors) == 1
    for vector in vectors:
        inputs = vector["inputs"]
        value = levenshtein_similarity(inputs["response"], inputs["reference"])
        assert value == pytest.approx(vector["expected"], abs=1e-12), vector["id"]


@needs_ragas_examples
def test_llm_context_precision_vectors_via_implied_verdicts() -> None:
    vectors = _by_family("response_anchored_context_precision", "reference_context_precision")
    assert len(vectors) == 4
    for vector in vectors:
        assert len(vector["implied_verdicts"]) == len(vector["inputs"]["retrieved_contexts"])
        value = context_precision_at_k(vector["implied_verdicts"])
        assert value == pytest.approx(vector["expected"], abs=1e-6), vector["id"]


# --- context entities recall --------------------------------------------------------------------


def test_context_entities_recall_seed_example() -> None:
    value = context_entities_recall(["Brazil", "Brasília", "April 21, 1960"], ["Brasília", "Brazil"])
    assert value is not None
    assert round(value, 4) == 0.6667


def test_context_entities_recall_normalises_case_whitespace_and_unicode() -> None:
    decomposed = "Brasi\u0301lia"  # "i" followed by a combining acute accent
    value = context_entities_recall(
        ["  April 21,\t1960 ", "BRASÍLIA", "Brazil"], ["april 21, 1960", decomposed]
    )
    assert value == pytest.approx(2 / 3)


def test_context_entities_recall_counts_duplicates_once() -> None:
    assert context_entities_recall(["Agra", "agra", "Taj Mahal"], ["Agra", "Agra"]) == 0.5


def test_context_entities_recall_undefined_without_reference_entities() -> None:
    assert context_entities_recall([], ["Paris"]) is None
    assert context_entities_recall(["", "   "], ["Paris"]) is None


def test_context_entities_recall_no_context_entities_is_zero() -> None:
    assert context_entities_recall(["Paris"], []) == 0.0


# --- Levenshtein --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "", 0),
        ("", "abc", 3),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("abc", "abc", 0),
        ("Paris", "India", 4),
        ("résumé", "resume", 2),
    ],
)
def test_levenshtein_distance_known_values(a: str, b: str, distance: int) -> None:
    assert levenshtein_distance(a, b) == distance
    assert levenshtein_distance(b, a) == distance


def test_levenshtein_similarity_edge_cases() -> None:
    assert levenshtein_similarity("", "") == 1.0
    assert levenshtein_similarity("abc", "") == 0.0
    assert levenshtein_similarity("abc", "xyz") == 0.0
    assert levenshtein_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    # Case is significant, as in rapidfuzz.
    assert levenshtein_similarity("Paris", "paris") == pytest.approx(0.8)


def test_levenshtein_handles_long_strings() -> None:
    a = "the quick brown fox jumps over the lazy dog " * 60
    b = a.replace("fox", "cat")
    assert len(a) > 2000
    assert levenshtein_distance(a, b) == 3 * 60


@given(st.text(max_size=40), st.text(max_size=90))
def test_levenshtein_matches_textbook_dp(a: str, b: str) -> None:
    assert levenshtein_distance(a, b) == _textbook_levenshtein(a, b)


@given(st.text(alphabet="ab", max_size=70), st.text(alphabet="ab", max_size=70))
def test_levenshtein_matches_textbook_dp_small_alphabet(a: str, b: str) -> None:
    assert levenshtein_distance(a, b) == _textbook_levenshtein(a, b)
    similarity = levenshtein_similarity(a, b)
    assert 0.0 <= similarity <= 1.0


# --- non-LLM context precision and recall -------------------------------------------------------

PARIS = "Paris is the capital of France."
EIFFEL = "The Eiffel Tower is one of the most famous landmarks in Paris."
UNRELATED = "Photosynthesis converts light energy into chemical energy in plants."


def test_nonllm_context_precision_is_rank_aware() -> None:
    references = [PARIS, EIFFEL]
    assert nonllm_context_precision([PARIS, UNRELATED], references) == 1.0
    assert nonllm_context_precision([UNRELATED, PARIS], references) == 0.5
    assert nonllm_context_precision([UNRELATED], references) == 0.0


def test_nonllm_thresholds_precision_inclusive_recall_strict() -> None:
    def half(_a: str, _b: str) -> float:
        return 0.5

    assert nonllm_context_precision(["x"], ["y"], threshold=0.5, similarity=half) == 1.0
    assert nonllm_context_recall(["x"], ["y"], threshold=0.5, similarity=half) == 0.0


def test_nonllm_custom_similarity_and_threshold() -> None:
    def exact(a: str, b: str) -> float:
        return float(a == b)

    assert nonllm_context_recall(["a", "b"], ["b", "c"], similarity=exact) == 0.5
    assert nonllm_context_precision(["c", "b"], ["b"], similarity=exact) == 0.5
    assert nonllm_context_recall([PARIS], [PARIS + "!"], threshold=0.99) == 0.0


def test_nonllm_context_recall_counts_each_reference() -> None:
    assert nonllm_context_recall([PARIS, EIFFEL], [EIFFEL, PARIS, UNRELATED]) == pytest.approx(2 / 3)


def test_nonllm_empty_inputs() -> None:
    assert nonllm_context_precision([], [PARIS]) is None
    assert nonllm_context_precision([PARIS], []) is None
    assert nonllm_context_recall([PARIS], []) is None
    assert nonllm_context_recall([], [PARIS]) == 0.0


# --- ID-based -----------------------------------------------------------------------------------


def test_id_based_worked_examples() -> None:
    reference = ["doc_1", "doc_4", "doc_5", "doc_6"]
    assert id_context_precision(["doc_1", "doc_2", "doc_3", "doc_4"], reference) == 0.5
    assert id_context_recall(["doc_1", "doc_2", "doc_3"], reference) == 0.25


def test_id_based_duplicates_count_once() -> None:
    assert id_context_precision(["a", "a", "b"], ["a"]) == 0.5
    assert id_context_recall(["a"], ["a", "a", "b"]) == 0.5


def test_id_based_empty_inputs() -> None:
    assert id_context_precision([], ["a"]) is None
    assert id_context_recall(["a"], []) is None
    assert id_context_precision(["a"], []) == 0.0
    assert id_context_recall([], ["a"]) == 0.0


def test_id_based_accepts_iterators() -> None:
    assert id_context_precision(iter(["a", "b"]), iter(["b"])) == 0.5
