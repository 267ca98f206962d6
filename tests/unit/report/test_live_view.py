"""The live view's lowest-scored table on a small terminal (80x24, the classic size): the scores
stay whole, one `metric=value` never split across lines, the trace id whole, and the question is
what gives way."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.text import Text

from agent.model import Chunk, MetricResult, RagInteraction
from agent.report.live import LiveView, Watch
from agent.scoreboard import Scoreboard
from tests.support.pipeline import evaluated

QUESTION = "How long does a refund for an annual plan take to reach the card it was paid with?"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SCORES = {"answer_relevancy": 0.61, "context_precision": 0.12, "context_relevancy": 0.05, "faithfulness": 0.3}


def _screen(width: int) -> list[str]:
    board = Scoreboard(time.monotonic() - 10)
    interaction = RagInteraction(
        TRACE_ID, "00f067aa0ba902b7", QUESTION, tuple(Chunk(f"passage {k}", f"c{k}") for k in range(4)),
        "Five to ten business days.", "support-assistant", "/api/billing",
    )  # fmt: skip
    results = [MetricResult.ok(name, value, judge="lexical") for name, value in SCORES.items()]
    results[2] = MetricResult.ok("context_relevancy", 0.05, judge="lexical", chunk_verdicts=(False,) * 4)
    asyncio.run(board.export(evaluated(interaction, results)))
    console = Console(width=width, height=24, color_system=None, force_terminal=False)
    view = LiveView(Watch(CollectorRegistry(), board), console, lambda: Text("header"))
    with console.capture() as captured:
        console.print(view.render())
    return captured.get().splitlines()


@pytest.mark.parametrize("width", [80, 100, 140])
def test_scores_stay_whole_and_the_question_gives_way(width: int) -> None:
    lines = _screen(width)
    assert all(len(line) <= width for line in lines)
    text = "\n".join(lines)
    for name, value in SCORES.items():
        assert f"{name}={value:.2f}" in text, text  # on one line, never folded inside
    assert TRACE_ID in text and "support-assistant /api/billing" in text
    # The verdicts behind the low score, read down the scores column, say what they said.
    row = next(i for i, line in enumerate(lines) if "answer_relevancy=" in line)
    column = lines[row].index("answer_relevancy=")
    below = " ".join(line[column:].strip(" │") for line in lines[row : row + 8])
    assert "context_relevancy: #1 #2 #3 #4 not relevant" in " ".join(below.split()), below
    # The question is shown from its start, cut with an ellipsis where the screen is narrow.
    shown = next(line for line in lines if "How long does" in line)
    if width < 120:
        assert QUESTION not in text and "…" in shown
    assert QUESTION[:25] in shown


def test_at_80_columns_the_scores_have_more_than_their_narrowest() -> None:
    """The question yields first: at 80 columns the scores' column is wider than one
    `answer_relevancy=0.61`, so two short scores or a verdict's first words share a line."""
    lines = _screen(80)
    row = next(i for i, line in enumerate(lines) if "answer_relevancy=" in line)
    column = lines[row].index("answer_relevancy=")
    assert len(lines[row]) - column - 2 >= 26, lines[row]
