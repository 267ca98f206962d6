"""Charts as inline SVG (for self-contained HTML) or PNG, drawn with matplotlib's Agg backend: the
demo's timeline. The evaluation report draws its own simpler charts without matplotlib (svg.py).

No display, no network, no CDN: a report opens offline in any browser.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # never a GUI backend: reports are written on servers and in CI

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

plt.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: small files, selectable labels
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)

PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00")


def to_svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prologue and doctype: inline in HTML


def to_png(figure: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def timeline(
    times: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    *,
    injections: Sequence[tuple[float, str]] = (),
    detections: Sequence[tuple[float, str]] = (),
    title: str = "",
) -> Figure:
    """Score means over time per metric, with vertical marks where the regression was injected and
    where drift was detected."""
    figure, axes = plt.subplots(figsize=(9.5, 4.2))
    for n, (metric, values) in enumerate(series.items()):
        points = [(t, v) for t, v in zip(times, values, strict=True) if v is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, color=PALETTE[n % len(PALETTE)], linewidth=1.4, label=metric)
    for at, label in injections:
        axes.axvline(at, color="#cc0000", linestyle="--", linewidth=1.2)
        axes.annotate(label, (at, 1.02), xycoords=("data", "axes fraction"), color="#cc0000", fontsize=8)
    # Alarms a few seconds apart would print their labels over each other: each label of a close
    # group moves one label's width to the right of the previous one.
    crowded = 0.03 * (max(times) - min(times)) if times else 0.0
    previous, shift = float("-inf"), 0.0
    for at, label in sorted(detections):
        shift = shift + 10.0 if at - previous < crowded else 0.0
        previous = at
        axes.axvline(at, color="#7b1fa2", linestyle=":", linewidth=1.2)
        axes.annotate(label, (at, 0.02), xycoords=("data", "axes fraction"), xytext=(shift, 0),
                      textcoords="offset points", color="#7b1fa2", fontsize=8, rotation=90,
                      va="bottom")  # fmt: skip
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("seconds since start")
    axes.set_ylabel("mean score (per interval)")
    if title:
        axes.set_title(title, loc="left")
    if series:
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False, ncol=4)
    return figure
