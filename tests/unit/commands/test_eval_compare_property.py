"""`ragpulse eval A B --compare` always writes comparison.json and report.html and exits 0, for
any pair of small input files: random metric values, missing fields, disjoint ids, single items,
metrics undefined everywhere. The command function runs in-process with the lexical judge."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.commands.eval import _main as eval_command
from agent.config import Settings

SENTENCES = (
    "Paris is the capital of France.",
    "The Eiffel Tower was built in 1889.",
    "The Seine flows through Paris.",
    "Bananas are rich in potassium.",
    "Lyon sits on the Rhone.",
    "The tower is 330 metres tall.",
    "Gustave Eiffel designed the tower.",
)
QUESTIONS = (
    "What is the capital of France?",
    "When was the tower built?",
    "Which river flows through Paris?",
)
DOC_IDS = ("d1", "d2", "d3", "d4")

texts = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3).map(" ".join)
row = st.fixed_dictionaries(
    {"question": st.sampled_from(QUESTIONS)},
    optional={
        "id": st.sampled_from(("a", "b", "c", "x", "y", "z")),
        "contexts": st.lists(st.sampled_from(SENTENCES), max_size=3),
        "response": texts,
        "reference": texts,
        "reference_contexts": st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=2),
        "retrieved_ids": st.lists(st.sampled_from(DOC_IDS), max_size=4, unique=True),
        "relevant_ids": st.lists(st.sampled_from(DOC_IDS), max_size=2, unique=True),
    },
)
files = st.lists(row, min_size=1, max_size=4)


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=files, b=files)
def test_compare_always_writes_the_comparison_and_the_report(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write(work / "a.jsonl", a)
        write(work / "b.jsonl", b)
        out = work / "out"
        args = argparse.Namespace(
            files=[str(work / "a.jsonl"), str(work / "b.jsonl")],
            out=str(out),
            metrics=None,
            judge_model=None,
            k=3,
            compare=True,
            labels=None,
            calibration=None,
            max_judge_errors=0.1,
            fail_under=[],
            fail_under_ci=[],
            fail_if_worse=[],
        )
        assert eval_command(args, Settings(judge_model="lexical")) == 0
        comparison = json.loads((out / "comparison.json").read_text())
        assert comparison["paired_by"] in ("id", "question")
        for values in comparison["metrics"].values():
            assert values["verdict"] in ("better", "worse", "no detectable difference")
        report = (out / "report.html").read_text()
        assert 'id="comparison"' in report and report.rstrip().endswith("</html>")
        assert (out / "a" / "results.jsonl").exists() and (out / "b" / "summary.json").exists()


def test_an_interval_that_does_not_contain_its_mean_still_draws() -> None:
    from agent.report.svg import differences_svg

    # A BCa interval of a skewed difference can lie wholly to one side of the mean.
    svg = differences_svg(["faithfulness", "mrr"], [0.02, -0.3], [0.05, -0.2], [0.2, -0.1], [True, True])
    assert svg.startswith("<svg") and svg.count("<circle") == 2


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(
            st.floats(-1, 1, allow_nan=False),
            st.floats(-1, 1, allow_nan=False),
            st.floats(-1, 1, allow_nan=False),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_point_and_interval_draws(rows: list[tuple[float, float, float]]) -> None:
    from agent.report.svg import differences_svg

    means = [m for m, _, _ in rows]
    lows = [min(a, b) for _, a, b in rows]
    highs = [max(a, b) for _, a, b in rows]
    svg = differences_svg([f"m{i}" for i in range(len(rows))], means, lows, highs, [True] * len(rows))
    assert svg.count("<circle") == len(rows) and "nan" not in svg


def test_a_chart_that_cannot_be_drawn_costs_neither_the_json_nor_the_report(monkeypatch: Any) -> None:
    from agent.report import svg

    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("'xerr' must not contain negative values")

    monkeypatch.setattr(svg, "differences_svg", broken)
    rows = [
        {"id": str(n), "question": QUESTIONS[0], "retrieved_ids": ["d1", "d2"], "relevant_ids": ["d1"]}
        for n in range(4)
    ]
    worse = [{**r, "relevant_ids": ["d2"]} for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write(work / "a.jsonl", rows)
        write(work / "b.jsonl", worse)
        args = argparse.Namespace(
            files=[str(work / "a.jsonl"), str(work / "b.jsonl")], out=str(work / "out"), metrics=None,
            judge_model=None, k=3, compare=True, labels=None, calibration=None, max_judge_errors=0.1,
            fail_under=[], fail_under_ci=[], fail_if_worse=[],
        )  # fmt: skip
        assert eval_command(args, Settings(judge_model="lexical")) == 0
        comparison = json.loads((work / "out" / "comparison.json").read_text())
        assert comparison["metrics"]["mrr"]["verdict"] == "worse"
        report = (work / "out" / "report.html").read_text()
        assert "The differences chart could not be drawn" in report and 'id="comparison"' in report
