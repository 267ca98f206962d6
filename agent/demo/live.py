"""The demo's terminal view: a rich live dashboard on a terminal, plain lines otherwise."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agent.demo.traffic import Phase

if TYPE_CHECKING:
    from agent.demo.state import DemoState

_SPARK = "▁▂▃▄▅▆▇█"
PLAIN_EVERY_SECONDS = 5.0


def sparkline(values: list[float | None], width: int = 40) -> str:
    shown = values[-width:]
    return "".join(" " if v is None else _SPARK[min(7, max(0, int(v * 8)))] for v in shown)


def _counters(state: DemoState) -> dict[str, float]:
    return {
        "spans": state.sample_total("ragpulse_spans_received_total"),
        "interactions": state.sample_total("ragpulse_interactions_total"),
        "sampled": state.sample_total("ragpulse_interactions_sampled_total"),
    }


class LiveView:
    def __init__(self, state: DemoState, console: Any) -> None:
        self._state = state
        self._live = Live(console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._live.__exit__(kind, exc, tb)

    def refresh(self) -> None:
        self._live.update(self.render())

    def render(self) -> Group:
        state = self._state
        recorder = state.recorder
        elapsed = recorder.elapsed()
        counts = _counters(state)
        phase_style = "green" if state.phase is Phase.HEALTHY else "bold red"
        header = Text.assemble(
            ("ragpulse demo  ", "bold"),
            f"{elapsed:5.1f}s" + ("" if state.duration is None else f" / {state.duration:g}s"),
            "  traffic: ",
            (state.phase.label, phase_style),
            f"   judge: {state.judge}\n",
            f"spans in {counts['spans']:.0f}   interactions {counts['interactions']:.0f}   "
            f"sampled {counts['sampled']:.0f}   scored {recorder.scored}   first score "
            + ("—" if recorder.first_score_at is None else f"{recorder.first_score_at:.1f}s"),
        )
        _, series = recorder.timeline()
        recent = recorder.mean_since(5.0)
        scores = Table(expand=True, box=None)
        for column in ("metric", "mean (5 s)", f"over time ({recorder.bin_seconds:g} s bins)", "drift"):
            scores.add_column(column)
        firing = set(state.poll_drift())
        for metric in recorder.metrics():
            alarms = sum(1 for key in firing if key[2] == metric)
            drift = (
                Text(f"DRIFT on {alarms} series", style="bold red") if alarms else Text("ok", style="green")
            )
            mean = recent.get(metric)
            scores.add_row(
                metric, "—" if mean is None else f"{mean:.3f}", sparkline(series.get(metric, [])), drift
            )
        lowest = Table(expand=True, box=None, title="lowest-scored recent interactions", title_justify="left")
        for column in ("at", "service", "route", "mean", "lowest metric", "question"):
            lowest.add_column(column, overflow="ellipsis", no_wrap=column == "question")
        for scored in recorder.lowest():
            metric, value = scored.lowest
            mean = sum(scored.scores.values()) / len(scored.scores)
            lowest.add_row(
                f"{scored.at:.0f}s", scored.service, scored.route, f"{mean:.2f}", f"{metric} {value:.2f}",
                scored.query,
            )  # fmt: skip
        events = Text()
        for (service, route, metric), at in sorted(state.detections.items(), key=lambda kv: kv[1]):
            events.append(f"{at:5.1f}s  drift detected: {metric} on {service} {route}\n", style="red")
        parts: list[Any] = [Panel(header), Panel(scores, title="scores")]
        if events:
            parts.append(Panel(events, title="drift detector"))
        parts.append(Panel(lowest))
        return Group(*parts)


class PlainView:
    """One line every few seconds and one per drift alarm: for logs, pipes and CI."""

    def __init__(self, state: DemoState, console: Any) -> None:
        self._state = state
        self._console = console
        self._last = float("-inf")
        self._announced: set[tuple[str, str, str]] = set()
        self._phase = Phase.HEALTHY

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.refresh(force=True)

    def _print(self, line: str) -> None:
        self._console.print(line, highlight=False, markup=False, soft_wrap=True)

    def refresh(self, force: bool = False) -> None:
        state = self._state
        elapsed = state.recorder.elapsed()
        if state.phase is not self._phase:
            self._phase = state.phase
            self._print(f"{elapsed:6.1f}s regression injected: {state.phase.label}")
        for key, at in sorted(state.detections.items(), key=lambda kv: kv[1]):
            if key not in self._announced:
                self._announced.add(key)
                self._print(f"{at:6.1f}s DRIFT detected: {key[2]} on service={key[0]} route={key[1]}")
        if not force and elapsed - self._last < PLAIN_EVERY_SECONDS:
            return
        self._last = elapsed
        counts = _counters(state)
        means = " ".join(f"{m}={v:.3f}" for m, v in sorted(state.recorder.mean_since(5.0).items()))
        self._print(
            f"{elapsed:6.1f}s phase={state.phase.label!r} spans={counts['spans']:.0f} "
            f"interactions={counts['interactions']:.0f} sampled={counts['sampled']:.0f} "
            f"scored={state.recorder.scored} {means} drift_series={len(state.detections)}"
        )
