"""`ragpulse run --live`: the demo's live view (agent/report/live.py) over the running agent.

On a terminal, a dashboard refreshed four times a second: the means per metric with their drift
state, and the lowest-scored recent interactions with their scores, failing verdicts, trace id
and question. Anywhere else (a pipe, a log file), plain lines: a status line every few seconds,
one per drift alarm and one per new low-scored interaction.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.text import Text

from agent.config import Settings
from agent.report.live import LiveView, PlainView, Watch, log_above, show
from agent.scoreboard import Scoreboard

BIN_SECONDS = 10.0  # the sparkline's bins: 40 of them show the last few minutes
MEAN_SECONDS = 60.0  # production traffic is sparser than the demo's: means over a minute
LOWEST_SECONDS = 600.0  # the worst interactions of the last ten minutes


class LiveRun:
    """The scoreboard the agent feeds (give `board` to build_agent's observers) and its view."""

    def __init__(
        self, settings: Settings, registry: CollectorRegistry, *, terminal: bool | None = None
    ) -> None:
        self.console = Console(soft_wrap=True)
        self.terminal = self.console.is_terminal if terminal is None else terminal
        self.board = Scoreboard(time.monotonic(), bin_seconds=BIN_SECONDS, recent=settings.activity.recent)
        self.watch = Watch(registry, self.board, mean_seconds=MEAN_SECONDS, lowest_seconds=LOWEST_SECONDS)
        self._settings = settings
        if self.terminal:
            log_above(self.console)

    def _header(self) -> Text:
        settings, board = self._settings, self.board
        counts = self.watch.counters()
        if settings.source == "kafka":
            intake = f"kafka {settings.kafka.topic}"
        else:
            host, port = settings.otlp.address
            intake = f"otlp-http {host}:{port}"
        return Text.assemble(
            ("ragpulse run  ", "bold"),
            f"up {board.elapsed():6.0f}s   intake: {intake}   judge: {settings.judge.model}\n",
            f"spans in {counts['spans']:.0f}   interactions {counts['interactions']:.0f}   "
            f"sampled {counts['sampled']:.0f}   scored {board.scored}",
        )

    async def show(self, stop: asyncio.Event) -> None:
        view = (
            LiveView(self.watch, self.console, self._header)
            if self.terminal
            else PlainView(self.watch, self.console)
        )
        await show(view, stop)
