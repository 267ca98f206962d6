"""Reference-based retrieval metrics that need no LLM judge.

Definitions follow RAGAS (https://docs.ragas.io, "Context Precision", "Context Recall",
"Context Entities Recall", "Traditional" metrics):

- context entities recall = |CE ∩ RE| / |RE|, over entities already extracted from the
  reference (RE) and from the retrieved context (CE);
- non-LLM context precision: a retrieved chunk is relevant when its best string similarity to a
  reference context is >= threshold, then CP@K over those verdicts;
- non-LLM context recall: fraction of reference contexts whose best similarity to a retrieved
  chunk is > threshold (strict, as in RAGAS);
- ID-based context precision / recall: set overlap of retrieved and reference context ids.

The default similarity is 1 - normalised Levenshtein distance, as RAGAS computes it with
rapidfuzz. RAGAS smooths its denominators with 1e-10 (1e-8 for entities); these functions
return exact ratios and ``None`` when a denominator is empty.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence

from agent.metrics.ranking import (
    context_precision_at_k,
    hit_rate_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)

__all__ = [
    "Similarity",
    "context_entities_recall",
    "id_context_precision",
    "id_context_recall",
    "id_rank_scores",
    "levenshtein_distance",
    "levenshtein_similarity",
    "nonllm_context_precision",
    "nonllm_context_recall",
]

Similarity = Callable[[str, str], float]
"""A string similarity in [0, 1], 1 meaning identical."""


def _normalise_entity(entity: str) -> str:
    # NFC first so that a precomposed "í" and "i" + combining accent compare equal.
    return " ".join(unicodedata.normalize("NFC", entity).casefold().split())


def _entity_set(entities: Iterable[str]) -> set[str]:
    # An entity that normalises to "" carries no information and would inflate |RE|.
    return {norm for entity in entities if (norm := _normalise_entity(entity))}


def context_entities_recall(
    reference_entities: Iterable[str], context_entities: Iterable[str]
) -> float | None:
    """Fraction of the reference's entities that also occur among the context's entities.

    Entities are compared after Unicode NFC normalisation, case folding and whitespace
    collapsing, so "April 21,  1960" matches "april 21, 1960"; duplicates count once.
    E.g. RE = {Brazil, Brasília, April 21 1960}, CE = {Brasília, Brazil} → 2/3.

    Args:
        reference_entities: Entities extracted from the reference answer (RE).
        context_entities: Entities extracted from the retrieved contexts (CE).

    Returns:
        |CE ∩ RE| / |RE| in [0, 1], or ``None`` when the reference has no entities.
    """
    reference = _entity_set(reference_entities)
    if not reference:
        return None
    return len(reference & _entity_set(context_entities)) / len(reference)


def levenshtein_distance(a: str, b: str) -> int:
    """Minimum number of single-character insertions, deletions and substitutions from a to b.

    Uses the bit-parallel algorithm of Myers (1999) in Hyyrö's (2001) formulation: each column of
    the DP matrix is a pair of bit vectors held in one Python int, so the cost is
    O(len(a) * ceil(len(b) / word size)) instead of the O(len(a) * len(b)) Python-level steps
    of the textbook two-row DP. Characters are Unicode code points, as in rapidfuzz.
    """
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    # match_masks[c] has bit i set where b[i] == c.
    match_masks: dict[str, int] = {}
    for i, char in enumerate(b):
        match_masks[char] = match_masks.get(char, 0) | (1 << i)
    all_ones = (1 << m) - 1
    last_bit = 1 << (m - 1)
    vp = all_ones  # vertical deltas +1 (column 0 of the DP is 0, 1, ..., m)
    vn = 0  # vertical deltas -1
    distance = m
    for char in a:
        eq = match_masks.get(char, 0)
        xv = eq | vn
        xh = (((eq & vp) + vp) ^ vp) | eq
        hp = vn | ~(xh | vp)
        hn = vp & xh
        if hp & last_bit:
            distance += 1
        elif hn & last_bit:
            distance -= 1
        # Shifting in a 1 encodes the +1 horizontal delta of row 0 (distance from "" is j).
        hp = (hp << 1) | 1
        hn <<= 1
        vp = (hn | ~(xv | hp)) & all_ones
        vn = hp & xv & all_ones
    return distance


def levenshtein_similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / max(len(a), len(b)); 1.0 for two empty strings.

    This is rapidfuzz's ``Levenshtein.normalized_similarity`` with unit weights, the default
    distance of RAGAS's non-LLM string metrics. Case and whitespace are significant.
    E.g. "The Eiffel Tower is located in Paris." vs "... in India." → 1 - 4/37 = 0.8919.
    """
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein_distance(a, b) / longest


def _best_similarity(text: str, candidates: Sequence[str], similarity: Similarity) -> float:
    return max(similarity(text, candidate) for candidate in candidates)


def nonllm_context_precision(
    retrieved_contexts: Sequence[str],
    reference_contexts: Sequence[str],
    threshold: float = 0.5,
    similarity: Similarity = levenshtein_similarity,
) -> float | None:
    """Rank-aware precision of retrieved chunks, judged by string similarity to references.

    Chunk k is relevant (v_k = 1) when ``max_j similarity(chunk_k, reference_j) >= threshold``
    (RAGAS ``NonLLMContextPrecisionWithReference`` uses >= here), and the score is
    :func:`~agent.metrics.ranking.context_precision_at_k` of those verdicts.

    Args:
        retrieved_contexts: Retrieved chunks in rank order.
        reference_contexts: Gold contexts for the query.
        threshold: Minimum similarity for a chunk to count as relevant.
        similarity: ``similarity(retrieved, reference)`` in [0, 1].

    Returns:
        CP@K in [0, 1]; 0.0 when no chunk matches a reference; ``None`` when nothing was
        retrieved or there are no reference contexts to judge against.
    """
    if not retrieved_contexts or not reference_contexts:
        return None
    verdicts = [
        _best_similarity(chunk, reference_contexts, similarity) >= threshold for chunk in retrieved_contexts
    ]
    return context_precision_at_k(verdicts)


def nonllm_context_recall(
    retrieved_contexts: Sequence[str],
    reference_contexts: Sequence[str],
    threshold: float = 0.5,
    similarity: Similarity = levenshtein_similarity,
) -> float | None:
    """Fraction of reference contexts recovered by some retrieved chunk.

    Reference j is recovered when ``max_k similarity(chunk_k, reference_j) > threshold``;
    RAGAS ``NonLLMContextRecall`` uses a strict > here, unlike the >= of its precision.

    Args:
        retrieved_contexts: Retrieved chunks (order does not matter).
        reference_contexts: Gold contexts for the query.
        threshold: Similarity a match must exceed.
        similarity: ``similarity(retrieved, reference)`` in [0, 1].

    Returns:
        The recall in [0, 1] (0.0 when nothing was retrieved: every reference was missed), or
        ``None`` when there are no reference contexts.
    """
    if not reference_contexts:
        return None
    if not retrieved_contexts:
        return 0.0
    recovered = sum(
        1
        for reference in reference_contexts
        if max(similarity(chunk, reference) for chunk in retrieved_contexts) > threshold
    )
    return recovered / len(reference_contexts)


def id_context_precision(retrieved_ids: Iterable[str], reference_ids: Iterable[str]) -> float | None:
    """Fraction of distinct retrieved context ids that are reference ids (RAGAS ID-based).

    Set-based and not rank-aware, as in RAGAS ``IDBasedContextPrecision``: duplicates count
    once. E.g. retrieved {1, 2, 3, 4}, reference {1, 4, 5, 6} → 0.5.

    Returns:
        |retrieved ∩ reference| / |retrieved|, or ``None`` when nothing was retrieved.
    """
    retrieved = set(retrieved_ids)
    if not retrieved:
        return None
    return len(retrieved & set(reference_ids)) / len(retrieved)


def id_context_recall(retrieved_ids: Iterable[str], reference_ids: Iterable[str]) -> float | None:
    """Fraction of distinct reference context ids that were retrieved (RAGAS ID-based).

    E.g. retrieved {1, 2, 3}, reference {1, 4, 5, 6} → 0.25.

    Returns:
        |retrieved ∩ reference| / |reference|, or ``None`` when there are no reference ids.
    """
    reference = set(reference_ids)
    if not reference:
        return None
    return len(reference & set(retrieved_ids)) / len(reference)


def id_rank_scores(
    retrieved_ids: Sequence[str],
    relevant_ids: Iterable[str],
    k: int,
    grades: Mapping[str, float] | None = None,
) -> dict[str, float | None]:
    """Every rank metric over document ids, by the name `ragpulse eval` reports it under.

    One function for `ragpulse eval` and the probes, so a probe's score equals the offline one on
    the same item. `grades` are graded relevance for NDCG (default: 1 for each relevant id).
    Each value is None where its metric is undefined (no relevant ids).
    """
    retrieved = list(retrieved_ids)
    relevant = set(relevant_ids)
    graded = grades if grades is not None else dict.fromkeys(relevant, 1.0)
    return {
        f"precision_at_{k}": precision_at_k(retrieved, relevant, k),
        f"recall_at_{k}": recall_at_k(retrieved, relevant, k),
        f"hit_rate_at_{k}": hit_rate_at_k(retrieved, relevant, k),
        "mrr": reciprocal_rank(retrieved, relevant),
        f"ndcg_at_{k}": ndcg_at_k(retrieved, graded, k),
        "id_context_precision": id_context_precision(retrieved, relevant),
        "id_context_recall": id_context_recall(retrieved, relevant),
    }
