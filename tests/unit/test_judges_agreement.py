"""The lexical judge's agreement with the labels of the shared data stays at its documented level."""

from __future__ import annotations

import asyncio

import pytest

from agent.judges.local import LexicalJudge
from benchmarks.judge_agreement import agreement, auroc, balanced_accuracy, f1_of_negatives
from tests.support.repo import SHARED_DATA


def test_agreement_statistics() -> None:
    assert auroc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.875)
    assert auroc([1, 1], [0.1, 0.2]) is None
    assert balanced_accuracy([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.75)
    assert f1_of_negatives([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.5)


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
