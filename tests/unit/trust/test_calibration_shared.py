"""`ragpulse calibrate` on the shared labelled samples, scored by the local lexical judge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.judges.local import LexicalJudge
from agent.trust.agreement import auroc
from agent.trust.calibration import load_calibrations
from tests.support.labelled import load_cases, score
from tests.support.repo import SHARED_DATA

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="shared evaluation data not present")

# AUROC of the lexical judge's metric value against the human / construction labels.
EXPECTED_AUROC = {
    ("ragtruth_qa_sample", "faithfulness"): 0.7059,
    ("ares_sample", "context_relevancy"): 0.7956,
    ("ares_sample", "faithfulness"): 0.8198,
    ("ares_sample", "answer_relevancy"): 0.4650,
    ("halueval_qa_sample", "faithfulness"): 0.7937,
}


def scored_files(folder: str, tmp_path: Path) -> tuple[Path, Path, dict[str, tuple[list[int], list[float]]]]:
    """results.jsonl and labels.jsonl for one shared sample, and the pairs per metric."""
    (path,) = (SHARED_DATA / folder).glob("*.jsonl")
    _, cases = load_cases(path)
    judge = LexicalJudge()

    async def all_scores() -> list[tuple[float | None, float | None]]:
        return list(await asyncio.gather(*(score(judge, case) for case in cases)))

    values = asyncio.run(all_scores())
    results, labels = [], []
    pairs: dict[str, tuple[list[int], list[float]]] = {}
    for n, (case, (value, _)) in enumerate(zip(cases, values, strict=True)):
        identifier = f"{folder}-{n}"
        metric_value = 1.0 if value is None else value  # as the agreement benchmark counts it
        results.append({"id": identifier, case.metric: metric_value})
        labels.append({"id": identifier, "metric": case.metric, "label": case.label})
        pairs.setdefault(case.metric, ([], []))
        pairs[case.metric][0].append(case.label)
        pairs[case.metric][1].append(metric_value)
    results_path = tmp_path / f"{folder}.results.jsonl"
    labels_path = tmp_path / f"{folder}.labels.jsonl"
    results_path.write_text("".join(json.dumps(r) + "\n" for r in results))
    labels_path.write_text("".join(json.dumps(r) + "\n" for r in labels))
    return results_path, labels_path, pairs


@pytest.mark.parametrize("folder", ["ragtruth_qa_sample", "ares_sample", "halueval_qa_sample"])
def test_calibrate_reports_agreement_of_the_lexical_judge(
    folder: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, labels, pairs = scored_files(folder, tmp_path)
    out = tmp_path / "out"
    code = main(["calibrate", str(labels), "--scores", str(results), "--out", str(out),
                 "--judge", "lexical", "--bootstrap", "300"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    agreement = json.loads((out / "agreement.json").read_text())
    assert agreement["problems"] == []
    for metric, (y, values) in pairs.items():
        row = agreement["metrics"][metric]
        assert row["items"] == len(y) and row["positives"] == sum(y)
        assert row["auroc"]["value"] == pytest.approx(auroc(y, values))
        assert row["auroc"]["value"] == pytest.approx(EXPECTED_AUROC[folder, metric], abs=0.0005)
        low, high = row["auroc"]["low"], row["auroc"]["high"]
        if low is not None:
            assert low <= row["auroc"]["value"] <= high
    calibrations = load_calibrations(out / "calibration.json")
    report = (out / "report.html").read_text()
    assert report.count("<svg") == len(agreement["metrics"])
    for metric in calibrations.calibrations:
        calibration = calibrations.get(metric)
        assert calibration is not None and calibration.fitted_on["judge"] == "lexical"
        # The default method: isotonic from 100 labels on, Platt scaling below.
        assert calibration.method == ("isotonic" if len(pairs[metric][0]) >= 100 else "platt")
        probabilities = [calibration.probability(v) for v in sorted(pairs[metric][1])]
        # Monotone in the score (a Platt curve falls for a judge that ranks worse than chance).
        assert probabilities in (sorted(probabilities), sorted(probabilities, reverse=True))
    # A plain verdict per metric from the AUROC interval.
    printed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:] if line.strip()}
    for metric, row in agreement["metrics"].items():
        low, high = row["auroc"]["low"], row["auroc"]["high"]
        expected = "at chance" if low <= 0.5 <= high else "useful" if low >= 0.7 else "weak"
        assert printed[metric].endswith(f"  {expected}"), printed[metric]
    if folder == "ares_sample":  # the local judge's answer relevancy cannot be told from a coin
        assert printed["answer_relevancy"].endswith("  at chance")
        assert " 0.000000001 " in printed["context_relevancy"]  # plain decimals, never 1e-09


def test_bad_label_lines_are_reported_by_line_and_the_rest_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, labels, pairs = scored_files("ragtruth_qa_sample", tmp_path)
    good = labels.read_text().splitlines()
    bad = [
        '{"id": "nobody", "metric": "faithfulness", "label": 1}',
        '{"id": "ragtruth_qa_sample-0", "metric": "faithfulness", "label": 7}',
        "{oops",
    ]
    labels.write_text("\n".join([good[0], *bad, *good[1:]]) + "\n")
    out = tmp_path / "out"
    assert (
        main(["calibrate", str(labels), "--scores", str(results), "--out", str(out), "--bootstrap", "50"])
        == 0
    )
    err = capsys.readouterr().err
    assert "line 2: unknown interaction id 'nobody'" in err
    assert "line 3: label 7 is outside [0, 1]" in err
    assert "line 4: not JSON" in err
    agreement = json.loads((out / "agreement.json").read_text())
    assert len(agreement["problems"]) == 3
    assert agreement["metrics"]["faithfulness"]["items"] == len(pairs["faithfulness"][0])
    assert "unknown interaction id" in (out / "report.html").read_text()


def test_label_queue_then_calibrate_from_the_filled_queue(tmp_path: Path) -> None:
    results, labels, _pairs = scored_files("halueval_qa_sample", tmp_path)
    queue = tmp_path / "queue.jsonl"
    assert main(["label-queue", str(results), "--fraction", "0.5", "--out", str(queue)]) == 0
    rows = [json.loads(line) for line in queue.read_text().splitlines()]
    # One line per interaction, its metrics' labels to fill in.
    assert 40 <= len(rows) <= 80 and all(r["weight"] == 2.0 for r in rows)
    assert all(r["labels"] == {"faithfulness": None} and "faithfulness" in r["scores"] for r in rows)
    truth = {json.loads(line)["id"]: json.loads(line)["label"] for line in labels.read_text().splitlines()}
    for row in rows:  # the "human" fills in the queue
        row["labels"]["faithfulness"] = truth[row["interaction_id"]]
    queue.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["calibrate", str(queue), "--out", str(out), "--method", "platt", "--bootstrap", "50"]) == 0
    row = json.loads((out / "agreement.json").read_text())["metrics"]["faithfulness"]
    assert row["items"] == len(rows)
    calibration = load_calibrations(out / "calibration.json").get("faithfulness")
    assert calibration is not None and calibration.method == "platt" and calibration.params["a"] > 0
