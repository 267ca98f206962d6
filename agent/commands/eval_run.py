"""`ragpulse eval`: score, summarise, write results, summary and report (parser in command.py)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.config import Settings
from agent.offline.evaluate import (
    ItemResult,
    OfflineEvaluator,
    all_metric_names,
    available_metrics,
    verdict_details,
)
from agent.offline.records import BadRow, EvalItem, InputError, read_items
from agent.offline.summary import (
    BETTER,
    WORSE,
    MetricComparison,
    MetricSummary,
    compare,
    pair_results,
    summarise,
    write_comparison,
    write_summary,
)

WEAKEST_SHOWN = 10
BAD_LINES_PRINTED = 20


@dataclass
class Scored:
    source: Path
    items: list[EvalItem]
    bad: list[BadRow]
    results: list[ItemResult]
    summaries: list[MetricSummary]


def main(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True)
    out = Console(soft_wrap=not sys.stdout.isatty())
    files = [Path(f) for f in args.files]
    if args.compare != (len(files) == 2) or len(files) > 2:
        console.print("ragpulse eval: give one FILE, or two FILEs with --compare")
        return 2
    try:
        loaded = [read_items(path) for path in files]
    except InputError as exc:
        console.print(f"ragpulse eval: {exc}")
        return 2
    for path, (_, bad) in zip(files, loaded, strict=True):
        _report_bad(console, path, bad)
    if not any(items for items, _ in loaded):
        console.print("ragpulse eval: no usable line in the input")
        return 1
    metrics = available_metrics([i for items, _ in loaded for i in items], args.k)
    if args.metrics:
        wanted = [m.strip() for m in args.metrics.split(",") if m.strip()]
        known = all_metric_names(args.k)
        unknown = [m for m in wanted if m not in known]
        if unknown:
            console.print(f"ragpulse eval: unknown metric(s) {unknown}; choose from {known}")
            return 2
        metrics = [m for m in wanted if m in metrics] or wanted
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    scored, judge = asyncio.run(
        _score_all(settings, files, loaded, metrics, args.k, console, out_dir, args.compare)
    )
    for s in scored:
        _print_summary(out, s)
    if getattr(args, "labels", None) and not args.compare:  # trust: PPI estimates (agent/trust)
        from agent.trust.offline import eval_ppi

        calibration = Path(args.calibration) if args.calibration else None
        if eval_ppi(Path(args.labels), calibration, out_dir, out.print) != 0:
            return 2
    section = None
    if args.compare:
        a, b = scored
        pairs, paired_by = pair_results(a.results, b.results)
        comparisons = compare(pairs, metrics)
        # Written before anything is drawn: a report that cannot be drawn never loses it.
        write_comparison(out_dir / "comparison.json", comparisons, a=str(a.source), b=str(b.source),
                         paired_by=paired_by, pairs=len(pairs))  # fmt: skip
        _print_comparison(out, comparisons, paired_by, len(pairs))
        from agent.report.evaluation import comparison_section

        section = comparison_section(comparisons, str(a.source), str(b.source), paired_by)
    _write_report(judge, scored, metrics, out_dir, section)
    out.print(f"Wrote {out_dir}/ (results.jsonl, summary.json, report.html"
              + (", comparison.json)" if args.compare else ")"))  # fmt: skip
    return 0


def _report_bad(console: Console, path: Path, bad: Sequence[BadRow]) -> None:
    for row in bad[:BAD_LINES_PRINTED]:
        # Plain lines, never wrapped: FILE:LINE: is what editors and grep understand.
        print(f"{path}:{row.line}: skipped: {row.reason}", file=sys.stderr)
    if len(bad) > BAD_LINES_PRINTED:
        print(
            f"{path}: … {len(bad) - BAD_LINES_PRINTED} more bad lines (all in report.html)", file=sys.stderr
        )


async def _score_all(
    settings: Settings,
    files: Sequence[Path],
    loaded: Sequence[tuple[list[EvalItem], list[BadRow]]],
    metrics: Sequence[str],
    k: int,
    console: Console,
    out_dir: Path,
    comparing: bool,
) -> tuple[list[Scored], str]:
    """Score every file and write its results and summary; returns them and the judge's name."""
    from prometheus_client import CollectorRegistry

    from agent.build import build_judge
    from agent.telemetry import JudgeTelemetry

    # The judge's instruments on a registry nobody scrapes: offline, there is no /metrics.
    judge = build_judge(settings, JudgeTelemetry(CollectorRegistry()))  # waits for litellm's import
    # The imports are over: the cycle collector, paused by the command (agent/commands/eval.py),
    # runs again. What they built lives until exit, so it is frozen out of the collector's walks
    # instead of being walked by its first full collection.
    gc.freeze()
    gc.enable()
    evaluator = OfflineEvaluator(judge, metrics, k=k, concurrency=settings.pipeline.eval_concurrency)
    scored: list[Scored] = []
    for n, (path, (items, bad)) in enumerate(zip(files, loaded, strict=True)):
        results = await _score(evaluator, items, path, console)
        summaries = summarise(results, metrics)
        target = out_dir / ("ab"[n]) if comparing else out_dir
        target.mkdir(parents=True, exist_ok=True)
        _write_results(target / "results.jsonl", results, bad, metrics)
        write_summary(target / "summary.json", summaries, items=len(items), bad_lines=len(bad),
                      judge=judge.model, source=str(path))  # fmt: skip
        scored.append(Scored(path, items, bad, results, summaries))
    return scored, judge.model


async def _score(
    evaluator: OfflineEvaluator, items: Sequence[EvalItem], path: Path, console: Console
) -> list[ItemResult]:
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False, disable=not console.is_terminal,
    )  # fmt: skip
    results: dict[str, ItemResult] = {}
    with progress:
        task = progress.add_task(f"scoring {path.name}", total=len(items))
        for next_done in asyncio.as_completed([evaluator.score(item) for item in items]):
            result = await next_done
            results[result.item.id] = result
            progress.advance(task)
    if not console.is_terminal:
        print(f"scored {len(results)} items of {path}", file=sys.stderr)
    return [results[item.id] for item in items]


def _json_value(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 6)


def _write_results(
    path: Path, results: Sequence[ItemResult], bad: Sequence[BadRow], metrics: Sequence[str]
) -> None:
    rows: list[tuple[int, dict[str, Any]]] = []
    for r in results:
        row: dict[str, Any] = {"id": r.item.id, "line": r.item.line}
        row.update({m: _json_value(r.scores.get(m)) for m in metrics})
        if r.errors:
            row["errors"] = dict(r.errors)
        rows.append((r.item.line, row))
    for b in bad:  # one object per input line: a skipped line says why
        rows.append((b.line, {"id": str(b.line), "line": b.line, "skipped": b.reason}))
    with path.open("w") as handle:
        for _, row in sorted(rows, key=lambda pair: pair[0]):
            handle.write(json.dumps(row) + "\n")


def weakest(
    results: Sequence[ItemResult], metrics: Sequence[str], n: int = WEAKEST_SHOWN
) -> list[ItemResult]:
    """Items with the lowest mean of their defined scores (lower-is-better metrics left out)."""
    from agent.offline.evaluate import LOWER_IS_BETTER

    ranked = []
    for r in results:
        values = [v for m in metrics if m not in LOWER_IS_BETTER and (v := r.scores.get(m)) is not None]
        if values:
            ranked.append((sum(values) / len(values), r.item.line, r))
    return [r for _, _, r in sorted(ranked, key=lambda t: (t[0], t[1]))[:n]]


def _write_report(judge: str, scored: Sequence[Scored], metrics: Sequence[str], out_dir: Path,
                  comparison: str | None) -> None:  # fmt: skip
    """report.html; the weakest items show the verdicts obtained while scoring (no judge is asked)."""
    from agent.report.evaluation import evaluation_page

    last = scored[-1]
    weak_results = weakest(last.results, metrics)
    page = evaluation_page(
        source=" vs ".join(str(s.source) for s in scored),
        judge=judge,
        summaries=last.summaries,
        results=last.results,
        weak=[(r, verdict_details(r, judge)) for r in weak_results],
        bad=[b for s in scored for b in s.bad],
        comparison=comparison,
        baseline=scored[0].summaries if comparison is not None else None,
    )
    (out_dir / "report.html").write_text(page)


def _print_summary(console: Console, scored: Scored) -> None:
    table = Table(title=f"{scored.source} — {len(scored.items)} items, {len(scored.bad)} bad lines")
    for column in ("metric", "mean", "95% CI", "scored", "undefined", "errors"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for s in scored.summaries:
        table.add_row(
            s.metric,
            "—" if s.mean is None else f"{s.mean:.3f}",
            "—" if s.ci_low is None else f"{s.ci_low:.3f} – {s.ci_high:.3f}",
            str(s.count),
            str(s.undefined),
            str(s.errors),
        )
    console.print(table)


def _print_comparison(
    console: Console, comparisons: Sequence[MetricComparison], paired_by: str, pairs: int
) -> None:
    table = Table(title=f"B vs A: {pairs} pairs (by {paired_by})")
    for column in ("metric", "pairs", "A", "B", "B − A", "95% CI", "verdict"):
        table.add_column(column, justify="left" if column in ("metric", "verdict") else "right")
    for c in comparisons:
        style = "green" if c.verdict == BETTER else "red" if c.verdict == WORSE else ""
        table.add_row(
            c.metric, str(c.pairs),
            "—" if c.mean_a is None else f"{c.mean_a:.3f}",
            "—" if c.mean_b is None else f"{c.mean_b:.3f}",
            "—" if c.mean_difference is None else f"{c.mean_difference:+.3f}",
            "—" if c.ci_low is None else f"{c.ci_low:+.3f} – {c.ci_high:+.3f}",
            f"[{style}]{c.verdict}[/]" if style else c.verdict,
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as `ragpulse eval`")
