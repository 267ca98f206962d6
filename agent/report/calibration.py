"""The `ragpulse calibrate` HTML report: one self-contained page, readable offline, on the same
page builder as `ragpulse eval`'s (agent/report/html.py).

Per metric: the agreement figures with their bootstrap intervals, the thresholds that meet the
precision / recall goals, and a reliability diagram (share of items labelled good against the
judge's score, raw and calibrated) drawn by matplotlib's Agg backend as inline SVG.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from agent.report.html import Page, chart, fmt, table
from agent.trust.agreement import Agreement, Interval, auroc_verdict, plain
from agent.trust.calibration import Calibration
from agent.trust.labels import LineProblem
from agent.trust.offline import Pairs


def reliability_points(
    labels: Sequence[float], probabilities: Sequence[float], bins: int = 10
) -> list[tuple[float, float, int]]:
    """(mean predicted, share labelled good, count) per non-empty equal-width bin."""
    grouped: dict[int, list[tuple[float, float]]] = {}
    for label, p in zip(labels, probabilities, strict=True):
        clipped = min(max(p, 0.0), 1.0)
        grouped.setdefault(min(int(clipped * bins), bins - 1), []).append((clipped, float(label >= 0.5)))
    points = []
    for b in sorted(grouped):
        items = grouped[b]
        points.append(
            (sum(p for p, _ in items) / len(items), sum(y for _, y in items) / len(items), len(items))
        )
    return points


def reliability_svg(metric: str, pairs: Pairs, calibration: Calibration | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5.2, 4.2))
    try:
        axes.plot([0, 1], [0, 1], linestyle=":", color="#888", label="perfectly calibrated")
        raw = reliability_points(pairs.labels, pairs.scores)
        axes.plot([p[0] for p in raw], [p[1] for p in raw], marker="o", label="judge score")
        for x, y, n in raw:
            axes.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        if calibration is not None:
            calibrated = [calibration.probability(s) for s in pairs.scores]
            cal = reliability_points(pairs.labels, calibrated)
            axes.plot([p[0] for p in cal], [p[1] for p in cal], marker="s", label=f"{calibration.method}")
        axes.set_xlim(0, 1)
        axes.set_ylim(0, 1)
        axes.set_xlabel("predicted P(good) (bin mean)")
        axes.set_ylabel("share labelled good")
        axes.set_title(f"{metric}: reliability")
        axes.legend(loc="upper left", fontsize=8)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight")
    finally:
        plt.close(figure)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML


def _interval(interval: Interval) -> str:
    if interval.value is None:
        return fmt(None)
    if interval.low is None or interval.high is None:
        return fmt(interval.value)
    return f'{interval.value:.3f} <span class="muted">[{interval.low:.3f}, {interval.high:.3f}]</span>'


def _estimate(e: Mapping[str, float] | None) -> str:
    return fmt(None) if e is None else f"{e['mean']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def render(
    agreements: Mapping[str, Agreement],
    calibrations: Mapping[str, Calibration],
    pairs: Mapping[str, Pairs],
    problems: Sequence[LineProblem],
    *,
    title: str,
    judge: str | None,
    summary: Mapping[str, Any] | None = None,
) -> str:
    page = Page(
        title,
        f"Judge: <b>{escape(judge or 'unknown')}</b>. Labels 1 = good (faithful, relevant), 0 = the "
        "problem; intervals are bootstrap 95% intervals over the labelled items. A problem is "
        "flagged when the raw score is below the threshold.",
    )
    page.section(
        "Agreement with the labels",
        table(
            ["metric", "items", "good", "AUROC", "balanced accuracy", "problem-class F1", "threshold",
             "Brier", "ECE", "verdict"],
            [
                [escape(metric), str(a.items), str(a.positives), _interval(a.auroc),
                 _interval(a.balanced_accuracy), _interval(a.problem_f1), plain(a.threshold),
                 f"{a.brier:.3f}", f"{a.ece:.3f}", auroc_verdict(a.auroc.low, a.auroc.high)]
                for metric, a in sorted(agreements.items())
            ],
            numeric=range(1, 9),
        ),
        section_id="agreement",
    )  # fmt: skip
    for metric in sorted(agreements):
        calibration = calibrations.get(metric)
        body = ""
        if calibration is not None:
            body += (
                f"<p>Calibration: {calibration.method}, fitted on {calibration.fitted_on.get('items')} "
                "labelled items.</p>"
            )
            body += table(
                ["goal (problem class)", "threshold", "precision", "recall"],
                [
                    [
                        f"{t.target} &ge; {plain(t.goal)}",
                        "n/a" if t.threshold is None else plain(t.threshold),
                        fmt(t.precision),
                        fmt(t.recall),
                    ]
                    for t in calibration.thresholds
                ],
                numeric=(1, 2, 3),
            )
            body += '<p class="muted">Precision and recall on the fitting data (in-sample).</p>'
        if metric in pairs:
            body += chart(reliability_svg(metric, pairs[metric], calibration), f"{metric}-reliability")
        page.section(metric, body)
    if summary:
        page.section(
            "Prediction-powered estimates",
            table(
                ["metric", "labels", "judged", "PPI mean [95% CI]", "labels only", "judge mean"],
                [
                    [escape(metric), str(row["labels"]), str(row["judged"]), _estimate(row["ppi"]),
                     _estimate(row["labels_only"]), _estimate(row["judge_mean"])]
                    for metric, row in sorted(summary.items())
                ],
                numeric=range(1, 6),
            ),
        )  # fmt: skip
    if problems:
        items = "".join(f"<li>{escape(str(p))}</li>" for p in problems[:200])
        page.section(f"Label lines not used ({len(problems)})", f"<ul>{items}</ul>")
    return page.render()
