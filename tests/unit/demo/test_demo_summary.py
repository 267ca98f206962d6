"""What the demo says at the end: each alarm timed from the start of the phase it fired in, and a
run too short to learn a baseline told as such, with a --duration that is long enough."""

from __future__ import annotations

import asyncio
import re
import time

from prometheus_client import CollectorRegistry

from agent.demo.run import phase_alarms, summary_line, too_short
from agent.demo.state import DemoState
from agent.demo.traffic import Phase, Schedule, TrafficModel
from agent.model import Chunk, MetricResult, RagInteraction
from agent.report.demo import demo_page
from agent.scoreboard import Scoreboard
from tests.support.pipeline import evaluated

# A real `ragpulse demo --duration 90` timeline (demo.json, lexical judge): the phases' starts and
# some of its alarms, one of which (context_relevancy on shipping) fired in the second phase.
PHASES = {0: 0.56, 1: 36.11, 2: 63.21}
ALARMS = {
    ("hr-assistant", "/api/leave", "context_precision"): 37.48,
    ("docs-search", "/api/install", "signal:retrieval_top_score"): 40.58,
    ("support-assistant", "/api/shipping", "context_relevancy"): 63.97,
    ("support-assistant", "/api/billing", "faithfulness"): 65.52,
}


def _state(
    board: Scoreboard | None = None,
    *,
    baseline_size: int = 150,
    window: int = 50,
    default_regression: bool = True,
) -> DemoState:
    board = board or Scoreboard(time.monotonic())
    return DemoState(CollectorRegistry(), board, Schedule(36.0, 63.0), 90.0, "lexical",
                     baseline_size=baseline_size, window=window,
                     default_regression=default_regression)  # fmt: skip


def test_each_alarm_is_timed_from_the_phase_it_fired_in() -> None:
    state = _state()
    state.phase_started.update(PHASES)
    state.detections.update(ALARMS)
    alarms = {
        (a["metric"], a["route"]): (a["phase"], round(a["after_phase_start"], 2)) for a in phase_alarms(state)
    }
    assert alarms == {
        ("context_precision", "/api/leave"): ("irrelevant chunks ranked first", 1.37),
        ("signal:retrieval_top_score", "/api/install"): ("irrelevant chunks ranked first", 4.47),
        ("context_relevancy", "/api/shipping"): ("missing facts", 0.76),
        # Not +29.4 s: faithfulness fell with the second step, injected at 63.2 s.
        ("faithfulness", "/api/billing"): ("missing facts", 2.31),
    }
    line = summary_line(state)
    assert line.endswith(
        "drift detected on 4 series; first alarms: 'irrelevant chunks ranked first' at 37.5s (+1.4s after it "
        "began), 'missing facts' at 64.0s (+0.8s after it began)"
    ), line
    data = {
        "judge": "lexical", "phases": {Phase(p).label: at for p, at in PHASES.items()},
        "regression_injected_at": PHASES[1], "detections": phase_alarms(state),
        "timeline": {"t": [1.0, 3.0], "faithfulness": [0.9, 0.9]},
    }  # fmt: skip
    page = demo_page(data, line)
    assert "+2.3" in page and "+29.4" not in page


def test_an_alarm_before_any_regression_is_a_false_alarm() -> None:
    state = _state()
    state.phase_started.update(PHASES)
    state.detections[("docs-search", "/api/install", "faithfulness")] = 20.0
    [alarm] = phase_alarms(state)
    assert alarm["phase"] == "healthy" and alarm["after_phase_start"] is None
    assert summary_line(state).endswith("first alarms: a false alarm at 20.0s")


def _scored_board(seconds: float, count: int) -> Scoreboard:
    """A board that scored `count` demo interactions (four routes, one metric) over `seconds`."""
    board = Scoreboard(time.monotonic() - seconds)
    model = TrafficModel(seed=5)
    for n in range(count):
        drawn = model.draw(Phase.HEALTHY)
        interaction = RagInteraction(
            f"{n:032x}", f"{n:016x}", drawn.question,
            tuple(Chunk(c.content, c.id, c.score) for c in drawn.chunks), drawn.response,
            drawn.service, drawn.route,
        )  # fmt: skip
        asyncio.run(
            board.export(evaluated(interaction, [MetricResult.ok("faithfulness", 0.9, judge="lexical")]))
        )
    return board


def test_a_run_too_short_to_learn_a_baseline_says_so_and_how_long_is_enough() -> None:
    board = _scored_board(seconds=15.0, count=600)  # 40 per second, about 10 per route
    state = _state(board, baseline_size=150, window=50)
    state.phase_started.update({0: 0.5, 1: 6.0})
    counts = board.scores_per_series()
    assert len(counts) == 4 and sum(counts.values()) == 600
    state.scores_at_injection = {key: n * 6 // 15 for key, n in counts.items()}  # what 6 s had scored
    fewest = min(state.scores_at_injection.values())
    line = summary_line(state)
    match = re.search(
        r"no drift detected: the regression came at 6\.0s, before the drift detector had learnt its baseline "
        rf"\(150 scores of each service, route and metric; the fewest had {fewest}\); "
        r"--duration (\d+) or more gives it time$",
        line,
    )
    assert match, line
    duration = int(match[1])
    # Enough at the slowest series' rate: its baseline complete before the regression (at 40%),
    # and a window of regressed scores after it.
    per_second = min(counts.values()) / 15.0
    assert 0.4 * duration * per_second >= 150 and 0.6 * duration * per_second >= 50
    assert duration < 120  # and not absurdly long: ~60 s at this rate


def test_with_its_own_regression_time_it_names_a_later_one() -> None:
    board = _scored_board(seconds=15.0, count=600)
    state = _state(board, baseline_size=150, window=50, default_regression=False)
    state.phase_started.update({0: 0.5, 1: 5.0})
    state.scores_at_injection = dict.fromkeys(board.scores_per_series(), 40)
    message = too_short(state)
    assert message is not None
    match = re.search(
        r"--regress-after (\d+) or later gives it time, with --duration (\d+) or more$", message
    )
    assert match, message
    per_second = min(board.scores_per_series().values()) / 15.0
    assert int(match[1]) * per_second >= 150 and (int(match[2]) - int(match[1])) * per_second >= 50


def test_a_baseline_learnt_before_the_regression_needs_no_excuse() -> None:
    board = _scored_board(seconds=15.0, count=600)
    state = _state(board, baseline_size=100, window=50)
    state.phase_started.update({0: 0.5, 1: 14.0})
    state.scores_at_injection = board.scores_per_series()  # every series has 100 or more
    assert min(state.scores_at_injection.values()) >= 100
    assert too_short(state) is None
    assert summary_line(state).endswith("; no drift detected")
