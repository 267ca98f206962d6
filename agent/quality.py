"""ragpulse's Python API for offline evaluation and quality gates (pytest, notebooks, scripts).

    from agent.quality import evaluate, assert_quality

    results = evaluate("golden.jsonl")   # or a list of dicts in the eval JSONL format
    assert_quality(results, faithfulness=0.8, context_precision=0.6)

`evaluate` scores a set exactly as `ragpulse eval` does (it is the same code: the command scores
through `open_run` and `agent.offline.run.OfflineRun`), with the same settings: `RAGPULSE_*`
variables, a `config` file, or `judge=` for the judge model. `results.rows()` and
`results.summary_document(source)` are what `results.jsonl` and `summary.json` would hold.
`assert_quality` raises an AssertionError with the lines `ragpulse eval --fail-under` prints;
`assert_not_worse` is `--compare --fail-if-worse`. See docs/eval.md ("A gate in CI").
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.config import ConfigError, Settings, load_settings
from agent.offline.evaluate import ItemResult
from agent.offline.gate import (
    CI_LOW,
    MEAN,
    GateCheck,
    Threshold,
    check_comparisons,
    check_gate_metrics,
    check_thresholds,
    failure_message,
)
from agent.offline.records import BadRow, EvalItem, items_from_rows, read_items
from agent.offline.run import EvalResults, JudgeBroken, OfflineRun, UnknownMetric, choose_metrics
from agent.offline.summary import MetricComparison, MetricSummary, compare, pair_results

__all__ = [
    "ConfigError",
    "EvalItem",
    "EvalResults",
    "GateCheck",
    "ItemResult",
    "JudgeBroken",
    "MetricComparison",
    "MetricSummary",
    "UnknownMetric",
    "aevaluate",
    "assert_not_worse",
    "assert_quality",
    "compare_results",
    "evaluate",
    "open_run",
]

Items = str | Path | Iterable[Mapping[str, Any] | EvalItem]


def open_run(settings: Settings, metrics: Sequence[str], k: int = 5) -> OfflineRun:
    """The judge the settings name (cache, redaction and instruments as in `ragpulse run`), its
    instruments on a registry nobody scrapes (offline there is no /metrics), ready to score."""
    from prometheus_client import CollectorRegistry

    from agent.build import build_judge
    from agent.telemetry import JudgeTelemetry

    registry = CollectorRegistry()
    judge = build_judge(settings, JudgeTelemetry(registry))
    return OfflineRun(
        judge,
        registry,
        metrics,
        criteria=settings.criteria,
        k=k,
        concurrency=settings.pipeline.eval_concurrency,
    )


def _load(items: Items) -> tuple[list[EvalItem], list[BadRow]]:
    """The usable items and the unusable rows (with their position, from 1, and the reason)."""
    if isinstance(items, str | Path):
        return read_items(Path(items))
    given = list(items)
    rows = [(n, row, None) for n, row in enumerate(given, start=1) if not isinstance(row, EvalItem)]
    from_rows, bad = items_from_rows(rows)
    by_line = {item.line: item for item in from_rows}
    ordered = [row if isinstance(row, EvalItem) else by_line[n] for n, row in enumerate(given, start=1)
               if isinstance(row, EvalItem) or n in by_line]  # fmt: skip
    return ordered, bad


def _settings(settings: Settings | None, config: str | Path | None, judge: str | None) -> Settings:
    if settings is not None:
        if judge or config:
            raise ValueError("give settings, or judge= and config=, not both")
        return settings
    from agent.build import check_settings

    loaded = load_settings(config_file=config, overrides={"judge_model": judge})
    check_settings(loaded)
    return loaded


def _prepare(
    items: Items, metrics: Sequence[str] | None, k: int, settings: Settings
) -> tuple[list[EvalItem], list[BadRow], list[str]]:
    loaded, bad = _load(items)
    for row in bad:  # attributed to the caller of evaluate / aevaluate
        warnings.warn(f"item {row.line} skipped: {row.reason}", stacklevel=3)
    if not loaded:
        raise ValueError("no usable item to evaluate")
    choice = choose_metrics(loaded, metrics, k, settings.judge.model, criteria=settings.criteria)
    if choice.off:  # as `ragpulse eval` says it on stderr
        off = ", ".join(s.metric for s in choice.off)
        warnings.warn(f"{choice.why()}; to score {off}: metrics={list(choice.every)}", stacklevel=3)
    return loaded, bad, list(choice.metrics)


async def _evaluate(
    loaded: list[EvalItem], bad: list[BadRow], metrics: list[str], k: int, settings: Settings
) -> EvalResults:
    run = open_run(settings, metrics, k)
    if settings.judge.checked_at_start:
        await run.check()
    return await run.score(loaded, bad)


async def aevaluate(
    items: Items,
    *,
    judge: str | None = None,
    metrics: Sequence[str] | None = None,
    k: int = 5,
    config: str | Path | None = None,
    settings: Settings | None = None,
) -> EvalResults:
    """`evaluate` for code already in an event loop (a notebook: `await aevaluate(items)`)."""
    resolved = _settings(settings, config, judge)
    loaded, bad, chosen = _prepare(items, metrics, k, resolved)
    return await _evaluate(loaded, bad, chosen, k, resolved)


def evaluate(
    items: Items,
    *,
    judge: str | None = None,
    metrics: Sequence[str] | None = None,
    k: int = 5,
    config: str | Path | None = None,
    settings: Settings | None = None,
) -> EvalResults:
    """Score `items` as `ragpulse eval` does and return the results.

    Args:
        items: a path to a set (JSONL, CSV, Parquet), or dicts in the eval JSONL format (RAGAS
            column names accepted), or `EvalItem`s. A dict that cannot be used is skipped with a
            warning and listed in `results.bad`, as the command lists a bad line.
        judge: the judge model (`lexical`, `embedding`, or a litellm model); default: the settings'.
        metrics: only these metrics (default: every metric whose inputs some item carries, less
            those the judge measures no better than chance, named in a warning: answer_relevancy
            with the local judges; docs/judges.md).
        k: the cut-off of the rank metrics.
        config: a YAML settings file, as `--config`; `RAGPULSE_*` variables apply either way.
        settings: settings already loaded (instead of `judge` and `config`).

    Raises:
        UnknownMetric: a name in `metrics` is not a metric (the message suggests one).
        JudgeBroken: the judge cannot work (its self-check failed), in one line.
        ConfigError: the settings are wrong (the message names the setting).
        ValueError: no usable item.
    """
    resolved = _settings(settings, config, judge)
    loaded, bad, chosen = _prepare(items, metrics, k, resolved)
    return asyncio.run(_evaluate(loaded, bad, chosen, k, resolved))


def quality_checks(results: EvalResults, *, on: str = MEAN, **thresholds: float) -> list[GateCheck]:
    """The gate's checks of `results`, passed ones included (their lines say by how much)."""
    if on not in (MEAN, CI_LOW):
        raise ValueError(f"on must be {MEAN!r} or {CI_LOW!r}, got {on!r}")
    if not thresholds:
        raise ValueError("name at least one metric and its threshold, e.g. faithfulness=0.8")
    wanted = [Threshold.parse(f"{metric}={minimum}", on) for metric, minimum in thresholds.items()]
    check_gate_metrics(wanted, [], k=results.k)
    return check_thresholds(results.summaries, wanted)


def assert_quality(results: EvalResults, *, on: str = MEAN, **thresholds: float) -> None:
    """Raise AssertionError, one line per failing metric (mean, 95% CI, threshold), unless every
    metric reaches its threshold: `assert_quality(results, faithfulness=0.8)`. `on="ci_low"`
    compares the lower bound of the 95% CI instead of the mean (stricter). A metric with no
    defined score fails."""
    checks = quality_checks(results, on=on, **thresholds)
    if not all(c.passed for c in checks):
        raise AssertionError(failure_message(checks))


def compare_results(a: EvalResults, b: EvalResults) -> list[MetricComparison]:
    """B compared with A on the items both scored, as `ragpulse eval A B --compare` does."""
    pairs, _ = pair_results(a.results, b.results)
    return compare(pairs, [m for m in b.metrics if m in a.metrics])


def assert_not_worse(a: EvalResults, b: EvalResults, *metrics: str) -> None:
    """Raise AssertionError when B is worse than A on any of `metrics` with the paired 95%
    interval of B − A excluding 0 (a worse mean within the noise passes)."""
    check_gate_metrics([], metrics, k=b.k)
    checks = check_comparisons(compare_results(a, b), metrics)
    if not all(c.passed for c in checks):
        raise AssertionError(failure_message(checks))
