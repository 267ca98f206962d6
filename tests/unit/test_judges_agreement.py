"""The lexical judge's agreement with the labels of the shared data stays at its documented level."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.judges.base import Judge
from agent.judges.local import LexicalJudge
from agent.trust.agreement import DEFAULT_THRESHOLDS, auroc, balanced_accuracy, problem_f1
from tests.support.labelled import load_cases, score
from tests.support.repo import SHARED_DATA


def test_agreement_statistics() -> None:
    assert auroc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.875)
    assert auroc([1, 1], [0.1, 0.2]) is None
    assert auroc([], []) is None
    assert balanced_accuracy([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.75)
    assert balanced_accuracy([], []) is None
    assert problem_f1([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.5)
    assert problem_f1([], []) is None


@dataclass(frozen=True)
class Row:
    data: str
    metric: str
    items: int
    positives: int
    auroc: float | None
    graded_auroc: float | None
    hallucination_f1: float | None


async def agreement(judge: Judge, path: Path) -> list[Row]:
    """What benchmarks/judge_agreement.py prints per metric: the same cases, scores and statistics."""
    name, cases = load_cases(path)
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    rows = []
    for metric, threshold in DEFAULT_THRESHOLDS.items():
        pairs = [(c.label, s) for c, s in zip(cases, scored, strict=True) if c.metric == metric]
        if not pairs:
            continue
        labels = [label for label, _ in pairs]
        values = [1.0 if v is None else v for _, (v, _) in pairs]
        graded = [g for _, (_, g) in pairs]
        predicted = [int(v >= threshold) for v in values]
        defined = all(g is not None for g in graded)
        rows.append(
            Row(name, metric, len(pairs), sum(labels), auroc(labels, values),
                auroc(labels, graded) if defined else None,  # type: ignore[arg-type]
                problem_f1(labels, predicted) if metric == "faithfulness" else None)
        )  # fmt: skip
    return rows


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared evaluation data not present")
def test_lexical_judge_agreement_on_the_shared_samples() -> None:
    judge = LexicalJudge()
    rows = {}
    for folder in ("ragtruth_qa_sample", "ares_sample", "halueval_qa_sample"):
        (path,) = (SHARED_DATA / folder).glob("*.jsonl")
        for row in asyncio.run(agreement(judge, path)):
            rows[row.data, row.metric] = row
    ragtruth = rows["RAGTruth QA", "faithfulness"]
    assert (ragtruth.items, ragtruth.positives) == (45, 28)
    # 45 responses: two of them move F1 by ~0.05. The documented level on 772 held-out responses
    # is benchmarks/heldout.py's (docs/judges.md); this pins the sample against regressions.
    assert ragtruth.hallucination_f1 is not None and ragtruth.hallucination_f1 >= 0.63
    assert ragtruth.auroc is not None and ragtruth.auroc >= 0.70
    assert ragtruth.graded_auroc is not None and ragtruth.graded_auroc >= 0.77
    ares = rows["ARES", "context_relevancy"]
    assert (ares.items, ares.positives) == (50, 36)
    assert ares.graded_auroc is not None and ares.graded_auroc >= 0.70
    halueval = rows["HaluEval QA", "faithfulness"]
    assert (halueval.items, halueval.positives) == (120, 40)
    assert halueval.graded_auroc is not None and halueval.graded_auroc >= 0.85
