"""Context metrics judged per chunk: response-anchored context precision."""

from __future__ import annotations

from agent.judges.base import CHUNK_USEFULNESS, Judge, JudgeError
from agent.metrics.ranking import context_precision_at_k
from agent.model import MetricResult, RagInteraction


class ContextPrecision:
    """Response-anchored context precision (reference-free).

    For each chunk k the judge answers "was it useful in arriving at this response?" (v_k), and
    CP@K = Σ_k (P@k · v_k) / Σ_k v_k: high when the useful chunks are ranked first. Undefined
    (skipped) without chunks or without a response; 0.0 when no chunk was useful.
    """

    name = "context_precision"

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.chunks:
            return MetricResult.skipped(self.name, "no_chunks")
        if not interaction.response:
            return MetricResult.skipped(self.name, "no_response")
        try:
            verdicts = await judge.chunk_usefulness(
                interaction.query, interaction.response, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        score = context_precision_at_k([v.value for v in verdicts])
        if score is None:
            return MetricResult.skipped(self.name, "no_chunks")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(CHUNK_USEFULNESS)
        )
