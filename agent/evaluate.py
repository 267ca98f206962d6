"""Evaluate: run every configured metric on one interaction, concurrently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from agent.judges.base import ASSESS_CHUNKS, CHECK_RESPONSE, Judge
from agent.metrics.base import Metric
from agent.model import MetricResult, RagInteraction

log = logging.getLogger(__name__)


class Evaluator:
    def __init__(self, metrics: Sequence[Metric], judge: Judge) -> None:
        self._metrics = tuple(metrics)
        self._judge = judge
        asked = set().union(*(m.questions for m in self._metrics))
        # Both chunk and claim questions: one combined judge call can serve all the metrics.
        self._prefetch = (
            getattr(judge, "prefetch", None) if {ASSESS_CHUNKS, CHECK_RESPONSE} <= asked else None
        )

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    async def evaluate(self, interaction: RagInteraction) -> list[MetricResult]:
        if self._prefetch is not None and interaction.chunks and interaction.response:
            try:
                await self._prefetch(
                    interaction.query, interaction.response, [c.content for c in interaction.chunks]
                )
            except Exception:  # an optimisation only: the metrics still ask for themselves
                log.exception("combined judge call failed on interaction %s", interaction.interaction_id)
        return list(await asyncio.gather(*(self._one(m, interaction) for m in self._metrics)))

    async def _one(self, metric: Metric, interaction: RagInteraction) -> MetricResult:
        try:
            return await metric.evaluate(interaction, self._judge)
        except Exception as exc:  # stage boundary: a bug in one metric must not stop the others
            log.exception("metric %s failed on interaction %s", metric.name, interaction.interaction_id)
            return MetricResult.error(metric.name, f"internal error: {exc!r}", judge=self._judge.model)
