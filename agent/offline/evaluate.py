"""Score an offline evaluation set with every metric whose inputs are present.

Judged metrics (the classes of `agent.metrics.METRICS` and RAGChecker's claim metrics) ask the
configured judge through the same verdict cache as the agent; rank and string metrics need no
judge. A metric whose inputs an item lacks is None for that item (never 0); a judge failure is
an error, also None, and counted apart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.judges.base import ASSESS_CHUNKS, CHECK_RESPONSE, Judge, JudgeError
from agent.metrics import (
    METRICS,
    ClaimCheck,
    hit_rate_at_k,
    id_context_precision,
    id_context_recall,
    ndcg_at_k,
    nonllm_context_precision,
    nonllm_context_recall,
    precision_at_k,
    ragchecker_scores,
    recall_at_k,
    reciprocal_rank,
)
from agent.metrics.base import Metric
from agent.metrics.ragchecker import RagCheckerScores
from agent.model import Chunk, MetricResult, Outcome, RagInteraction, Verdict
from agent.offline.records import EvalItem

log = logging.getLogger(__name__)

# RAGChecker's scores, by the column name they get here; lower is better for the last four.
RAGCHECKER_FIELDS = tuple(f"ragchecker_{name}" for name in RagCheckerScores.__dataclass_fields__)
LOWER_IS_BETTER = frozenset(
    {
        "ragchecker_hallucination",
        "ragchecker_self_knowledge",
        "ragchecker_noise_sensitivity_in_relevant",
        "ragchecker_noise_sensitivity_in_irrelevant",
    }
)


def _relevant(item: EvalItem) -> set[str] | None:
    if item.relevant_ids is not None:
        return set(item.relevant_ids)
    if item.relevance is not None:
        return {doc for doc, grade in item.relevance.items() if grade > 0}
    return None


def _has_ranking(item: EvalItem) -> bool:
    return item.retrieved_ids is not None and _relevant(item) is not None


# Judged metric → whether an item carries its inputs (the metric itself skips what it cannot score).
# Every judged question reads the user's question, so none runs without it.
_JUDGED_INPUTS: dict[str, Callable[[EvalItem], bool]] = {
    "context_precision": lambda i: (
        bool(i.question and i.contexts) and (i.response or i.reference) is not None
    ),
    "context_relevancy": lambda i: bool(i.question and i.contexts),
    "faithfulness": lambda i: bool(i.question and i.contexts) and i.response is not None,
    "answer_relevancy": lambda i: bool(i.question) and i.response is not None,
    "context_recall": lambda i: bool(i.question and i.contexts) and i.reference is not None,
    "answer_correctness": lambda i: bool(i.question) and i.response is not None and i.reference is not None,
}


def _ragchecker_ready(item: EvalItem) -> bool:
    return bool(item.question and item.contexts) and item.response is not None and item.reference is not None


def deterministic_scores(item: EvalItem, k: int) -> dict[str, float | None]:
    """The metrics that need no judge: rank metrics over ids, string-similarity metrics."""
    scores: dict[str, float | None] = {}
    relevant = _relevant(item)
    if item.retrieved_ids is not None and relevant is not None:
        retrieved = list(item.retrieved_ids)
        scores[f"precision_at_{k}"] = precision_at_k(retrieved, relevant, k)
        scores[f"recall_at_{k}"] = recall_at_k(retrieved, relevant, k)
        scores[f"hit_rate_at_{k}"] = hit_rate_at_k(retrieved, relevant, k)
        scores["mrr"] = reciprocal_rank(retrieved, relevant)
        grades = item.relevance if item.relevance is not None else dict.fromkeys(relevant, 1.0)
        scores[f"ndcg_at_{k}"] = ndcg_at_k(retrieved, grades, k)
        scores["id_context_precision"] = id_context_precision(retrieved, relevant)
        scores["id_context_recall"] = id_context_recall(retrieved, relevant)
    if item.reference_contexts is not None and item.contexts:
        scores["nonllm_context_precision"] = nonllm_context_precision(item.contexts, item.reference_contexts)
        scores["nonllm_context_recall"] = nonllm_context_recall(item.contexts, item.reference_contexts)
    return scores


def available_metrics(items: Sequence[EvalItem], k: int) -> list[str]:
    """Every metric whose inputs at least one item carries, in a stable order."""
    names: list[str] = [n for n, ready in _JUDGED_INPUTS.items() if any(ready(i) for i in items)]
    if any(_has_ranking(i) for i in items):
        names += [f"precision_at_{k}", f"recall_at_{k}", f"hit_rate_at_{k}", "mrr", f"ndcg_at_{k}"]
        names += ["id_context_precision", "id_context_recall"]
    if any(i.reference_contexts is not None and i.contexts for i in items):
        names += ["nonllm_context_precision", "nonllm_context_recall"]
    if any(_ragchecker_ready(i) for i in items):
        names += list(RAGCHECKER_FIELDS)
    return names


def all_metric_names(k: int) -> list[str]:
    return available_metrics(
        [EvalItem("x", 0, "q", ("c",), "r", "ref", ("c",), ("a",), ("a",), {"a": 1.0})], k
    )


@dataclass(frozen=True)
class ItemResult:
    """Scores of one item: `scores[metric]` is None where undefined or failed; `errors` says why
    a judged metric failed (never a score)."""

    item: EvalItem
    scores: Mapping[str, float | None]
    errors: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)


def interaction_of(item: EvalItem) -> RagInteraction:
    ids = item.retrieved_ids or ()
    chunks = tuple(
        Chunk(content, id=ids[i] if i < len(ids) else None) for i, content in enumerate(item.contexts)
    )
    return RagInteraction(
        trace_id="offline",
        span_id=item.id,
        query=item.question,
        chunks=chunks,
        response=item.response,
        service="offline",
        route="offline",
        reference=item.reference,
    )


async def ragchecker_check(judge: Judge, item: EvalItem) -> ClaimCheck:
    """RAGChecker's entailment matrices from the judge's typed questions.

    answer2response / response2answer come from `compare_answers`; chunk k's entailment of each
    response claim and each reference claim from `check_response` / `check_reference` asked
    about chunk k alone (2k + 1 judge questions, each cached).
    """
    assert item.response is not None and item.reference is not None
    comparison, per_chunk_response, per_chunk_reference = await asyncio.gather(
        judge.compare_answers(item.question, item.response, item.reference),
        asyncio.gather(*(judge.check_response(item.question, item.response, [c]) for c in item.contexts)),
        asyncio.gather(*(judge.check_reference(item.reference, [c]) for c in item.contexts)),
    )
    n_response = len(comparison.response_claims)
    n_reference = len(comparison.reference_claims)
    if any(len(claims) != n_response for claims in per_chunk_response) or any(
        len(claims) != n_reference for claims in per_chunk_reference
    ):
        raise JudgeError("the judge split the same text into different claims in different questions")
    return ClaimCheck(
        answer2response=[v.value for v in comparison.response_claims],
        response2answer=[v.value for v in comparison.reference_claims],
        retrieved2response=[[per_chunk_response[k][i].supported.value for k in range(len(item.contexts))]
                            for i in range(n_response)],
        retrieved2answer=[[per_chunk_reference[k][j].value for k in range(len(item.contexts))]
                          for j in range(n_reference)],
        n_chunks=len(item.contexts),
    )  # fmt: skip


class OfflineEvaluator:
    """Scores items concurrently with `metrics` (names from `available_metrics`)."""

    def __init__(self, judge: Judge, metrics: Sequence[str], *, k: int = 5, concurrency: int = 32) -> None:
        self._judge = judge
        self._k = k
        self._metrics = tuple(metrics)
        self._judged: list[Metric] = [METRICS[name]() for name in self._metrics if name in METRICS]
        self._ragchecker = any(name in RAGCHECKER_FIELDS for name in self._metrics)
        self._semaphore = asyncio.Semaphore(concurrency)
        asked = set().union(*(m.questions for m in self._judged)) if self._judged else set()
        # As in the streaming evaluator: one combined judge call answers both chunk and claim questions.
        self._prefetch = (
            getattr(judge, "prefetch", None) if {ASSESS_CHUNKS, CHECK_RESPONSE} <= asked else None
        )

    @property
    def metrics(self) -> tuple[str, ...]:
        return self._metrics

    async def score(self, item: EvalItem) -> ItemResult:
        async with self._semaphore:
            scores: dict[str, float | None] = dict.fromkeys(self._metrics)
            errors: dict[str, str] = {}
            skipped: dict[str, str] = {}
            deterministic = deterministic_scores(item, self._k)
            for name in self._metrics:
                if name in deterministic:
                    scores[name] = deterministic[name]
            interaction = interaction_of(item)
            judged = [m for m in self._judged if _JUDGED_INPUTS[m.name](item)]
            for metric in self._judged:
                if metric not in judged:
                    skipped[metric.name] = "inputs_missing"
            if self._prefetch is not None and item.question and item.contexts and item.response:
                try:
                    await self._prefetch(item.question, item.response, list(item.contexts))
                except Exception:  # an optimisation only: the metrics still ask for themselves
                    log.debug("combined judge call failed on item %s", item.id, exc_info=True)
            results = await asyncio.gather(*(self._one(m, interaction) for m in judged))
            for result in results:
                scores[result.metric] = result.value
                if result.outcome is Outcome.ERROR:
                    errors[result.metric] = result.reason
                elif result.outcome is Outcome.SKIPPED:
                    skipped[result.metric] = result.reason
            if self._ragchecker and _ragchecker_ready(item):
                try:
                    checked = ragchecker_scores(await ragchecker_check(self._judge, item))
                except (JudgeError, ValueError) as exc:
                    for name in RAGCHECKER_FIELDS:
                        if name in scores:
                            errors[name] = str(exc)
                else:
                    for name, value in zip(RAGCHECKER_FIELDS, _ragchecker_values(checked), strict=True):
                        if name in scores:
                            scores[name] = value
            return ItemResult(item, scores, errors, skipped)

    async def _one(self, metric: Metric, interaction: RagInteraction) -> MetricResult:
        try:
            return await metric.evaluate(interaction, self._judge)
        except Exception as exc:  # a bug in one metric must not stop the run
            log.exception("metric %s failed on item %s", metric.name, interaction.span_id)
            return MetricResult.error(metric.name, f"internal error: {exc!r}")


def _ragchecker_values(scores: RagCheckerScores) -> list[float | None]:
    return [getattr(scores, name) for name in RagCheckerScores.__dataclass_fields__]


@dataclass(frozen=True)
class VerdictDetail:
    """One judge verdict shown in the report: what was asked about, the answer, and why."""

    question: str
    subject: str
    value: bool
    score: float | None
    reason: str


async def verdict_details(judge: Judge, item: EvalItem) -> list[VerdictDetail]:
    """The judge's verdicts on one item, for the report's weakest items: chunk usefulness and
    response-claim support (with the claims' text where the judge gives it)."""
    from agent.judges import local

    details: list[VerdictDetail] = []
    if item.contexts:
        answer = item.reference or item.response
        try:
            assessed = await judge.assess_chunks(item.question, answer, item.contexts)
        except JudgeError as exc:
            return [VerdictDetail("error", "", False, None, str(exc))]
        for k, (chunk, assessment) in enumerate(zip(item.contexts, assessed, strict=False), start=1):
            verdict = assessment.useful or assessment.relevance
            details.append(_detail(f"chunk {k} useful", chunk, verdict))
    if item.contexts and item.response:
        try:
            claims = await judge.check_response(item.question, item.response, item.contexts)
        except JudgeError as exc:
            return [*details, VerdictDetail("error", "", False, None, str(exc))]
        texts = local.claims(item.response) if judge.model == "lexical" else []
        for n, claim in enumerate(claims):
            subject = claim.supported.reason or (texts[n] if n < len(texts) else f"claim {n + 1}")
            details.append(_detail("claim supported", subject, claim.supported))
    return details


def _detail(question: str, subject: str, verdict: Verdict) -> VerdictDetail:
    return VerdictDetail(question, subject[:300], verdict.value, verdict.score, verdict.reason)
