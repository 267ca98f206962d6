"""`ragpulse probe [--schedule]`: send the golden set through the live app (docs/probes.md).

Once by default (a Kubernetes CronJob); `--schedule` runs a round every probes_interval_seconds
(one sidecar). Either way exactly one runner sends each round: run one CronJob or one sidecar,
not one per agent replica. The results are the agent's: it scores the probe traces.

SIGTERM or SIGINT stops either cleanly: the requests in flight finish, no more are sent, every
span is exported, and a scheduled prober exits 0. Exit statuses: 0, 1 when every request of a
single round failed, 5 when an LLM judge is configured and its self-check fails (nothing sent).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.config import ConfigError, ProbeEndpoint, ProbeSettings, Settings
from agent.infra.stopping import stop_on_signals, stopped_within
from agent.probes.prober import GoldenItem, Prober, Round

log = logging.getLogger("ragpulse.probe")

# Exit statuses (docs/probes.md): 1 when every request of a single round failed; 5 when the judge
# configured for the agent cannot work (its self-check failed), before any request.
ALL_FAILED, JUDGE_BROKEN = 1, 5


def register(
    commands: Any, with_settings: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    parser = with_settings(
        commands.add_parser(
            "probe",
            help="send the golden set through the live app; the agent scores the traces",
            description="Ask each golden question (probes_golden_set) of each endpoint "
            "(probes_endpoints) over HTTP, in a trace the agent recognises and scores against "
            "the reference. Runs one round, or one every probes_interval_seconds with --schedule.",
        )
    )
    parser.add_argument("--schedule", action="store_true", help="keep running, a round per interval")
    parser.add_argument("--golden", metavar="FILE", help="golden set (as probes_golden_set)")
    parser.add_argument(
        "--endpoint", metavar="URL", help="one endpoint with the default body and answer path"
    )
    parser.set_defaults(handler=_main)


def golden_items(path: Path) -> list[GoldenItem]:
    """The golden set, read as `ragpulse eval` reads its input."""
    from agent.offline.records import InputError, read_items

    try:
        items, bad = read_items(path)
    except (OSError, InputError) as exc:
        raise ConfigError(f"probes_golden_set: cannot read {path}: {exc}") from None
    if bad:
        raise ConfigError(f"probes_golden_set: {path} line {bad[0].line}: {bad[0].reason}")
    return [
        GoldenItem(item.id, item.question, item.reference, item.relevant_ids)
        for item in items
        if item.question
    ]


def prober_config(settings: Settings, endpoint_url: str | None = None) -> ProbeSettings:
    """The probes section, its endpoints replaced by `--endpoint URL` when given."""
    probes = settings.probes
    if endpoint_url:
        try:
            endpoint = ProbeEndpoint(url=endpoint_url)
        except ValueError as exc:  # pydantic's ValidationError
            raise ConfigError(f"--endpoint {endpoint_url}: expected an http:// or https:// URL") from exc
        probes = probes.model_copy(update={"endpoints": (endpoint,)})
    if not probes.endpoints:
        raise ConfigError("probes_endpoints (env RAGPULSE_PROBES_ENDPOINTS): no endpoint to probe")
    return probes


def tracer_provider(endpoint: str) -> Any:
    """An SDK tracer provider exporting over OTLP/HTTP. Its resource is the prober's own, never
    tagged as ragpulse's (the agent skips its own telemetry, and must not skip this)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url = endpoint.rstrip("/")
    url = url if url.endswith("/v1/traces") else f"{url}/v1/traces"
    provider = TracerProvider(resource=Resource({"service.name": "ragpulse-prober"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return provider


def summary(settings: Settings, result: Round) -> str:
    failures = result.failures
    failed = sum(failures.values())
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(failures.items()))
    stopped = f"; stopped, {result.unsent} not sent" if result.unsent else ""
    # no_answer: where the answer was looked for and what the response held, per endpoint.
    hints = "".join(f"\n  no_answer on {endpoint}: {hint}" for endpoint, hint in result.hints().items())
    return (
        f"probe round of {settings.probes.set_name}: {len(result.outcomes)} request(s), "
        f"{failed} failed{f' ({reasons})' if reasons else ''}{stopped}{hints}"
    )


async def _judge_problem(settings: Settings) -> str | None:
    """The configured judge's self-check: None, or the one line that says why it cannot work."""
    from prometheus_client import CollectorRegistry

    from agent.build import build_judge
    from agent.judges.llm import judge_problem
    from agent.telemetry import JudgeTelemetry

    return await judge_problem(build_judge(settings, JudgeTelemetry(CollectorRegistry()), cached=False))


def _main(args: argparse.Namespace, settings: Settings) -> int:
    golden = args.golden or settings.probes.golden_set
    if not golden:
        raise ConfigError("probes_golden_set (env RAGPULSE_PROBES_GOLDEN_SET): no golden set given")
    items = golden_items(Path(golden))
    config = prober_config(settings, args.endpoint)
    if settings.judge.checked_at_start:
        # The agent judges the probes' traces; a judge that cannot work would score none of them.
        line = asyncio.run(_judge_problem(settings))
        if line is not None:
            print(f"ragpulse probe: {line}; no probe sent", flush=True)
            return JUDGE_BROKEN
    provider = tracer_provider(settings.probes.otlp_endpoint)
    prober = Prober(config, provider.get_tracer("ragpulse.probe"))
    try:
        return asyncio.run(_rounds(prober, provider, items, settings, schedule=args.schedule))
    finally:
        provider.shutdown()  # exports what is still queued: no span of a sent request is lost


async def _rounds(
    prober: Prober, provider: Any, items: Sequence[GoldenItem], settings: Settings, *, schedule: bool
) -> int:
    """One round, or with `schedule` a round every interval until SIGTERM or SIGINT: a round under
    way then finishes the requests in flight and sends no more (agent/infra/stopping.py)."""
    stop = stop_on_signals()
    while True:
        started = time.monotonic()
        result = await prober.round(items, stop)
        # The spans are out before the round is reported done.
        await asyncio.to_thread(provider.force_flush)
        print(summary(settings, result), flush=True)
        if not schedule:
            # Every request failed (or none was sent): the CronJob reports the failure too.
            return ALL_FAILED if all(o.failure for o in result.outcomes) else 0
        if stop.is_set() or await stopped_within(
            stop, settings.probes.interval_seconds - (time.monotonic() - started)
        ):
            return 0
