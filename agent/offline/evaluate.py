"""Score an offline evaluation set with every metric whose inputs are present.

Judged metrics (the classes of `agent.metrics.METRICS` and RAGChecker's claim metrics) run in
`agent.evaluate.Evaluator`, the evaluator of the stream, through the same judge stack: each judge
question is asked once per item, and a retryable judge failure is retried with backoff a bounded
number of times, then recorded as an error (never as a score). Rank and string metrics need no
judge and are added on top. A metric whose inputs an item lacks is None for that item (never 0);
a judge failure is an error, also None, and counted apart. The verdicts obtained while scoring
stay on the result for the report.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.evaluate import Evaluation, Evaluator, JudgedVerdicts
from agent.judges.base import CHECK_REFERENCE, CHECK_RESPONSE, COMPARE_ANSWERS, Judge, JudgeError
from agent.metrics import (
    METRICS,
    ClaimCheck,
    id_rank_scores,
    nonllm_context_precision,
    nonllm_context_recall,
    ragchecker_scores,
)
from agent.metrics.base import Metric
from agent.metrics.criteria import CriterionMetric, criterion_answer, criterion_inputs, criterion_score
from agent.metrics.ragchecker import RagCheckerScores
from agent.model import Chunk, Criterion, MetricResult, Outcome, RagInteraction, Verdict
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
        scores.update(id_rank_scores(item.retrieved_ids, relevant, k, item.relevance))
    if item.reference_contexts is not None and item.contexts:
        scores["nonllm_context_precision"] = nonllm_context_precision(item.contexts, item.reference_contexts)
        scores["nonllm_context_recall"] = nonllm_context_recall(item.contexts, item.reference_contexts)
    return scores


def _criterion_ready(criterion: Criterion, item: EvalItem) -> bool:
    """Whether the item carries what the custom criterion reads."""
    return (
        bool(item.question)
        and CriterionMetric(criterion).missing(criterion_inputs(interaction_of(item))) is None
    )


def available_metrics(items: Sequence[EvalItem], k: int, criteria: Sequence[Criterion] = ()) -> list[str]:
    """Every metric whose inputs at least one item carries, in a stable order (the custom
    `criteria` after the built-in judged metrics)."""
    names: list[str] = [n for n, ready in _JUDGED_INPUTS.items() if any(ready(i) for i in items)]
    names += [c.name for c in criteria if any(_criterion_ready(c, i) for i in items)]
    if any(_has_ranking(i) for i in items):
        names += [f"precision_at_{k}", f"recall_at_{k}", f"hit_rate_at_{k}", "mrr", f"ndcg_at_{k}"]
        names += ["id_context_precision", "id_context_recall"]
    if any(i.reference_contexts is not None and i.contexts for i in items):
        names += ["nonllm_context_precision", "nonllm_context_recall"]
    if any(_ragchecker_ready(i) for i in items):
        names += list(RAGCHECKER_FIELDS)
    return names


def all_metric_names(k: int, criteria: Sequence[Criterion] = ()) -> list[str]:
    return available_metrics(
        [EvalItem("x", 0, "q", ("c",), "r", "ref", ("c",), ("a",), ("a",), {"a": 1.0})], k, criteria
    )


@dataclass(frozen=True)
class ItemResult:
    """Scores of one item: `scores[metric]` is None where undefined or failed; `errors` says why
    a judged metric failed (never a score); `verdicts` are the judge's verdicts obtained while
    scoring (chunk assessments and response claims), which the report shows."""

    item: EvalItem
    scores: Mapping[str, float | None]
    errors: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    verdicts: JudgedVerdicts = field(default_factory=JudgedVerdicts)


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


async def ragchecker_check(judge: Judge, interaction: RagInteraction) -> ClaimCheck:
    """RAGChecker's entailment matrices from the judge's typed questions.

    answer2response / response2answer come from `compare_answers`; chunk k's entailment of each
    response claim and each reference claim from `check_response` / `check_reference` asked
    about chunk k alone (2k + 1 judge questions).
    """
    assert interaction.response is not None and interaction.reference is not None
    query, response, reference = interaction.query, interaction.response, interaction.reference
    contexts = [c.content for c in interaction.chunks]
    comparison, per_chunk_response, per_chunk_reference = await asyncio.gather(
        judge.compare_answers(query, response, reference),
        asyncio.gather(*(judge.check_response(query, response, [c]) for c in contexts)),
        asyncio.gather(*(judge.check_reference(reference, [c]) for c in contexts)),
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
        retrieved2response=[[per_chunk_response[k][i].supported.value for k in range(len(contexts))]
                            for i in range(n_response)],
        retrieved2answer=[[per_chunk_reference[k][j].value for k in range(len(contexts))]
                          for j in range(n_reference)],
        n_chunks=len(contexts),
    )  # fmt: skip


class RagCheckerMetric:
    """One of RAGChecker's claim metrics as a Metric of the evaluator. The ten of them ask the
    same questions, which the evaluator asks the judge once per item."""

    questions = frozenset({COMPARE_ANSWERS, CHECK_RESPONSE, CHECK_REFERENCE})

    def __init__(self, field_name: str) -> None:
        self.name = f"ragchecker_{field_name}"
        self._field = field_name

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if interaction.response is None or interaction.reference is None or not interaction.chunks:
            return MetricResult.skipped(self.name, "inputs_missing")
        try:
            checked = ragchecker_scores(await ragchecker_check(judge, interaction))
        except (JudgeError, ValueError) as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        value = getattr(checked, self._field)
        if value is None:
            return MetricResult.skipped(self.name, "undefined")
        return MetricResult.ok(self.name, value, judge=judge.model)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of an item whose judge failure was retryable: at most `attempts` evaluations in
    all, waiting `base` · 2^n seconds (with jitter, at least what the judge asked for, at most
    `cap`) between them."""

    attempts: int = 4
    base: float = 1.0
    cap: float = 30.0

    def delay(self, attempt: int, failure: JudgeError) -> float:
        wait = min(self.cap, self.base * 2**attempt) * random.uniform(0.5, 1.0)
        return min(self.cap, max(wait, failure.retry_after or 0.0))


class OfflineEvaluator:
    """Scores items concurrently with `metrics` (names from `available_metrics`; those naming one
    of the custom `criteria` score it)."""

    def __init__(
        self,
        judge: Judge,
        metrics: Sequence[str],
        *,
        criteria: Sequence[Criterion] = (),
        k: int = 5,
        concurrency: int = 32,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._k = k
        self._metrics = tuple(metrics)
        judged: list[Metric] = [METRICS[name]() for name in self._metrics if name in METRICS]
        judged += [RagCheckerMetric(name.removeprefix("ragchecker_")) for name in self._metrics
                   if name in RAGCHECKER_FIELDS]  # fmt: skip
        self._criteria = {c.name: c for c in criteria if c.name in self._metrics}
        judged += [CriterionMetric(c) for c in self._criteria.values()]
        self._judged = tuple(m.name for m in judged)
        self._evaluator = Evaluator(judged, judge)
        self._retry = retry or RetryPolicy()
        self._semaphore = asyncio.Semaphore(concurrency)

    @property
    def metrics(self) -> tuple[str, ...]:
        return self._metrics

    def _ready(self, name: str, item: EvalItem) -> bool:
        if name in _JUDGED_INPUTS:
            return _JUDGED_INPUTS[name](item)
        if name in self._criteria:
            return _criterion_ready(self._criteria[name], item)
        return _ragchecker_ready(item)

    async def score(self, item: EvalItem) -> ItemResult:
        scores: dict[str, float | None] = dict.fromkeys(self._metrics)
        errors: dict[str, str] = {}
        skipped: dict[str, str] = {}
        deterministic = deterministic_scores(item, self._k)
        for name in self._metrics:
            if name in deterministic:
                scores[name] = deterministic[name]
        ready = [name for name in self._judged if self._ready(name, item)]
        skipped.update((name, "inputs_missing") for name in self._judged if name not in ready)
        evaluation = await self._assess(interaction_of(item), ready) if ready else Evaluation([])
        for result in evaluation.results:
            scores[result.metric] = result.value
            if result.outcome is Outcome.ERROR:
                errors[result.metric] = result.reason
            elif result.outcome is Outcome.SKIPPED:
                skipped[result.metric] = result.reason
        return ItemResult(item, scores, errors, skipped, evaluation.verdicts)

    async def _assess(self, interaction: RagInteraction, metrics: Sequence[str]) -> Evaluation:
        """The evaluator's answer; a retryable judge failure is tried again (the verdict cache
        keeps what was answered) until the attempts run out, then its errors stand."""
        attempt = 0
        while True:
            async with self._semaphore:
                evaluation = await self._evaluator.assess(interaction, metrics)
            failure = evaluation.retryable
            attempt += 1
            if failure is None or attempt >= self._retry.attempts:
                return evaluation
            delay = self._retry.delay(attempt - 1, failure)
            log.debug("item %s: judge %s, trying again in %.1fs", interaction.span_id, failure.reason, delay)
            await asyncio.sleep(delay)


@dataclass(frozen=True)
class VerdictDetail:
    """One judge verdict shown in the report: what was asked about, the answer, and why.

    `value` is whether the verdict counts for the score (a yes of a built-in question); `answer`
    is the judge's own answer where it is not that yes / no (a custom criterion's "no" that
    scores 1, its "4 of 5"); `score` is what the metric counted, when graded or not binary.
    """

    question: str
    subject: str
    value: bool
    score: float | None
    reason: str
    answer: str = ""


# Judges whose claims are the response's sentences as `agent.judges.local.claims` splits them.
_LOCAL_CLAIMS = frozenset({"lexical", "embedding-minilm"})


def verdict_details(result: ItemResult, judge_model: str) -> list[VerdictDetail]:
    """The judge's verdicts on one item as obtained while scoring it, for the report's weakest
    items: chunk usefulness (relevance where no answer was judged) and response-claim support,
    with the claims' text where the judge gave it. No judge is asked."""
    item, verdicts = result.item, result.verdicts
    details: list[VerdictDetail] = []
    for k, (chunk, assessment) in enumerate(zip(item.contexts, verdicts.chunks or (), strict=False), start=1):
        verdict = assessment.useful or assessment.relevance
        details.append(
            _detail(f"chunk {k} useful" if assessment.useful else f"chunk {k} relevant", chunk, verdict)
        )
    if verdicts.claims:
        from agent.judges import local

        texts = local.claims(item.response or "") if judge_model in _LOCAL_CLAIMS else []
        for n, claim in enumerate(verdicts.claims):
            subject = claim.supported.reason or (texts[n] if n < len(texts) else f"claim {n + 1}")
            details.append(_detail("claim supported", subject, claim.supported))
    details += [criterion_detail(criterion, verdict) for criterion, verdict in verdicts.criteria]
    return details


def criterion_detail(criterion: Criterion, verdict: Verdict) -> VerdictDetail:
    """A custom criterion's answer as the judge gave it (yes / no, or the point of 1-5), with the
    score it counted for (higher is better, so a lower-is-better "yes" scores 0)."""
    score = criterion_score(verdict, criterion.higher_is_better)
    answer = criterion_answer(criterion, verdict)
    return VerdictDetail(
        f"criterion {criterion.name}", criterion.question[:300], score >= 0.5, score, verdict.reason, answer
    )


def _detail(question: str, subject: str, verdict: Verdict) -> VerdictDetail:
    return VerdictDetail(question, subject[:300], verdict.value, verdict.score, verdict.reason)
