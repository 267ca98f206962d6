"""Agents read by principle (issue 25): the failure classes of frameworks beyond the first three,
on spans made by the real OpenTelemetry SDK, and arrival order never changing the interactions.

The real frameworks' traces are replayed in tests/integration/test_agent_corpus.py.
"""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import Status, StatusCode

from agent.model import RagInteraction
from agent.otlp.sessions import Sessions
from tests.support.otlp import Clock, Recorder, assembler, decoded, set_all

QUESTION = "Which river flows through Paris?"
DOCS = [
    "The Seine flows through Paris.",
    "The Loire is the longest river in France.",
    "Lyon sits on the Rhone.",
]
ANSWER = "The Seine flows through Paris."


def _tool(recorder: Recorder, name: str, call_id: str, result: str | None, *, error: bool = False) -> None:
    with recorder.tracer.start_as_current_span(f"execute_tool {name}") as span:
        set_all(
            span,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.call.arguments": json.dumps({"query": "paris river"}),
            },
        )
        if result is not None:
            span.set_attribute("gen_ai.tool.call.result", result)
        if error:
            span.set_status(Status(StatusCode.ERROR, "search backend down"))


def _chat(recorder: Recorder, messages: list[dict], output: list[dict], system: str | None = None) -> None:
    with recorder.tracer.start_as_current_span("chat") as span:
        set_all(
            span,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output.messages": json.dumps(output),
            },
        )
        if system:
            span.set_attribute(
                "gen_ai.system_instructions", json.dumps([{"type": "text", "content": system}])
            )


def _text(role: str, text: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _call(call_id: str, name: str = "search") -> dict:
    return {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": call_id, "name": name, "arguments": {}}],
    }


def _result(call_id: str, result: str) -> dict:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": result}]}


def planning_then_generation(recorder: Recorder, header: bool = False) -> None:
    """A planning call (tools bound) searches, then says it has enough; a plain generation call
    answers with the documents pasted into its system prompt (class 4)."""
    result = "\n".join(f"Document {n + 1}:\n{d}" for n, d in enumerate(DOCS)) if header else "\n\n".join(DOCS)
    with recorder.tracer.start_as_current_span("invoke_agent") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "s-1"})
        root.set_attribute("gen_ai.output.messages", json.dumps([_text("assistant", ANSWER)]))
        _chat(recorder, [_text("user", QUESTION)], [_call("c1")])
        _tool(recorder, "search", "c1", result)
        _chat(
            recorder,
            [_text("user", QUESTION), _call("c1"), _result("c1", result)],
            [_text("assistant", "I have enough.")],
        )
        _chat(
            recorder,
            [_text("user", QUESTION)],
            [_text("assistant", ANSWER)],
            system="Context:\n" + "\n\n".join(reversed(DOCS)),
        )


def final_answer_tool(recorder: Recorder) -> None:
    """The answer given through a final-answer tool: no model call returns text (class 1)."""
    with recorder.tracer.start_as_current_span("invoke_agent") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent"})
        root.set_attribute("gen_ai.output.messages", json.dumps([_text("assistant", ANSWER)]))
        _chat(recorder, [_text("user", QUESTION)], [_call("c1")])
        _tool(recorder, "search", "c1", json.dumps([{"content": d} for d in DOCS]))
        _chat(
            recorder,
            [_text("user", QUESTION), _call("c1"), _result("c1", json.dumps([{"content": d} for d in DOCS]))],
            [_call("c2", "final_answer")],
        )
        with recorder.tracer.start_as_current_span("execute_tool final_answer") as span:
            set_all(
                span,
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.arguments": json.dumps({"answer": ANSWER}),
                },
            )


def messages_as_events(recorder: Recorder, *, failed: bool = False) -> None:
    """Messages as span events with content blocks, the tool's result in an event (class 2)."""
    blocks = json.dumps([{"text": "\n\n".join(DOCS)}])
    with recorder.tracer.start_as_current_span("invoke_agent") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent", "session.id": "s-2"})
        root.add_event("gen_ai.user.message", {"content": json.dumps([{"text": QUESTION}])})
        with recorder.tracer.start_as_current_span("chat") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.add_event("gen_ai.user.message", {"content": json.dumps([{"text": QUESTION}])})
            chat.add_event(
                "gen_ai.choice", {"message": json.dumps([{"toolUse": {"toolUseId": "c1", "name": "search"}}])}
            )
        with recorder.tracer.start_as_current_span("execute_tool search") as tool:
            set_all(tool, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "c1"})
            tool.add_event(
                "gen_ai.tool.message", {"content": json.dumps({"query": "paris river"}), "id": "c1"}
            )
            if failed:
                tool.set_status(Status(StatusCode.ERROR))
            else:
                tool.add_event("gen_ai.choice", {"message": blocks, "id": "c1"})
        with recorder.tracer.start_as_current_span("chat") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.add_event("gen_ai.user.message", {"content": json.dumps([{"text": QUESTION}])})
            chat.add_event(
                "gen_ai.assistant.message", {"content": json.dumps([{"toolUse": {"toolUseId": "c1"}}])}
            )
            result = blocks if not failed else json.dumps([{"text": "error: backend down"}])
            chat.add_event(
                "gen_ai.tool.message",
                {"content": json.dumps([{"toolResult": {"toolUseId": "c1", "content": json.loads(result)}}])},
            )
            chat.add_event("gen_ai.choice", {"message": ANSWER})
        root.add_event("gen_ai.choice", {"message": ANSWER})


def _assemble(recorder: Recorder) -> list[RagInteraction]:
    intake = assembler()
    return intake.add(decoded(recorder.spans())).interactions + intake.flush().interactions


def test_a_separate_generation_step_is_the_answer_and_the_planning_call_is_not() -> None:
    recorder = Recorder()
    planning_then_generation(recorder)
    (found,) = _assemble(recorder)
    assert (found.query, found.response) == (QUESTION, ANSWER)
    assert [c.content for c in found.chunks] == list(reversed(DOCS))  # the order the prompt gave them
    assert found.sub_queries == ("paris river",)


def test_header_delimited_tool_results_are_one_document_each() -> None:
    recorder = Recorder()
    planning_then_generation(recorder, header=True)
    (found,) = _assemble(recorder)
    assert [c.content for c in found.chunks] == list(reversed(DOCS))


def test_an_answer_given_through_a_final_answer_tool() -> None:
    recorder = Recorder()
    final_answer_tool(recorder)
    (found,) = _assemble(recorder)
    assert (found.query, found.response) == (QUESTION, ANSWER)
    assert [c.content for c in found.chunks] == DOCS and found.searches == 1


def test_messages_as_span_events_with_content_blocks() -> None:
    recorder = Recorder()
    messages_as_events(recorder)
    (found,) = _assemble(recorder)
    assert (found.query, found.response, found.session_id) == (QUESTION, ANSWER, "s-2")
    assert [c.content for c in found.chunks] == DOCS and found.sub_queries == ("paris river",)


def test_a_tool_whose_span_status_is_error_is_a_tool_error() -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("invoke_agent") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent"})
        _chat(recorder, [_text("user", QUESTION)], [_call("c1"), _call("c2")])
        _tool(recorder, "search", "c1", "\n\n".join(DOCS))
        _tool(recorder, "search", "c2", "error: backend down", error=True)
        _chat(
            recorder,
            [
                _text("user", QUESTION),
                _call("c1"),
                _result("c1", "\n\n".join(DOCS)),
                _result("c2", "error: backend down"),
            ],
            [_text("assistant", ANSWER)],
        )
    (found,) = _assemble(recorder)
    assert found.tool_errors == 1 and found.searches == 2
    assert [c.content for c in found.chunks] == DOCS


def test_a_follow_up_in_a_new_trace_gets_the_earlier_turns_of_its_session() -> None:
    sessions = Sessions(max_sessions=2, ttl_seconds=60)
    first = RagInteraction(
        trace_id="a",
        span_id="1",
        query=QUESTION,
        chunks=(),
        response=ANSWER,
        service="a",
        route="r",
        session_id="s",
    )
    follow = RagInteraction(
        trace_id="b",
        span_id="2",
        query="How long is it?",
        chunks=(),
        response="777 km.",
        service="a",
        route="r",
        session_id="s",
    )
    assert sessions.follow(first, 0.0).earlier_turns == ()
    turns = sessions.follow(follow, 1.0).earlier_turns
    assert [(t.role, t.content) for t in turns] == [("user", QUESTION), ("assistant", ANSWER)]
    # Bounded: expired after the TTL, least recently used evicted beyond max_sessions.
    assert sessions.follow(follow, 100.0).earlier_turns == ()
    for name in ("x", "y", "z"):
        sessions.follow(
            RagInteraction(
                trace_id=name,
                span_id="3",
                query="q",
                chunks=(),
                response="r",
                service="a",
                route="r",
                session_id=name,
            ),
            101.0,
        )
    assert len(sessions) == 2


def _key(interactions: list[RagInteraction]) -> list[tuple]:
    return sorted(
        (
            i.trace_id,
            i.span_id,
            i.query,
            i.response,
            tuple(c.content for c in i.chunks),
            i.sub_queries,
            i.tool_errors,
        )
        for i in interactions
    )


def _all_classes() -> Recorder:
    recorder = Recorder()
    planning_then_generation(recorder)
    planning_then_generation(recorder, header=True)
    final_answer_tool(recorder)
    messages_as_events(recorder)
    messages_as_events(recorder, failed=True)
    return recorder


SPANS = decoded(_all_classes().spans())
IN_ORDER = _key((lambda a: a.add(SPANS).interactions + a.flush().interactions)(assembler()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(len(SPANS))), cuts=st.sets(st.integers(1, len(SPANS) - 1), max_size=6))
def test_arrival_order_and_splitting_never_change_the_interactions(order: list[int], cuts: set[int]) -> None:
    spans = [SPANS[i] for i in order]
    bounds = [0, *sorted(cuts), len(spans)]
    intake = assembler()
    found: list[RagInteraction] = []
    for sequence, (start, end) in enumerate(itertools.pairwise(bounds)):
        found.extend(intake.add(spans[start:end], sequence).interactions)
    found.extend(intake.flush().interactions)
    assert _key(found) == IN_ORDER
    assert len(IN_ORDER) == 4  # the turn whose only search failed has no context


def _responses_conversation() -> tuple[list, list]:
    """The recorded OpenAI Agents SDK conversation (tests/fixtures/agents: Responses API, real
    instrumentor): (its first turn's spans, its follow-up's spans). The follow-up's calls continue
    the first turn's last response (`previous_response_id`) and carry none of its messages."""
    from tests.support.corpus import load

    traces: dict[str, list] = {}
    for span in load("openai-agents-responses").spans():
        traces.setdefault(span.trace_id, []).append(span)
    first, follow_up = list(traces.values())[-2:]
    return first, follow_up


EARLIER = [
    ("user", "Who painted The Starry Night?"),
    ("assistant", "Vincent van Gogh painted The Starry Night in June 1889."),
]


def test_a_follow_up_continuing_a_response_waits_for_the_turn_that_holds_it() -> None:
    first, follow_up = _responses_conversation()
    intake = assembler(clock=Clock())
    # The follow-up whole, root included, before any span of its first turn: it waits.
    assert intake.add(follow_up).interactions == []
    assert intake.oldest_pending() is not None
    out = intake.add(first)
    assert [i.query for i in out.interactions] == [
        "Who painted The Starry Night?",
        "Which museum holds that painting today?",
    ]
    assert [(t.role, t.content) for t in out.interactions[1].earlier_turns] == EARLIER
    assert intake.oldest_pending() is None and intake.flush().interactions == []


def test_a_follow_up_whose_earlier_turn_never_comes_is_assembled_when_its_wait_is_over() -> None:
    _, follow_up = _responses_conversation()
    clock = Clock()
    intake = assembler(wait=10.0, clock=clock)
    assert intake.add(follow_up).interactions == []
    clock.now = 9.0
    assert intake.expire(clock.now).interactions == []
    clock.now = 10.5
    (found,) = intake.expire(clock.now).interactions
    assert found.query == "Which museum holds that painting today?" and found.earlier_turns == ()


def test_the_responses_sessions_remember_are_bounded(monkeypatch) -> None:
    import agent.otlp.sessions as module

    monkeypatch.setattr(module, "MAX_RESPONSES", 3)
    sessions = Sessions()
    sessions.assembled(["r1", "r2", "r3", "r4"])
    assert [sessions.knows(r) for r in ("r1", "r2", "r4")] == [False, True, True]
    assert Sessions(max_sessions=0).knows("never seen")  # no sessions: nothing to wait for
