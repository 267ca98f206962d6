"""benchmarks/heldout.py and lexical_ceiling.py read the public held-out files as they are published."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

from agent.judges.local import LexicalJudge
from benchmarks.common.heldout import SHARED_SAMPLE_SOURCES, load_ares, load_ragtruth
from benchmarks.heldout import ragtruth_row


def _question(source_id: int, *labelled: bool) -> dict[str, object]:
    """A line of FaithJudge's ragtruth_qa.jsonl: one question, its passages, one response per flag."""
    return {
        "source_id": source_id,
        "source": {
            "question": f"how tall is tower {source_id}",
            "passages": f"passage 1:Tower {source_id} is 300 metres tall.\n\n"
            "passage 2:It opened in 1889.\n\n",
        },
        "responses": [
            {
                "response": "Tower is 300 metres tall." if not hallucinated else "Tower is 500 metres tall.",
                "model": f"model-{n}",
                "labels": [{"start": 9, "end": 12, "text": "500", "label_type": "Evident Conflict"}]
                if hallucinated
                else [],
            }
            for n, hallucinated in enumerate(labelled)
        ],
    }


def test_ragtruth_leaves_out_the_shared_sample_and_splits_by_question(tmp_path: Path) -> None:
    shared = int(sorted(SHARED_SAMPLE_SOURCES)[0])
    lines = [
        _question(40, False, True),
        _question(shared, True),
        _question(10, False),
        _question(30, True, True),
    ]
    path = tmp_path / "ragtruth_qa.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    halves = load_ragtruth(path)
    # Sorted by id: 10, 30, 40 -> dev gets 10 and 40, test gets 30; the shared question is gone.
    assert [c.query for c in halves["dev"]] == [
        "how tall is tower 10",
        "how tall is tower 40",
        "how tall is tower 40",
    ]
    assert [c.label for c in halves["dev"]] == [1, 1, 0]
    assert [c.label for c in halves["test"]] == [0, 0]
    assert halves["dev"][0].chunks == ("Tower 10 is 300 metres tall.", "It opened in 1889.")
    row = asyncio.run(ragtruth_row(LexicalJudge(), "dev", halves["dev"]))
    # The one hallucinated response (500 metres) is the one flagged: F1, precision, recall 1, and
    # every resample of the questions that holds it agrees.
    assert row.split() == ["dev", "3", "1", "1.000", "1.000–1.000", "1.000", "1.000", "1.000"]


def test_ares_reads_quoted_multi_line_pages_and_three_labels_per_row(tmp_path: Path) -> None:
    path = tmp_path / "ares.tsv"
    columns = ["", "Reaction", "Sources", "Question", "Document", "Answer", "Context_Relevance_Label",
               "Answer_Faithfulness_Label", "Answer_Relevance_Label", "annotated"]  # fmt: skip
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(columns)
        page = 'Clone a table\n=====\nUse "SHALLOW CLONE"\tto copy metadata only.'
        writer.writerow(
            ["0", "no_reaction", "https://docs", "shallow clone?", page, "It copies metadata.", 1, 0, 1, True]
        )
    cases = load_ares(path)
    assert [(c.metric, c.label) for c in cases] == [
        ("context_relevancy", 1),
        ("faithfulness", 0),
        ("answer_relevancy", 1),
    ]
    assert cases[0].chunks == (page,) and cases[0].response == "It copies metadata."


def test_the_ceiling_labels_claims_by_span_and_its_fit_learns_the_sign(tmp_path: Path) -> None:
    import numpy as np

    from benchmarks.lexical_ceiling import collect_claims, cross_validated, fit

    question = _question(10, False, True)
    claims = collect_claims([question], encoder=None)
    # "Tower is 500 metres tall." overlaps the span "500"; the right answer's claim does not.
    assert claims.labels == [0, 1]
    assert claims.responses == [(0, 0, [0]), (0, 1, [1])]
    assert claims.features[1][3] == 1.0  # states a number the passages lack
    assert claims.judge_suspicion[1] > claims.judge_suspicion[0]

    rng = np.random.default_rng(7)
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] - 0.5 * x[:, 1] > 0).astype(float)
    w = fit(x, y, l2=1.0)
    assert w[0] > 0 > w[1]
    many = collect_claims([_question(n, *(n % 3 == 0, False, True)) for n in range(1, 16)], encoder=None)
    probability = cross_validated(many, l2=1.0)
    hallucinated = [p for p, label in zip(probability, many.labels, strict=True) if label]
    right = [p for p, label in zip(probability, many.labels, strict=True) if not label]
    assert min(hallucinated) > max(right)
