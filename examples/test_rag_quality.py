"""A quality gate for your RAG app in pytest: copy this file into your tests.

It scores a golden set with ragpulse (the same scores as `ragpulse eval`) and fails the build
when a metric's mean drops under its threshold, with one line per failing metric:

    faithfulness: mean 0.412 is under the threshold 0.700 (95% CI 0.301 – 0.530, 12 scores)

Run it with `pytest test_rag_quality.py`. The set is GOLDEN_SET (default: golden.jsonl beside
this file), one JSON object per line with the question, the contexts your retriever returned
and your app's response (docs/eval.md, "Input"). The judge is the settings' (RAGPULSE_JUDGE_MODEL,
RAGPULSE_JUDGE_API_KEY, ...; the built-in local judge, lexical, when unset). To score your app
as it answers now, build the items in the fixture instead of reading a file:

    items = [{"question": q, **my_rag_app(q)} for q in questions]  # contexts, response
    return evaluate(items)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.quality import EvalResults, assert_quality, evaluate

GOLDEN_SET = Path(os.environ.get("GOLDEN_SET", Path(__file__).with_name("golden.jsonl")))


@pytest.fixture(scope="module")
def results() -> EvalResults:
    return evaluate(GOLDEN_SET)  # scored once for every test of this module


def test_answers_are_grounded_in_the_retrieved_context(results: EvalResults) -> None:
    assert_quality(results, faithfulness=0.7)


def test_answers_address_the_question(results: EvalResults) -> None:
    if "answer_relevancy" not in results.metrics:  # left out by the judge's default (docs/judges.md)
        pytest.skip("the local judges measure answer relevancy at chance: set RAGPULSE_JUDGE_MODEL to an LLM")
    assert_quality(results, answer_relevancy=0.5)
