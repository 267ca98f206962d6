"""Labels against offline results: read a results file, join labels to scores, PPI summaries.

A results file is JSONL with one object per interaction: `id` (or `interaction_id`) and one key
per metric holding its score, null where undefined — `ragpulse eval`'s `results.jsonl`. Lines of a
label queue (`interaction_id`, `metric`, `score`) are read too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.trust.calibration import CalibrationSet
from agent.trust.labels import Label, LineProblem
from agent.trust.ppi import Estimate, judge_mean, moments, ppi_mean

# Keys of a results or queue line that are not metric scores.
NOT_METRICS = frozenset(
    {"id", "interaction_id", "metric", "score", "label", "weight", "service", "route", "reason", "line",
     "label_requested", "label_weight", "query", "question", "response", "answer", "contexts",
     "reference", "ground_truth", "user_input", "retrieved_contexts", "scores", "labels", "documents",
     "trace_id"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScoreTable:
    """Judge scores by interaction id and metric (None = undefined for that interaction)."""

    scores: Mapping[str, Mapping[str, float | None]]
    problems: tuple[LineProblem, ...] = ()

    def metrics(self) -> list[str]:
        return sorted({m for row in self.scores.values() for m in row})

    def values(self, metric: str) -> list[float]:
        return [v for row in self.scores.values() if (v := row.get(metric)) is not None]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def score_rows(rows: Iterable[Mapping[str, Any]]) -> ScoreTable:
    """Scores from parsed result rows (dicts with `id` and one key per metric)."""
    table: dict[str, dict[str, float | None]] = {}
    problems = []
    for number, row in enumerate(rows, start=1):
        identifier = row.get("interaction_id", row.get("id"))
        if identifier is None:
            problems.append(LineProblem(number, "no id"))
            continue
        entry = table.setdefault(str(identifier), {})
        if isinstance(row.get("scores"), dict):  # a label-queue line: scores by metric
            for metric, score in row["scores"].items():
                entry[str(metric)] = float(score) if _number(score) else None
            continue
        if isinstance(row.get("metric"), str) and "score" in row:
            score = row["score"]
            entry[row["metric"]] = float(score) if _number(score) else None
            continue
        for key, value in row.items():
            if key in NOT_METRICS:
                continue
            if value is None:
                entry[key] = None
            elif _number(value):
                entry[key] = float(value)
    return ScoreTable(table, tuple(problems))


def read_scores(path: Path) -> ScoreTable:
    rows: list[Mapping[str, Any]] = []
    problems: list[LineProblem] = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.append(LineProblem(number, f"not JSON ({exc.msg})"))
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                problems.append(LineProblem(number, "not a JSON object"))
    table = score_rows(rows)
    return ScoreTable(table.scores, tuple(problems) + table.problems)


def source_line(label: Label) -> int:
    """The line number a file label came from (0 when it did not come from a file)."""
    tail = label.source.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


@dataclass
class Pairs:
    """The labelled items of one metric: label, judge score, sampling weight, id."""

    labels: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


def join(
    labels: Sequence[Label], table: ScoreTable | None, metrics: Iterable[str] | None = None
) -> tuple[dict[str, Pairs], list[LineProblem]]:
    """Pair every label with the judge's score of the same interaction and metric.

    With no table, a label must carry its own score (a filled-in label queue). Labels that cannot
    be paired are reported by line; the rest go on. One label per interaction and metric counts
    (the first); later ones are reported as duplicates.
    """
    wanted = None if metrics is None else set(metrics)
    pairs: dict[str, Pairs] = {}
    problems: list[LineProblem] = []
    seen: set[tuple[str, str]] = set()
    for label in labels:
        line = source_line(label)
        if wanted is not None and label.metric not in wanted:
            continue
        if (label.interaction_id, label.metric) in seen:
            problems.append(LineProblem(line, f"duplicate label for {label.interaction_id} {label.metric}"))
            continue
        if table is None:
            score = label.score
            if score is None:
                problems.append(LineProblem(line, "no score on the line and no --scores file"))
                continue
        else:
            row = table.scores.get(label.interaction_id)
            if row is None:
                problems.append(LineProblem(line, f"unknown interaction id {label.interaction_id!r}"))
                continue
            if label.metric not in row:
                problems.append(LineProblem(line, f"no {label.metric} score for {label.interaction_id!r}"))
                continue
            score = row[label.metric]
            if score is None:
                problems.append(
                    LineProblem(line, f"{label.metric} of {label.interaction_id!r} is undefined (null)")
                )
                continue
        seen.add((label.interaction_id, label.metric))
        entry = pairs.setdefault(label.metric, Pairs())
        entry.labels.append(label.value)
        entry.scores.append(float(score))
        entry.weights.append(label.weight)
        entry.ids.append(label.interaction_id)
    return pairs, problems


def _estimate(estimate: Estimate | None) -> dict[str, float] | None:
    if estimate is None:
        return None
    return {
        "mean": round(estimate.mean, 6),
        "low": round(estimate.low, 6),
        "high": round(estimate.high, 6),
        "width": round(estimate.width, 6),
    }


def ppi_summary(
    results: ScoreTable | Iterable[Mapping[str, Any]],
    labels: Sequence[Label],
    *,
    calibrations: CalibrationSet | None = None,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Per metric: the prediction-powered estimate of the true mean with its CI, beside the
    labels-only interval and the judge's own mean, for `ragpulse eval`'s summary:
    `{"metrics": {metric: {...}}, "problems": ["line N: ...", ...]}`.

    Valid when the labelled interactions are a random sample of the results (e.g. drawn by
    `ragpulse label-queue`; their weights are used).
    """
    table = results if isinstance(results, ScoreTable) else score_rows(results)
    pairs, problems = join(labels, table)
    calibrations = calibrations or CalibrationSet()
    summary: dict[str, Any] = {}
    for metric, joined in sorted(pairs.items()):
        calibration = calibrations.get(metric)

        def adjust(value: float, calibration: Any = calibration) -> float:
            return calibration.probability(value) if calibration is not None else value

        all_scores = [adjust(v) for v in table.values(metric)]
        judged, labelled = moments(
            joined.labels, [adjust(s) for s in joined.scores], all_scores, joined.weights
        )
        ppi = ppi_mean(judged, labelled, alpha=alpha)
        summary[metric] = {
            "labels": labelled.count,
            "judged": judged.count,
            "calibrated": calibration is not None,
            "ppi": _estimate(ppi),
            "lambda": round(ppi.lam, 4) if ppi is not None else None,
            "labels_only": _estimate(ppi_mean(judged, labelled, alpha=alpha, tuning="labels")),
            "judge_mean": _estimate(judge_mean(judged, alpha=alpha)),
        }
    return {"metrics": summary, "problems": [str(p) for p in problems]}


def eval_ppi(labels_path: Path, calibration_path: Path | None, out_dir: Path, print_line: Any = print) -> int:
    """`ragpulse eval --labels FILE [--calibration FILE]`: PPI estimates beside eval's summary.

    Reads eval's `results.jsonl` in `out_dir`, adds `"ppi"` (the `ppi_summary`) to its
    `summary.json`, and prints one line per metric. Bad label lines are reported by line.
    """
    import sys

    from agent.trust.calibration import CalibrationError, load_calibrations
    from agent.trust.labels import read_label_file

    try:
        calibrations = load_calibrations(calibration_path) if calibration_path else None
        label_file = read_label_file(labels_path)
    except (CalibrationError, OSError) as exc:
        print(f"ragpulse eval: {exc}", file=sys.stderr)
        return 2
    for problem in label_file.problems:
        print(f"{labels_path}: {problem}", file=sys.stderr)
    summary = ppi_summary(
        read_scores(out_dir / "results.jsonl"), label_file.labels, calibrations=calibrations
    )
    for problem in summary["problems"]:
        print(f"{labels_path}: {problem}", file=sys.stderr)
    summary_path = out_dir / "summary.json"
    document = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    document["ppi"] = summary["metrics"]
    summary_path.write_text(json.dumps(document, indent=2) + "\n")
    print_line("Prediction-powered estimates (human labels + judge; 95% CI; docs/trust.md):")
    for metric, row in summary["metrics"].items():
        ppi, only = row["ppi"], row["labels_only"]
        if ppi is None:
            print_line(f"  {metric}: {row['labels']} label(s), too few for an estimate")
            continue
        labels_only = f"{only['mean']:.3f} [{only['low']:.3f}, {only['high']:.3f}]" if only else "n/a"
        print_line(
            f"  {metric}: {ppi['mean']:.3f} [{ppi['low']:.3f}, {ppi['high']:.3f}] from "
            f"{row['labels']} labels and {row['judged']} judged (labels alone: {labels_only})"
        )
    return 0
