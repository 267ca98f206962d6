"""`ragpulse eval`: score, summarise, write results, summary and report (parser in eval.py).

Exit statuses (docs/eval.md): 0 scored; 1 no usable line (or an unexpected error); 2 a usage or
input error; 3 the judge failed on more than --max-judge-errors of the judged scores (all of
them, whatever the share); 5 the judge cannot work (its self-check failed: credentials, model,
api base), before anything was scored; 4 the quality gate failed (--fail-under, --fail-under-ci,
--fail-if-worse), after every file was written. The scoring is `agent.offline.run.OfflineRun`,
the same the Python API (`agent.quality`) runs; the gate's checks are `agent.offline.gate`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.config import Settings
from agent.model import Criterion
from agent.offline.evaluate import ItemResult, verdict_details
from agent.offline.gate import CI_LOW, MEAN, GateCheck, Threshold, check_comparisons, check_gate_metrics
from agent.offline.gate import check_thresholds as gate_thresholds
from agent.offline.records import BadRow, EvalItem, InputError, read_items
from agent.offline.run import EvalResults, JudgeBroken, OfflineRun, choose_metrics
from agent.offline.summary import (
    BETTER,
    WORSE,
    ItemChange,
    MetricComparison,
    compare,
    item_changes,
    pair_results,
    weakest,
    write_comparison,
)

BAD_LINES_PRINTED = 20
# Exit statuses (docs/eval.md).
OK, NO_INPUT, USAGE, JUDGE_FAILED, GATE_FAILED, JUDGE_BROKEN = 0, 1, 2, 3, 4, 5
# Without a terminal (CI logs, `| tee`), a progress line at least this often, and every tenth.
PROGRESS_SECONDS = 10.0
LOG_WIDTH = 200  # columns of the tables printed to a log or pipe


@dataclass(frozen=True)
class Scored:
    source: Path
    evaluation: EvalResults

    @property
    def items(self) -> tuple[EvalItem, ...]:
        return self.evaluation.items

    @property
    def bad(self) -> tuple[BadRow, ...]:
        return self.evaluation.bad

    @property
    def results(self) -> tuple[ItemResult, ...]:
        return self.evaluation.results


@dataclass(frozen=True)
class Gate:
    """What the gate checks: thresholds (on B with --compare) and metrics B must not be worse on."""

    thresholds: tuple[Threshold, ...] = ()
    not_worse: tuple[str, ...] = ()

    @property
    def metrics(self) -> list[str]:
        return list(dict.fromkeys([*(t.metric for t in self.thresholds), *self.not_worse]))


def _gate(args: argparse.Namespace, criteria: Sequence[Criterion] = ()) -> Gate:
    """The gate's flags, checked; ValueError with the one line naming the flag otherwise."""
    thresholds = []
    for flag, values, on in (
        ("--fail-under", args.fail_under, MEAN),
        ("--fail-under-ci", args.fail_under_ci, CI_LOW),
    ):
        for text in values or ():
            try:
                thresholds.append(Threshold.parse(text, on))
            except ValueError as exc:
                raise ValueError(f"{flag} {exc}") from None
    gate = Gate(tuple(thresholds), tuple(dict.fromkeys(args.fail_if_worse or ())))
    if gate.not_worse and not args.compare:
        raise ValueError("--fail-if-worse needs two files and --compare")
    try:
        check_gate_metrics(gate.thresholds, gate.not_worse, args.k, criteria)
    except ValueError as exc:
        raise ValueError(f"gate: {exc}") from None
    return gate


def main(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True, soft_wrap=True)  # an error is one line, however long its path
    # In a log (no terminal) lines may be long: tables at their natural width, nothing cut.
    piped = not sys.stdout.isatty()
    out = Console(soft_wrap=piped, width=LOG_WIDTH if piped else None)
    files = [Path(f) for f in args.files]
    if args.compare != (len(files) == 2) or len(files) > 2:
        console.print("ragpulse eval: give one FILE, or two FILEs with --compare")
        return 2
    try:
        gate = _gate(args, settings.criteria)
    except ValueError as exc:  # an unknown metric included: one line with a suggestion
        print(f"ragpulse eval: {exc}", file=sys.stderr)
        return USAGE
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
    try:
        wanted = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
        if wanted:  # a gated metric is scored even when --metrics leaves it out
            wanted += [m for m in gate.metrics if m not in wanted]
        items = [i for items, _ in loaded for i in items]
        choice = choose_metrics(
            items, wanted, args.k, settings.judge.model, keep=gate.metrics, criteria=settings.criteria
        )
        metrics = list(choice.metrics)
    except ValueError as exc:  # UnknownMetric: one line with a suggestion
        print(f"ragpulse eval: --metrics: {exc}", file=sys.stderr)
        return USAGE
    if choice.off or choice.doubtful:  # as the agent does: a metric left out, or one that says little
        hint = f"; to score {', '.join(s.metric for s in choice.off)}: --metrics {','.join(choice.every)}"
        # Said like the progress lines: "ragpulse eval:" starts the lines of errors and the gate.
        print(f"{choice.why()}{hint if choice.off else ''}", file=sys.stderr)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        scored, judge = asyncio.run(
            _score_all(settings, files, loaded, metrics, args.k, console, out_dir, args.compare)
        )
    except JudgeBroken as exc:
        print(f"ragpulse eval: {exc}", file=sys.stderr)
        return JUDGE_BROKEN
    for s in scored:
        _print_summary(out, s)
        out.print(s.evaluation.usage.describe(judge))
    if getattr(args, "labels", None) and not args.compare:  # trust: PPI estimates (agent/trust)
        from agent.trust.offline import eval_ppi

        calibration = Path(args.calibration) if args.calibration else None
        if eval_ppi(Path(args.labels), calibration, out_dir, out.print) != 0:
            return 2
    section = None
    comparisons: list[MetricComparison] = []
    if args.compare:
        a, b = scored
        pairs, paired_by = pair_results(a.results, b.results)
        comparisons = compare(pairs, metrics)
        # Written before anything is drawn: a report that cannot be drawn never loses it.
        write_comparison(out_dir / "comparison.json", comparisons, a=str(a.source), b=str(b.source),
                         paired_by=paired_by, pairs=len(pairs))  # fmt: skip
        _print_comparison(out, comparisons, paired_by, len(pairs), str(a.source), str(b.source))
        worse, better = item_changes(pairs, metrics)
        _print_changes(out, worse, better)
        from agent.report.evaluation import comparison_section

        section = comparison_section(
            comparisons, str(a.source), str(b.source), paired_by,
            changes=_changed_items(worse, better, judge),
        )  # fmt: skip
    _write_report(judge, scored, metrics, out_dir, section)
    if args.compare:
        out.print(f"Wrote {out_dir}/ (comparison.json, report.html), {out_dir}/a/ and {out_dir}/b/ "
                  "(results.jsonl, summary.json)")  # fmt: skip
    else:
        out.print(f"Wrote {out_dir}/ (results.jsonl, summary.json, report.html)")
    checks = gate_thresholds(scored[-1].evaluation.summaries, gate.thresholds)
    if gate.not_worse:
        checks += check_comparisons(comparisons, gate.not_worse)
    gate_status = _print_gate(out, checks)
    judged = _judge_verdict(scored, metrics, args.max_judge_errors, [c.name for c in settings.criteria])
    # Scores with too many judge errors say little: that failure comes first.
    return judged if judged != OK else gate_status


def _print_gate(out: Console, checks: Sequence[GateCheck]) -> int:
    """A passed check on stdout, a failed one on stderr, one line each; GATE_FAILED if any failed."""
    for check in checks:
        if check.passed:
            out.print(f"gate passed: {check.line}", soft_wrap=True, highlight=False, markup=False)
        else:
            print(f"ragpulse eval: gate failed: {check.line}", file=sys.stderr)
    return GATE_FAILED if any(not c.passed for c in checks) else OK


def _judge_verdict(
    scored: Sequence[Scored], metrics: Sequence[str], max_share: float, criteria: Sequence[str] = ()
) -> int:
    """JUDGE_FAILED, with one line, when the judge failed on more than `max_share` of the judged
    scores (or on all of them); else OK."""
    failed = sum(len(r.errors) for s in scored for r in s.results)
    if not failed:
        return OK
    judged = _judged_metrics() | frozenset(criteria)
    answered = sum(
        1 for s in scored for r in s.results for m in metrics if m in judged and m not in r.errors
        and (r.scores.get(m) is not None or r.skipped.get(m) == "undefined")
    )  # fmt: skip
    share = failed / (failed + answered)
    if answered and share <= max_share:
        return OK
    first = next(e for s in scored for r in s.results for e in r.errors.values())
    print(
        f"ragpulse eval: the judge failed on {failed} of {failed + answered} judged scores "
        f"({share:.0%}, more than --max-judge-errors {max_share:g}); first: {first}",
        file=sys.stderr,
    )
    return JUDGE_FAILED


def _judged_metrics() -> frozenset[str]:
    from agent.metrics import METRICS
    from agent.offline.evaluate import RAGCHECKER_FIELDS

    return frozenset(METRICS) | frozenset(RAGCHECKER_FIELDS)


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
    from agent.quality import open_run

    run = open_run(settings, metrics, k)  # waits for litellm's import
    # The imports are over: the cycle collector, paused by the command (agent/commands/eval.py),
    # runs again. What they built lives until exit, so it is frozen out of the collector's walks
    # instead of being walked by its first full collection.
    gc.freeze()
    gc.enable()
    if settings.judge.checked_at_start:
        await run.check()
    scored: list[Scored] = []
    for n, (path, (items, bad)) in enumerate(zip(files, loaded, strict=True)):
        evaluation = await _score(run, items, bad, path, console)
        target = out_dir / ("ab"[n]) if comparing else out_dir
        target.mkdir(parents=True, exist_ok=True)
        _write_jsonl(target / "results.jsonl", evaluation.rows())
        summary = evaluation.summary_document(str(path))
        (target / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        scored.append(Scored(path, evaluation))
    return scored, run.judge.model


async def _score(
    run: OfflineRun, items: Sequence[EvalItem], bad: Sequence[BadRow], path: Path, console: Console
) -> EvalResults:
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False, disable=not console.is_terminal,
    )  # fmt: skip
    lines = None if console.is_terminal else ProgressLines(f"scoring {path}", len(items))
    with progress:
        task = progress.add_task(f"scoring {path.name}", total=len(items))

        def advance(_: ItemResult) -> None:
            progress.advance(task)
            if lines:
                lines.advance()

        heartbeat = asyncio.create_task(lines.heartbeat()) if lines else None
        try:
            evaluation = await run.score(items, bad, on_result=advance)
        finally:
            if heartbeat:
                heartbeat.cancel()
    if lines:
        print(f"scored {len(evaluation.results)} items of {path} in {lines.elapsed():.0f}s",
              file=sys.stderr, flush=True)  # fmt: skip
    return evaluation


class ProgressLines:
    """Progress for logs (no terminal): a line at every tenth of the items and, while items take
    long, at least every PROGRESS_SECONDS."""

    def __init__(self, label: str, total: int, interval: float = PROGRESS_SECONDS) -> None:
        self._label = label
        self._total = total
        self._interval = interval
        self._done = 0
        self._started = self._last = time.monotonic()
        self._step = max(1, total // 10)

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def advance(self) -> None:
        self._done += 1
        if self._done % self._step == 0 and self._done < self._total:
            self._print()

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._interval - (time.monotonic() - self._last))
            if time.monotonic() - self._last >= self._interval - 0.05:
                self._print()

    def _print(self) -> None:
        self._last = time.monotonic()
        share = self._done / self._total if self._total else 1.0
        print(f"{self._label}: {self._done}/{self._total} items ({share:.0%}), {self.elapsed():.0f}s",
              file=sys.stderr, flush=True)  # fmt: skip


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def _write_report(judge: str, scored: Sequence[Scored], metrics: Sequence[str], out_dir: Path,
                  comparison: str | None) -> None:  # fmt: skip
    """report.html; the weakest items show the verdicts obtained while scoring (no judge is asked)."""
    from agent.report.evaluation import evaluation_page

    last = scored[-1]
    weak_results = weakest(last.results, metrics)
    page = evaluation_page(
        source=" vs ".join(str(s.source) for s in scored),
        judge=judge,
        summaries=list(last.evaluation.summaries),
        results=last.results,
        weak=[(r, verdict_details(r, judge)) for r in weak_results],
        bad=[b for s in scored for b in s.bad],
        comparison=comparison,
        baseline=list(scored[0].evaluation.summaries) if comparison is not None else None,
    )
    (out_dir / "report.html").write_text(page)


def _metric_column(table: Table, metrics: Sequence[str]) -> None:
    """The metric column, never cut: two names cut alike would read as one metric."""
    table.add_column("metric", no_wrap=True, min_width=max((len(m) for m in metrics), default=6))


def _print_summary(console: Console, scored: Scored) -> None:
    table = Table(title=f"{scored.source} — {len(scored.items)} items, {len(scored.bad)} bad lines")
    _metric_column(table, [s.metric for s in scored.evaluation.summaries])
    for column in ("mean", "95% CI", "scored", "undefined", "errors"):
        table.add_column(column, justify="right")
    for s in scored.evaluation.summaries:
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
    console: Console, comparisons: Sequence[MetricComparison], paired_by: str, pairs: int, a: str, b: str
) -> None:
    table = Table(title=f"B ({b}) vs A ({a}): {pairs} pairs (by {paired_by})")
    _metric_column(table, [c.metric for c in comparisons])
    for column in ("pairs", "A", "B", "B − A", "95% CI", "verdict"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
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


def _print_changes(console: Console, worse: Sequence[ItemChange], better: Sequence[ItemChange]) -> None:
    """The items an A/B decision turns on; their answers and verdicts are in report.html."""
    for title, changes in (("got worse from A to B", worse), ("got better from A to B", better)):
        if not changes:
            console.print(f"No item {title}.")
            continue
        table = Table(title=f"Items that {title} (mean change of their scores; answers in report.html)")
        for column in ("id", "question", "change"):
            table.add_column(column, justify="right" if column == "change" else "left",
                             no_wrap=column == "id", overflow="fold")  # fmt: skip
        for c in changes:
            table.add_row(c.a.item.id, c.a.item.question[:80], f"{c.change:+.3f}")
        console.print(table)


def _changed_items(worse: Sequence[ItemChange], better: Sequence[ItemChange], judge: str) -> Any:
    """The changed items with each side's verdicts, for the report (no judge is asked)."""
    from agent.report.evaluation import ChangedItem

    def shown(changes: Sequence[ItemChange]) -> list[ChangedItem]:
        return [ChangedItem(c, verdict_details(c.a, judge), verdict_details(c.b, judge)) for c in changes]

    return shown(worse), shown(better)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as `ragpulse eval`")
