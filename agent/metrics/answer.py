"""Answer metrics: is the response grounded, on topic and correct?

- faithfulness: claims of the response supported by the context / all its claims.
- answer_relevancy: claims of the response relevant to the query / all its claims (statement
  level, as DeepEval defines it; RAGAS's variant generates questions and compares embeddings).
- answer_correctness: factual F1 between the response's and the reference's claims,
  TP / (TP + (FP + FN) / 2), as RAGAS's factual part (its optional semantic-similarity term is
  not included).

Faithfulness and answer relevancy ask the same `check_response` question, so a cached judge
answers both with one call.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.judges.base import CHECK_RESPONSE, COMPARE_ANSWERS, Judge, JudgeError
from agent.metrics.context import share
from agent.model import MetricResult, RagInteraction


def faithfulness_score(supported: Sequence[bool]) -> float | None:
    """Supported claims / claims; None when the response makes no claim."""
    return share(sum(map(bool, supported)), len(supported))


def answer_relevancy_score(relevant: Sequence[bool]) -> float | None:
    """Relevant statements / statements; None when the response has no statement."""
    return share(sum(map(bool, relevant)), len(relevant))


def answer_correctness_score(true_positives: int, false_positives: int, false_negatives: int) -> float | None:
    """Claim-level F1: TP / (TP + (FP + FN) / 2); None when neither side has a claim."""
    if min(true_positives, false_positives, false_negatives) < 0:
        raise ValueError("claim counts must be >= 0")
    denominator = true_positives + 0.5 * (false_positives + false_negatives)
    return true_positives / denominator if denominator else None


class Faithfulness:
    """Faithfulness: the share of the response's claims that the retrieved context supports.

    Skipped without chunks (nothing to be faithful to), without a response, or without claims.
    """

    name = "faithfulness"
    questions = frozenset({CHECK_RESPONSE})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.chunks:
            return MetricResult.skipped(self.name, "no_chunks")
        if not interaction.response:
            return MetricResult.skipped(self.name, "no_response")
        try:
            claims = await judge.check_response(
                interaction.judged_query, interaction.response, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        score = faithfulness_score([c.supported.value for c in claims])
        if score is None:
            return MetricResult.skipped(self.name, "no_claims")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(CHECK_RESPONSE)
        )


class AnswerRelevancy:
    """Answer relevancy: the share of the response's statements that address the query.

    Skipped without a response or when it has no statement.
    """

    name = "answer_relevancy"
    questions = frozenset({CHECK_RESPONSE})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.response:
            return MetricResult.skipped(self.name, "no_response")
        try:
            # Same arguments as Faithfulness, so a cached judge answers both in one call.
            claims = await judge.check_response(
                interaction.judged_query, interaction.response, [c.content for c in interaction.chunks]
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        score = answer_relevancy_score([c.relevant is not None and c.relevant.value for c in claims])
        if score is None:
            return MetricResult.skipped(self.name, "no_claims")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(CHECK_RESPONSE)
        )


class AnswerCorrectness:
    """Answer correctness against a reference: claim-level F1 (see module doc).

    Needs a reference and a response; skipped without them or when neither has a claim.
    """

    name = "answer_correctness"
    questions = frozenset({COMPARE_ANSWERS})  # what it asks the judge

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        if not interaction.reference:
            return MetricResult.skipped(self.name, "no_reference")
        if not interaction.response:
            return MetricResult.skipped(self.name, "no_response")
        try:
            comparison = await judge.compare_answers(
                interaction.query, interaction.response, interaction.reference
            )
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        tp = sum(v.value for v in comparison.response_claims)
        fp = len(comparison.response_claims) - tp
        fn = sum(not v.value for v in comparison.reference_claims)
        score = answer_correctness_score(tp, fp, fn)
        if score is None:
            return MetricResult.skipped(self.name, "no_claims")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(COMPARE_ANSWERS)
        )
