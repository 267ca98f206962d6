"""The demo's terminal view: the agent's live view (agent/report/live.py) with the demo's traffic
phase in its header and its plain lines."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from agent.demo.state import DemoState
from agent.demo.traffic import Phase
from agent.report import live
from agent.report.live import sparkline

__all__ = ["LiveView", "PlainView", "sparkline"]


def _header(state: DemoState) -> Text:
    board = state.board
    counts = state.counters()
    phase_style = "green" if state.phase is Phase.HEALTHY else "bold red"
    return Text.assemble(
        ("ragpulse demo  ", "bold"),
        f"{board.elapsed():5.1f}s" + ("" if state.duration is None else f" / {state.duration:g}s"),
        "  traffic: ",
        (state.phase.label, phase_style),
        f"   judge: {state.judge}\n",
        f"spans in {counts['spans']:.0f}   interactions {counts['interactions']:.0f}   "
        f"sampled {counts['sampled']:.0f}   scored {board.scored}   first score "
        + ("—" if board.first_score_at is None else f"{board.first_score_at:.1f}s"),
    )


class LiveView(live.LiveView):
    def __init__(self, state: DemoState, console: Any) -> None:
        super().__init__(state, console, lambda: _header(state))


class PlainView(live.PlainView):
    """The agent's plain lines, plus one when the demo injects a regression."""

    def __init__(self, state: DemoState, console: Any) -> None:
        super().__init__(state, console, lambda: f"phase={state.phase.label!r} ")
        self._state = state
        self._phase = Phase.HEALTHY

    def refresh(self, force: bool = False) -> None:
        state = self._state
        if state.phase is not self._phase:
            self._phase = state.phase
            self.print(f"{state.board.elapsed():6.1f}s regression injected: {state.phase.label}")
        super().refresh(force)
