"""Agent traces with no model-call span (issue 25): the answer anchored on the agent span that
returned it, its context what that span states (a transcript of the turn) or else the turn's
searches, joined by the session's earlier documents; and the repr reader such transcripts need.

Spans are made with the real SDK in the layouts the instrumentors write (OpenInference's Haystack
and Google ADK instrumentors); the recorded frameworks are replayed in
tests/integration/test_agent_corpus.py.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model import Chunk, RagInteraction
from agent.otlp.conventions.haystack import MAX_REPR_CHARS, MAX_REPR_DEPTH, MAX_REPR_TOKENS, parse_repr
from agent.otlp.sessions import Sessions
from tests.support.otlp import Recorder, assembler, decoded, set_all, total

SEINE = ["The Seine flows through Paris.", "The Loire is the longest river in France."]
BRIDGES = ["Paris has 37 bridges across the Seine.", "The Pont Neuf is the oldest bridge in Paris."]


# -- the repr reader ----------------------------------------------------------------------------------


def test_a_repr_is_read_by_its_grammar_with_every_string_escape() -> None:
    found = parse_repr(
        "ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result='it\\'s \"x\"\\n"
        "\\\\n\\x41\\u00e9\\U0001F600', origin=ToolCall(tool_name='search', arguments={'query': "
        "\"l'eau\", 'k': 3, 'f': -1.5e3}, id='c1', extra=None), error=False)], _name=None, "
        "_meta={'usage': {'n': (1, 2)}, 'fn': <function run.<locals>.search at 0x7f>})"
    )
    assert found.name == "ChatMessage"
    assert found.kwargs["_role"] == "tool"
    (result,) = found.kwargs["_content"]
    assert result.kwargs["result"] == 'it\'s "x"\n\\nA\u00e9\U0001f600'
    assert result.kwargs["error"] is False
    origin = result.kwargs["origin"]
    assert origin.kwargs["arguments"]["query"] == "l'eau"
    assert origin.kwargs["extra"] is None
    assert found.kwargs["_meta"]["fn"] is None  # a function's repr holds no string


@pytest.mark.parametrize(
    "text",
    [
        "ChatMessage(_content=[TextContent(text='unterminated)])",  # an open string literal
        "ChatMessage(_content=[TextContent(text='a')]",  # an open call
        "ChatMessage(_content=[TextContent(text='a')])) trailing",
        "ChatMessage(_role=<ChatRole.USER: 'user')",  # an open enum
        "{'a' 'b'}",
        "__import__('os').system('true')",  # read as a call named so, never run
        "",
    ],
)
def test_a_repr_that_breaks_the_grammar_reads_as_nothing_and_runs_nothing(text: str) -> None:
    found = parse_repr(text)
    assert found is None or found.name == "__import__"


def test_a_repr_is_bounded_in_length_and_depth() -> None:
    assert parse_repr("[" * (MAX_REPR_DEPTH + 2) + "]" * (MAX_REPR_DEPTH + 2)) is None
    assert parse_repr("[" * MAX_REPR_DEPTH + "]" * MAX_REPR_DEPTH) is not None
    assert parse_repr("'" + "a" * MAX_REPR_CHARS + "'") is None
    assert parse_repr("[" + "1," * (MAX_REPR_TOKENS // 2 - 1) + "]") is not None
    assert parse_repr("[" + "1," * (MAX_REPR_TOKENS // 2 + 1) + "]") is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="()[]{}<>,:='\"\\ aZ0.-\n", max_size=200))
def test_any_text_reads_without_an_error(text: str) -> None:
    parse_repr(text)


# -- Haystack's agent under OpenInference: the turn as a transcript ------------------------------------


def _repr(text: str) -> str:
    return repr(text)  # a Python string literal, as Haystack's reprs hold them


def _user(text: str) -> str:
    return (
        f"ChatMessage(_role=<ChatRole.USER: 'user'>, _content=[TextContent(text={_repr(text)})], _meta={{}})"
    )


def _assistant(text: str) -> str:
    return (
        f"ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text={_repr(text)})], "
        "_meta={'model': 'gpt-4o-mini', 'finish_reason': 'stop'})"
    )


def _tool_turn(call_id: str, query: str, docs: list[str]) -> list[str]:
    joined = "\n\n".join(docs)
    call = f"ToolCall(tool_name='search', arguments={{'query': {_repr(query)}}}, id='{call_id}', extra=None)"
    return [
        f"ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[{call}], _meta={{}})",
        f"ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result="
        f"{_repr(joined)}, origin={call}, error=False)], _meta={{}})",
    ]


def _haystack_turn(recorder: Recorder, sent: list[str], transcript: list[str]) -> None:
    """One `Pipeline.run` holding `Agent.run`, as the OpenInference Haystack instrumentor writes
    them: no model-call nor tool span, the turn in the outputs."""
    inputs = json.dumps({"messages": sent})
    with recorder.tracer.start_as_current_span("Pipeline.run") as pipeline:
        with recorder.tracer.start_as_current_span("Agent.run") as agent:
            set_all(
                agent,
                {
                    "openinference.span.kind": "CHAIN",
                    "input.mime_type": "application/json",
                    "input.value": inputs,
                    "output.mime_type": "application/json",
                    "output.value": json.dumps({"messages": transcript, "last_message": transcript[-1]}),
                },
            )
        set_all(
            pipeline,
            {
                "openinference.span.kind": "CHAIN",
                "input.mime_type": "application/json",
                "input.value": json.dumps({"data": {"agent": json.loads(inputs)}}),
                "output.mime_type": "application/json",
                "output.value": json.dumps({"agent": {"messages": transcript}}),
            },
        )


def test_a_transcript_of_the_turn_is_the_answer_and_what_it_was_given() -> None:
    recorder = Recorder()
    system = (
        "ChatMessage(_role=<ChatRole.SYSTEM: 'system'>, _content=[TextContent(text='Use the search tool.')])"
    )
    first = [
        system,
        _user("Which river flows through Paris?"),
        *_tool_turn("c1", "paris river", SEINE),
        _assistant("The Seine."),
    ]
    _haystack_turn(recorder, [_user("Which river flows through Paris?")], first)
    follow = [
        *first,
        _user("How many bridges cross it?"),
        *_tool_turn("c2", "seine bridges", BRIDGES[:1]),
        *_tool_turn("c3", "oldest paris bridge", BRIDGES[1:]),
        _assistant("37 bridges; the Pont Neuf is the oldest."),
    ]
    _haystack_turn(recorder, [*first, _user("How many bridges cross it?")], follow)
    intake = assembler()
    # With no model call to wait for, the traces wait for the bounded wait (spans below the agent
    # span may still be on their way): assembled when it runs out.
    assert intake.add(decoded(recorder.spans())).interactions == []
    found = sorted(intake.flush().interactions, key=lambda i: i.end_time_unix_nano)
    assert [(i.query, i.response) for i in found] == [
        ("Which river flows through Paris?", "The Seine."),
        ("How many bridges cross it?", "37 bridges; the Pont Neuf is the oldest."),
    ]
    one, two = found
    assert [c.content for c in one.chunks] == SEINE
    assert one.sub_queries == ("paris river",) and one.searches == 1
    # The follow-up was given the first turn's tool result too; its own searches are its turn's.
    assert [c.content for c in two.chunks] == SEINE + BRIDGES
    assert two.sub_queries == ("seine bridges", "oldest paris bridge") and two.searches == 2
    assert [(t.role, t.content) for t in two.earlier_turns] == [
        ("user", "Which river flows through Paris?"),
        ("assistant", "The Seine."),
    ]
    assert {i.span_id for i in found} == {
        s.context.span_id.to_bytes(8, "big").hex() for s in recorder.spans() if s.name == "Pipeline.run"
    }


# -- Google ADK under OpenInference: the turn's searches, the session's earlier documents ----------------


def _adk_turn(
    recorder: Recorder, session: str, question: str, searches: list[tuple[str, list[str]]], answer: str
) -> None:
    """One ADK run as the OpenInference ADK instrumentor writes it under ADK's schema 2: an
    `invocation` CHAIN, an `agent_run` AGENT, TOOL spans; no model-call span."""
    common = {"session.id": session, "user.id": "u"}
    event = json.dumps({"content": {"parts": [{"text": answer}], "role": "model"}, "author": "assistant"})
    with recorder.tracer.start_as_current_span("invocation") as run:
        with recorder.tracer.start_as_current_span("agent_run [assistant]") as agent:
            for n, (query, docs) in enumerate(searches):
                with recorder.tracer.start_as_current_span("execute_tool search") as tool:
                    response = {"result": "\n\n".join(docs)}
                    set_all(
                        tool,
                        {
                            "openinference.span.kind": "TOOL",
                            "tool.name": "search",
                            "input.mime_type": "application/json",
                            "input.value": json.dumps({"query": query}),
                            "output.mime_type": "application/json",
                            "output.value": json.dumps(
                                {"id": f"call_{n}", "name": "search", "response": response}
                            ),
                            **common,
                        },
                    )
            set_all(
                agent,
                {
                    "openinference.span.kind": "AGENT",
                    "output.mime_type": "application/json",
                    "output.value": event,
                    **common,
                },
            )
        set_all(
            run,
            {
                "openinference.span.kind": "CHAIN",
                "input.mime_type": "application/json",
                "input.value": json.dumps(
                    {"session_id": session, "new_message": {"parts": [{"text": question}], "role": "user"}}
                ),
                "output.mime_type": "application/json",
                "output.value": event,
                **common,
            },
        )


def test_an_agent_run_without_model_calls_answers_from_its_turns_searches_and_its_sessions() -> None:
    recorder = Recorder()
    _adk_turn(recorder, "s1", "Which river flows through Paris?", [("paris river", SEINE)], "The Seine.")
    _adk_turn(recorder, "s2", "Which river flows through Paris?", [("paris river", SEINE)], "The Seine.")
    _adk_turn(
        recorder,
        "s1",
        "How many bridges cross it?",
        [("seine bridges", BRIDGES[:1]), ("oldest bridge", BRIDGES[1:])],
        "37 bridges; the Pont Neuf is the oldest.",
    )
    intake = assembler()
    found = sorted(
        total([intake.add(decoded(recorder.spans())), intake.flush()]).interactions,
        key=lambda i: i.end_time_unix_nano,
    )
    assert [(i.query, i.response, i.session_id) for i in found] == [
        ("Which river flows through Paris?", "The Seine.", "s1"),
        ("Which river flows through Paris?", "The Seine.", "s2"),
        ("How many bridges cross it?", "37 bridges; the Pont Neuf is the oldest.", "s1"),
    ]
    assert [[c.content for c in i.chunks] for i in found] == [SEINE, SEINE, SEINE + BRIDGES]
    assert found[2].sub_queries == ("seine bridges", "oldest bridge") and found[2].searches == 2
    assert [(t.role, t.content) for t in found[2].earlier_turns] == [
        ("user", "Which river flows through Paris?"),
        ("assistant", "The Seine."),
    ]
    anchors = {s.context.span_id.to_bytes(8, "big").hex() for s in recorder.spans() if s.name == "invocation"}
    assert {i.span_id for i in found} == anchors


@pytest.mark.parametrize("seed", range(4))
def test_agent_spans_without_model_calls_read_the_same_in_any_arrival_order(seed: int) -> None:
    recorder = Recorder()
    _adk_turn(recorder, "s1", "Which river flows through Paris?", [("paris river", SEINE)], "The Seine.")
    _adk_turn(recorder, "s1", "How many bridges cross it?", [("seine bridges", BRIDGES)], "37 bridges.")
    first = [
        _user("Which river flows through Paris?"),
        *_tool_turn("c1", "paris river", SEINE),
        _assistant("The Seine."),
    ]
    _haystack_turn(recorder, first[:1], first)
    spans = decoded(recorder.spans())
    in_order = assembler()
    want = total([in_order.add(spans), in_order.flush()]).interactions
    shuffled = list(spans)
    random.Random(seed).shuffle(shuffled)
    one_by_one = assembler()
    got = total([*(one_by_one.add([span]) for span in shuffled), one_by_one.flush()]).interactions

    def key(found: list[RagInteraction]) -> list[tuple[object, ...]]:
        return sorted((i.span_id, i.query, tuple(c.content for c in i.chunks), i.sub_queries) for i in found)

    assert len(want) == 3 and key(got) == key(want)
    # The follow-up still follows its session's first turn, which ended before it.
    (follow_up,) = [i for i in got if i.query == "How many bridges cross it?"]
    assert [c.content for c in follow_up.chunks] == SEINE + BRIDGES


def _interaction(span_id: str, chunks: list[str]) -> RagInteraction:
    return RagInteraction(
        trace_id=span_id,
        span_id=span_id,
        query="q" + span_id,
        chunks=tuple(Chunk(c) for c in chunks),
        response="r",
        service="a",
        route="r",
        session_id="s",
    )


def test_a_sessions_earlier_documents_join_only_inferred_answers_and_are_bounded() -> None:
    sessions = Sessions(document_chars=len(SEINE[1]) + len(BRIDGES[0]))
    assert [c.content for c in sessions.follow(_interaction("1", SEINE), 0.0, inferred=True).chunks] == SEINE
    # An answer whose model call states what it was given keeps exactly that.
    assert [c.content for c in sessions.follow(_interaction("2", BRIDGES[:1]), 1.0).chunks] == BRIDGES[:1]
    joined = sessions.follow(_interaction("3", [*BRIDGES[:1], SEINE[0]]), 2.0, inferred=True)
    assert [c.content for c in joined.chunks] == [*SEINE, BRIDGES[0]]  # earlier first, each once
    # Only the latest documents that fit were kept: SEINE[0] fell out.
    later = sessions.follow(_interaction("4", BRIDGES[1:]), 3.0, inferred=True)
    assert [c.content for c in later.chunks] == [SEINE[1], *BRIDGES]
