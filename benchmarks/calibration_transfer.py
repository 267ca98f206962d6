"""A calibration fitted on one labelled sample, measured on another (out of sample).

    python benchmarks/calibration_transfer.py [--judge lexical] [--method isotonic|platt]

Faithfulness scored by the judge on the shared HaluEval QA and RAGTruth QA samples; for each
direction (fit on one, measure on the other) it prints the Brier score and expected calibration
error of the raw score and of the calibrated probability, and the precision / recall of the
problem class (unfaithful) at the thresholds chosen on the fitting sample for precision >= 0.9
and recall >= 0.9. docs/trust.md quotes its output.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.build import build_inner_judge
from agent.config import Settings
from agent.telemetry import JudgeTelemetry
from agent.trust.agreement import brier, expected_calibration_error
from agent.trust.calibration import fit
from benchmarks.harness import Benchmark, line, shared_data
from tests.support.labelled import load_cases, score

DATA = shared_data()
SAMPLES = {"HaluEval QA": "halueval_qa_sample", "RAGTruth QA": "ragtruth_qa_sample"}


async def faithfulness(judge: object, folder: str) -> tuple[list[float], list[float]]:
    (path,) = (DATA / folder).glob("*.jsonl")
    _, cases = load_cases(path)
    cases = [c for c in cases if c.metric == "faithfulness"]
    scored = await asyncio.gather(*(score(judge, c) for c in cases))  # type: ignore[arg-type]
    return [float(c.label) for c in cases], [1.0 if v is None else v for v, _ in scored]


def flags(
    scores: list[float], labels: list[float], threshold: float | None
) -> tuple[float | None, float | None]:
    if threshold is None:
        return None, None
    flagged = [y for s, y in zip(scores, labels, strict=True) if s < threshold]
    problems = sum(1 for y in labels if y < 0.5)
    tp = sum(1 for y in flagged if y < 0.5)
    return (tp / len(flagged) if flagged else None), (tp / problems if problems else None)


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


async def main_async(args: argparse.Namespace) -> None:
    judge = build_inner_judge(
        Settings.model_validate({"judge_model": args.judge}), JudgeTelemetry(CollectorRegistry())
    )
    data = {name: await faithfulness(judge, folder) for name, folder in SAMPLES.items()}
    line(f"judge {judge.model}, faithfulness, {args.method} calibration")
    line(
        "| fitted on | measured on | Brier raw | Brier calibrated | ECE raw | ECE calibrated "
        "| P>=0.9 threshold: precision / recall | R>=0.9 threshold: precision / recall |"
    )
    line("|---|---|---:|---:|---:|---:|---|---|")
    for fit_name, test_name in (("HaluEval QA", "RAGTruth QA"), ("RAGTruth QA", "HaluEval QA")):
        labels, scores = data[fit_name]
        calibration = fit("faithfulness", scores, labels, method=args.method, judge=judge.model)
        test_labels, test_scores = data[test_name]
        calibrated = [calibration.probability(s) for s in test_scores]
        cells = []
        for choice in calibration.thresholds:
            p, r = flags(test_scores, test_labels, choice.threshold)
            cells.append(f"t={fmt(choice.threshold)}: {fmt(p)} / {fmt(r)}")
        line(
            f"| {fit_name} | {test_name} | {brier(test_labels, test_scores):.3f} "
            f"| {brier(test_labels, calibrated):.3f} "
            f"| {expected_calibration_error(test_labels, test_scores):.3f} "
            f"| {expected_calibration_error(test_labels, calibrated):.3f} | {cells[0]} | {cells[1]} |"
        )


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.split("\n\n")[0])
    parser = bench.parser
    parser.add_argument("--judge", default="lexical")
    parser.add_argument("--method", choices=["isotonic", "platt"], default="isotonic")
    asyncio.run(main_async(bench.parse()))


if __name__ == "__main__":
    main()
