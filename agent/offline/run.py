"""One offline evaluation run: a judge, the metrics chosen, and sets scored into `EvalResults`.

`ragpulse eval` and the Python API (`agent.quality`) both score through `OfflineRun.score`, so
a set gives the same per-item scores, summary and judge usage either way; `EvalResults.rows()`
and `EvalResults.summary_document()` are what `results.jsonl` and `summary.json` hold. Building
the judge from the settings is the callers' part (they are the ones that read the settings).
"""

from __future__ import annotations

import asyncio
import difflib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.judges import standing
from agent.judges.base import Judge
from agent.judges.standing import MetricChoice
from agent.model import Criterion
from agent.offline.evaluate import ItemResult, OfflineEvaluator, all_metric_names, available_metrics
from agent.offline.records import BadRow, EvalItem
from agent.offline.summary import JudgeUsage, MetricSummary, summarise, summary_document, weakest_document


class JudgeBroken(Exception):
    """The judge's self-check failed: nothing can be scored (the message is the one line)."""


class UnknownMetric(ValueError):
    """A metric name ragpulse does not know; the message is one line with a suggestion."""


def unknown_metric_line(name: str, known: Sequence[str], what: str = "metric") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"choose from {', '.join(known)}"
    return f"unknown {what} {name!r}: {hint}"


def check_metric_names(
    names: Iterable[str], k: int, what: str = "metric", criteria: Sequence[Criterion] = ()
) -> None:
    """Raises UnknownMetric for the first name that is not a metric of `ragpulse eval` (nor one
    of the custom `criteria`)."""
    known = all_metric_names(k, criteria)
    for name in names:
        if name not in known:
            raise UnknownMetric(unknown_metric_line(name, known, what))


def choose_metrics(
    items: Sequence[EvalItem],
    wanted: Sequence[str] | None,
    k: int,
    judge_model: str = "",
    keep: Sequence[str] = (),
    criteria: Sequence[Criterion] = (),
) -> MetricChoice:
    """The metrics to score: `wanted` (checked, those no item has inputs for left out unless
    none is left), or every metric whose inputs some item carries (custom `criteria` included)
    less those the judge `judge_model` measures at chance or worse (the agent's rule,
    agent/judges/standing.py), save those in `keep` (a gate names them)."""
    available = available_metrics(items, k, criteria)
    if not wanted:
        return standing.choose_metrics(judge_model, None, available, keep)
    check_metric_names(wanted, k, criteria=criteria)
    return standing.choose_metrics(judge_model, [m for m in wanted if m in available] or list(wanted), ())


@dataclass(frozen=True)
class EvalResults:
    """What an evaluation of one set gives: per item (`results`, in input order, and the rows
    that could not be used, `bad`), per metric (`summaries`: mean, count, 95% CI), and what the
    judge was asked (`usage`)."""

    items: tuple[EvalItem, ...]
    bad: tuple[BadRow, ...]
    results: tuple[ItemResult, ...]
    summaries: tuple[MetricSummary, ...]
    usage: JudgeUsage
    judge: str
    metrics: tuple[str, ...]
    k: int = 5  # the rank metrics' cut-off

    def summary(self, metric: str) -> MetricSummary | None:
        return next((s for s in self.summaries if s.metric == metric), None)

    def mean(self, metric: str) -> float | None:
        found = self.summary(metric)
        return None if found is None else found.mean

    def rows(self) -> list[dict[str, Any]]:
        """`results.jsonl`: one object per input line, in input order (a skipped line says why)."""
        rows: list[tuple[int, dict[str, Any]]] = []
        for r in self.results:
            row: dict[str, Any] = {"id": r.item.id, "line": r.item.line}
            row.update({m: _json_value(r.scores.get(m)) for m in self.metrics})
            if r.errors:
                row["errors"] = dict(r.errors)
            rows.append((r.item.line, row))
        for b in self.bad:
            rows.append((b.line, {"id": str(b.line), "line": b.line, "skipped": b.reason}))
        return [row for _, row in sorted(rows, key=lambda pair: pair[0])]

    def summary_document(self, source: str) -> dict[str, Any]:
        """`summary.json` of this set read from `source`."""
        return summary_document(
            self.summaries, items=len(self.items), bad_lines=len(self.bad), judge=self.judge,
            source=source,
            extra={
                "judge_usage": self.usage.as_json(),
                "weakest": weakest_document(self.results, self.metrics, self.judge),
            },
        )  # fmt: skip


def _json_value(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 6)


class OfflineRun:
    """A judge and the metrics to score with it; `score` evaluates one set at a time, and the
    judge usage of each set is its share of the judge's instruments on `registry`."""

    def __init__(
        self,
        judge: Judge,
        registry: Any,
        metrics: Sequence[str],
        *,
        criteria: Sequence[Criterion] = (),
        k: int = 5,
        concurrency: int = 32,
    ) -> None:
        self.judge = judge
        self._registry = registry
        self.metrics = tuple(metrics)
        self.k = k
        self._evaluator = OfflineEvaluator(
            judge, self.metrics, criteria=criteria, k=k, concurrency=concurrency
        )

    async def check(self) -> None:
        """The LLM judge's self-check: raises JudgeBroken with its one line when it cannot work."""
        from agent.judges.llm import judge_problem

        line = await judge_problem(self.judge)
        if line is not None:
            raise JudgeBroken(line)

    async def score(
        self,
        items: Sequence[EvalItem],
        bad: Sequence[BadRow] = (),
        on_result: Callable[[ItemResult], None] | None = None,
    ) -> EvalResults:
        """Score every item concurrently; `on_result` is called as each one is done (progress)."""
        before = judge_usage(self._registry)
        done: dict[str, ItemResult] = {}
        for next_done in asyncio.as_completed([self._evaluator.score(item) for item in items]):
            result = await next_done
            done[result.item.id] = result
            if on_result is not None:
                on_result(result)
        results = tuple(done[item.id] for item in items)
        return EvalResults(
            items=tuple(items),
            bad=tuple(bad),
            results=results,
            summaries=tuple(summarise(results, self.metrics)),
            usage=judge_usage(self._registry).minus(before),
            judge=self.judge.model,
            metrics=self.metrics,
            k=self.k,
        )


def judge_usage(registry: Any) -> JudgeUsage:
    """The judge's totals so far, from its instruments (ragpulse_judge_* on `registry`)."""

    def total(name: str, **labels: str) -> float:
        found = 0.0
        for family in registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    found += sample.value
        return found

    calls = total("ragpulse_judge_requests_total")
    refused = total("ragpulse_judge_requests_total", outcome="refused")
    return JudgeUsage(
        calls=int(calls - refused),
        failed=int(total("ragpulse_judge_requests_total", outcome="error")),
        prompt_tokens=int(total("ragpulse_judge_tokens_total", kind="prompt")),
        completion_tokens=int(total("ragpulse_judge_tokens_total", kind="completion")),
        cost_usd=total("ragpulse_judge_cost_usd_total"),
        unpriced_calls=int(total("ragpulse_judge_unpriced_calls_total")),
    )
