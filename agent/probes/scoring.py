"""Score a probe interaction: the configured metrics, the reference-based ones, rank metrics.

The judged metrics run in the one `Evaluator`, through the probes' own judge stack (the same
judge, outside the budget); rank metrics come from `id_rank_scores`, the function `ragpulse eval`
uses, so a probe's scores equal `ragpulse eval`'s on the same item. Rank metrics need the ids of
the relevant documents (from the golden item) and the id of every retrieved chunk (from the app's
spans); without either they are left out, never scored 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.config import ProbeSettings
from agent.evaluate import Evaluation, Evaluator
from agent.judges.base import Judge
from agent.metrics import METRICS, id_rank_scores
from agent.metrics.base import Metric
from agent.metrics.criteria import CriterionMetric
from agent.model import Criterion, MetricResult, RagInteraction

# The reference-based metrics every probe interaction is scored with, beside the configured ones.
REFERENCE_METRICS = ("context_recall", "answer_correctness")
RANK_JUDGE = "ids"  # MetricResult.judge of the rank metrics: computed from ids, no judge asked


class ProbeScorer:
    """Scores probe interactions (`assess` has the Evaluator's signature, for the pipeline)."""

    def __init__(
        self,
        settings: ProbeSettings,
        judge: Judge,
        metrics: Sequence[str],
        *,
        criteria: Sequence[Criterion] = (),
    ) -> None:
        """`metrics`: the configured judged metrics (REFERENCE_METRICS are added); `criteria`:
        the custom criteria, scored as in production (those reading the reference now can be);
        `settings.k`: the cut-off of the rank metrics (as `ragpulse eval --k`)."""
        names = dict.fromkeys([*metrics, *REFERENCE_METRICS])  # ordered, unique
        chosen: list[Metric] = [METRICS[name]() for name in names]
        chosen += [CriterionMetric(c) for c in criteria]
        self._evaluator = Evaluator(chosen, judge)
        self._k = settings.k

    async def assess(self, interaction: RagInteraction) -> Evaluation:
        evaluation = await self._evaluator.assess(interaction)
        ranks = self.rank_results(interaction)
        if not ranks:
            return evaluation
        return Evaluation([*evaluation.results, *ranks], evaluation.retryable, evaluation.verdicts)

    def rank_results(self, interaction: RagInteraction) -> list[MetricResult]:
        probe = interaction.probe
        if probe is None or probe.relevant_ids is None:
            return []
        retrieved = [chunk.id for chunk in interaction.chunks]
        if not retrieved or any(doc_id is None for doc_id in retrieved):
            return []  # the app's spans do not name every chunk: no ranking to score
        scores = id_rank_scores([d for d in retrieved if d is not None], probe.relevant_ids, self._k)
        return [
            MetricResult.ok(name, value, judge=RANK_JUDGE)
            if value is not None
            else MetricResult.skipped(name, "no_relevant_ids")
            for name, value in scores.items()
        ]
