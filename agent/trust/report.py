"""The `ragpulse calibrate` HTML report: one self-contained page, readable offline.

Per metric: the agreement figures with their bootstrap intervals, the thresholds that meet the
precision / recall goals, and a reliability diagram (share of items labelled good against the
judge's score, raw and calibrated) drawn by matplotlib's Agg backend as inline SVG.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

from agent.trust.agreement import Agreement, Interval, auroc_verdict, plain
from agent.trust.calibration import Calibration
from agent.trust.labels import LineProblem
from agent.trust.offline import Pairs

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; color: #222; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
td, th { border: 1px solid #ccc; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.muted { color: #666; } svg { max-width: 100%; height: auto; }
"""


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


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _interval(interval: Interval) -> str:
    if interval.value is None:
        return "n/a"
    if interval.low is None or interval.high is None:
        return f"{interval.value:.3f}"
    return f"{interval.value:.3f} <span class=muted>[{interval.low:.3f}, {interval.high:.3f}]</span>"


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
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Judge: <b>{html.escape(judge or 'unknown')}</b>. Labels 1 = good (faithful, relevant), "
        "0 = the problem; intervals are bootstrap 95% intervals over the labelled items. "
        "A problem is flagged when the raw score is below the threshold.</p>",
        "<table><tr><th>metric</th><th>items</th><th>good</th><th>AUROC</th><th>balanced accuracy</th>"
        "<th>problem-class F1</th><th>threshold</th><th>Brier</th><th>ECE</th><th>verdict</th></tr>",
    ]
    for metric, a in sorted(agreements.items()):
        parts.append(
            f"<tr><td>{html.escape(metric)}</td><td>{a.items}</td><td>{a.positives}</td>"
            f"<td>{_interval(a.auroc)}</td><td>{_interval(a.balanced_accuracy)}</td>"
            f"<td>{_interval(a.problem_f1)}</td><td>{plain(a.threshold)}</td><td>{a.brier:.3f}</td>"
            f"<td>{a.ece:.3f}</td><td>{auroc_verdict(a.auroc.low, a.auroc.high)}</td></tr>"
        )
    parts.append("</table>")
    for metric in sorted(agreements):
        calibration = calibrations.get(metric)
        parts.append(f"<h2>{html.escape(metric)}</h2>")
        if calibration is not None:
            parts.append(
                f"<p>Calibration: {calibration.method}, fitted on {calibration.fitted_on.get('items')} "
                "labelled items.</p><table><tr><th>goal (problem class)</th><th>threshold</th>"
                "<th>precision</th><th>recall</th></tr>"
            )
            for t in calibration.thresholds:
                parts.append(
                    f"<tr><td>{t.target} &ge; {plain(t.goal)}</td>"
                    f"<td>{'n/a' if t.threshold is None else plain(t.threshold)}</td>"
                    f"<td>{_fmt(t.precision)}</td><td>{_fmt(t.recall)}</td></tr>"
                )
            parts.append("</table><p class=muted>Precision and recall on the fitting data (in-sample).</p>")
        if metric in pairs:
            parts.append(reliability_svg(metric, pairs[metric], calibration))
    if summary:
        parts.append(
            "<h2>Prediction-powered estimates</h2><table><tr><th>metric</th><th>labels</th><th>judged</th>"
            "<th>PPI mean [95% CI]</th><th>labels only</th><th>judge mean</th></tr>"
        )
        for metric, row in sorted(summary.items()):

            def cell(e: Mapping[str, float] | None) -> str:
                return "n/a" if e is None else f"{e['mean']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"

            parts.append(
                f"<tr><td>{html.escape(metric)}</td><td>{row['labels']}</td><td>{row['judged']}</td>"
                f"<td>{cell(row['ppi'])}</td><td>{cell(row['labels_only'])}</td>"
                f"<td>{cell(row['judge_mean'])}</td></tr>"
            )
        parts.append("</table>")
    if problems:
        parts.append(f"<h2>Label lines not used ({len(problems)})</h2><ul>")
        parts.extend(f"<li>{html.escape(str(p))}</li>" for p in problems[:200])
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "".join(parts)
