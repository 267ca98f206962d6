"""Signals on every interaction: what they cost on the hot path, and how much sooner they see a
retrieval regression than judged scores at 1% and 10% sampling.

Traffic is the demo's (agent/demo/traffic.py, one route): healthy, then the broken retriever deploy
of its first regression step (passages of other topics ranked first, and a retriever that scores
lower). The signals go through the agent's SignalRecorder with its defaults; judged scores through
the agent's Evaluator with the built-in lexical judge (the embedded default) on a uniform sample,
into the agent's drift exporter (DriftAggregator) with its defaults. The delay is counted in
interactions of the route after the regression begins until the first drift alarm of any signal,
or of any judged metric. The healthy stretch is long enough for the judged baseline at 1% (1,000
judged scores per metric need 100,000 interactions).

    python benchmarks/signals.py [--trials 5] [--healthy 130000]
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from random import Random

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from agent.config import DriftSettings, SignalsSettings
from agent.demo.knowledge import ROUTES
from agent.demo.traffic import Phase, SyntheticInteraction, TrafficModel
from agent.evaluate import Evaluator
from agent.exporters.drift import DriftAggregator
from agent.judges.local import LexicalJudge
from agent.metrics import METRICS
from agent.model import Chunk, Evaluated, RagInteraction, SamplingDecision
from agent.signals import SignalRecorder
from agent.telemetry import DriftTelemetry, SignalsTelemetry
from benchmarks.harness import Benchmark, Column, line

STREAMING = ("context_precision", "context_relevancy", "faithfulness", "answer_relevancy")


def rag_interaction(drawn: SyntheticInteraction, n: int) -> RagInteraction:
    return RagInteraction(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        query=drawn.question,
        chunks=tuple(Chunk(c.content, c.id, c.score) for c in drawn.chunks),
        response=drawn.response,
        service=drawn.service,
        route=drawn.route,
        searches=1,
    )


def any_alarm(registry: CollectorRegistry, family: str) -> bool:
    for metric in registry.collect():
        if metric.name == family:
            return any(s.value == 1.0 for s in metric.samples)
    return False


async def trial(
    seed: int, healthy: int, limit: int, rates: tuple[float, ...], scenario: str
) -> dict[str, int | None]:
    """Interactions from the regression's start to the first alarm: signals, then judged at each
    rate. Scenarios: `ranking` (the demo's first regression step: other topics ranked first by a
    retriever that scores lower), `empty` (the index lost documents: 30% of retrievals come back
    empty, the rest stay healthy)."""
    model = TrafficModel(seed=seed, routes=ROUTES[:1])
    lost = Random(seed + 2)
    signals_registry = CollectorRegistry()
    signals = SignalRecorder(SignalsTelemetry(signals_registry), SignalsSettings())
    evaluator = Evaluator([METRICS[name]() for name in STREAMING], LexicalJudge())
    judged = {rate: CollectorRegistry() for rate in rates}
    aggregators = {rate: DriftAggregator(DriftTelemetry(judged[rate]), DriftSettings()) for rate in rates}
    delays: dict[str, int | None] = {"signals": None, **{f"judged {rate:.0%}": None for rate in rates}}
    # One uniform draw per interaction decides every rate (nested samples, as one sampler's would be).
    sampler = Random(seed + 1)
    for n in range(healthy + limit):
        regressed = n >= healthy
        phase = Phase.IRRELEVANT_FIRST if regressed and scenario == "ranking" else Phase.HEALTHY
        interaction = rag_interaction(model.draw(phase), n)
        if regressed and scenario == "empty" and lost.random() < 0.3:
            interaction = replace(interaction, chunks=())
        signals.record(interaction)
        draw = sampler.random()
        kept = [rate for rate in rates if draw < rate]
        if kept:
            evaluation = await evaluator.assess(interaction)
            for rate in kept:
                await aggregators[rate].export(
                    Evaluated(interaction, evaluation.results, SamplingDecision(True, "rate"))
                )
        if n < healthy:
            continue
        since = n - healthy + 1
        if delays["signals"] is None and any_alarm(signals_registry, "ragpulse_signal_drift_detected"):
            delays["signals"] = since
        for rate in kept:
            key = f"judged {rate:.0%}"
            if delays[key] is None and any_alarm(judged[rate], "ragpulse_drift_detected"):
                delays[key] = since
        if all(value is not None for value in delays.values()):
            break
    return delays


def cost(bench: Benchmark) -> None:
    """CPU time of SignalRecorder.record per interaction (demo interactions, 4 chunks)."""
    model = TrafficModel(seed=3)
    interactions = [rag_interaction(model.draw(Phase.HEALTHY), n) for n in range(20_000)]
    for label, per_second in (("overlap capped at 100/s (default)", 100.0), ("overlap on every one", 1e12)):
        recorder = SignalRecorder(
            SignalsTelemetry(CollectorRegistry()), SignalsSettings(overlap_per_second=per_second)
        )
        best = float("inf")
        for _ in range(3):
            start = time.thread_time()
            for interaction in interactions:
                recorder.record(interaction)
            best = min(best, (time.thread_time() - start) / len(interactions))
        line(f"SignalRecorder.record, {label}: {best * 1e6:5.1f} µs CPU per interaction")
        bench.record(f"record_us_{'capped' if per_second == 100.0 else 'every'}", round(best * 1e6, 2))


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.splitlines()[0], seed=31)
    bench.parser.add_argument("--trials", type=int, default=5)
    bench.parser.add_argument("--healthy", type=int, default=130_000, help="healthy interactions first")
    bench.parser.add_argument("--limit", type=int, default=60_000, help="regressed interactions at most")
    args = bench.parse()
    logging.getLogger("agent").setLevel(logging.ERROR)  # the alarms' own log lines
    cost(bench)
    for scenario in ("ranking", "empty"):
        line(f"\nscenario: {scenario}")
        delays(bench, args, scenario)
    bench.finish()


def delays(bench: Benchmark, args: object, scenario: str) -> None:
    rates = (0.10, 0.01)
    table = bench.table(
        f"detection_delay_{scenario}",
        [
            Column("trial", "trial", 5),
            Column("signals", "signals 100%", 13),
            *(Column(f"judged {r:.0%}", f"judged {r:.0%}", 11) for r in rates),
        ],
    )
    table.header()
    results = []
    for t in range(args.trials):  # type: ignore[attr-defined]
        found = asyncio.run(trial(args.seed + t, args.healthy, args.limit, rates, scenario))  # type: ignore[attr-defined]
        results.append(found)
        table.row(trial=t, **found)
    for key in results[0]:
        values = [value for r in results if (value := r[key]) is not None]
        missed = sum(1 for r in results if r[key] is None)
        median = statistics.median(values) if values else None
        bench.record(f"median_delay_{scenario}_{key.replace(' ', '_').replace('%', 'pct')}", median)
        line(
            f"{key:12s}: median {median if median is not None else 'n/a'} interactions after the "
            f"regression began (range {min(values) if values else 'n/a'}–{max(values) if values else 'n/a'}"
            f"{f'; not detected within {args.limit} in {missed} trial(s)' if missed else ''})"  # type: ignore[attr-defined]
        )


if __name__ == "__main__":
    main()
