"""The local judges on labelled data they were never written or tuned on.

    python benchmarks/heldout.py --ragtruth RAGTRUTH_QA_JSONL [--split dev|test|all|every]
    python benchmarks/heldout.py --ares ARES_HUMAN_TSV
    ... [--judge lexical|embedding]

Neither file is part of this repository; both are public:

- RAGTRUTH_QA_JSONL: RAGTruth's QA responses (MIT) as vectara/FaithJudge ships them,
  https://github.com/vectara/FaithJudge/blob/22f7b4d510b4cd6b388f6ed31f7b29846b509dff/eval_data/ragtruth_qa.jsonl
  One line per question (MS MARCO) with its three passages and the responses of six models, each
  with its human hallucination spans: 139 questions, 817 responses. The shared sample
  (../shared/data/ragtruth_qa_sample) was drawn from it; its 8 questions are left out, which leaves
  131 questions and 772 responses. They are sorted by question id and dealt alternately into two
  halves, `dev` (1st, 3rd, ...) and `test` (2nd, 4th, ...), so all the responses to one question
  fall in one half. Changes to a judge are tried on `dev`; `test` is for reporting. A response is
  hallucinated when it has any human span (as in the shared sample).
- ARES_HUMAN_TSV: ARES's human-annotated judge test set (Apache-2.0),
  https://github.com/stanford-futuredata/ARES/blob/2d290e1fab16bd0ec430b967b1446167b58bb160/datasets_v2/LLM_Judge_Test_Set_Human_Annotations_V1.1_Filtered.tsv
  111 questions a Databricks documentation assistant was asked, each with the page it retrieved
  and its answer, labelled for context relevance, answer faithfulness and answer relevance. None
  of them is among the shared ARES sample's 50 rows.

RAGTruth: per half, the responses, the hallucinated ones, hallucination F1 (positive class:
hallucinated) at the documented rule (faithful iff every claim is supported) with its percentile
bootstrap 95% interval (2000 resamples of whole questions), its precision and recall, and the
AUROC of the weakest claim's support score (no rule). ARES: per metric, the items, the
positives, and the AUROC of the metric value and of the judge's graded score, as
benchmarks/judge_agreement.py computes them (tests/support/labelled.py's score, the statistics of
agent/trust/agreement.py).
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
from agent.judges.base import Judge
from agent.telemetry import JudgeTelemetry
from agent.trust.agreement import Interval, auroc, grouped_bootstrap, problem_f1
from benchmarks.common.heldout import ARES_LABELS, load_ares, load_ragtruth
from benchmarks.harness import Benchmark
from tests.support.labelled import Case, score


def _number(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:7.3f}"


async def ragtruth_row(judge: Judge, name: str, cases: list[Case], bench: Benchmark | None = None) -> str:
    # labelled.score: the faithfulness value (1.0 without claims) and the weakest claim's support.
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    labels = [c.label for c in cases]
    predicted = [int(value is not None and value >= 1.0) for value, _ in scored]
    weakest = [1.0 if graded is None else graded for _, graded in scored]
    flagged = sum(1 - p for p in predicted)
    hallucinated = sum(1 - y for y in labels)
    caught = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and not p)
    precision = caught / flagged if flagged else None
    recall = caught / hallucinated if hallucinated else None
    f1 = f1_interval([c.query for c in cases], labels, predicted)
    area = auroc(labels, weakest)
    if bench is not None:
        bench.record(f"ragtruth {name}", {
            "responses": len(cases), "hallucinated": hallucinated, "f1": f1.value, "f1_low": f1.low,
            "f1_high": f1.high, "precision": precision, "recall": recall, "auroc": area,
        })  # fmt: skip
    interval = "n/a" if f1.low is None or f1.high is None else f"{f1.low:>6.3f}–{f1.high:.3f}"
    return (
        f"{name:<6} {len(cases):>9} {hallucinated:>12} {_number(f1.value)} "
        f"{interval} {_number(precision):>9} {_number(recall):>6} {_number(area)}"
    )


def f1_interval(questions: list[str], labels: list[int], predicted: list[int]) -> Interval:
    """The hallucination F1 with its percentile bootstrap 95% interval, resampling whole questions
    (2000 resamples): the responses to one question are judged against the same passages and are
    not independent."""
    by_question: dict[str, list[tuple[int, int]]] = {}
    for question, label, guess in zip(questions, labels, predicted, strict=True):
        by_question.setdefault(question, []).append((label, guess))

    def f1(pairs: list[tuple[int, int]]) -> float | None:
        return problem_f1([y for y, _ in pairs], [p for _, p in pairs])

    return grouped_bootstrap(f1, list(by_question.values()), resamples=2000, seed=0)


async def ragtruth(bench: Benchmark, judge: Judge, path: Path, split: str) -> None:
    halves = load_ragtruth(path)
    halves["all"] = halves["dev"] + halves["test"]
    bench.line(f"RAGTruth QA, held out; judge: {judge.model}; rule: faithful iff every claim is supported")
    columns = f"{'F1':>7} {'95% CI':>13} {'precision':>9} {'recall':>6} {'AUROC':>7}"
    bench.line(f"{'half':<6} {'responses':>9} {'hallucinated':>12} {columns}")
    for name in ["dev", "test", "all"] if split == "every" else [split]:
        bench.line(await ragtruth_row(judge, name, halves[name], bench))


async def ares(bench: Benchmark, judge: Judge, path: Path) -> None:
    cases = load_ares(path)
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    bench.line(f"ARES human-annotated test set; judge: {judge.model}")
    bench.line(f"{'metric':<18} {'items':>5} {'positives':>9} {'AUROC':>7} {'AUROC*':>7}")
    for metric in ARES_LABELS:
        pairs = [(c.label, s) for c, s in zip(cases, scored, strict=True) if c.metric == metric]
        labels = [label for label, _ in pairs]
        values = [v if v is not None else 1.0 for _, (v, _) in pairs]
        graded = [g if g is not None else 0.0 for _, (_, g) in pairs]
        figures = {"items": len(labels), "positives": sum(labels), "auroc": auroc(labels, values)}
        bench.record(f"ares {metric}", {**figures, "graded_auroc": auroc(labels, graded)})
        bench.line(
            f"{metric:<18} {len(labels):>5} {sum(labels):>9} {_number(auroc(labels, values))} "
            f"{_number(auroc(labels, graded))}"
        )
    bench.line("AUROC: of the metric value; AUROC*: of the judge's graded score")


async def main_async(bench: Benchmark, args: argparse.Namespace) -> None:
    judge = build_inner_judge(
        Settings.model_validate({"judge_model": args.judge}), JudgeTelemetry(CollectorRegistry())
    )
    if args.ragtruth:
        await ragtruth(bench, judge, Path(args.ragtruth), args.split)
    if args.ares:
        await ares(bench, judge, Path(args.ares))


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument(
        "--ragtruth", metavar="RAGTRUTH_QA_JSONL", help="FaithJudge's eval_data/ragtruth_qa.jsonl"
    )
    parser.add_argument("--split", choices=["dev", "test", "all", "every"], default="dev")
    parser.add_argument(
        "--ares",
        metavar="ARES_HUMAN_TSV",
        help="ARES's LLM_Judge_Test_Set_Human_Annotations_V1.1_Filtered.tsv",
    )
    parser.add_argument("--judge", default="lexical", help="'lexical' or 'embedding'")
    args = bench.parse()
    if not args.ragtruth and not args.ares:
        parser.error("give --ragtruth FILE, --ares FILE or both")
    asyncio.run(main_async(bench, args))
    bench.finish()


if __name__ == "__main__":
    main()
