"""`ragpulse eval --labels`: prediction-powered estimates beside eval's summary, bad labels by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import ragpulse_eval, read_jsonl
from tests.support.repo import SHARED_DATA

pytestmark = pytest.mark.integration

HALUEVAL = SHARED_DATA / "halueval_qa_sample" / "halueval_qa_sample.jsonl"


def test_eval_with_labels_adds_ppi_estimates_to_the_summary(tmp_path: Path) -> None:
    if not HALUEVAL.is_file():
        pytest.skip(f"shared data absent: {HALUEVAL}")
    rows, labels = [], []
    for n, line in enumerate(HALUEVAL.read_text().splitlines()):
        item = json.loads(line)
        answers = [
            ("right_answer", 1),
            ("hallucinated_answer_one_turn", 0),
            ("hallucinated_answer_multi_turn", 0),
        ]
        for key, label in answers:
            identifier = f"{n}-{key}"
            rows.append({"id": identifier, "question": item["question"], "contexts": [item["knowledge"]],
                         "answer": item[key]})  # fmt: skip
            labels.append({"id": identifier, "metric": "faithfulness", "label": label})
    data = tmp_path / "halueval.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    label_file = tmp_path / "labels.jsonl"
    bad = [
        '{"id": "nobody", "metric": "faithfulness", "label": 1}',
        '{"id": "0-right_answer", "metric": "faithfulness"}',
    ]
    label_file.write_text("\n".join([*bad, *(json.dumps(r) for r in labels)]) + "\n")
    out = tmp_path / "out"
    run = ragpulse_eval(
        str(data), "--out", str(out), "--metrics", "faithfulness", "--labels", str(label_file)
    )
    assert run.returncode == 0, run.stderr
    assert "line 1: unknown interaction id 'nobody'" in run.stderr
    assert "line 2: no label" in run.stderr
    assert "Prediction-powered estimates" in run.stdout
    judged = {r["id"] for r in read_jsonl(out / "results.jsonl") if r.get("faithfulness") is not None}
    truth = {r["id"]: r["label"] for r in labels}
    expected = sum(truth[i] for i in judged) / len(judged)
    ppi = json.loads((out / "summary.json").read_text())["ppi"]["faithfulness"]
    assert (ppi["labels"], ppi["judged"]) == (len(judged), len(judged))
    assert len(judged) >= 110
    # Every judged item is labelled: the estimate is the labels' mean (about 40 right of 120),
    # whatever the judge said; the judge's own mean is far from it.
    assert ppi["ppi"]["mean"] == pytest.approx(expected, abs=1e-6)
    assert ppi["ppi"]["low"] < expected < ppi["ppi"]["high"]
    assert abs(ppi["judge_mean"]["mean"] - expected) > 0.1
