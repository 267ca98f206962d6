"""`ragpulse canary [--accept] [--schedule]`: re-judge the frozen labelled set (docs/probes.md).

The configured judge scores the frozen items again without the verdict cache; agreement with the
human labels and the mean shift against the last accepted run are exported as
ragpulse_canary_* gauges (served with --schedule, pushed with --pushgateway) and kept in
canary_state_file. Exit status 3 when the judge moved (a CronJob shows it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import ConfigError, Settings

MOVED = 3


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


def _main(args: argparse.Namespace, settings: Settings) -> int:
    from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server

    from agent.telemetry import CanaryTelemetry, JudgeTelemetry

    canary = settings.canary
    if not canary.items_file or not canary.labels_file:
        raise ConfigError("canary_items_file and canary_labels_file: both are needed for the canary")
    registry = CollectorRegistry()
    telemetry, judge_telemetry = CanaryTelemetry(registry), JudgeTelemetry(registry)
    if args.schedule:
        host, port = settings.server.address
        start_http_server(port, host, registry=registry)
    while True:
        started = time.monotonic()
        moved = run_once(settings, telemetry, judge_telemetry, accept=args.accept)
        if args.pushgateway:
            push_to_gateway(args.pushgateway, job="ragpulse-canary", registry=registry)
        if not args.schedule:
            return MOVED if moved else 0
        time.sleep(max(0.0, canary.interval_seconds - (time.monotonic() - started)))


def run_once(settings: Settings, telemetry: Any, judge_telemetry: Any, *, accept: bool = False) -> bool:
    """One canary run; True when the judge moved (and the run was not accepted)."""
    from agent.build import build_judge
    from agent.metrics import METRICS
    from agent.offline.evaluate import OfflineEvaluator
    from agent.offline.records import read_items
    from agent.probes.canary import CanaryConfig, CanaryState, compare, metric_run, record
    from agent.trust.labels import read_label_file

    canary = settings.canary
    items, bad = read_items(Path(str(canary.items_file)))
    if bad:
        raise ConfigError(f"canary_items_file: line {bad[0].line}: {bad[0].reason}")
    labels = read_label_file(Path(str(canary.labels_file))).labels
    metrics = sorted({label.metric for label in labels} & set(METRICS))
    if not metrics:
        raise ConfigError(f"canary_labels_file: no label names a judged metric ({sorted(METRICS)})")
    # No verdict cache: a cached verdict would hide a judge that changed.
    judge = build_judge(settings, judge_telemetry, cached=False)
    evaluator = OfflineEvaluator(judge, metrics)
    results = asyncio.run(_score(evaluator, items))
    scores = {(r.item.id, metric): v for r in results for metric, v in r.scores.items() if v is not None}
    run = {}
    for metric in metrics:
        pairs = [(label.value, scores[(label.interaction_id, metric)]) for label in labels
                 if label.metric == metric and (label.interaction_id, metric) in scores]  # fmt: skip
        if pairs:
            run[metric] = metric_run(metric, [p[0] for p in pairs], [p[1] for p in pairs])
    state = CanaryState(Path(canary.state_file))
    accepted, _ = state.accepted()
    comparison = compare(run, accepted, CanaryConfig(canary.max_mean_shift, canary.max_agreement_drop))
    last = state.save(run, comparison, accept=accept, judge=settings.judge.model)
    record(telemetry, run, comparison)
    for metric, result in run.items():
        print(
            f"canary {metric}: mean {result.mean:.3f} (shift {comparison.mean_shift.get(metric, 0.0):+.3f}), "
            f"auroc {_fmt(result.auroc)}, balanced accuracy {_fmt(result.balanced_accuracy)}",
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
        return True
    return False


async def _score(evaluator: Any, items: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*(evaluator.score(item) for item in items)))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
