"""The out-of-sample rules of the agreement tables: the labelled sets, the grids a rule is chosen
from, and the rules themselves (benchmarks/judge_agreement.py --cross, benchmarks/judge_ablation.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tests.support.labelled import Case, load_cases

SUPPORT_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

SHARE_GRID = (0.5, 0.67, 0.75, 0.9, 1.0)

RELEVANCE_GRID = tuple(round(0.05 * n, 2) for n in range(1, 20))

SETS = {
    "RAGTruth": "ragtruth_qa_sample/ragtruth_qa_sample.jsonl",
    "ARES": "ares_sample/ares_fewshot_judge_examples.jsonl",
    "HaluEval": "halueval_qa_sample/halueval_qa_sample.jsonl",
}


def relevance_cases(name: str, path: Path) -> list[Case]:
    """Context relevancy cases: ARES's labels, or pairs built from a QA set (own passage: 1,
    the next item's passage: 0)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if name == "ARES":
        return [c for c in load_cases(path)[1] if c.metric == "context_relevancy"]
    if name == "RAGTruth":
        unique = {r["source_id"]: r for r in rows}  # several responses share one question
        pairs = [(r["question"], "\n".join(r["passages"])) for r in unique.values()]
    else:
        pairs = [(r["question"], r["knowledge"]) for r in rows]
    cases = []
    for n, (question, passage) in enumerate(pairs):
        other = pairs[(n + 1) % len(pairs)][1]
        cases.append(Case("context_relevancy", 1, question, (passage,), ""))
        cases.append(Case("context_relevancy", 0, question, (other,), ""))
    return cases


def faithful(claim_scores: Sequence[float], support: float, share: float) -> int:
    if not claim_scores:
        return 1  # no claim: nothing unsupported
    return int(sum(s >= support for s in claim_scores) / len(claim_scores) >= share)
