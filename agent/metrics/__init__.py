"""RAG metrics: pure scoring functions and the judged metric classes built on them.

Every pure function is importable from here by the name the docs use (docs/metrics.md).
"""

from __future__ import annotations

from agent.metrics.answer import (
    AnswerCorrectness,
    AnswerRelevancy,
    Faithfulness,
    answer_correctness_score,
    answer_relevancy_score,
    faithfulness_score,
)
from agent.metrics.base import Metric
from agent.metrics.context import (
    ContextPrecision,
    ContextRecall,
    ContextRelevancy,
    context_recall_score,
    context_relevancy_score,
    graded_context_precision,
    mean_confidence,
)
from agent.metrics.ragchecker import (
    ClaimCheck,
    RagCheckerScores,
    aggregate_ragchecker,
    claim_check_from_verdicts,
    ragchecker_scores,
)
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
from agent.metrics.reference import (
    context_entities_recall,
    id_context_precision,
    id_context_recall,
    id_rank_scores,
    levenshtein_distance,
    levenshtein_similarity,
    nonllm_context_precision,
    nonllm_context_recall,
)

# Reference-free metrics the streaming agent scores on production traffic, by configuration name.
# Together they cost two judge calls per interaction on a cold cache (see docs/judges.md).
STREAMING_METRICS: dict[str, type[Metric]] = {
    m.name: m for m in (ContextPrecision, ContextRelevancy, Faithfulness, AnswerRelevancy)
}
# Every judged metric; the reference-based ones are skipped ("no_reference") when the
# interaction carries no reference answer.
METRICS: dict[str, type[Metric]] = {
    **STREAMING_METRICS,
    ContextRecall.name: ContextRecall,
    AnswerCorrectness.name: AnswerCorrectness,
}

# Names of metrics ragpulse computes without a judge (`ragpulse eval`, probes): a custom
# criterion may not take one, or its series would mix with theirs.
_DERIVED_PREFIXES = (
    "ragchecker_",
    "nonllm_",
    "id_",
    "precision_at_",
    "recall_at_",
    "hit_rate_at_",
    "ndcg_at_",
)


def builtin_metric_name(name: str) -> bool:
    """Whether `name` is, or could be, the name of one of ragpulse's own metrics."""
    return name in METRICS or name == "mrr" or name.startswith(_DERIVED_PREFIXES)


__all__ = [
    "METRICS",
    "STREAMING_METRICS",
    "AnswerCorrectness",
    "AnswerRelevancy",
    "ClaimCheck",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevancy",
    "Faithfulness",
    "Metric",
    "RagCheckerScores",
    "aggregate_ragchecker",
    "answer_correctness_score",
    "answer_relevancy_score",
    "builtin_metric_name",
    "claim_check_from_verdicts",
    "context_entities_recall",
    "context_precision_at_k",
    "context_recall_score",
    "context_relevancy_score",
    "faithfulness_score",
    "graded_context_precision",
    "hit_rate_at_k",
    "id_context_precision",
    "id_context_recall",
    "id_rank_scores",
    "levenshtein_distance",
    "levenshtein_similarity",
    "mean_confidence",
    "mean_reciprocal_rank",
    "ndcg_at_k",
    "nonllm_context_precision",
    "nonllm_context_recall",
    "precision_at_k",
    "ragchecker_scores",
    "rank_trec_run",
    "recall_at_k",
    "reciprocal_rank",
]
