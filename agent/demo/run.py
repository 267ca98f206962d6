"""`ragpulse demo` and `ragpulse demo-app`.

`demo`: the embedded agent (OTLP/HTTP receiver, local or configured judge, /metrics) plus the
synthetic RAG service sending it real OTLP over HTTP, a regression injected part-way, a live
view, and a report at the end. `demo-app`: the synthetic service alone, sending to any OTLP
endpoint (a Collector, or a ragpulse elsewhere).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent.config import Settings
from agent.demo.state import DemoState
from agent.demo.traffic import Phase, Schedule, SpanEmitter, TrafficModel
from agent.infra.stopping import stop_on_signals
from agent.pipeline import Agent
from agent.scoreboard import Scoreboard
from agent.server import MetricsServer
from agent.sources.otlp_http import http_receiver
from agent.telemetry import DemoTelemetry

log = logging.getLogger(__name__)

TICK_SECONDS = 0.1

# Drift settings for a demo that lasts a minute: the defaults learn a baseline from 1000 scores
# per series, minutes of traffic. Applied only to settings the user did not set.
DEMO_DRIFT = {"drift_baseline_size": 150, "drift_window": 50}


def demo_settings(settings: Settings) -> Settings:
    return settings.with_defaults(DEMO_DRIFT)


async def generate(
    emitter: SpanEmitter,
    model: TrafficModel,
    schedule: Schedule,
    rate: float,
    started: float,
    until: float | None,
    on_phase: Callable[[Phase], None] = lambda phase: None,
    time_scale: float = 1.0,
) -> int:
    """Emit `rate` interactions per second until `until` seconds after `started` (None: forever).

    Seconds are the demo's: with `time_scale` N its clock runs N times faster than the wall clock,
    so the same traffic (`rate` per demo second, the schedule) takes 1/N of the wall time."""
    sent = 0
    owed = 0.0
    phase = None
    last = time.monotonic()
    while True:
        now = time.monotonic()
        elapsed = (now - started) * time_scale
        if until is not None and elapsed >= until:
            return sent
        current = schedule.phase(elapsed)
        if current is not phase:
            phase = current
            on_phase(current)
        # Owed by the clock, not by ticks: a slow tick on a busy machine does not lower the rate.
        owed += rate * time_scale * (now - last)
        last = now
        while owed >= 1.0:
            emitter.emit(model.draw(current))
            sent += 1
            owed -= 1.0
        await asyncio.sleep(TICK_SECONDS)


# -- ragpulse demo-app -----------------------------------------------------------------------------


def run_demo_app(endpoint: str, rate: float, regress_after: float | None, missing_facts_after: float | None,
                 duration: float | None, seed: int) -> int:  # fmt: skip
    emitter = SpanEmitter(endpoint)
    schedule = Schedule(regress_after, missing_facts_after)

    async def main() -> int:
        stop = stop_on_signals()
        started = time.monotonic()

        def announce(phase: Phase) -> None:
            log.info("phase: %s", phase.label)

        task = asyncio.create_task(
            generate(emitter, TrafficModel(seed), schedule, rate, started, duration, announce)
        )
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not task.done():
            task.cancel()
        sent = await asyncio.gather(task, return_exceptions=True)
        return sent[0] if isinstance(sent[0], int) else 0

    log.info("sending synthetic RAG traces to %s at %.1f/s", emitter.traces_url, rate)
    sent = asyncio.run(main())
    emitter.flush()
    emitter.shutdown()
    log.info("sent %d interactions", sent)
    return 0


# -- ragpulse demo ---------------------------------------------------------------------------------


def run_demo(settings: Settings, *, duration: float | None, regress_after: float | None, rate: float,
             out_dir: Path, seed: int, live: bool | None = None, time_scale: float = 1.0) -> int:  # fmt: skip
    """Run the demo; returns the exit code. `live`: force the rich view on or off (None: when the
    output is a terminal). `time_scale`: demo seconds per wall-clock second; durations, `rate` (per
    demo second) and every time shown or reported are on the demo's clock, so a faster clock sends
    the same interactions, regression and report in less wall time (the drift detectors count
    scores, not seconds, and see the same story)."""
    from rich.console import Console

    from agent.build import build_agent, metric_choice

    settings = demo_settings(settings)
    console = Console(soft_wrap=True)
    use_live = console.is_terminal if live is None else live
    if use_live:
        from agent.report.live import log_above

        log_above(console)
    started = time.monotonic()
    regress_given = regress_after
    if regress_after is None and duration is not None:
        regress_after = round(duration * 0.4, 1)
    missing_after = None
    if regress_after is not None:
        end = duration if duration is not None else regress_after * 2
        missing_after = regress_after + max(5.0, (end - regress_after) / 2)
    schedule = Schedule(regress_after, missing_after)
    registry = CollectorRegistry()
    demo_telemetry = DemoTelemetry(registry)
    recorder = Scoreboard(started, time_scale=time_scale)
    agent = build_agent(settings, registry, observers=[recorder])
    choice = metric_choice(settings)
    state = DemoState(registry, recorder, schedule, duration, settings.judge.model,
                      choice.metrics, choice.describe(),
                      baseline_size=settings.drift.baseline_size, window=settings.drift.window,
                      default_regression=regress_given is None)  # fmt: skip

    def on_phase(phase: Phase) -> None:
        state.phase = phase
        state.phase_started.setdefault(int(phase), recorder.elapsed())
        if phase is Phase.IRRELEVANT_FIRST and state.scores_at_injection is None:
            state.scores_at_injection = recorder.scores_per_series()
        demo_telemetry.phase.set(int(phase))

    async def main() -> None:
        stop = stop_on_signals()
        await agent.start()
        # Where the agent listens now: the ports it bound, which differ from the settings' for a
        # port of 0 (any free port).
        receiver, metrics_url = listening(agent, settings)
        console.print(banner(metrics_url), highlight=False)
        # The demo's clock starts with the traffic, once the agent is up (an LLM judge's client
        # alone can take seconds to import): durations and the regression time count from here.
        started = time.monotonic()
        recorder.restart_clock(started)
        emitter = SpanEmitter(receiver)
        generator = asyncio.create_task(
            generate(emitter, TrafficModel(seed), schedule, rate, started, duration, on_phase, time_scale)
        )
        view = asyncio.create_task(_view(state, console, use_live, stop))
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({generator, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not generator.done():
            generator.cancel()
        await asyncio.gather(generator, return_exceptions=True)
        await asyncio.to_thread(emitter.flush)
        await asyncio.sleep(1.0)  # let the last batch be assembled and scored
        stop.set()
        await view
        await asyncio.to_thread(emitter.shutdown)
        await agent.shutdown()
        state.poll_drift()

    def banner(metrics_url: str) -> str:
        return (
            f"ragpulse demo: judge [bold]{settings.judge.model}[/], {rate:g} interactions/s, "
            + ("" if time_scale == 1 else f"demo clock {time_scale:g}x the wall clock, ")
            + f"/metrics on {metrics_url}/metrics, regression at "
            f"{'never' if regress_after is None else f'{regress_after:g}s'}"
            + ("" if duration is None else f", {duration:g}s in all (Ctrl-C ends it early)")
        )

    asyncio.run(main())
    # Worded once: the suggested --duration depends on the clock, and the report and the console
    # must say the same.
    summary = summary_line(state)
    paths = write_demo_report(state, out_dir, summary)
    console.print(summary, highlight=False)
    console.print(f"report: {paths[0]}  chart: {paths[1]}  data: {paths[2]}", highlight=False)
    return 0


def listening(agent: Agent, settings: Settings) -> tuple[str, str]:
    """The base URLs of the started agent's OTLP/HTTP receiver and /metrics, with the ports they
    bound; the settings' addresses where the agent has no such listener."""
    receiver = http_receiver(agent.source)
    server = next((c for c in agent.components if isinstance(c, MetricsServer)), None)
    otlp_host, otlp_port = settings.otlp.address
    metrics_host, metrics_port = settings.server.address
    return (
        (receiver.url if receiver is not None else None) or f"http://{otlp_host}:{otlp_port}",
        (server.url if server is not None else None) or f"http://{metrics_host}:{metrics_port}",
    )


def summary_line(state: DemoState) -> str:
    first = state.recorder.first_score_at
    first_text = "no score" if first is None else f"first score after {first:.1f}s"
    if not state.detections:
        drift = "no drift detected" + (too_short(state) or "")
    else:
        # The first alarm of each phase, counted from that phase's own start (phase_alarms).
        firsts: dict[str, str] = {}
        for alarm in phase_alarms(state):
            after = alarm["after_phase_start"]
            firsts.setdefault(
                alarm["phase"],
                f"a false alarm at {alarm['at']:.1f}s" if after is None
                else f"'{alarm['phase']}' at {alarm['at']:.1f}s ({after:+.1f}s after it began)",
            )  # fmt: skip
        drift = f"drift detected on {len(state.detections)} series; first alarms: " + ", ".join(
            firsts.values()
        )
    return f"{first_text}; {state.recorder.scored} interactions scored; {drift}"


def phase_alarms(state: DemoState) -> list[dict[str, Any]]:
    """Each drift alarm, oldest first, with the traffic phase it fired in (the latest started by
    then) and the seconds since that phase began: a later step of the regression is timed from
    its own injection, not from the first. An alarm in the healthy phase has no delay (a false alarm)."""
    started = sorted((at, Phase(p)) for p, at in state.phase_started.items())
    alarms = []
    for (service, route, metric), at in sorted(state.detections.items(), key=lambda kv: kv[1]):
        began, phase = max(((t, p) for t, p in started if t <= at), default=(0.0, Phase.HEALTHY))
        regressed = phase is not Phase.HEALTHY
        alarms.append({
            "service": service, "route": route, "metric": metric, "at": at, "phase": phase.label,
            "after_phase_start": at - began if regressed else None,
        })  # fmt: skip
    return alarms


def too_short(state: DemoState) -> str | None:
    """Why the drift detector could not fire, when the regression came before it had learnt its
    baseline (`drift_baseline_size` scores of each service, route and metric), with the
    --duration that gives it time at the rate series were scored in this run; None otherwise."""
    injected = state.phase_started.get(int(Phase.IRRELEVANT_FIRST))
    at_injection = state.scores_at_injection
    if injected is None or at_injection is None:
        return None
    final = {key: n for key, n in state.board.scores_per_series().items() if not key[2].startswith("signal:")}
    fewest = min((at_injection.get(key, 0) for key in final), default=0)
    need = state.baseline_size
    if fewest >= need:
        return None
    said = (
        f": the regression came at {injected:.1f}s, before the drift detector had learnt its baseline "
        f"({need} scores of each service, route and metric; the fewest had {fewest})"
    )
    elapsed = state.board.elapsed()
    if not final or elapsed <= 0 or min(final.values()) == 0:
        return said
    # The slowest series' scores per second; the regression after its baseline (+20% for chance),
    # then room for the window test's scores; a default regression comes at 40% of the duration.
    per_second = min(final.values()) / elapsed
    learnt = 1.2 * need / per_second
    detect = 1.2 * state.window / per_second
    if state.default_regression:
        duration = math.ceil(max(learnt / 0.4, detect / 0.6) / 10) * 10
        return f"{said}; --duration {duration} or more gives it time"
    regress = math.ceil(learnt / 5) * 5
    duration = regress + math.ceil(detect / 5) * 5
    return f"{said}; --regress-after {regress} or later gives it time, with --duration {duration} or more"


async def _view(state: DemoState, console: Any, live: bool, stop: asyncio.Event) -> None:
    from agent.demo.live import LiveView, PlainView
    from agent.report.live import show

    await show(LiveView(state, console) if live else PlainView(state, console), stop)


def demo_data(state: DemoState) -> dict[str, Any]:
    times, series = state.recorder.timeline()
    return {
        "judge": state.judge,
        "metrics": list(state.metrics),
        "metrics_note": state.metrics_note,
        "duration": state.duration,
        "time_scale": state.recorder.time_scale,
        "first_score_seconds": state.recorder.first_score_at,
        "interactions_scored": state.recorder.scored,
        "phases": {Phase(p).label: at for p, at in sorted(state.phase_started.items())},
        "regression_injected_at": state.phase_started.get(int(Phase.IRRELEVANT_FIRST)),
        "detections": phase_alarms(state),
        "bin_seconds": state.recorder.bin_seconds,
        "timeline": {"t": times, **series},
    }


def write_demo_report(state: DemoState, out_dir: Path, summary: str) -> tuple[Path, Path, Path]:
    from agent.report.demo import demo_page, demo_png

    out_dir.mkdir(parents=True, exist_ok=True)
    data = demo_data(state)
    data_path = out_dir / "demo.json"
    data_path.write_text(json.dumps(data, indent=2) + "\n")
    png_path = out_dir / "report.png"
    png_path.write_bytes(demo_png(data))
    html_path = out_dir / "report.html"
    html_path.write_text(demo_page(data, summary))
    return html_path, png_path, data_path
