"""The report of `ragpulse demo`: scores over time, where the regression was injected and where
the drift detector fired, as a self-contained HTML page and a PNG."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from agent.report import charts
from agent.report.html import Page, chart, fmt, table


def _figure(data: Mapping[str, Any]) -> Any:
    timeline = dict(data["timeline"])
    times = timeline.pop("t")
    injections = [(at, label) for label, at in data["phases"].items() if label != "healthy"]
    first: dict[str, float] = {}
    for d in data["detections"]:
        first.setdefault(d["metric"], d["at"])
    detections = [(at, f"drift: {metric}") for metric, at in first.items()]
    return charts.timeline(
        times, timeline, injections=injections, detections=detections,
        title=f"ragpulse demo — judge {data['judge']}",
    )  # fmt: skip


def demo_png(data: Mapping[str, Any]) -> bytes:
    return charts.to_png(_figure(data))


def demo_page(data: Mapping[str, Any], summary: str) -> str:
    page = Page("ragpulse demo", escape(summary))
    page.section("Scores over time", chart(charts.to_svg(_figure(data)), "timeline"), section_id="timeline")
    # Each alarm is timed from the start of the phase it fired in (agent/demo/run.py phase_alarms).
    rows = [
        (
            escape(d["service"]), escape(d["route"]), escape(d["metric"]), fmt(d["at"], 1),
            escape(d["phase"]),
            "false alarm" if d["after_phase_start"] is None else f"{d['after_phase_start']:+.1f}",
        )
        for d in data["detections"]
    ]  # fmt: skip
    if rows:
        body = table(
            ["service", "route", "metric", "detected at (s)", "during phase", "after the phase began (s)"],
            rows,
            numeric=(3, 5),
        )
    else:
        body = '<p class="callout">The drift detector did not fire.</p>'
    page.section("Drift detected", body, section_id="detections")
    if data.get("metrics_note"):  # which metrics were scored, and those the judge's default left out
        page.section("Metrics scored", f"<p>{escape(data['metrics_note'])}</p>", section_id="metrics")
    phases = [(escape(label), fmt(at, 1)) for label, at in data["phases"].items()]
    page.section(
        "Traffic phases",
        table(["phase", "started at (s)"], phases, numeric=(1,))
        + "<p>The regression first ranks passages about other topics above the right one, with a retriever "
        "that scores lower (metric <code>signal:retrieval_top_score</code>: a signal measured on every "
        "interaction without a judge), then stops retrieving the right passage so that the model answers "
        "from memory.</p>",
        section_id="phases",
    )
    return page.render()
