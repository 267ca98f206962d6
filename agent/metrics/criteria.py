"""Custom criteria: the operator's own metrics, each a question the LLM judge answers.

A criterion (`agent.model.Criterion`, the `criteria` setting) reads some of query, response,
context and reference, and is answered 0 / 1 or on a 1-5 scale. Its score:

- binary: 1 for yes, 0 for no (the judge's confidence in yes when it grades its answers);
- 1-5: (s - 1) / 4, so 1 → 0.0, 3 → 0.5, 5 → 1.0;
- `higher_is_better: false`: 1 minus that, so every ragpulse score is higher-is-better and the
  drift detectors and alert rules, which watch for drops, watch the right way.

Undefined, never 0: a criterion that reads what the interaction lacks (a reference in
production, a response that is missing) is skipped (`no_reference`, ...); a judge failure is an
error. The judge is asked once per interaction for all criteria together, inside the combined
question when the built-in metrics ask it (agent/evaluate.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.judges.base import JUDGE_CRITERIA, CriterionInputs, Judge, JudgeError
from agent.judges.confidence import ANSWER_FLAGS
from agent.metrics import builtin_metric_name
from agent.model import Criterion, MetricResult, RagInteraction, Verdict

_MISSING = {"response": "no_response", "context": "no_chunks", "reference": "no_reference"}


def check_criteria(criteria: Sequence[Criterion], judge_model: str, *, local_judge: bool) -> None:
    """Raise ValueError unless the criteria have names no built-in metric has, and an LLM judge
    (`local_judge` False) to answer them: the `criteria` setting's rules at start-up."""
    if not criteria:
        return
    taken = [c.name for c in criteria if builtin_metric_name(c.name)]
    if taken:
        raise ValueError(f"{taken} name built-in metrics; give the criteria names of their own")
    # The judge's graded confidence reads these keys of its answers: a criterion of that name
    # would be taken for one of them.
    keys = [c.name for c in criteria if c.name in ANSWER_FLAGS]
    if keys:
        raise ValueError(f"{keys} name keys of the judge's answers; give the criteria other names")
    if local_judge:
        raise ValueError(
            f"custom criteria need an LLM judge, and judge_model is the local judge "
            f"{judge_model!r}, which cannot answer open questions; set judge_model to an "
            "LLM (e.g. openai/gpt-4o-mini) or remove the criteria"
        )


def criterion_score(verdict: Verdict, higher_is_better: bool = True) -> float:
    """A criterion's score in [0, 1] from the judge's verdict (see the module doc)."""
    value = verdict.confidence
    return value if higher_is_better else 1.0 - value


def criterion_answer(criterion: Criterion, verdict: Verdict) -> str:
    """The judge's answer as it gave it: "yes" / "no", or "s of 5" (a 1-5 verdict keeps
    (s - 1) / 4 as its score)."""
    if criterion.scale == "binary":
        return "yes" if verdict.value else "no"
    return f"{round(1 + 4 * verdict.confidence)} of 5"


def answer_text(criterion: Criterion, verdict: Verdict) -> str:
    """What the judge answered, for the result's explanation: the answer, the probability of yes
    when graded, what the anchor of a 1-5 point says, and the judge's reason when it gave one."""
    text = f"answered {criterion_answer(criterion, verdict)}"
    if criterion.scale == "binary" and verdict.score is not None:
        text += f" (p(yes) {verdict.confidence:.2f})"
    elif criterion.scale != "binary":
        anchor = criterion.anchors.get(round(1 + 4 * verdict.confidence))
        text += f" ({anchor})" if anchor else ""
    return f"{text}: {verdict.reason}" if verdict.reason else text


def criterion_inputs(interaction: RagInteraction) -> CriterionInputs:
    """What criteria may read of an interaction (the query as relevance is judged against it)."""
    return CriterionInputs(
        interaction.judged_query,
        interaction.response,
        tuple(c.content for c in interaction.chunks),
        interaction.reference,
    )


class CriterionMetric:
    """One custom criterion as a metric named after it."""

    questions = frozenset({JUDGE_CRITERIA})  # what it asks the judge

    def __init__(self, criterion: Criterion) -> None:
        self.criterion = criterion
        self.name = criterion.name

    def missing(self, inputs: CriterionInputs) -> str | None:
        """The skip reason when the interaction lacks something the criterion reads, else None."""
        for read in self.criterion.reads:
            if not inputs.has(read):
                return _MISSING[read]
        return None

    async def evaluate(self, interaction: RagInteraction, judge: Judge) -> MetricResult:
        inputs = criterion_inputs(interaction)
        reason = self.missing(inputs)
        if reason is not None:
            return MetricResult.skipped(self.name, reason)
        try:
            verdicts = await judge.judge_criteria([self.criterion], inputs)
        except JudgeError as exc:
            return MetricResult.error(self.name, str(exc), judge=judge.model)
        verdict = verdicts.get(self.name)
        if verdict is None:  # a judge that answered without it: a failure, never a score
            return MetricResult.error(
                self.name, "the judge gave no answer for this criterion", judge=judge.model
            )
        return MetricResult.ok(
            self.name,
            criterion_score(verdict, self.criterion.higher_is_better),
            judge=judge.model,
            prompt_version=judge.prompt_version(JUDGE_CRITERIA),
            reason=answer_text(self.criterion, verdict),
        )
