"""Answer metrics: is the response grounded, on topic and correct?

- faithfulness: claims of the response supported by the context / all its claims.
- answer_relevancy: claims of the response relevant to the query / all its claims (statement
  level, as DeepEval defines it; RAGAS's variant generates questions and compares embeddings).
- answer_correctness: factual F1 between the response's and the reference's claims,
  TP / (TP + (FP + FN) / 2), as RAGAS's factual part (its optional semantic-similarity term is
  not included).

Every verdict counts with its confidence (`Verdict.confidence`: the judge's graded score where it
gives one, else 1 or 0), so binary verdicts give exactly the shares above.

Faithfulness and answer relevancy ask the same `check_response` question, so a cached judge
answers both with one call.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.judges.base import CHECK_RESPONSE, COMPARE_ANSWERS, Judge, JudgeError
from agent.metrics.context import mean_confidence
from agent.model import MetricResult, RagInteraction


def faithfulness_score(supported: Sequence[float | bool]) -> float | None:
    """Supported claims / claims, each claim counted with its confidence of support (the mean
    of graded supports; 1 / 0 for binary verdicts); None when the response makes no claim."""
    return mean_confidence(supported)


def answer_relevancy_score(relevant: Sequence[float | bool]) -> float | None:
    """Relevant statements / statements, each counted with its confidence; None when the
    response has no statement."""
    return mean_confidence(relevant)


def answer_correctness_score(
    true_positives: float, false_positives: float, false_negatives: float
) -> float | None:
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
        score = faithfulness_score([c.supported.confidence for c in claims])
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
        score = answer_relevancy_score([c.relevant.confidence if c.relevant else 0.0 for c in claims])
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
        # Graded: a claim 0.8 supported is 0.8 of a true positive and 0.2 of a false one.
        tp = sum(v.confidence for v in comparison.response_claims)
        fp = len(comparison.response_claims) - tp
        fn = sum(1.0 - v.confidence for v in comparison.reference_claims)
        score = answer_correctness_score(tp, fp, fn)
        if score is None:
            return MetricResult.skipped(self.name, "no_claims")
        return MetricResult.ok(
            self.name, score, judge=judge.model, prompt_version=judge.prompt_version(COMPARE_ANSWERS)
        )
