"""The demo's synthetic traffic: the regression moves the local judge's scores the way it claims,
and both terminal views render."""

from __future__ import annotations

import asyncio
import io
import statistics
import time

from prometheus_client import CollectorRegistry
from rich.console import Console

from agent.demo.live import LiveView, PlainView, sparkline
from agent.demo.run import demo_data, demo_settings, generate
from agent.demo.state import DemoState
from agent.demo.traffic import Phase, Schedule, SyntheticInteraction, TrafficModel
from agent.exporters.otlp_results import traces_url
from agent.judges.local import LexicalJudge
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, MetricResult, RagInteraction
from agent.scoreboard import Scoreboard
from tests.support.pipeline import evaluated


def _interaction(n: int, phase: Phase, model: TrafficModel) -> RagInteraction:
    drawn = model.draw(phase)
    return RagInteraction(
        f"{n:032x}", f"{n:016x}", drawn.question,
        tuple(Chunk(c.content, c.id, c.score) for c in drawn.chunks), drawn.response,
        drawn.service, drawn.route,
    )  # fmt: skip


def _means(phase: Phase, count: int = 120) -> dict[str, float]:
    model = TrafficModel(seed=3)
    judge = LexicalJudge()

    async def score() -> dict[str, list[float]]:
        values: dict[str, list[float]] = {name: [] for name in STREAMING_METRICS}
        for n in range(count):
            interaction = _interaction(n, phase, model)
            for name, metric in STREAMING_METRICS.items():
                result = await metric().evaluate(interaction, judge)
                if result.value is not None:
                    values[name].append(result.value)
        return values

    return {name: statistics.fmean(v) for name, v in asyncio.run(score()).items()}


def test_regression_steps_move_the_local_judges_scores() -> None:
    healthy, irrelevant, missing = (_means(p) for p in Phase)
    assert healthy["context_precision"] > 0.75  # graded usefulness (the lexical support), not 0/1
    assert irrelevant["context_precision"] < healthy["context_precision"] - 0.5  # right passage ranked last
    assert irrelevant["faithfulness"] > 0.95  # the answer is still right
    assert missing["faithfulness"] < 0.2  # answers from memory: wrong numbers and names
    assert missing["context_precision"] < 0.1


def test_schedule_phases() -> None:
    schedule = Schedule(10.0, 20.0)
    assert [schedule.phase(t) for t in (0, 9.9, 10, 19.9, 20, 100)] == [
        Phase.HEALTHY, Phase.HEALTHY, Phase.IRRELEVANT_FIRST, Phase.IRRELEVANT_FIRST,
        Phase.MISSING_FACTS, Phase.MISSING_FACTS,
    ]  # fmt: skip
    assert Schedule(None).phase(1e9) is Phase.HEALTHY


def test_traffic_covers_several_services_and_routes() -> None:
    model = TrafficModel(seed=1)
    drawn = [model.draw(Phase.HEALTHY) for _ in range(200)]
    assert len({d.service for d in drawn}) >= 3 and len({d.route for d in drawn}) >= 4
    assert all(d.chunks[0].score >= d.chunks[-1].score for d in drawn)


def test_demo_drift_settings_do_not_override_the_users() -> None:
    from agent.config import load_settings

    assert demo_settings(load_settings(environ={})).drift.baseline_size == 150
    user = load_settings(environ={"RAGPULSE_DRIFT_BASELINE_SIZE": "500"})
    assert demo_settings(user).drift.baseline_size == 500


def test_views_render_state() -> None:
    recorder = Scoreboard(time.monotonic() - 5)
    model = TrafficModel(seed=2)
    for n in range(20):
        interaction = _interaction(n, Phase.HEALTHY, model)
        results = [MetricResult.ok("faithfulness", 0.5 + n / 40, judge="lexical")]
        asyncio.run(recorder.export(evaluated(interaction, results)))
    worst = _interaction(20, Phase.HEALTHY, model)
    worst_results = [
        MetricResult.ok("faithfulness", 0.1, judge="lexical"),
        MetricResult.ok("context_precision", 0.2, judge="lexical", chunk_verdicts=(True, False, False)),
    ]
    asyncio.run(recorder.export(evaluated(worst, worst_results)))
    state = DemoState(CollectorRegistry(), recorder, Schedule(30.0), 60.0, "lexical")
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=140)
    with LiveView(state, console) as view:
        view.refresh()
    assert "faithfulness" in buffer.getvalue() and "lowest-scored" in buffer.getvalue()
    # The lowest-scored interaction is listed with its trace id and the verdicts behind its score.
    assert worst.trace_id in buffer.getvalue() and "#2 #3 not useful" in buffer.getvalue()
    plain = io.StringIO()
    with PlainView(state, Console(file=plain, width=80)) as view:
        view.refresh()
    assert "faithfulness=" in plain.getvalue() and "\x1b[" not in plain.getvalue()
    assert f"low score: trace_id={worst.trace_id}" in plain.getvalue()
    data = demo_data(state)
    assert data["first_score_seconds"] is not None and data["timeline"]["faithfulness"]
    assert sparkline([0.0, 0.5, 1.0, None]) == "▁▅█ "


def test_the_report_says_which_metrics_were_scored_and_why() -> None:
    from agent.build import metric_choice
    from agent.config import Settings
    from agent.report.demo import demo_page

    choice = metric_choice(Settings())  # the lexical judge's default
    state = DemoState(CollectorRegistry(), Scoreboard(time.monotonic()), Schedule(30.0), 60.0, "lexical",
                      choice.metrics, choice.describe())  # fmt: skip
    data = demo_data(state)
    assert data["metrics"] == ["context_precision", "context_relevancy", "faithfulness"]
    page = demo_page(data, "summary")
    assert 'id="metrics"' in page
    assert "answer_relevancy is off: the lexical judge measures it at chance (AUROC 0.469" in page.replace(
        "&#x27;", "'"
    )


class _Sent:
    """The emitter's part that `generate` uses: what it was given."""

    def __init__(self) -> None:
        self.interactions: list[SyntheticInteraction] = []

    def emit(self, interaction: SyntheticInteraction) -> None:
        self.interactions.append(interaction)


def test_a_faster_demo_clock_sends_the_same_traffic_in_less_wall_time() -> None:
    """`ragpulse demo --time-scale 4`: the rate, the schedule and the recorder's times are in demo
    seconds, which pass four times faster than wall-clock ones."""
    sent, phases, rate, until = _Sent(), [], 50.0, 8.0
    started = time.monotonic()
    count = asyncio.run(
        generate(sent, TrafficModel(seed=1), Schedule(2.0), rate, started, until, phases.append, 4.0)  # type: ignore[arg-type]
    )
    wall = time.monotonic() - started
    assert count == len(sent.interactions)
    # More than the wall clock's rate allows, never more than the demo's 8 seconds hold.
    assert rate * wall < count <= rate * until
    assert phases == [Phase.HEALTHY, Phase.IRRELEVANT_FIRST]
    assert Scoreboard(time.monotonic() - 1.0, time_scale=4.0).elapsed() >= 4.0


def test_otlp_results_url() -> None:
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
