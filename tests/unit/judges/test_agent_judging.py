"""A follow-up's earlier turns reach the judges of relevance, never the evidence of support."""

from __future__ import annotations

import asyncio
import dataclasses

from agent.judges.local import LexicalJudge
from agent.judges.questions import (
    assess_chunks_request,
    assess_interaction_request,
    check_response_request,
    load_prompt,
)
from agent.model import Chunk, RagInteraction, Turn

EARLIER = (
    Turn("user", "Tell me about the Pont Neuf bridge in Paris."),
    Turn("assistant", "It opened in 1607."),
)
CHUNKS = ["The Pont Neuf crosses the Seine in Paris.", "A guided tour of the Pont Neuf costs 12 euros."]


def follow_up(turns: tuple[Turn, ...] = EARLIER) -> RagInteraction:
    return RagInteraction(
        trace_id="a" * 32, span_id="b" * 16, query="And how much does the tour cost?",
        chunks=tuple(Chunk(c) for c in CHUNKS), response="The tour costs 12 euros.",
        service="s", route="r", earlier_turns=turns,
    )  # fmt: skip


def test_llm_prompts_show_earlier_turns_fenced_only_for_follow_ups() -> None:
    query = follow_up().judged_query
    for request in (
        assess_chunks_request(query, "The tour costs 12 euros.", dict(enumerate(CHUNKS, 1))),
        check_response_request(query, "The tour costs 12 euros.", CHUNKS),
        assess_interaction_request(query, "The tour costs 12 euros.", CHUNKS),
    ):
        names = [name for name, _ in request.blocks]
        assert names[:2] == ["EARLIER TURNS", "QUERY"]
        assert dict(request.blocks)["QUERY"] == "And how much does the tour cost?"
        rendered = request.render()
        assert "user: Tell me about the Pont Neuf bridge in Paris.\nassistant: It opened in 1607." in rendered
        assert "\x1e" not in rendered and "\x1f" not in rendered
    plain = follow_up(()).judged_query
    request = assess_interaction_request(plain, "x", CHUNKS)
    assert request.blocks[0][0] == "QUERY" and "EARLIER TURNS" not in request.render()


def test_prompts_say_earlier_turns_are_not_evidence() -> None:
    for kind in ("assess_chunks", "check_response", "assess_interaction", "check_claims"):
        prompt = load_prompt(kind)
        assert prompt.version.startswith("v2-") and "never by an earlier turn" in prompt.text


def test_the_local_judge_reads_a_follow_up_with_its_earlier_user_turns() -> None:
    judge = LexicalJudge()
    alone, with_turns = follow_up(()), follow_up()
    a = asyncio.run(judge.assess_chunks(alone.judged_query, alone.response, CHUNKS))
    b = asyncio.run(judge.assess_chunks(with_turns.judged_query, with_turns.response, CHUNKS))
    # "Pont Neuf ... Paris" is in the earlier user turn only: the first chunk becomes relevant.
    assert a[0].relevant_statements == 0 and b[0].relevant_statements == 1
    # Support does not change: it is judged against the chunks alone.
    ca = asyncio.run(judge.check_response(alone.judged_query, alone.response, CHUNKS))
    cb = asyncio.run(judge.check_response(with_turns.judged_query, with_turns.response, CHUNKS))
    assert [c.supported.value for c in ca] == [c.supported.value for c in cb]


def test_results_carry_the_agent_counts_and_with_text_the_sub_queries() -> None:
    from agent.exporters.result_spans import evaluation_request

    interaction = dataclasses.replace(
        follow_up(), sub_queries=("pont neuf tour",), searches=2, empty_searches=1, session_id="conv-1"
    )
    (span,) = evaluation_request(interaction, [], now_ns=1).resource_spans[0].scope_spans[0].spans
    keys = {kv.key: kv.value for kv in span.attributes}
    assert (
        keys["ragpulse.agent.searches"].double_value == 2
        and keys["ragpulse.agent.empty_searches"].double_value == 1
    )
    assert "ragpulse.agent.sub_queries.0" not in keys and "session.id" not in keys
    (span,) = (
        evaluation_request(interaction, [], include_text=True, now_ns=1)
        .resource_spans[0]
        .scope_spans[0]
        .spans
    )
    keys = {kv.key: kv.value for kv in span.attributes}
    assert keys["ragpulse.agent.sub_queries.0"].string_value == "pont neuf tour"
    assert keys["session.id"].string_value == "conv-1"
