"""The evaluation report's charts as inline SVG, written directly: no plotting library to import
(matplotlib alone takes about a second to import, longer than drawing every chart of a report),
no display, no network; a report opens offline in any browser.

Each function is pure: numbers in, an `<svg>` element out. Values outside a chart's range are
clipped to it, and an interval that does not contain its point (a BCa bootstrap interval of a
skewed difference can) is drawn as it is: a line from its low to its high end, the point apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00")
GREY = "#888888"
INK = "#333333"
GRID = "#e3e6ee"
FONT = 'font-family="system-ui,sans-serif" font-size="11" fill="#1d2433"'


def _n(value: float) -> str:
    """A coordinate, short."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}" {FONT}{extra}>{escape(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, color: str, width: float = 1.0, extra: str = "") -> str:
    return (
        f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{color}" '
        f'stroke-width="{width:g}"{extra}/>'
    )


def _svg(width: int, height: int, title: str, body: Sequence[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>' + "".join(body) + "</svg>"
    )


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (at most count + 2 of them)."""
    span = high - low
    if not span > 1e-9:  # also a range too narrow to hold distinct round ticks
        return [low]
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks: list[float] = []
    value = first
    while value <= high + 1e-9 and len(ticks) <= count + 2:
        ticks.append(round(value, 10))
        value += step
    return ticks


def histogram_svg(values: Sequence[float], title: str, mean: float | None = None, *, bins: int = 20) -> str:
    """Scores on [0, 1] in `bins` equal bins, with the mean as a vertical line. The count axis
    ends on a tick at or above the tallest bar, so no bar runs past the last gridline; the mean's
    label sits above the plot, where no bar can cover it."""
    width, height = 340, 236
    left, right, top, bottom = 42, 12, 40, 38
    plot_w, plot_h = width - left - right, height - top - bottom
    counts = [0] * bins
    for value in values:
        if math.isfinite(value):
            counts[min(bins - 1, max(0, int(min(max(value, 0.0), 1.0) * bins)))] += 1
    peak = max(counts) or 1
    ticks = _ticks(0, peak, 4)
    step = max(1, math.ceil(ticks[1] - ticks[0])) if len(ticks) > 1 else 1
    top_count = step * math.ceil(peak / step)
    y_ticks = list(range(0, top_count + 1, step))

    def x(v: float) -> float:
        return left + v * plot_w

    def y(c: float) -> float:
        return top + plot_h - c / top_count * plot_h

    body = [_text(left + plot_w / 2, 15, title, extra=' font-weight="600"')]
    for count in y_ticks:
        body.append(_line(left, y(count), left + plot_w, y(count), GRID))
        body.append(_text(left - 5, y(count) + 4, f"{count}", "end"))
    for t in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        body.append(_line(x(t), top + plot_h, x(t), top + plot_h + 4, INK))
        body.append(_text(x(t), top + plot_h + 16, f"{t:.1f}"))
    bar = plot_w / bins
    for i, count in enumerate(counts):
        if count:
            body.append(
                f'<rect x="{_n(x(i / bins) + 0.5)}" y="{_n(y(count))}" width="{_n(bar - 1)}" '
                f'height="{_n(y(0) - y(count))}" fill="{PALETTE[0]}" fill-opacity="0.85"/>'
            )
    body.append(_line(left, top + plot_h, left + plot_w, top + plot_h, INK))
    body.append(_line(left, top, left, top + plot_h, INK))
    if mean is not None and math.isfinite(mean):
        at = x(min(max(mean, 0.0), 1.0))
        body.append(_line(at, top, at, top + plot_h, PALETTE[1], 1.5))
        body.append(_text(left, 31, f"mean {mean:.3f}", "start", f' fill="{PALETTE[1]}"'))
    body.append(_text(left + plot_w / 2, height - 6, "score"))
    body.append(
        _text(12, top + plot_h / 2, "items", extra=f' transform="rotate(-90 12 {_n(top + plot_h / 2)})"')
    )
    return _svg(width, height, f"{title}: distribution of scores", body)


def _verdict_color(low: float, high: float, higher_is_better: bool) -> str:
    if low > 0 or high < 0:
        return PALETTE[3] if (low > 0) == higher_is_better else PALETTE[1]
    return GREY


def differences_svg(
    metrics: Sequence[str],
    means: Sequence[float],
    lows: Sequence[float],
    highs: Sequence[float],
    higher_is_better: Sequence[bool],
) -> str:
    """Mean difference B − A per metric with its confidence interval: green where B is better,
    red where it is worse (a rise in a lower-is-better metric is worse), grey otherwise. The
    interval is a line from its low to its high end, whether or not it contains the mean."""
    rows = len(metrics)
    label_w = min(260, 12 + 6.2 * max((len(m) for m in metrics), default=4))
    width = int(label_w + 420)
    row_h, top, bottom = 24.0, 12, 44
    height = int(max(120, top + rows * row_h + bottom))
    plot_l, plot_r = label_w + 8, width - 16
    finite = [v for v in (*means, *lows, *highs) if math.isfinite(v)]
    low, high = min([0.0, *finite]), max([0.0, *finite])
    pad = max((high - low) * 0.08, 0.05)  # a range of at least 0.1, however close the values
    low, high = low - pad, high + pad

    def x(v: float) -> float:
        v = min(max(v, low), high) if math.isfinite(v) else 0.0
        return plot_l + (v - low) / (high - low) * (plot_r - plot_l)

    plot_bottom = height - bottom
    row_h = (plot_bottom - top) / max(rows, 1)
    body: list[str] = []
    for t in _ticks(low, high, 6):
        body.append(_line(x(t), top, x(t), plot_bottom, GRID))
        body.append(_line(x(t), plot_bottom, x(t), plot_bottom + 4, INK))
        body.append(_text(x(t), plot_bottom + 16, f"{t:+.2f}" if t else "0"))
    body.append(_line(plot_l, plot_bottom, plot_r, plot_bottom, INK))
    body.append(_line(x(0.0), top, x(0.0), plot_bottom, INK, 1.2))
    for n, (metric, mean, lo, hi, higher) in enumerate(
        zip(metrics, means, lows, highs, higher_is_better, strict=True)
    ):
        cy = top + n * row_h + row_h / 2
        color = _verdict_color(lo, hi, higher)
        body.append(_line(plot_l, cy, plot_r, cy, GRID, 0.5))
        body.append(_text(label_w, cy + 4, metric, "end"))
        start, end = sorted((lo, hi))
        body.append(_line(x(start), cy, x(end), cy, "#555555", 1.5))
        body.append(_line(x(start), cy - 5, x(start), cy + 5, "#555555", 1.5))
        body.append(_line(x(end), cy - 5, x(end), cy + 5, "#555555", 1.5))
        body.append(f'<circle cx="{_n(x(mean))}" cy="{_n(cy)}" r="4.5" fill="{color}"/>')
    body.append(_text((plot_l + plot_r) / 2, height - 8, "mean difference B − A (95% paired bootstrap CI)"))
    return _svg(width, height, "mean difference B − A per metric", body)
