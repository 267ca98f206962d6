"""Context metrics: is the retrieved context useful, relevant and complete?

- context_precision: response-anchored (reference-free) or reference-anchored when the
  interaction carries a reference; CP@K = Σ_k (P@k · v_k) / Σ_k v_k over usefulness verdicts.
- context_relevancy: statement level, relevant statements of the context / all its statements.
- context_recall: claims of the reference attributable to the context / all reference claims.

Every verdict counts with its confidence (`Verdict.confidence`): the judge's graded score where
it gives one, else 1 or 0. Binary verdicts therefore give exactly the literature's scores; graded
ones give a score that moves with the judge's certainty instead of jumping at a threshold.

Context precision and context relevancy ask the same `assess_chunks` question, so a cached judge
answers both with one call.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.judges.base import ASSESS_CHUNKS, CHECK_REFERENCE, Judge, JudgeError
from agent.model import MetricResult, RagInteraction


def share(hits: int, total: int) -> float | None:
    """hits / total; None when there is nothing to count (undefined, never 0)."""
    if total < 0 or not 0 <= hits <= total:
        raise ValueError(f"expected 0 <= hits <= total, got {hits}/{total}")
    return hits / total if total else None


def mean_confidence(confidences: Sequence[float | bool]) -> float | None:
    """The mean of per-item confidences in [0, 1] (bools count 1 / 0, so binary verdicts give
    hits / total exactly); None when there is no item (undefined, never 0)."""
    for i, c in enumerate(confidences):
        if c is None or not 0.0 <= c <= 1.0:
            raise ValueError(f"confidence {i} must be in [0, 1], got {c!r}")
    return sum(map(float, confidences)) / len(confidences) if confidences else None


def context_relevancy_score(relevant_statements: Sequence[float], statements: Sequence[int]) -> float | None:
    """Σ relevant statements / Σ statements over the chunks; None without any statement.

    A chunk's relevant statements may be graded (the sum of its statements' confidences, see
    `ChunkAssessment.relevant_weight`); counts give the statement-level share exactly.
    """
    total = sum(statements)
    relevant = sum(relevant_statements)
    if total < 0 or not 0 <= relevant <= total:
        raise ValueError(f"expected 0 <= relevant <= statements, got {relevant}/{total}")
    return relevant / total if total else None


def context_recall_score(attributed: Sequence[float | bool]) -> float | None:
    """Reference claims attributable to the context / reference claims, each counted with its
    confidence; None without claims."""
    return mean_confidence(attributed)


def graded_context_precision(usefulness: Sequence[float | bool]) -> float | None:
    """Context precision with graded usefulness: CP@K = Σ_k (P@k · v_k) / Σ_k v_k, where v_k in
    [0, 1] is the judge's confidence that chunk k was useful and P@k = (Σ_{i≤k} v_i) / k is
    computed from the same graded v's.

    With 0/1 verdicts this is exactly `context_precision_at_k` (0,1,1,0,0 → 0.5833; 1,1,0,1,0 →
    0.9167; 0,0,1,1,1 → 0.4778). E.g. v = (0.5, 1.0): P@1 = 0.5, P@2 = 0.75, CP = (0.5·0.5 +
    0.75·1.0) / 1.5 = 0.6667. Returns 0.0 when no chunk has any usefulness, None without chunks.
    """
    if not usefulness:
        return None
    weighted = 0.0
    hits = 0.0
    for k, v in enumerate(usefulness, start=1):
        if v is None or not 0.0 <= v <= 1.0:
            raise ValueError(f"usefulness at rank {k} must be in [0, 1], got {v!r}")
        if v:
            hits += v
            weighted += hits / k * v
    if hits == 0:
        return 0.0
    return weighted / hits


def anchor(interaction: RagInteraction) -> str | None:
    """What chunk usefulness is judged against: the reference when known, else the response."""
    return interaction.reference or interaction.response


class ContextPrecision:
    """Context precision: are the useful chunks ranked first?

    For each chunk k the judge answers "was it useful in arriving at the answer?" (v_k), where the
    answer is the reference when the interaction has one and the response otherwise. Skipped
    without chunks or without any answer; 0.0 when no chunk was useful.
    """

    name = "context_precision"
    questions = frozenset({ASSESS_CHUNKS})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.chunks:
            return MetricResult.skipped(self.name, "no_chunks")
        answer = anchor(interaction)
        if not answer:
            return MetricResult.skipped(self.name, "no_response")
        try:
            assessed = await judge.assess_chunks(
                interaction.judged_query, answer, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        if assessed and all(a.useful is None for a in assessed):
            return MetricResult.skipped(self.name, "nothing_checkable")
        score = graded_context_precision([a.useful.confidence if a.useful else 0.0 for a in assessed])
        if score is None:
            return MetricResult.skipped(self.name, "no_chunks")
        useful = tuple(None if a.useful is None else bool(a.useful.value) for a in assessed)
        return MetricResult.ok(
            self.name,
            score,
            judge=judge.model,
            prompt_version=judge.prompt_version(ASSESS_CHUNKS),
            chunk_verdicts=useful,
        )


class ContextRelevancy:
    """Context relevancy: the share of the context's statements that are relevant to the query.

    Skipped without chunks, or when the chunks hold no statement.
    """

    name = "context_relevancy"
    questions = frozenset({ASSESS_CHUNKS})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.chunks:
            return MetricResult.skipped(self.name, "no_chunks")
        try:
            # Same arguments as ContextPrecision, so a cached judge answers both in one call.
            assessed = await judge.assess_chunks(
                interaction.judged_query, anchor(interaction) or None, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        score = context_relevancy_score(
            [a.relevant_weight for a in assessed], [a.statements for a in assessed]
        )
        if score is None:
            return MetricResult.skipped(self.name, "no_statements")
        relevant = tuple(a.relevant_statements > 0 if a.statements else None for a in assessed)
        return MetricResult.ok(
            self.name,
            score,
            judge=judge.model,
            prompt_version=judge.prompt_version(ASSESS_CHUNKS),
            chunk_verdicts=relevant,
        )


class ContextRecall:
    """Context recall: the share of the reference's claims that the context supports.

    Needs a reference; skipped without one, without chunks, or when the reference has no claim.
    """

    name = "context_recall"
    questions = frozenset({CHECK_REFERENCE})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.reference:
            return MetricResult.skipped(self.name, "no_reference")
        if not interaction.chunks:
            return MetricResult.skipped(self.name, "no_chunks")
        try:
            verdicts = await judge.check_reference(
                interaction.reference, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        score = context_recall_score([v.confidence for v in verdicts])
        if score is None:
            return MetricResult.skipped(self.name, "no_claims")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(CHECK_REFERENCE)
        )
