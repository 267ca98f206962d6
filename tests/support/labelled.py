"""The labelled shared samples (../shared/data) as cases, and a judge's figures for a case.

RAGTruth QA, ARES and HaluEval QA are detected by their fields. `score` asks a Judge what the
streaming metrics ask it and returns the metric value with the judge's graded score: how
benchmarks/judge_agreement.py and the calibration tests count a case; `judge_file` scores a whole
file for agent.trust.agreement.agreement_table.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from agent.judges.base import Judge
from agent.metrics import answer_relevancy_score, context_relevancy_score, faithfulness_score
from agent.trust.agreement import Judged


@dataclass(frozen=True)
class Case:
    metric: str
    label: int  # 1 = faithful / relevant
    query: str
    chunks: tuple[str, ...]
    response: str


def load_cases(path: Path) -> tuple[str, list[Case]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first = rows[0]
    cases: list[Case] = []
    if {"passages", "response", "has_hallucination"} <= first.keys():
        for r in rows:
            cases.append(
                Case(
                    "faithfulness",
                    int(not r["has_hallucination"]),
                    r["question"],
                    tuple(r["passages"]),
                    r["response"],
                )
            )
        return "RAGTruth QA", cases
    if {"document", "answer", "context_relevance_label"} <= first.keys():
        for r in rows:
            chunks = (r["document"],)
            cases.append(
                Case("context_relevancy", r["context_relevance_label"], r["question"], chunks, r["answer"])
            )
            cases.append(
                Case("faithfulness", r["answer_faithfulness_label"], r["question"], chunks, r["answer"])
            )
            cases.append(
                Case("answer_relevancy", r["answer_relevance_label"], r["question"], chunks, r["answer"])
            )
        return "ARES", cases
    if {"knowledge", "right_answer"} <= first.keys():
        for r in rows:
            chunks = (r["knowledge"],)
            cases.append(Case("faithfulness", 1, r["question"], chunks, r["right_answer"]))
            for key in ("hallucinated_answer_one_turn", "hallucinated_answer_multi_turn"):
                cases.append(Case("faithfulness", 0, r["question"], chunks, r[key]))
        return "HaluEval QA", cases
    raise SystemExit(f"{path}: unknown format (fields {sorted(first)})")


async def score(judge: Judge, case: Case) -> tuple[float | None, float | None]:
    """The metric value and the judge's graded score (None when the judge gives none)."""
    if case.metric == "context_relevancy":
        (assessed,) = await judge.assess_chunks(case.query, None, case.chunks)
        value = context_relevancy_score([assessed.relevant_statements], [assessed.statements])
        return value, assessed.relevance.score
    claims = await judge.check_response(case.query, case.response, case.chunks)
    if case.metric == "faithfulness":
        value = faithfulness_score([c.supported.value for c in claims])
        scores = [c.supported.score for c in claims]
    else:
        value = answer_relevancy_score([bool(c.relevant and c.relevant.value) for c in claims])
        scores = [c.relevant.score if c.relevant else None for c in claims]
    if value is None:  # no claim: nothing unsupported, nothing off-topic
        value = 1.0
    graded = 1.0 if not scores else None
    if scores and all(s is not None for s in scores):
        # Faithfulness is as weak as its weakest claim; relevancy is the average statement.
        graded = min(scores) if case.metric == "faithfulness" else sum(scores) / len(scores)  # type: ignore[arg-type,type-var]
    return value, graded


async def judge_file(judge: Judge, path: Path) -> tuple[str, list[Judged]]:
    """The set's name and every case of the file as `judge` scored it."""
    name, cases = load_cases(path)
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    return name, [
        Judged(c.metric, c.label, value, graded) for c, (value, graded) in zip(cases, scored, strict=True)
    ]
