"""Agreement of a judge with human / construction labels: AUROC and balanced accuracy.

    python benchmarks/judge_agreement.py FILE... [--judge lexical|MODEL] [--api-base URL]
    python benchmarks/judge_agreement.py --cross DATA_DIR [--judge lexical|embedding]

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

--cross measures out of sample: the decision rule is chosen on one labelled set and reported on
the others. Faithfulness (RAGTruth QA, ARES, HaluEval QA): a claim is supported when its support
score is >= s, a response faithful when the share of supported claims is >= r; (s, r) is the
pair of a fixed grid with the best hallucination F1 on the set it is chosen on. Context relevancy
(ARES, plus two sets built from HaluEval and RAGTruth by pairing each question with its own
passage (relevant) and with the next item's passage (not relevant)): a chunk is relevant when its
graded relevance is >= t, chosen for the best balanced accuracy. AUROC needs no rule.
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


# -- out of sample ---------------------------------------------------------------------------------

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


async def cross(judge: Judge, data: Path) -> None:
    claim_scores: dict[str, tuple[list[int], list[list[float]]]] = {}
    for name, relative in SETS.items():
        cases = [c for c in load_cases(data / relative)[1] if c.metric == "faithfulness"]
        checked = await asyncio.gather(*(judge.check_response(c.query, c.response, c.chunks) for c in cases))
        scores = [
            [v.supported.score if v.supported.score is not None else float(v.supported.value) for v in claims]
            for claims in checked
        ]
        claim_scores[name] = ([c.label for c in cases], scores)

    def f1_at(name: str, support: float, share: float) -> float:
        labels, scores = claim_scores[name]
        return f1_of_negatives(labels, [faithful(s, support, share) for s in scores]) or 0.0

    print(f"judge: {judge.model}")
    print("faithfulness: hallucination F1 at the rule chosen on the row's set (best F1 there)")
    names = list(SETS)
    print(
        f"{'chosen on':<10} {'rule (s, r)':<14} "
        + " ".join(f"{n:>9}" for n in names)
        + "   AUROC of min support"
    )
    for source in names:
        support, share = max(
            ((s, r) for s in SUPPORT_GRID for r in SHARE_GRID), key=lambda rule: f1_at(source, *rule)
        )
        cells = [f"{f1_at(n, support, share):9.3f}" + ("*" if n == source else " ") for n in names]
        print(f"{source:<10} {f'({support}, {share})':<14} " + "".join(cells))
    grid = [(s, r) for s in SUPPORT_GRID for r in SHARE_GRID]
    loo = []
    for target in names:
        # Leave one set out: the rule with the best mean F1 over the two others.
        rule = max(grid, key=lambda g: sum(f1_at(n, *g) for n in names if n != target))
        loo.append(f"{f1_at(target, *rule):6.3f} {rule}")
    print(f"{'the others':<10} {'(per column)':<14} " + " ".join(loo))
    documented = (0.5, 1.0)
    cells = [f"{f1_at(n, *documented):9.3f} " for n in names]
    print(f"{'documented':<10} {documented!s:<14} " + "".join(cells))
    for name in names:
        labels, scores = claim_scores[name]
        print(
            f"  {name}: AUROC(min claim support) {auroc(labels, [min(s, default=1.0) for s in scores]):.3f}"
        )

    print(
        "context relevancy: AUROC of the graded relevance; "
        "balanced accuracy at the threshold chosen on the row's set"
    )
    graded: dict[str, tuple[list[int], list[float]]] = {}
    for name, relative in SETS.items():
        cases = relevance_cases(name, data / relative)
        assessed = await asyncio.gather(*(judge.assess_chunks(c.query, None, c.chunks) for c in cases))
        graded[name] = ([c.label for c in cases], [a[0].relevance.score or 0.0 for a in assessed])

    def accuracy_at(name: str, threshold: float) -> float:
        labels, scores = graded[name]
        return balanced_accuracy(labels, [int(s >= threshold) for s in scores]) or 0.0

    for name in names:
        labels, scores = graded[name]
        print(f"  {name}: {len(labels)} cases, AUROC {auroc(labels, scores):.3f}")
    for source in names:
        threshold = max(RELEVANCE_GRID, key=lambda t: accuracy_at(source, t))
        cells = [f"{accuracy_at(n, threshold):9.3f}" + ("*" if n == source else " ") for n in names]
        print(f"{source:<10} {f't={threshold}':<14} " + "".join(cells))


async def main_async(args: argparse.Namespace) -> None:
    overrides: dict[str, object] = {"judge_model": args.judge}
    if args.api_base:
        overrides["judge_api_base"] = args.api_base
    if args.api_key:
        overrides["judge_api_key"] = args.api_key
    judge = build_inner_judge(Settings.model_validate(overrides), Telemetry(CollectorRegistry()))
    if args.cross:
        await cross(judge, Path(args.cross))
        return
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
    parser.add_argument("files", nargs="*")
    parser.add_argument("--cross", metavar="DATA_DIR", help="out-of-sample table over the shared data")
    parser.add_argument("--judge", default="lexical", help="'lexical' or a litellm model string")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--api-key", default=None)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
