"""The public held-out files the local judges were never written or tuned on (see
benchmarks/heldout.py for where they come from): RAGTruth QA in two halves by question, and
ARES's human-annotated judge test set."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from tests.support.labelled import Case

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
