"""Scores from the judge's confidence against thresholded verdicts, on labelled data.

    python benchmarks/graded_scores.py [--data DIR] [--judge lexical|embedding]
        [--ragtruth RAGTRUTH_QA_JSONL] [--ares ARES_HUMAN_TSV]

A metric averages its verdicts. Before graded scores it averaged thresholded verdicts (a claim is
supported or not); now it averages the judge's confidence (`Verdict.confidence`, the local
judge's support). Per data set and metric this prints, for both ways of scoring:

- AUROC of the metric value against the human / construction label (no rule, nothing fitted);
- balanced accuracy and, for faithfulness, hallucination F1 (positive class: unfaithful) at a
  cut on the metric value chosen OUT OF SAMPLE: on the shared samples, the cut with the best mean
  balanced accuracy over the other shared sets (leave one set out); on the held-out files, the
  cut chosen on all three shared sets. Both also get the documented cut (agent/trust/
  agreement.py: faithful at 1.0, relevant above 0, answer relevant at 0.5), which `ragpulse
  calibrate` and the judge canary use.

Data: the shared samples (RAGTruth QA, ARES exemplars, HaluEval QA; ../shared/data), the
RAGChecker example's claims as claim-level data (a response or reference claim, written out from
its triplet, labelled supported when RAGChecker's checker found any chunk to entail it), and, when
given, the held-out files of benchmarks/heldout.py: RAGTruth QA's `test` half (its `dev` half was
used to tune the judge) and ARES's human-annotated test set. Scores come from the product's pure
metric functions (agent/metrics) over the judge's verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.build import build_inner_judge
from agent.config import Settings
from agent.judges.base import Judge
from agent.metrics import answer_relevancy_score, context_relevancy_score, faithfulness_score
from agent.telemetry import JudgeTelemetry
from agent.trust.agreement import DEFAULT_THRESHOLDS, auroc, balanced_accuracy, problem_f1
from benchmarks.common.heldout import load_ares, load_ragtruth
from benchmarks.common.labelled import SETS, relevance_cases
from benchmarks.harness import Benchmark, Column, shared_data
from tests.support.labelled import Case, load_cases

CUTS = tuple(round(0.05 * n, 2) for n in range(0, 21))
METRICS = ("faithfulness", "context_relevancy", "answer_relevancy")


@dataclass(frozen=True)
class Scored:
    label: int
    thresholded: float
    graded: float


async def scored(judge: Judge, case: Case) -> Scored:
    """The metric value from thresholded verdicts and from the judge's confidence."""
    if case.metric == "context_relevancy":
        (a,) = await judge.assess_chunks(case.query, None, case.chunks)
        before = context_relevancy_score([a.relevant_statements], [a.statements])
        after = context_relevancy_score([a.relevant_weight], [a.statements])
        return Scored(case.label, before or 0.0, after or 0.0)
    claims = await judge.check_response(case.query, case.response, case.chunks)
    if case.metric == "faithfulness":
        before = faithfulness_score([c.supported.value for c in claims])
        after = faithfulness_score([c.supported.confidence for c in claims])
    else:
        before = answer_relevancy_score([bool(c.relevant and c.relevant.value) for c in claims])
        after = answer_relevancy_score([c.relevant.confidence if c.relevant else 0.0 for c in claims])
    # No claim: nothing unsupported, nothing off topic (as benchmarks/judge_agreement.py counts).
    return Scored(case.label, 1.0 if before is None else before, 1.0 if after is None else after)


def _predict(values: Sequence[float], cut: float) -> list[int]:
    return [int(v >= cut) for v in values]


def best_cut(rows: Sequence[Sequence[Scored]], graded: bool) -> float:
    """The cut with the best mean balanced accuracy over `rows` (one list per data set)."""

    def mean_accuracy(cut: float) -> float:
        found = [
            balanced_accuracy(
                [s.label for s in r], _predict([s.graded if graded else s.thresholded for s in r], cut)
            )
            for r in rows
        ]
        kept = [f for f in found if f is not None]
        return sum(kept) / len(kept) if kept else 0.0

    return max(CUTS, key=mean_accuracy)


COLUMNS = (
    Column("data", "data", 16, "<"),
    Column("metric", "metric", 17, "<"),
    Column("items", "items", 5),
    Column("auroc_before", "AUROC thr", 9, spec=".3f"),
    Column("auroc_after", "AUROC grd", 9, spec=".3f"),
    Column("bacc_documented", "BalAcc doc", 10, spec=".3f"),
    Column("bacc_documented_after", "doc grd", 7, spec=".3f"),
    Column("cut_before", "cut thr", 7, spec=".2f"),
    Column("bacc_before", "BalAcc thr", 10, spec=".3f"),
    Column("cut_after", "cut grd", 7, spec=".2f"),
    Column("bacc_after", "BalAcc grd", 10, spec=".3f"),
    Column("f1_before", "halF1 thr", 9, spec=".3f"),
    Column("f1_after", "halF1 grd", 9, spec=".3f"),
)


def figures(
    name: str, metric: str, rows: Sequence[Scored], cut_before: float | None, cut_after: float | None
) -> dict[str, object]:
    """One row; without a cut (no other set has the metric) only AUROC and the documented cut."""
    labels = [s.label for s in rows]
    before, after = [s.thresholded for s in rows], [s.graded for s in rows]
    faith = metric == "faithfulness"

    def at(values: list[float], cut: float | None, statistic: Callable[..., float | None]) -> float | None:
        return None if cut is None else statistic(labels, _predict(values, cut))

    return {
        "data": name,
        "metric": metric,
        "items": len(rows),
        "auroc_before": auroc(labels, before),
        "auroc_after": auroc(labels, after),
        "bacc_documented": balanced_accuracy(labels, _predict(before, DEFAULT_THRESHOLDS[metric])),
        # The documented cut on graded values: what `ragpulse calibrate` and the canary now count.
        "bacc_documented_after": balanced_accuracy(labels, _predict(after, DEFAULT_THRESHOLDS[metric])),
        "cut_before": cut_before,
        "bacc_before": at(before, cut_before, balanced_accuracy),
        "cut_after": cut_after,
        "bacc_after": at(after, cut_after, balanced_accuracy),
        "f1_before": at(before, cut_before, problem_f1) if faith else None,
        "f1_after": at(after, cut_after, problem_f1) if faith else None,
    }


def ragchecker_claims(path: Path) -> list[Case]:
    """Claim-level cases from the RAGChecker example: each claim against the retrieved chunks."""
    cases = []
    for item in json.loads(path.read_text())["results"]:
        chunks = tuple(c["text"] for c in item["retrieved_context"])
        for claims_field, verdicts_field in (
            ("response_claims", "retrieved2response"),
            ("gt_answer_claims", "retrieved2answer"),
        ):
            claims, verdicts = item[claims_field], item[verdicts_field]
            for triplet, per_chunk in zip(claims, verdicts, strict=True):
                label = int("Entailment" in per_chunk)
                cases.append(Case("claim", label, item["query"], chunks, " ".join(triplet) + "."))
    return cases


async def claim_rows(bench: Benchmark, judge: Judge, path: Path) -> None:
    cases = ragchecker_claims(path)
    verdicts = await asyncio.gather(*(judge.check_reference(c.response, c.chunks) for c in cases))
    labels, before, after = [], [], []
    for case, found in zip(cases, verdicts, strict=True):
        if not found:
            continue
        labels.append(case.label)
        # A triplet may read as more than one sentence: the claim holds when all its parts do.
        before.append(float(all(v.value for v in found)))
        after.append(min(v.confidence for v in found))
    figures = {"claims": len(labels), "supported": sum(labels), "auroc_before": auroc(labels, before),
               "auroc_after": auroc(labels, after)}  # fmt: skip
    bench.record("RAGChecker claims", figures)
    bench.line(
        f"RAGChecker claims (claim level): {len(labels)} claims, {sum(labels)} supported; "
        f"AUROC thresholded {figures['auroc_before']:.3f}, graded {figures['auroc_after']:.3f}"
    )


async def main_async(bench: Benchmark, args: argparse.Namespace) -> None:
    judge = build_inner_judge(
        Settings.model_validate({"judge_model": args.judge}), JudgeTelemetry(CollectorRegistry())
    )
    data = Path(args.data) if args.data else shared_data()
    shared: dict[str, list[Case]] = {}
    for name, relative in SETS.items():
        cases = load_cases(data / relative)[1]
        if name != "ARES":  # context relevancy pairs built from the QA sets (own passage or not)
            cases += relevance_cases(name, data / relative)
        shared[name] = cases
    held: dict[str, list[Case]] = {}
    if args.ragtruth:
        held["RAGTruth test"] = load_ragtruth(Path(args.ragtruth))["test"]
    if args.ares:
        held["ARES human"] = load_ares(Path(args.ares))
    results: dict[str, dict[str, list[Scored]]] = {}
    for name, cases in {**shared, **held}.items():
        values = await asyncio.gather(*(scored(judge, c) for c in cases))
        for case, value in zip(cases, values, strict=True):
            results.setdefault(name, {}).setdefault(case.metric, []).append(value)

    bench.line(f"judge: {judge.model}; thr = thresholded verdicts (before), grd = graded confidence (after)")
    table = bench.table("graded", COLUMNS)
    table.header()
    for metric in METRICS:
        for name in results:
            rows = results[name].get(metric)
            if not rows:
                continue
            # Cuts are chosen on the other shared sets (all of them for a held-out file).
            others = [results[o][metric] for o in shared if o != name and metric in results[o]]
            cuts = (best_cut(others, graded=False), best_cut(others, graded=True)) if others else (None, None)
            row = figures(name, metric, rows, *cuts)
            bench.record(f"{name} {metric}", row)
            table.row(**row)
    ragchecker = data / "ragchecker_examples" / "checking_outputs.json"
    if ragchecker.exists():
        await claim_rows(bench, judge, ragchecker)


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("--data", default=None, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--judge", default="lexical", help="'lexical' or 'embedding'")
    parser.add_argument("--ragtruth", metavar="RAGTRUTH_QA_JSONL", help="FaithJudge's ragtruth_qa.jsonl")
    parser.add_argument("--ares", metavar="ARES_HUMAN_TSV", help="ARES's human-annotated test set")
    asyncio.run(main_async(bench, bench.parse()))
    bench.finish()


if __name__ == "__main__":
    main()
