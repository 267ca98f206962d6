"""Evaluate: run every configured metric on one interaction, concurrently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from agent.judges.base import Judge
from agent.metrics.base import Metric
from agent.model import MetricResult, RagInteraction

log = logging.getLogger(__name__)


class Evaluator:
    def __init__(self, metrics: Sequence[Metric], judge: Judge) -> None:
        self._metrics = tuple(metrics)
        self._judge = judge

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self._metrics)

    async def evaluate(self, interaction: RagInteraction) -> list[MetricResult]:
        return list(await asyncio.gather(*(self._one(m, interaction) for m in self._metrics)))

    async def _one(self, metric: Metric, interaction: RagInteraction) -> MetricResult:
        try:
            return await metric.evaluate(interaction, self._judge)
        except Exception as exc:  # stage boundary: a bug in one metric must not stop the others
            log.exception("metric %s failed on interaction %s", metric.name, interaction.interaction_id)
            return MetricResult.error(metric.name, f"internal error: {exc!r}", judge=self._judge.model)
