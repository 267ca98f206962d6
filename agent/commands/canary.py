"""`ragpulse canary [--accept] [--schedule]`: re-judge the frozen labelled set (docs/probes.md).

The configured judge scores the frozen items again without the verdict cache; agreement with the
human labels and the mean shift against the last accepted run are exported as
ragpulse_canary_* gauges (served with --schedule, pushed with --pushgateway) and kept in
canary_state_file. Exit statuses (docs/probes.md): 0 the judge has not moved (or this run was
accepted); 1 the judge failed on a labelled item (the run is incomplete: nothing saved or pushed);
3 the judge moved; 4 the frozen set changed since the accepted run (nothing judged: accept the
new set with --accept); 5 the judge cannot work (its self-check failed). A CronJob shows each.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.config import ConfigError, Settings
from agent.infra.listening import listen_error
from agent.infra.stopping import stop_on_signals, stopped_within, unless_stopped
from agent.probes.canary import Comparison, MetricRun, record

# Exit statuses: a CronJob shows a moved judge, and a run the judge could not finish, as failed.
OK, INCOMPLETE, MOVED, SET_CHANGED, JUDGE_BROKEN = 0, 1, 3, 4, 5


def register(
    commands: Any, with_settings: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    parser = with_settings(
        commands.add_parser(
            "canary",
            help="re-judge a frozen human-labelled set: has the judge moved?",
            description="Score canary_items_file with the configured judge (no verdict cache), "
            "compare agreement with canary_labels_file and the mean with the last accepted run.",
        )
    )
    parser.add_argument("--accept", action="store_true", help="make this run the accepted reference")
    parser.add_argument(
        "--schedule", action="store_true", help="keep running, a run per canary_interval_seconds"
    )
    parser.add_argument("--pushgateway", metavar="URL", help="push the gauges to a Prometheus Pushgateway")
    parser.set_defaults(handler=_main)


@dataclass(frozen=True)
class CanaryRun:
    """What one run found: the exit status, and for a complete run its gauges' inputs."""

    status: int  # OK, MOVED, INCOMPLETE, SET_CHANGED or JUDGE_BROKEN
    runs: Mapping[str, MetricRun] = field(default_factory=dict)
    comparison: Comparison | None = None  # None when the run was incomplete


def _main(args: argparse.Namespace, settings: Settings) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    canary = settings.canary
    if not canary.items_file or not canary.labels_file:
        raise ConfigError("canary_items_file and canary_labels_file: both are needed for the canary")
    registry = CollectorRegistry()
    if args.schedule:
        host, port = settings.server.address
        try:
            start_http_server(port, host, registry=registry)
        except OSError as exc:  # a port taken: the operator's mistake, one line naming the setting
            raise listen_error("metrics_listen", host, port, exc) from None
    return asyncio.run(_runs(args, settings, registry))


async def _runs(args: argparse.Namespace, settings: Settings, registry: Any) -> int:
    """One run, or with --schedule one every canary_interval_seconds until SIGTERM or SIGINT
    (agent/infra/stopping.py). A run under way at the signal is abandoned: like an incomplete
    run, it compares, saves and pushes nothing. The scheduled canary then exits OK (its complete
    runs were its answers); a single run exits INCOMPLETE."""
    from prometheus_client import push_to_gateway

    from agent.telemetry import CanaryTelemetry, JudgeTelemetry

    judge_telemetry = JudgeTelemetry(registry)
    telemetry: CanaryTelemetry | None = None
    stop = stop_on_signals()
    while True:
        started = time.monotonic()
        result = await unless_stopped(stop, run_once(settings, judge_telemetry, accept=args.accept))
        if result is None:
            print("canary stopped: the run under way was abandoned; nothing compared or saved", flush=True)
            return OK if args.schedule else INCOMPLETE
        if result.comparison is not None:
            if telemetry is None:
                # Made at the first complete run: before it the gauges would read 0, a last run
                # at the epoch, which RagpulseJudgeCanaryStale would take for a canary days late.
                telemetry = CanaryTelemetry(registry)
            record(telemetry, result.runs, result.comparison, accepted=args.accept)
            # An incomplete run pushes nothing: a push replaces the job's series at the gateway,
            # and the last complete run's timestamp must stay there for the stale alert.
            if args.pushgateway:
                push_to_gateway(args.pushgateway, job="ragpulse-canary", registry=registry)
        if not args.schedule:
            return result.status
        if await stopped_within(stop, settings.canary.interval_seconds - (time.monotonic() - started)):
            return OK


async def run_once(settings: Settings, judge_telemetry: Any, *, accept: bool = False) -> CanaryRun:
    """One canary run, printed and kept in canary_state_file when complete. A judge error on any
    labelled item makes it incomplete: nothing is compared or saved (a mean over fewer items, or
    none, is no measure of the judge), and the run exits INCOMPLETE."""
    from agent.build import build_judge
    from agent.metrics import METRICS
    from agent.offline.evaluate import OfflineEvaluator
    from agent.offline.records import read_items
    from agent.probes.canary import CanaryState, compare, metric_run, set_fingerprint
    from agent.trust.labels import read_label_file

    canary = settings.canary
    items, bad = read_items(Path(str(canary.items_file)))
    if bad:
        raise ConfigError(f"canary_items_file: line {bad[0].line}: {bad[0].reason}")
    labels = read_label_file(Path(str(canary.labels_file))).labels
    judged = {*METRICS, *(c.name for c in settings.criteria)}
    metrics = sorted({label.metric for label in labels} & judged)
    if not metrics:
        raise ConfigError(f"canary_labels_file: no label names a judged metric ({sorted(judged)})")
    state = CanaryState(Path(canary.state_file))
    fingerprint = set_fingerprint(
        ({k: v for k, v in asdict(item).items() if k != "line"} for item in items),
        ((label.interaction_id, label.metric, label.value, label.weight) for label in labels),
    )
    accepted_set = state.accepted_fingerprint()
    if accepted_set is not None and accepted_set != fingerprint and not accept:
        print(
            f"canary: the frozen set changed (canary_items_file / canary_labels_file: fingerprint "
            f"{fingerprint}, accepted {accepted_set} in {state.path}): accept it with --accept; "
            "nothing judged or compared",
            flush=True,
        )
        return CanaryRun(SET_CHANGED)
    # No verdict cache: a cached verdict would hide a judge that changed.
    judge = build_judge(settings, judge_telemetry, cached=False)
    if settings.judge.checked_at_start:
        from agent.judges.llm import judge_problem

        line = await judge_problem(judge)
        if line is not None:
            print(f"canary: {line}; nothing judged or saved", flush=True)
            return CanaryRun(JUDGE_BROKEN)
    evaluator = OfflineEvaluator(judge, metrics, criteria=settings.criteria)
    results = await _score(evaluator, items)
    scores = {(r.item.id, metric): v for r in results for metric, v in r.scores.items() if v is not None}
    errors = {(r.item.id, metric) for r in results for metric in r.errors}
    failed = [label for label in labels if (label.interaction_id, label.metric) in errors]
    if failed:
        print(
            f"canary run incomplete: the judge failed on {len(failed)} of {len(labels)} labelled "
            f"item(s) (first: {failed[0].interaction_id} {failed[0].metric}); nothing compared or saved",
            flush=True,
        )
        return CanaryRun(INCOMPLETE)
    run = {}
    for metric in metrics:
        pairs = [(label.value, scores[(label.interaction_id, metric)]) for label in labels
                 if label.metric == metric and (label.interaction_id, metric) in scores]  # fmt: skip
        if pairs:
            run[metric] = metric_run(metric, [p[0] for p in pairs], [p[1] for p in pairs])
    if not run:
        raise ConfigError(
            "canary_labels_file: no labelled item was scored; do the labels' ids name items of "
            "canary_items_file, with the inputs their metric needs?"
        )
    accepted, _ = state.accepted()
    comparison = compare(run, accepted, canary)
    last = state.save(run, comparison, accept=accept, judge=settings.judge.model, fingerprint=fingerprint)
    for metric, result in run.items():
        print(
            f"canary {metric}: mean {result.mean:.3f} (shift {comparison.mean_shift.get(metric, 0.0):+.3f}), "
            f"auroc {_fmt(result.auroc)}, balanced accuracy {_fmt(result.balanced_accuracy)}",
            flush=True,
        )
    if accept or accepted is None:
        print(
            f"canary: {'accepted' if accept else 'first run, accepted'} as the reference "
            f"({len(items)} items, {len(labels)} labels, set fingerprint {fingerprint}, judge "
            f"{settings.judge.model}); state in {state.path}",
            flush=True,
        )
    if comparison.moved and not accept:
        since = last.get("possibly_judge_drift_since")
        when = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(since)))
            if isinstance(since, float)
            else "?"
        )
        print(f"judge moved: {'; '.join(comparison.reasons)}", flush=True)
        print(
            f"drift alarms since {when} (the last accepted run) may be the judge's, not the app's", flush=True
        )
        return CanaryRun(MOVED, run, comparison)
    return CanaryRun(OK, run, comparison)


async def _score(evaluator: Any, items: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*(evaluator.score(item) for item in items)))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
