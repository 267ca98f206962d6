"""The report of `ragpulse eval`: summary, score distributions, weakest items with the judge's
verdicts, bad input lines, and the A/B comparison when there is one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from html import escape

from agent.offline.evaluate import ItemResult, VerdictDetail
from agent.offline.records import BadRow
from agent.offline.summary import BETTER, WORSE, ItemChange, MetricComparison, MetricSummary
from agent.report import svg
from agent.report.html import Page, chart, fmt, table

WeakItem = tuple[ItemResult, Sequence[VerdictDetail]]


@dataclass(frozen=True)
class ChangedItem:
    """An item that changed from A to B, with the verdicts each side's scoring obtained."""

    change: ItemChange
    verdicts_a: Sequence[VerdictDetail]
    verdicts_b: Sequence[VerdictDetail]


log = logging.getLogger(__name__)


def _figure(draw: Callable[[], str], name: str) -> str:
    """A chart, or a note where it cannot be drawn: a chart never costs the report (or the
    comparison.json written before it)."""
    try:
        return chart(draw(), name)
    except Exception as exc:  # the boundary of drawing
        log.exception("could not draw the %s chart", name)
        return f'<p class="callout">The {escape(name)} chart could not be drawn: {escape(repr(exc))}.</p>'


def _summary_table(summaries: Sequence[MetricSummary]) -> str:
    rows = [
        (
            escape(s.metric)
            + ("" if s.higher_is_better else ' <span class="muted">(lower is better)</span>'),
            fmt(s.mean),
            f"{fmt(s.ci_low)} – {fmt(s.ci_high)}",
            str(s.count),
            str(s.undefined),
            str(s.errors),
        )
        for s in summaries
    ]
    return table(
        ["metric", "mean", "95% CI", "scored", "undefined", "judge errors"], rows, numeric=(1, 2, 3, 4, 5)
    )


def _distributions(summaries: Sequence[MetricSummary], results: Sequence[ItemResult]) -> str:
    figures = []
    for s in summaries:
        values = [v for r in results if (v := r.scores.get(s.metric)) is not None]
        if values:
            figures.append(_figure(partial(svg.histogram_svg, values, s.metric, s.mean), s.metric))
    return f'<div class="grid">{"".join(figures)}</div>' if figures else "<p>No defined scores.</p>"


def _verdict_rows(details: Sequence[VerdictDetail]) -> str:
    if not details:
        return '<p class="muted">No judge verdicts for this item.</p>'
    with_reasons = any(d.reason for d in details)  # local judges give graded scores, LLMs reasons
    rows = [
        (
            escape(d.question),
            # A criterion's own answer where it has one ("no" may count for its score, "2 of 5").
            f'<span class="{"yes" if d.value else "no"}">{escape(d.answer or ("yes" if d.value else "no"))}'
            "</span>",
            fmt(d.score, 2),
            escape(d.subject),
            *((escape(d.reason),) if with_reasons else ()),
        )
        for d in details
    ]
    headers = ["question", "verdict", "score", "about", *(("reason",) if with_reasons else ())]
    return table(headers, rows, numeric=(2,), text=(3, 4))


def _weakest(weak: Sequence[WeakItem], metrics: Sequence[str]) -> str:
    if not weak:
        return "<p>No item has a defined score.</p>"
    blocks = []
    for result, details in weak:
        item = result.item
        scores = ", ".join(
            f"{escape(m)} {fmt(v, 2)}" for m in metrics if (v := result.scores.get(m)) is not None
        )
        errors = "".join(f"<li>{escape(m)}: {escape(e)}</li>" for m, e in result.errors.items())
        blocks.append(
            f"<details open><summary><b>{escape(item.id)}</b> (line {item.line}) — {escape(item.question)}"
            f"</summary><p>{scores}</p>"
            + (f"<p><b>Response:</b> {escape(item.response)}</p>" if item.response else "")
            + (f"<p><b>Reference:</b> {escape(item.reference)}</p>" if item.reference else "")
            + (f"<p><b>Judge errors:</b></p><ul>{errors}</ul>" if errors else "")
            + _verdict_rows(details)
            + "</details>"
        )
    return "".join(blocks)


def _bad_rows(bad: Sequence[BadRow]) -> str:
    shown = bad[:200]
    rows = [(str(b.line), escape(b.reason)) for b in shown]
    more = f"<p>… and {len(bad) - len(shown)} more.</p>" if len(bad) > len(shown) else ""
    return table(["line", "reason"], rows, numeric=(0,), text=(1,)) + more


def _verdict_class(verdict: str) -> str:
    return "better" if verdict == BETTER else "worse" if verdict == WORSE else "muted"


def _side(label: str, result: ItemResult, details: Sequence[VerdictDetail], metrics: Sequence[str]) -> str:
    scores = ", ".join(f"{escape(m)} {fmt(result.scores.get(m), 2)}" for m in metrics)
    errors = "".join(f"<li>{escape(m)}: {escape(e)}</li>" for m, e in result.errors.items())
    response = result.item.response
    return (
        f'<div class="side"><h4>{label}</h4><p class="scores">{scores}</p>'
        + (f"<p><b>Response:</b> {escape(response)}</p>" if response else '<p class="muted">No response.</p>')
        + (f"<p><b>Judge errors:</b></p><ul>{errors}</ul>" if errors else "")
        + _verdict_rows(details)
        + "</div>"
    )


def _changed(items: Sequence[ChangedItem], empty: str) -> str:
    if not items:
        return f'<p class="muted">{empty}</p>'
    blocks = []
    for shown in items:
        change, item = shown.change, shown.change.a.item
        # Each side lists the scores that differ; the others are only counted.
        moved = [m for m in change.metrics if change.a.scores.get(m) != change.b.scores.get(m)]
        same = len(change.metrics) - len(moved)
        blocks.append(
            f'<details open class="changed"><summary><b>{escape(item.id)}</b> '
            f'<span class="{"better" if change.change > 0 else "worse"}">{change.change:+.3f}</span> — '
            f"{escape(item.question)}</summary>"
            + (f"<p><b>Reference:</b> {escape(item.reference)}</p>" if item.reference else "")
            + (f'<p class="muted">{same} other score(s) unchanged.</p>' if same else "")
            + '<div class="sides">'
            + _side("A", change.a, shown.verdicts_a, moved)
            + _side("B", change.b, shown.verdicts_b, moved)
            + "</div></details>"
        )
    return "".join(blocks)


def comparison_section(
    comparisons: Sequence[MetricComparison],
    a: str,
    b: str,
    paired_by: str,
    changes: tuple[Sequence[ChangedItem], Sequence[ChangedItem]] = ((), ()),
) -> str:
    """The A/B table and chart, then the items that got worse and better from A to B, each with
    both sides' answers, scores and verdicts side by side."""
    rows = [
        (
            escape(c.metric),
            str(c.pairs),
            fmt(c.mean_a),
            fmt(c.mean_b),
            fmt(c.mean_difference),
            f"{fmt(c.ci_low)} – {fmt(c.ci_high)}",
            f'<span class="{_verdict_class(c.verdict)}">{escape(c.verdict)}</span>',
        )
        for c in comparisons
    ]
    plotted = [c for c in comparisons if c.mean_difference is not None and c.ci_low is not None]
    figure = ""
    if plotted:
        draw = partial(
            svg.differences_svg,
            [c.metric for c in plotted],
            [c.mean_difference or 0.0 for c in plotted],
            [c.ci_low or 0.0 for c in plotted],
            [c.ci_high or 0.0 for c in plotted],
            [c.higher_is_better for c in plotted],
        )
        figure = _figure(draw, "differences")
    intro = (
        f"<p>B = <code>{escape(b)}</code> compared with A = <code>{escape(a)}</code>, items paired by "
        f"{escape(paired_by)}. A verdict is reached when the 95% paired bootstrap interval of the mean "
        "difference excludes 0.</p>"
    )
    return (
        intro
        + table(
            ["metric", "pairs", "mean A", "mean B", "B − A", "95% CI", "verdict"],
            rows,
            numeric=(1, 2, 3, 4, 5),
        )
        + figure
        + "<h3>Items that got worse from A to B</h3>"
        + '<p class="muted">The change is the mean of B − A over the item\'s scores (lower-is-better '
        "metrics counted the other way round); at most ten, the largest first.</p>"
        + _changed(changes[0], "No item got worse.")
        + "<h3>Items that got better from A to B</h3>"
        + _changed(changes[1], "No item got better.")
    )


def evaluation_page(
    *,
    source: str,
    judge: str,
    summaries: Sequence[MetricSummary],
    results: Sequence[ItemResult],
    weak: Sequence[WeakItem],
    bad: Sequence[BadRow],
    comparison: str | None = None,
    baseline: Sequence[MetricSummary] | None = None,
) -> str:
    """The page; with a comparison, `summaries` and `results` are B's and `baseline` is A's summary."""
    of_b = "" if baseline is None else " of B"
    page = Page(
        "ragpulse evaluation",
        f"{escape(source)} · {len(results)} items scored{of_b} · {len(bad)} bad lines skipped · judge "
        f"<code>{escape(judge)}</code>",
    )
    if comparison is not None:
        page.section("A/B comparison", comparison, section_id="comparison")
    if baseline is not None:
        page.section("Summary of A", _summary_table(baseline), section_id="summary-a")
    page.section(
        "Summary" if baseline is None else "Summary of B", _summary_table(summaries), section_id="summary"
    )
    page.section(f"Score distributions{of_b}", _distributions(summaries, results), section_id="distributions")
    page.section(f"Weakest items{of_b}", _weakest(weak, [s.metric for s in summaries]), section_id="weakest")
    if bad:
        page.section("Lines skipped", _bad_rows(bad), section_id="bad-lines")
    return page.render()
