"""Labels files, agreement statistics, calibration fits and the versioned calibration file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agent.build import load_checked_settings
from agent.config import ConfigError
from agent.trust.agreement import (
    Interval,
    agreement,
    auroc,
    balanced_accuracy,
    bootstrap,
    grouped_bootstrap,
    problem_f1,
)
from agent.trust.calibration import (
    CalibrationError,
    CalibrationSet,
    choose_thresholds,
    fit,
    load_calibrations,
)
from agent.trust.labels import read_label_file
from agent.trust.offline import join, ppi_summary, score_rows


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_label_file_reports_bad_lines_by_number_and_goes_on(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "labels.jsonl",
        [
            '{"interaction_id": "a:1", "metric": "faithfulness", "label": 1}',
            '{"id": "q7", "metric": "faithfulness", "label": "no"}',
            "{not json",
            '{"id": "q8", "metric": "faithfulness", "label": 1.5}',
            '{"id": "q9", "metric": "faithfulness", "label": "maybe"}',
            '{"id": "q10", "label": 1}',
            '{"metric": "faithfulness", "label": 1}',
            "",
            '{"id": "q11", "metric": "answer_relevancy", "label": null}',
            '{"id": 12, "metric": "answer_relevancy", "label": 0.25, "weight": 4, "score": 0.5}',
            '{"id": "q13", "metric": "answer_relevancy", "label": true, "weight": -1}',
        ],
    )
    found = read_label_file(path)
    assert [(lbl.interaction_id, lbl.metric, lbl.value) for lbl in found.labels] == [
        ("a:1", "faithfulness", 1.0),
        ("q7", "faithfulness", 0.0),
        ("12", "answer_relevancy", 0.25),
    ]
    assert found.labels[2].weight == 4.0 and found.labels[2].score == 0.5
    assert found.labels[0].source.endswith(":1") and found.labels[2].source.endswith(":10")
    assert [p.line for p in found.problems] == [3, 4, 5, 6, 7, 11]
    reasons = [p.reason for p in found.problems]
    assert reasons[0].startswith("not JSON")
    assert "outside [0, 1]" in reasons[1]
    assert "maybe" in reasons[2]
    assert reasons[3] == "no metric" and reasons[4] == "no interaction_id (or id)"
    assert "weight" in reasons[5]
    assert found.unlabelled == 1


def test_join_reports_unknown_ids_undefined_scores_and_duplicates(tmp_path: Path) -> None:
    labels = read_label_file(
        write_lines(
            tmp_path / "l.jsonl",
            [
                '{"id": "1", "metric": "faithfulness", "label": 1}',
                '{"id": "404", "metric": "faithfulness", "label": 1}',
                '{"id": "2", "metric": "faithfulness", "label": 0}',
                '{"id": "1", "metric": "faithfulness", "label": 0}',
                '{"id": "1", "metric": "context_recall", "label": 0}',
            ],
        )
    ).labels
    table = score_rows([{"id": "1", "faithfulness": 0.8}, {"id": "2", "faithfulness": None}])
    pairs, problems = join(labels, table)
    assert pairs["faithfulness"].labels == [1.0] and pairs["faithfulness"].scores == [0.8]
    assert [(p.line, p.reason) for p in problems] == [
        (2, "unknown interaction id '404'"),
        (3, "faithfulness of '2' is undefined (null)"),
        (4, "duplicate label for 1 faithfulness"),
        (5, "no context_recall score for '1'"),
    ]


def test_agreement_statistics_match_their_definitions() -> None:
    """The rank-based AUROC and the vectorised rates against the pairwise / counting definitions."""
    rng = random.Random(3)
    labels = [rng.random() < 0.6 for _ in range(120)]
    scores = [round(min(1.0, max(0.0, 0.3 * y + rng.gauss(0.4, 0.2))), 2) for y in labels]
    good = [s for s, y in zip(scores, labels, strict=True) if y]
    bad = [s for s, y in zip(scores, labels, strict=True) if not y]
    pairwise = sum((g > b) + 0.5 * (g == b) for g in good for b in bad) / (len(good) * len(bad))
    assert auroc([float(y) for y in labels], scores) == pytest.approx(pairwise)
    predicted = [int(s >= 0.5) for s in scores]
    hits = [p for p, y in zip(predicted, labels, strict=True) if y]
    rejections = [1 - p for p, y in zip(predicted, labels, strict=True) if not y]
    assert balanced_accuracy([float(y) for y in labels], predicted) == pytest.approx(
        (sum(hits) / len(hits) + sum(rejections) / len(rejections)) / 2
    )
    tp = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and not p)
    fp = sum(1 for y, p in zip(labels, predicted, strict=True) if y and not p)
    fn = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and p)
    assert problem_f1([float(y) for y in labels], predicted) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert auroc([1.0, 1.0], [0.2, 0.3]) is None


def test_bootstrap_interval_brackets_the_value_and_narrows_with_more_items() -> None:
    import numpy as np

    rng = random.Random(8)

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.array([float(rng.random() < 0.5) for _ in range(n)])
        return y, np.clip(0.4 * y + np.array([rng.gauss(0.3, 0.2) for _ in range(n)]), 0, 1)

    small = bootstrap(auroc, *sample(60), resamples=400, seed=1)  # type: ignore[arg-type]
    large = bootstrap(auroc, *sample(600), resamples=400, seed=1)  # type: ignore[arg-type]
    for interval in (small, large):
        assert interval.low is not None and interval.high is not None and interval.value is not None
        assert interval.low <= interval.value <= interval.high
    assert large.high - large.low < (small.high - small.low) / 2  # type: ignore[operator]


def test_isotonic_fit_pools_violators_and_interpolates() -> None:
    calibration = fit("faithfulness", [0.1, 0.2, 0.3, 0.4, 0.4], [0, 1, 0, 1, 1], method="isotonic")
    assert calibration.params == {"x": [0.1, 0.2, 0.3, 0.4], "y": [0.0, 0.5, 0.5, 1.0]}
    assert calibration.probability(0.0) == 0.0
    assert calibration.probability(0.15) == pytest.approx(0.25)
    assert calibration.probability(0.35) == pytest.approx(0.75)
    assert calibration.probability(0.9) == 1.0
    assert calibration.fitted_on["items"] == 5 and calibration.fitted_on["positives"] == 3


def test_platt_fit_recovers_a_logistic_relation() -> None:
    import math

    rng = random.Random(2)
    scores = [rng.random() for _ in range(4000)]
    labels = [float(rng.random() < 1 / (1 + math.exp(-(6 * s - 3)))) for s in scores]
    calibration = fit("answer_relevancy", scores, labels, method="platt")
    assert calibration.params["a"] == pytest.approx(6, abs=0.8)
    assert calibration.params["b"] == pytest.approx(-3, abs=0.4)
    assert calibration.probability(0.5) == pytest.approx(0.5, abs=0.05)


def test_thresholds_meet_precision_and_recall_goals_on_the_fitting_data() -> None:
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    labels = [0, 0, 0, 1, 0, 1, 1, 1, 1, 1]  # problems: 0.1, 0.2, 0.3, 0.5
    precision, recall = choose_thresholds(scores, labels, [("precision", 0.9), ("recall", 1.0)])
    # Flagging < 0.4 catches 3 problems with no false alarm; < 0.6 catches all 4 with one.
    assert (precision.threshold, precision.precision, precision.recall) == (0.4, 1.0, 0.75)
    assert (recall.threshold, recall.precision, recall.recall) == (0.6, 0.8, 1.0)


def test_calibration_file_round_trip_and_version_check(tmp_path: Path) -> None:
    calibration = fit("faithfulness", [0.1, 0.5, 0.9, 0.95], [0, 0, 1, 1], method="isotonic", judge="lexical")
    path = tmp_path / "calibration.json"
    CalibrationSet({"faithfulness": calibration}).save(path)
    loaded = load_calibrations(path).get("faithfulness")
    assert loaded is not None
    assert loaded.probability(0.7) == calibration.probability(0.7)
    assert loaded.thresholds == calibration.thresholds
    document = json.loads(path.read_text())
    assert (
        document["format_version"] == 1 and document["calibrations"]["faithfulness"]["method"] == "isotonic"
    )

    document["format_version"] = 99
    path.write_text(json.dumps(document))
    with pytest.raises(CalibrationError, match="format_version 99"):
        load_calibrations(path)
    with pytest.raises(ConfigError, match="calibration_file"):
        load_checked_settings(environ={"RAGPULSE_CALIBRATION_FILE": str(path)})
    with pytest.raises(ConfigError, match="calibration_file"):
        load_checked_settings(environ={"RAGPULSE_CALIBRATION_FILE": str(tmp_path / "missing.json")})


def test_uncertain_band_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="label_uncertain_high"):
        load_checked_settings(
            environ={"RAGPULSE_LABEL_UNCERTAIN_LOW": "0.8", "RAGPULSE_LABEL_UNCERTAIN_HIGH": "0.2"}
        )


def test_agreement_uses_documented_thresholds() -> None:
    found = agreement("faithfulness", [1, 1, 0, 0], [1.0, 1.0, 0.9, 0.2], resamples=50)
    assert found.threshold == 1.0
    assert found.balanced_accuracy.value == 1.0 and found.problem_f1.value == 1.0
    assert found.auroc.value == 1.0


def test_ppi_summary_for_eval() -> None:
    rng = random.Random(4)
    rows = []
    label_rows = []
    for i in range(3000):
        quality = rng.betavariate(5, 2)
        rows.append({"id": str(i), "faithfulness": min(1.0, quality + 0.1), "context_recall": None})
        if i % 10 == 0:
            label_rows.append(json.dumps({"id": str(i), "metric": "faithfulness", "label": quality}))
    from agent.trust.labels import parse_label_line

    labels = [parse_label_line(text, f"test:{n}") for n, text in enumerate(label_rows, start=1)]
    summary = ppi_summary(rows, [lbl for lbl in labels if lbl is not None])
    row = summary["metrics"]["faithfulness"]
    assert (row["labels"], row["judged"]) == (300, 3000)
    assert row["ppi"]["low"] <= 5 / 7 <= row["ppi"]["high"]
    assert row["judge_mean"]["low"] > 5 / 7  # the judge overstates by ~0.1
    assert row["ppi"]["width"] < row["labels_only"]["width"]
    assert summary["problems"] == []


def test_grouped_bootstrap_resamples_whole_groups() -> None:
    def f1(pairs: list[tuple[int, int]]) -> float | None:
        return problem_f1([y for y, _ in pairs], [p for _, p in pairs])

    # Question a: both hallucinated responses caught; question b: both missed. F1 over both is
    # 2/3, and resampling questions (aa, ab, bb) spans 0 to 1: responses of one question move together.
    interval = grouped_bootstrap(f1, [[(0, 0), (0, 0)], [(0, 1), (0, 1)]])
    assert interval.value == pytest.approx(2 / 3)
    assert (interval.low, interval.high) == (0.0, 1.0)
    assert grouped_bootstrap(f1, [[(0, 0)], [(1, 1)]]) == Interval(1.0, 1.0, 1.0)
    # Empty or undefined: None, never 0.
    assert grouped_bootstrap(f1, []) == Interval(None, None, None)
    assert grouped_bootstrap(f1, [[(1, 1)], [(1, 1)]]) == Interval(None, None, None)


def test_auroc_verdicts_and_plain_numbers() -> None:
    from agent.trust.agreement import auroc_verdict, plain

    assert auroc_verdict(0.27, 0.77) == "at chance"  # the local judge's answer relevancy on ARES
    assert auroc_verdict(0.55, 0.80) == "weak"
    assert auroc_verdict(0.70, 0.92) == "useful"
    assert auroc_verdict(0.20, 0.45) == "worse than chance"
    assert auroc_verdict(None, None) == "unknown"
    assert [plain(v) for v in (1e-9, 1.0, 0.5, 0.25, 12.0)] == ["0.000000001", "1", "0.5", "0.25", "12"]


def _labelled(tmp_path: Path, n: int, *, scores: bool) -> tuple[Path, Path]:
    rng = random.Random(7)
    labels, results = [], []
    for i in range(n):
        label = i % 2
        score = min(1.0, max(0.0, 0.3 + 0.4 * label + rng.uniform(-0.3, 0.3)))
        row = {"id": f"i{i}", "metric": "faithfulness", "label": label}
        labels.append(json.dumps({**row, "score": round(score, 3)} if scores else row))
        results.append(json.dumps({"id": f"i{i}", "faithfulness": round(score, 3)}))
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "summary.json").write_text(json.dumps({"judge": "openai/gpt-4o-mini", "metrics": {}}))
    return write_lines(tmp_path / "labels.jsonl", labels), write_lines(run / "results.jsonl", results)


def test_calibrate_says_what_it_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    labels, results = _labelled(tmp_path, 50, scores=False)
    out = tmp_path / "out"
    common = ["--out", str(out), "--bootstrap", "100"]
    # The judge comes from the summary.json beside the scores.
    assert main(["calibrate", str(labels), "--scores", str(results), *common]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Judge: openai/gpt-4o-mini\n")
    assert json.loads((out / "agreement.json").read_text())["judge"] == "openai/gpt-4o-mini"
    assert "Judge: <b>openai/gpt-4o-mini</b>" in (out / "report.html").read_text()
    # 50 labels: Platt scaling by default, isotonic refused in one line.
    assert load_calibrations(out / "calibration.json").calibrations["faithfulness"].method == "platt"
    row = next(line for line in printed.splitlines() if line.startswith("faithfulness"))
    assert row.split()[-2:] == ["platt", "useful"]
    assert main(["calibrate", str(labels), "--scores", str(results), "--method", "isotonic", *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ragpulse calibrate: faithfulness: 50 labels are too few for isotonic calibration (it needs 100: "
        "with fewer its steps follow the noise); use --method platt or label more"
    ]
    # A labels file without scores and no --scores: one line, not one per label.
    assert main(["calibrate", str(labels), *common]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err  # the shared reason, then "nothing to calibrate"
    assert err[0].startswith(f"{labels}: 50 lines (first 1, last 50): no score on the line and no --scores")
    assert "--scores RESULTS" in err[0]
