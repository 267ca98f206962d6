"""The agent conformance corpus: real frameworks' traces, replayed (issue 25, docs/intake.md).

Each directory under tests/fixtures/agents/ is one stack recorded by scripts/corpus/record.sh:
`otlp/NNNN.pb` (one ExportTraceServiceRequest per export batch, as the framework's real
instrumentation exported it) and `expected.json` (what the framework did, from the fake model
server's request log: each answer's question, response, the documents the answering call was
given in order, the searches' inputs, the earlier turns of a follow-up). Every stack must give one
interaction per answer with exactly these values, and the same context-precision sum under the
lexical judge as the expectations themselves.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.judges.local import assess_chunks
from agent.metrics.ranking import context_precision_at_k
from agent.model import RagInteraction, Turn, conversation_query
from tests.support.corpus import CORPUS, STACKS, load, replay

pytestmark = pytest.mark.integration


# Stacks whose follow-up's earlier turns no span states, and why (docs/intake.md, "Conformance
# corpus"): everything else of theirs is asserted exactly, and the earlier turns asserted unread
# (strict: a stack whose earlier turns start being read must leave this list).
UNSTATED_EARLIER_TURNS = {
    "crewai": "no session id and no earlier messages on the follow-up's spans: the app pastes its "
    "earlier turns into the task description as its own text (kickoff input `history`), which no "
    "convention states as turns",
    "crewai-litellm": "as crewai (the same crew, its model calls through litellm)",
}


def _replay(stack: str) -> list[RagInteraction]:
    return replay(load(stack)).interactions


def _precision(query: str, chunks: list[str], response: str | None) -> float:
    verdicts = [a.useful.value if a.useful else False for a in assess_chunks(query, response, chunks)]
    return context_precision_at_k(verdicts) or 0.0


def _expected_query(answer: dict[str, Any], turns_stated: bool = True) -> str:
    turns = tuple(Turn(role, text) for role, text in answer.get("earlier_turns", []) if turns_stated)
    return conversation_query(answer["question"], turns)


@pytest.mark.skipif(not STACKS, reason="no agent corpus under tests/fixtures/agents")
@pytest.mark.parametrize("stack", STACKS or ["none"])
def test_every_answer_of_the_stack_is_one_interaction_with_its_exact_context(stack: str) -> None:
    turns_stated = stack not in UNSTATED_EARLIER_TURNS
    expected = json.loads((CORPUS / stack / "expected.json").read_text())["answers"]
    found = _replay(stack)

    assert [(i.query, i.response) for i in found] == [(a["question"], a["response"]) for a in expected]
    for interaction, answer in zip(found, expected, strict=True):
        where = f"{stack} {answer['scenario']} turn {answer['turn']}"
        assert [c.content for c in interaction.chunks] == answer["chunks"], where
        assert list(interaction.sub_queries) == answer["sub_queries"], where
        turns = [[t.role, t.content] for t in interaction.earlier_turns]
        if answer.get("earlier_turns"):
            assert turns == (answer["earlier_turns"] if turns_stated else []), where
    got = sum(_precision(i.judged_query, [c.content for c in i.chunks], i.response) for i in found)
    want = sum(_precision(_expected_query(a, turns_stated), a["chunks"], a["response"]) for a in expected)
    assert got == pytest.approx(want)
