"""The live terminal view of a running agent: a rich dashboard on a terminal, plain lines otherwise.

Shared by `ragpulse demo` (agent/demo/live.py adds its traffic phase) and `ragpulse run --live`.
It reads a `Watch`: the agent's registry (counters, drift alarms) and a Scoreboard (agent/scoreboard.py)
that the agent feeds with every scored interaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agent.scoreboard import Scoreboard, SeriesKey, drift_alarms, sample_total

_SPARK = "▁▂▃▄▅▆▇█"
PLAIN_EVERY_SECONDS = 5.0
# The scores column's narrowest: one `answer_relevancy=0.60` (the longest metric name) per line.
_SCORE_WIDTH = 22
_TRACE_ID_WIDTH = 32  # hex digits of a W3C trace id, shown whole to be searched for
_VERDICTS_WIDTH = 44  # `context_relevancy: #1 #2 #3 #4 not relevant` on one line


def _interaction_width(screen: int) -> int:
    """The width of the lowest-scored table's interaction cell on a screen `screen` columns wide: the
    trace id's, widened for the question (up to 12 more) only once the scores have room to show a
    failing verdict on one line. The rest goes to the scores."""
    beside = screen - 4 - 4 * 2 - 4 - 4  # the panel, the columns' padding, `at` and `mean`
    return _TRACE_ID_WIDTH + min(12, max(0, beside - _TRACE_ID_WIDTH - _VERDICTS_WIDTH))


def sparkline(values: list[float | None], width: int = 40) -> str:
    shown = values[-width:]
    return "".join(" " if v is None else _SPARK[min(7, max(0, int(v * 8)))] for v in shown)


@dataclass
class Watch:
    """What a live view reads: the agent's registry and its scoreboard; remembers when each drift
    alarm first fired (seconds on the board's clock). Means are over the last `mean_seconds`, the
    lowest-scored interactions among those of the last `lowest_seconds`."""

    registry: CollectorRegistry
    board: Scoreboard
    detections: dict[SeriesKey, float] = field(default_factory=dict, kw_only=True)
    mean_seconds: float = field(default=5.0, kw_only=True)
    lowest_seconds: float = field(default=30.0, kw_only=True)

    def counters(self) -> dict[str, float]:
        return {
            "spans": sample_total(self.registry, "ragpulse_spans_received_total"),
            "interactions": sample_total(self.registry, "ragpulse_interactions_total"),
            "sampled": sample_total(self.registry, "ragpulse_interactions_sampled_total"),
        }

    def poll_drift(self) -> list[SeriesKey]:
        firing = drift_alarms(self.registry)
        for key in firing:
            self.detections.setdefault(key, self.board.elapsed())
        return firing


class LiveView:
    """The rich dashboard: a header, the means per metric with their drift state, the drift
    events, and the lowest-scored recent interactions with their failing verdicts and trace ids."""

    def __init__(self, watch: Watch, console: Any, header: Callable[[], Text]) -> None:
        self._watch = watch
        self._header = header
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
        watch = self._watch
        board = watch.board
        _, series = board.timeline()
        recent = board.mean_since(watch.mean_seconds)
        scores = Table(expand=True, box=None)
        for column in (
            "metric",
            f"mean ({watch.mean_seconds:g} s)",
            f"over time ({board.bin_seconds:g} s bins)",
            "drift",
        ):
            scores.add_column(column)
        firing = set(watch.poll_drift())
        for metric in board.metrics():
            alarms = sum(1 for key in firing if key[2] == metric)
            drift = (
                Text(f"DRIFT on {alarms} series", style="bold red") if alarms else Text("ok", style="green")
            )
            mean = recent.get(metric)
            scores.add_row(
                metric, "—" if mean is None else f"{mean:.3f}", sparkline(series.get(metric, [])), drift
            )
        # Laid out for 80 columns and up: the scores get what is left beside the interaction,
        # wrapping between metrics, never inside one (_SCORE_WIDTH); the interaction's cell holds its
        # route, its whole trace id and its question, which alone is cut (ellipsis).
        lowest = Table(expand=True, box=None, title="lowest-scored recent interactions", title_justify="left")
        lowest.add_column("at", no_wrap=True)
        lowest.add_column("mean", no_wrap=True)
        lowest.add_column("route / trace id / question", no_wrap=True, overflow="ellipsis",
                          width=_interaction_width(self._live.console.width))  # fmt: skip
        lowest.add_column("scores / failing verdicts", overflow="fold", min_width=_SCORE_WIDTH, ratio=1)
        for scored in board.lowest(seconds=watch.lowest_seconds):
            shown = " ".join(f"{m}={v:.2f}" for m, v in sorted(scored.scores.items()))
            verdicts = "\n".join(scored.failing)
            lowest.add_row(
                f"{scored.at:.0f}s", f"{scored.mean:.2f}",
                f"{scored.service} {scored.route}\n{scored.trace_id}\n{scored.query}",
                shown + ("\n" + verdicts if verdicts else ""),
            )  # fmt: skip
        events = Text()
        for (service, route, metric), at in sorted(watch.detections.items(), key=lambda kv: kv[1]):
            events.append(f"{at:5.1f}s  drift detected: {metric} on {service} {route}\n", style="red")
        parts: list[Any] = [Panel(self._header()), Panel(scores, title="scores")]
        if events:
            parts.append(Panel(events, title="drift detector"))
        parts.append(Panel(lowest))
        return Group(*parts)


class PlainView:
    """One line every few seconds while traffic flows, one per drift alarm and one per new
    low-scored interaction (mean below 0.5): for logs, pipes and CI. `status` starts the periodic
    line (e.g. the demo's phase)."""

    def __init__(self, watch: Watch, console: Any, status: Callable[[], str] = lambda: "") -> None:
        self._watch = watch
        self._console = console
        self._status = status
        self._last = float("-inf")
        self._announced: set[SeriesKey] = set()
        self._listed: set[tuple[str, float]] = set()
        self._seen: tuple[float, ...] = ()

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.refresh(force=True)

    def print(self, line: str) -> None:
        self._console.print(line, highlight=False, markup=False, soft_wrap=True)

    def refresh(self, force: bool = False) -> None:
        watch = self._watch
        board = watch.board
        elapsed = board.elapsed()
        watch.poll_drift()
        for key, at in sorted(watch.detections.items(), key=lambda kv: kv[1]):
            if key not in self._announced:
                self._announced.add(key)
                self.print(f"{at:6.1f}s DRIFT detected: {key[2]} on service={key[0]} route={key[1]}")
        if not force and elapsed - self._last < PLAIN_EVERY_SECONDS:
            return
        self._last = elapsed
        counts = watch.counters()
        seen = (*counts.values(), board.scored)
        if not force and seen == self._seen:
            return  # quiet while idle: nothing arrived since the last line
        self._seen = seen
        means = " ".join(f"{m}={v:.3f}" for m, v in sorted(board.mean_since(watch.mean_seconds).items()))
        self.print(
            f"{elapsed:6.1f}s {self._status()}spans={counts['spans']:.0f} "
            f"interactions={counts['interactions']:.0f} sampled={counts['sampled']:.0f} "
            f"scored={board.scored} {means} drift_series={len(watch.detections)}"
        )
        for scored in board.lowest(n=3, seconds=watch.lowest_seconds):
            listed = (scored.trace_id, scored.at)
            if listed in self._listed or scored.mean >= 0.5:
                continue
            self._listed.add(listed)
            if len(self._listed) > 1000:  # bounded: forget what left the board's recent window
                self._listed = {seen for seen in self._listed if seen[1] >= elapsed - 60.0}
            self.print(
                f"{scored.at:6.1f}s low score: trace_id={scored.trace_id} service={scored.service} "
                f"mean={scored.mean:.2f} "
                + " ".join(f"{m}={v:.2f}" for m, v in sorted(scored.scores.items()))
                + "".join(f" [{phrase}]" for phrase in scored.failing)
                + f" question={scored.query!r}"
            )


def log_above(console: Any) -> None:
    """Print log lines (drift alarms, warnings) above a live view instead of tearing it."""
    import logging

    from rich.logging import RichHandler

    root = logging.getLogger()
    level = root.level
    root.handlers[:] = [RichHandler(console=console, show_path=False)]
    root.setLevel(level)


async def show(view: LiveView | PlainView, stop: asyncio.Event, every: float = 0.5) -> None:
    """Refresh `view` every `every` seconds until `stop` is set, then once more."""
    with view:
        while not stop.is_set():
            view.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
        view.refresh()
