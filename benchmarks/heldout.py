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
benchmarks/judge_agreement.py computes them.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import Settings
from agent.judges.base import Judge
from agent.judges.factory import build_inner_judge
from agent.telemetry import Telemetry
from benchmarks.judge_agreement import Case, auroc, f1_of_negatives, score

# The questions of ../shared/data/ragtruth_qa_sample (its README lists them).
SHARED_SAMPLE_SOURCES = frozenset({"12219", "12262", "12306", "12404", "15325", "15369", "15450", "15454"})
_PASSAGE_HEADER = re.compile(r"passage \d+:", re.I)
ARES_LABELS = {
    "context_relevancy": "Context_Relevance_Label",
    "faithfulness": "Answer_Faithfulness_Label",
    "answer_relevancy": "Answer_Relevance_Label",
}


def ragtruth_halves(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The file's questions per half ('dev', 'test'), the shared sample's questions left out."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = sorted(
        (r for r in rows if str(r["source_id"]) not in SHARED_SAMPLE_SOURCES),
        key=lambda r: int(r["source_id"]),
    )
    return {"dev": questions[0::2], "test": questions[1::2]}


def passages(question: dict[str, Any]) -> tuple[str, ...]:
    return tuple(p.strip() for p in _PASSAGE_HEADER.split(question["source"]["passages"]) if p.strip())


def load_ragtruth(path: Path) -> dict[str, list[Case]]:
    """Faithfulness cases per half: one per response, labelled 1 when it has no human span."""
    return {
        half: [
            Case(
                "faithfulness",
                int(not answer["labels"]),
                q["source"]["question"],
                passages(q),
                answer["response"],
            )
            for q in questions
            for answer in q["responses"]
        ]
        for half, questions in ragtruth_halves(path).items()
    }


def load_ares(path: Path) -> list[Case]:
    """One case per labelled metric and row; the page is the interaction's one chunk."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [
        Case(metric, int(row[column]), row["Question"], (row["Document"],), row["Answer"])
        for metric, column in ARES_LABELS.items()
        for row in rows
    ]


def _number(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:7.3f}"


async def ragtruth_row(judge: Judge, name: str, cases: list[Case]) -> str:
    # judge_agreement.score: the faithfulness value (1.0 without claims) and the weakest claim's support.
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    labels = [c.label for c in cases]
    predicted = [int(value is not None and value >= 1.0) for value, _ in scored]
    weakest = [1.0 if graded is None else graded for _, graded in scored]
    flagged = sum(1 - p for p in predicted)
    hallucinated = sum(1 - y for y in labels)
    caught = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and not p)
    precision = caught / flagged if flagged else None
    recall = caught / hallucinated if hallucinated else None
    low, high = f1_interval([c.query for c in cases], labels, predicted)
    return (
        f"{name:<6} {len(cases):>9} {hallucinated:>12} {_number(f1_of_negatives(labels, predicted))} "
        f"{low:>6.3f}–{high:.3f} {_number(precision):>9} {_number(recall):>6} "
        f"{_number(auroc(labels, weakest))}"
    )


def f1_interval(
    questions: Sequence[str], labels: Sequence[int], predicted: Sequence[int], resamples: int = 2000
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the hallucination F1, resampling whole questions: the
    responses to one question are judged against the same passages and are not independent."""
    by_question: dict[str, list[tuple[int, int]]] = {}
    for question, label, guess in zip(questions, labels, predicted, strict=True):
        by_question.setdefault(question, []).append((label, guess))
    groups = list(by_question.values())
    rng = random.Random(0)
    draws = []
    for _ in range(resamples):
        picked = [pair for group in rng.choices(groups, k=len(groups)) for pair in group]
        value = f1_of_negatives([y for y, _ in picked], [p for _, p in picked])
        if value is not None:
            draws.append(value)
    draws.sort()
    return draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]


async def ragtruth(judge: Judge, path: Path, split: str) -> None:
    halves = load_ragtruth(path)
    halves["all"] = halves["dev"] + halves["test"]
    print(f"RAGTruth QA, held out; judge: {judge.model}; rule: faithful iff every claim is supported")
    columns = f"{'F1':>7} {'95% CI':>13} {'precision':>9} {'recall':>6} {'AUROC':>7}"
    print(f"{'half':<6} {'responses':>9} {'hallucinated':>12} {columns}")
    for name in ["dev", "test", "all"] if split == "every" else [split]:
        print(await ragtruth_row(judge, name, halves[name]))


async def ares(judge: Judge, path: Path) -> None:
    cases = load_ares(path)
    scored = await asyncio.gather(*(score(judge, c) for c in cases))
    print(f"ARES human-annotated test set; judge: {judge.model}")
    print(f"{'metric':<18} {'items':>5} {'positives':>9} {'AUROC':>7} {'AUROC*':>7}")
    for metric in ARES_LABELS:
        pairs = [(c.label, s) for c, s in zip(cases, scored, strict=True) if c.metric == metric]
        labels = [label for label, _ in pairs]
        values = [v if v is not None else 1.0 for _, (v, _) in pairs]
        graded = [g if g is not None else 0.0 for _, (_, g) in pairs]
        print(
            f"{metric:<18} {len(labels):>5} {sum(labels):>9} {_number(auroc(labels, values))} "
            f"{_number(auroc(labels, graded))}"
        )
    print("AUROC: of the metric value; AUROC*: of the judge's graded score")


async def main_async(args: argparse.Namespace) -> None:
    judge = build_inner_judge(
        Settings.model_validate({"judge_model": args.judge}), Telemetry(CollectorRegistry())
    )
    if args.ragtruth:
        await ragtruth(judge, Path(args.ragtruth), args.split)
    if args.ares:
        await ares(judge, Path(args.ares))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    args = parser.parse_args()
    if not args.ragtruth and not args.ares:
        parser.error("give --ragtruth FILE, --ares FILE or both")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
