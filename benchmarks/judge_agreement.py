"""Agreement of a judge with human / construction labels: AUROC and balanced accuracy.

    python benchmarks/judge_agreement.py FILE... [--judge lexical|MODEL] [--api-base URL]

FILEs are JSONL in the formats of the shared evaluation data, detected by their fields:
- RAGTruth QA (`passages`, `response`, `has_hallucination`): faithfulness (label 1 = no span);
- ARES (`document`, `answer`, `context_relevance_label`, ...): context relevancy, faithfulness,
  answer relevancy;
- HaluEval QA (`knowledge`, `right_answer`, `hallucinated_answer_*`): faithfulness, the right
  answer labelled 1 and both hallucinated answers 0.

Per file and metric it prints the item count, the positives, AUROC of the metric value, AUROC of
the judge's graded score where it has one (local judges do), balanced accuracy at the documented
threshold, and for faithfulness the hallucination F1 (positive class: unfaithful). Thresholds
(fixed, documented in docs/judges.md): faithfulness is "faithful" at 1.0 (every claim supported),
context relevancy "relevant" above 0 (some statement relevant), answer relevancy "relevant" at
>= 0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import Settings
from agent.judges.base import Judge
from agent.judges.factory import build_inner_judge
from agent.metrics import answer_relevancy_score, context_relevancy_score, faithfulness_score
from agent.telemetry import Telemetry

THRESHOLDS = {"faithfulness": 1.0, "context_relevancy": 1e-9, "answer_relevancy": 0.5}


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


def auroc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y]
    negatives = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def balanced_accuracy(labels: Sequence[int], predicted: Sequence[int]) -> float | None:
    pos = [p for p, y in zip(predicted, labels, strict=True) if y]
    neg = [p for p, y in zip(predicted, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    return (sum(pos) / len(pos) + sum(1 - p for p in neg) / len(neg)) / 2


def f1_of_negatives(labels: Sequence[int], predicted: Sequence[int]) -> float | None:
    """F1 of the 'unfaithful' class (RAGTruth's hallucination F1)."""
    tp = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and not p)
    fp = sum(1 for y, p in zip(labels, predicted, strict=True) if y and not p)
    fn = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and p)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


def fmt(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.3f}"


@dataclass(frozen=True)
class Agreement:
    data: str
    metric: str
    items: int
    positives: int
    auroc: float | None
    graded_auroc: float | None
    balanced_accuracy: float | None
    hallucination_f1: float | None


async def agreement(judge: Judge, path: Path) -> list[Agreement]:
    name, cases = load_cases(path)
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    rows = []
    for metric, threshold in THRESHOLDS.items():
        pairs = [(c, s) for c, s in zip(cases, scored, strict=True) if c.metric == metric]
        if not pairs:
            continue
        labels = [c.label for c, _ in pairs]
        values = [v if v is not None else 1.0 for _, (v, _) in pairs]
        graded = [g for _, (_, g) in pairs]
        predicted = [int(v >= threshold) for v in values]
        rows.append(
            Agreement(
                data=name,
                metric=metric,
                items=len(pairs),
                positives=sum(labels),
                auroc=auroc(labels, values),
                graded_auroc=auroc(labels, graded) if all(g is not None for g in graded) else None,  # type: ignore[arg-type]
                balanced_accuracy=balanced_accuracy(labels, predicted),
                hallucination_f1=f1_of_negatives(labels, predicted) if metric == "faithfulness" else None,
            )
        )
    return rows


async def main_async(args: argparse.Namespace) -> None:
    overrides: dict[str, object] = {"judge_model": args.judge}
    if args.api_base:
        overrides["judge_api_base"] = args.api_base
    if args.api_key:
        overrides["judge_api_key"] = args.api_key
    judge = build_inner_judge(Settings.model_validate(overrides), Telemetry(CollectorRegistry()))
    print(f"judge: {judge.model}")
    print(
        f"{'data':<12} {'metric':<18} {'items':>5} {'pos':>4} {'AUROC':>6} {'AUROC*':>6} "
        f"{'BalAcc':>6} {'hal.F1':>6}"
    )
    for path in args.files:
        for r in await agreement(judge, Path(path)):
            print(
                f"{r.data:<12} {r.metric:<18} {r.items:>5} {r.positives:>4} {fmt(r.auroc)} "
                f"{fmt(r.graded_auroc)} {fmt(r.balanced_accuracy)} {fmt(r.hallucination_f1)}"
            )
    print(
        "AUROC: of the metric value; AUROC*: of the judge's graded score; BalAcc at the documented threshold"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+")
    parser.add_argument("--judge", default="lexical", help="'lexical' or a litellm model string")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--api-key", default=None)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
