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
import sys
from dataclasses import asdict
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.build import build_inner_judge
from agent.config import Settings
from agent.judges.base import Judge
from agent.telemetry import JudgeTelemetry
from agent.trust.agreement import AgreementRow, agreement_table, auroc, balanced_accuracy, problem_f1
from benchmarks.common.labelled import (
    RELEVANCE_GRID,
    SETS,
    SHARE_GRID,
    SUPPORT_GRID,
    faithful,
    relevance_cases,
)
from benchmarks.harness import Benchmark, Column
from tests.support.labelled import judge_file, load_cases


async def agreement(judge: Judge, path: Path) -> list[AgreementRow]:
    """The table's rows for one file (agent.trust.agreement.agreement_table, which the tests pin)."""
    return agreement_table(*await judge_file(judge, path))


# -- out of sample ---------------------------------------------------------------------------------


async def cross(bench: Benchmark, judge: Judge, data: Path) -> None:
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
        return problem_f1(labels, [faithful(s, support, share) for s in scores]) or 0.0

    bench.line(f"judge: {judge.model}")
    bench.line("faithfulness: hallucination F1 at the rule chosen on the row's set (best F1 there)")
    names = list(SETS)
    bench.line(
        f"{'chosen on':<10} {'rule (s, r)':<14} "
        + " ".join(f"{n:>9}" for n in names)
        + "   AUROC of min support"
    )
    for source in names:
        support, share = max(
            ((s, r) for s in SUPPORT_GRID for r in SHARE_GRID), key=lambda rule: f1_at(source, *rule)
        )
        cells = [f"{f1_at(n, support, share):9.3f}" + ("*" if n == source else " ") for n in names]
        bench.line(f"{source:<10} {f'({support}, {share})':<14} " + "".join(cells))
        bench.record(
            f"faithfulness rule chosen on {source}",
            {"rule": [support, share], "f1": {n: f1_at(n, support, share) for n in names}},
        )
    grid = [(s, r) for s in SUPPORT_GRID for r in SHARE_GRID]
    loo = []
    for target in names:
        # Leave one set out: the rule with the best mean F1 over the two others.
        rule = max(grid, key=lambda g: sum(f1_at(n, *g) for n in names if n != target))
        loo.append(f"{f1_at(target, *rule):6.3f} {rule}")
    bench.line(f"{'the others':<10} {'(per column)':<14} " + " ".join(loo))
    documented = (0.5, 1.0)
    cells = [f"{f1_at(n, *documented):9.3f} " for n in names]
    bench.line(f"{'documented':<10} {documented!s:<14} " + "".join(cells))
    for name in names:
        labels, scores = claim_scores[name]
        bench.line(
            f"  {name}: AUROC(min claim support) {auroc(labels, [min(s, default=1.0) for s in scores]):.3f}"
        )

    bench.line(
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
        bench.line(f"  {name}: {len(labels)} cases, AUROC {auroc(labels, scores):.3f}")
    for source in names:
        threshold = max(RELEVANCE_GRID, key=lambda t: accuracy_at(source, t))
        cells = [f"{accuracy_at(n, threshold):9.3f}" + ("*" if n == source else " ") for n in names]
        bench.line(f"{source:<10} {f't={threshold}':<14} " + "".join(cells))
        bench.record(
            f"relevance threshold chosen on {source}",
            {"threshold": threshold, "balanced_accuracy": {n: accuracy_at(n, threshold) for n in names}},
        )


COLUMNS = (
    Column("data", "data", 12, "<"),
    Column("metric", "metric", 18, "<"),
    Column("items", "items", 5),
    Column("positives", "pos", 4),
    Column("auroc", "AUROC", 6, spec=".3f"),
    Column("graded_auroc", "AUROC*", 6, spec=".3f"),
    Column("balanced_accuracy", "BalAcc", 6, spec=".3f"),
    Column("hallucination_f1", "hal.F1", 6, spec=".3f"),
)


async def main_async(bench: Benchmark, args: argparse.Namespace) -> None:
    overrides: dict[str, object] = {"judge_model": args.judge}
    if args.api_base:
        overrides["judge_api_base"] = args.api_base
    if args.api_key:
        overrides["judge_api_key"] = args.api_key
    judge = build_inner_judge(Settings.model_validate(overrides), JudgeTelemetry(CollectorRegistry()))
    if args.cross:
        await cross(bench, judge, Path(args.cross))
        return
    bench.line(f"judge: {judge.model}")
    table = bench.table("agreement", COLUMNS)
    table.header()
    for path in args.files:
        for r in await agreement(judge, Path(path)):
            table.row(**asdict(r))
    bench.line(
        "AUROC: of the metric value; AUROC*: of the judge's graded score; BalAcc at the documented threshold"
    )


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("files", nargs="*")
    parser.add_argument("--cross", metavar="DATA_DIR", help="out-of-sample table over the shared data")
    parser.add_argument("--judge", default="lexical", help="'lexical' or a litellm model string")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--api-key", default=None)
    asyncio.run(main_async(bench, bench.parse()))
    bench.finish()


if __name__ == "__main__":
    main()
