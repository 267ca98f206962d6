"""Rank-based retrieval metrics over document ids and per-chunk relevance verdicts.

Definitions follow trec_eval (https://github.com/usnistgov/trec_eval), the reference
implementation of Precision@k (``P_k``), Recall@k (``recall_k``), Hit rate@k (``success_k``),
reciprocal rank (``recip_rank``) and NDCG@k (``ndcg_cut_k``), with one deliberate difference: a
query with no relevant documents has no achievable score, so these metrics return ``None`` for it
where trec_eval reports 0. A zero that is not a real zero would fire false drift alerts.

``context_precision_at_k`` is the rank-aware average precision used by RAGAS context precision:
CP@K = Σ_k (P@k · v_k) / Σ_k v_k, where v_k is the relevance verdict of the chunk at rank k.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

__all__ = [
    "context_precision_at_k",
    "hit_rate_at_k",
    "mean_reciprocal_rank",
    "ndcg_at_k",
    "precision_at_k",
    "rank_trec_run",
    "recall_at_k",
    "reciprocal_rank",
]

Gain = Literal["linear", "exponential"]


def _check_k(k: int) -> None:
    if k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")


def _relevant_hits_at_k(retrieved_ids: Sequence[str], relevant: set[str], k: int) -> int:
    # A relevant document retrieved twice is one hit: counting it twice would let a run that
    # repeats its best document exceed a perfect run.
    return len({doc_id for doc_id in retrieved_ids[:k] if doc_id in relevant})


def precision_at_k(retrieved_ids: Sequence[str], relevant_ids: Collection[str], k: int) -> float | None:
    """Fraction of the top ``k`` ranks that hold a relevant document (trec_eval ``P_k``).

    The denominator is always ``k``, even when fewer than ``k`` documents were retrieved: an
    empty rank is a missed opportunity, so retrieving nothing scores 0.0 (as in trec_eval).
    A relevant id that appears more than once in the top ``k`` counts once; the repeated
    position still occupies a rank.

    Args:
        retrieved_ids: Document ids in rank order, best first.
        relevant_ids: Ids judged relevant for the query.
        k: Cutoff rank, at least 1.

    Returns:
        The precision in [0, 1], or ``None`` when ``relevant_ids`` is empty: no ranking can
        score above 0 for such a query, so trec_eval's 0 there says nothing about the retriever.

    Raises:
        ValueError: if ``k`` < 1.
    """
    _check_k(k)
    relevant = set(relevant_ids)
    if not relevant:
        return None
    return _relevant_hits_at_k(retrieved_ids, relevant, k) / k


def recall_at_k(retrieved_ids: Sequence[str], relevant_ids: Collection[str], k: int) -> float | None:
    """Fraction of the relevant documents found in the top ``k`` ranks (trec_eval ``recall_k``).

    Duplicated ids in the top ``k`` count once.

    Args:
        retrieved_ids: Document ids in rank order, best first.
        relevant_ids: Ids judged relevant for the query.
        k: Cutoff rank, at least 1.

    Returns:
        The recall in [0, 1] (0.0 when nothing was retrieved), or ``None`` when
        ``relevant_ids`` is empty (trec_eval reports 0).

    Raises:
        ValueError: if ``k`` < 1.
    """
    _check_k(k)
    relevant = set(relevant_ids)
    if not relevant:
        return None
    return _relevant_hits_at_k(retrieved_ids, relevant, k) / len(relevant)


def hit_rate_at_k(retrieved_ids: Sequence[str], relevant_ids: Collection[str], k: int) -> float | None:
    """1.0 when at least one relevant document is in the top ``k`` ranks, else 0.0.

    This is trec_eval's ``success_k`` for one query; the hit rate of a query set is the mean.

    Args:
        retrieved_ids: Document ids in rank order, best first.
        relevant_ids: Ids judged relevant for the query.
        k: Cutoff rank, at least 1.

    Returns:
        1.0 or 0.0, or ``None`` when ``relevant_ids`` is empty (trec_eval reports 0).

    Raises:
        ValueError: if ``k`` < 1.
    """
    _check_k(k)
    relevant = set(relevant_ids)
    if not relevant:
        return None
    return 1.0 if any(doc_id in relevant for doc_id in retrieved_ids[:k]) else 0.0


def reciprocal_rank(retrieved_ids: Sequence[str], relevant_ids: Collection[str]) -> float | None:
    """1 / rank of the first relevant document (trec_eval ``recip_rank``), ranks from 1.

    Args:
        retrieved_ids: Document ids in rank order, best first.
        relevant_ids: Ids judged relevant for the query.

    Returns:
        The reciprocal rank in (0, 1], 0.0 when no relevant document was retrieved, or
        ``None`` when ``relevant_ids`` is empty (trec_eval reports 0).
    """
    relevant = set(relevant_ids)
    if not relevant:
        return None
    for rank, doc_id in enumerate(retrieved_ids, start=1):
        if doc_id in relevant:
            return 1.0 / rank
    return 0.0


def mean_reciprocal_rank(
    retrieved_lists: Sequence[Sequence[str]], relevant_lists: Sequence[Collection[str]]
) -> float | None:
    """Mean of :func:`reciprocal_rank` over the queries where it is defined.

    Queries without relevant documents are left out of the mean instead of counting as 0
    (trec_eval's ``all`` row would include them as zeros).

    Args:
        retrieved_lists: One ranked id list per query.
        relevant_lists: The relevant ids of each query, aligned with ``retrieved_lists``.

    Returns:
        The MRR in [0, 1], or ``None`` when no query has relevant documents (or there are no
        queries).

    Raises:
        ValueError: if the two sequences differ in length.
    """
    if len(retrieved_lists) != len(relevant_lists):
        raise ValueError(
            f"got {len(retrieved_lists)} retrieved lists but {len(relevant_lists)} relevant sets"
        )
    defined = [
        rr
        for retrieved, relevant in zip(retrieved_lists, relevant_lists, strict=True)
        if (rr := reciprocal_rank(retrieved, relevant)) is not None
    ]
    if not defined:
        return None
    return math.fsum(defined) / len(defined)


def _gain(grade: float, gain: Gain) -> float:
    # Negative grades (trec_eval's "judged harmful", e.g. -1) earn nothing rather than a penalty.
    grade = max(grade, 0.0)
    if gain == "linear":
        return grade
    return math.pow(2.0, grade) - 1.0


def _dcg(gains: Iterable[float]) -> float:
    return math.fsum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))


def ndcg_at_k(
    retrieved_ids: Sequence[str],
    relevance: Mapping[str, float],
    k: int,
    *,
    gain: Gain = "linear",
) -> float | None:
    """Normalised discounted cumulative gain at ``k``, graded (trec_eval ``ndcg_cut_k``).

    DCG@k = Σ_{r=1..k} gain(rel_r) / log2(r + 1). The gain is the grade itself (``"linear"``,
    trec_eval's choice) or 2^grade - 1 (``"exponential"``, Burges et al.); negative grades count
    as 0 and ids missing from ``relevance`` are unjudged, grade 0. The ideal DCG is built from
    *all* grades in ``relevance``, sorted descending and cut at ``k``, not only from the
    retrieved documents, so a retriever that misses a relevant document is penalised.

    A duplicated id earns its gain only at its first (best) rank; later occurrences still
    occupy their rank with gain 0, so repeating a relevant document cannot push NDCG above 1.

    Args:
        retrieved_ids: Document ids in rank order, best first.
        relevance: Graded judgments, id → grade (e.g. 0 to 3).
        k: Cutoff rank, at least 1.
        gain: ``"linear"`` or ``"exponential"``.

    Returns:
        NDCG@k in [0, 1], or ``None`` when no grade in ``relevance`` is positive (the ideal DCG
        is 0; trec_eval reports 0).

    Raises:
        ValueError: if ``k`` < 1 or ``gain`` is unknown.
    """
    _check_k(k)
    if gain not in ("linear", "exponential"):
        raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")
    ideal = _dcg(sorted((_gain(grade, gain) for grade in relevance.values()), reverse=True)[:k])
    if ideal <= 0.0:
        return None
    seen: set[str] = set()
    gains: list[float] = []
    for doc_id in retrieved_ids[:k]:
        gains.append(0.0 if doc_id in seen else _gain(relevance.get(doc_id, 0.0), gain))
        seen.add(doc_id)
    return _dcg(gains) / ideal


def rank_trec_run(scored_docs: Iterable[tuple[str, float]]) -> list[str]:
    """Order one topic of a TREC run the way trec_eval does.

    trec_eval ignores the rank column of a run: it sorts by score, descending, and breaks ties
    by document id, descending in string order. A run whose rank column orders tied scores
    differently is therefore scored in this order, not in its own.

    Args:
        scored_docs: ``(docno, score)`` pairs of one topic.

    Returns:
        The document ids, best first.
    """
    return [doc for doc, _ in sorted(scored_docs, key=lambda ds: (ds[1], ds[0]), reverse=True)]


def context_precision_at_k(verdicts: Sequence[bool | int]) -> float | None:
    """Rank-aware precision of retrieved chunks from per-chunk relevance verdicts.

    CP@K = Σ_k (P@k · v_k) / Σ_k v_k with P@k = (Σ_{i≤k} v_i) / k, K = ``len(verdicts)``: the
    mean of the precision at each relevant rank (average precision over the retrieved list).
    E.g. [0, 1, 1, 0, 0] → 0.5833, [1, 1, 0, 1, 0] → 0.9167, [0, 0, 1, 1, 1] → 0.4778.

    RAGAS adds 1e-10 to the denominator to avoid dividing by zero, so it reports 0.9999999999
    where this returns 1.0; here an all-irrelevant list is an explicit 0.0 instead. Unlike a
    query with no relevant documents in the ranking metrics above, that 0.0 is a real zero:
    chunks were retrieved and none was judged relevant.

    Args:
        verdicts: v_k for each chunk in rank order: ``True``/``1`` relevant, ``False``/``0`` not.

    Returns:
        CP@K in [0, 1]; 0.0 when no chunk is relevant; ``None`` when there are no chunks.

    Raises:
        ValueError: if a verdict is not 0/1/True/False. In particular an unknown verdict
            (``None``, e.g. a judge failure) is an error, never silently irrelevant.
    """
    if not verdicts:
        return None
    weighted = 0.0
    hits = 0
    for k, verdict in enumerate(verdicts, start=1):
        if verdict not in (0, 1):
            raise ValueError(f"verdict at rank {k} must be 0/1 or a bool, got {verdict!r}")
        if verdict:
            hits += 1
            weighted += hits / k
    if hits == 0:
        return 0.0
    return weighted / hits
