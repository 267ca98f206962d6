"""Real agent frameworks under real instrumentors, offline: each answer is one interaction with
every search its model call was given, the user's question, and the earlier turns. The apps and
their scenarios are in tests/support/agent_apps.py."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from tests.support.agent_apps import APPS, DOCS, FOLLOW_UP, QUESTION, expectation, run_app
from tests.support.otlp import assembler, total

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("app", sorted(APPS))
def test_agent_answers_assemble_with_everything_they_were_given(app: str, tmp_path: Path) -> None:
    expected, spans = run_app(app, tmp_path)
    a = assembler()
    out = total([a.add(spans), a.flush()])
    interactions = sorted(out.interactions, key=lambda i: i.end_time_unix_nano)
    answers = expected["answers"]
    # One interaction per answer: no tool-call-only turn, no ReAct step is ever one.
    assert len(interactions) == len(answers) >= 5
    for interaction, answer in zip(interactions, answers, strict=True):
        assert interaction.query == answer["question"]
        assert interaction.response == answer["response"]
        searched, chunks = expectation(answer)
        assert [c.content for c in interaction.chunks] == chunks, answer["scenario"]
        assert interaction.sub_queries == tuple(searched)
        assert interaction.searches == len(searched) and interaction.tool_errors == 0
    # Both searches reach the answer whichever held the useful passage.
    for interaction, answer in zip(interactions, answers, strict=True):
        if answer["scenario"].startswith("useful"):
            assert set(DOCS["seine"]) | set(DOCS["bridges"]) <= {c.content for c in interaction.chunks}
    for interaction, answer in zip(interactions, answers, strict=True):
        if answer["question"] == FOLLOW_UP:
            assert [t.role for t in interaction.earlier_turns] == ["user", "assistant"]
            assert interaction.earlier_turns[0].content == QUESTION
    one_trace = [i for i, answer in zip(interactions, answers, strict=True) if answer.get("one_trace")]
    if one_trace:
        assert len(one_trace) == 2 and one_trace[0].trace_id == one_trace[1].trace_id
        assert [c.content for c in one_trace[1].chunks] == DOCS["seine"] + DOCS["tour"]

    # Split and interleaved delivery: one span per request, shuffled, with a copy of every trace
    # under other trace ids: the same answers.
    copy = [dataclasses.replace(s, trace_id=s.trace_id[::-1]) for s in spans]
    mixed = list(spans) + copy
    random.Random(7).shuffle(mixed)
    split = assembler()
    reports = [split.add([span]) for span in mixed]
    reports.append(split.flush())
    again = total(reports).interactions
    assert len(again) == 2 * len(interactions)
    key = {(i.query, i.response, tuple(i.chunks), i.sub_queries) for i in interactions}
    assert {(i.query, i.response, tuple(i.chunks), i.sub_queries) for i in again} == key
