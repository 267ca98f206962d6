"""Agent traces: answers, their context, the user's question, conversations (agent/otlp/agents.py).

Spans are made with the real SDK in the layouts the instrumentors write (OpenInference as the
LangChain / LangGraph instrumentor writes an agent, the OTel GenAI agent spans); the real
instrumentors run in tests/integration/test_agent_frameworks.py.
"""

from __future__ import annotations

import json
import random

import pytest
from ragpulse_instrument import Search, record_interaction, record_search

from agent.model import Chunk, Turn, conversation_query, relevance_query, split_conversation
from agent.otlp.assemble import NOT_RAG
from agent.otlp.rules.agent import dedupe
from tests.support.otlp import Recorder, assembler, decoded, set_all, total

QUESTION = "Which river flows through Paris, and how many bridges cross it?"
SEINE = ["The Seine flows through Paris.", "The Seine reaches the English Channel at Le Havre."]
BRIDGES = ["Paris has 37 bridges across the Seine.", "The Pont Neuf is the oldest bridge in Paris."]
ANSWER = "The Seine; 37 bridges cross it."
FOLLOW_UP = "And which one is the oldest?"


def _messages(prefix: str, messages: list[dict]) -> dict[str, object]:
    out: dict[str, object] = {}
    for n, message in enumerate(messages):
        base = f"{prefix}.{n}.message."
        out[base + "role"] = message["role"]
        if message.get("content") is not None:
            out[base + "content"] = message["content"]
        if "tool_call_id" in message:
            out[base + "tool_call_id"] = message["tool_call_id"]
        for k, call in enumerate(message.get("tool_calls", [])):
            out[f"{base}tool_calls.{k}.tool_call.id"] = call["id"]
            out[f"{base}tool_calls.{k}.tool_call.function.name"] = "search"
            out[f"{base}tool_calls.{k}.tool_call.function.arguments"] = json.dumps({"query": call["query"]})
    return out


def langgraph_turn(
    recorder: Recorder,
    question: str,
    searches: list[tuple[str, list[str]]],
    answer: str,
    *,
    history: list[dict] | None = None,
    session: str | None = "thread-1",
    joined: bool = True,
) -> list[dict]:
    """One agent run as OpenInference's LangChain instrumentor writes `create_agent`: a LangGraph
    CHAIN root holding the agent state, per search an LLM call that calls the tool and a TOOL
    span around a RETRIEVER; then the answering call, given every tool result. Returns the
    conversation after the turn (the checkpointer's state)."""
    tracer = recorder.tracer
    messages = [*(history or []), {"role": "user", "content": question}]
    common = {"session.id": session} if session else {}
    with tracer.start_as_current_span("LangGraph") as root:
        set_all(
            root,
            {
                "openinference.span.kind": "CHAIN",
                "input.mime_type": "application/json",
                "input.value": json.dumps({"messages": [{"role": "user", "content": question}]}),
                **common,
            },
        )
        for n, (sub_query, docs) in enumerate(searches):
            call_id = f"call-{len(messages)}-{n}"
            with tracer.start_as_current_span("model"), tracer.start_as_current_span("FakeChat") as llm:
                set_all(
                    llm,
                    {
                        "openinference.span.kind": "LLM",
                        "output.value": "{}",
                        **common,
                        **_messages("llm.input_messages", messages),
                        **_messages(
                            "llm.output_messages",
                            [{"role": "assistant", "tool_calls": [{"id": call_id, "query": sub_query}]}],
                        ),
                    },
                )
            output = "\n\n".join(docs) if joined else json.dumps([{"id": d[:12], "content": d} for d in docs])
            with tracer.start_as_current_span("tools"), tracer.start_as_current_span("search") as tool:
                set_all(
                    tool,
                    {
                        "openinference.span.kind": "TOOL",
                        "input.value": sub_query,
                        "tool.name": "search",
                        "output.mime_type": "application/json",
                        **common,
                        "output.value": json.dumps(
                            {"type": "tool", "data": {"content": output, "tool_call_id": call_id}}
                        ),
                    },
                )
                if joined:
                    with tracer.start_as_current_span("VectorStoreRetriever") as retriever:
                        set_all(retriever, {"openinference.span.kind": "RETRIEVER", "input.value": sub_query})
                        for i, doc in enumerate(docs):
                            retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
            messages += [
                {"role": "assistant", "tool_calls": [{"id": call_id, "query": sub_query}]},
                {"role": "tool", "content": output, "tool_call_id": call_id},
            ]
        with tracer.start_as_current_span("model"), tracer.start_as_current_span("FakeChat") as llm:
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    **common,
                    **_messages("llm.input_messages", messages),
                    **_messages("llm.output_messages", [{"role": "assistant", "content": answer}]),
                },
            )
    return [*messages, {"role": "assistant", "content": answer}]


def contents(interaction) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.content for c in interaction.chunks]


def test_one_search_one_answer() -> None:
    recorder = Recorder()
    langgraph_turn(recorder, QUESTION, [("seine", SEINE)], ANSWER)
    out = assembler().add(decoded(recorder.spans()))
    (interaction,) = out.interactions
    assert (interaction.query, contents(interaction), interaction.response) == (QUESTION, SEINE, ANSWER)
    assert interaction.sub_queries == ("seine",) and interaction.searches == 1
    assert (interaction.empty_searches, interaction.tool_errors, interaction.earlier_turns) == (0, 0, ())
    assert interaction.session_id == interaction.conversation_id == "thread-1"
    final = [s for s in recorder.spans() if s.name == "FakeChat"][-1]
    assert interaction.span_id == format(final.context.span_id, "016x")
    # Every span accounted for: the tool-call-only turn and the graph's nodes are not_rag.
    assert out.assembled_spans + out.skipped[NOT_RAG] == len(recorder.spans()) and not out.buffered_spans


@pytest.mark.parametrize("joined", [True, False], ids=["retriever-in-tool", "tool-output-only"])
@pytest.mark.parametrize("useful_first", [True, False])
def test_two_searches_in_one_turn_give_the_answer_both(joined: bool, useful_first: bool) -> None:
    """The answer gets every search's documents in the order the model saw them: "last search
    only" and "first search only" both fail here, whichever search held the useful chunk."""
    searches = [("seine", SEINE), ("paris bridges", BRIDGES)]
    if not useful_first:
        searches.reverse()
    recorder = Recorder()
    langgraph_turn(recorder, QUESTION, searches, ANSWER, joined=joined)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert contents(interaction) == searches[0][1] + searches[1][1]
    assert interaction.query == QUESTION  # never the agent's sub-query
    assert interaction.sub_queries == tuple(q for q, _ in searches) and interaction.searches == 2
    if not joined:
        assert [c.id for c in interaction.chunks] == [d[:12] for _, docs in searches for d in docs]


def test_a_turn_that_only_calls_tools_is_never_an_interaction() -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("agent") as root:
        root.set_attribute("openinference.span.kind", "AGENT")
        with recorder.tracer.start_as_current_span("retrieve") as retriever:
            set_all(
                retriever,
                {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": SEINE[0]},
            )
        with recorder.tracer.start_as_current_span("MockFunctionCallingLLM.chat") as llm:
            # LlamaIndex's FunctionAgent: a call that only calls a tool has `output.value`
            # "assistant: None", which must not read as an answer.
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    "output.value": "assistant: None",
                    **_messages("llm.input_messages", [{"role": "user", "content": QUESTION}]),
                    **_messages(
                        "llm.output_messages",
                        [{"role": "assistant", "tool_calls": [{"id": "c1", "query": "seine"}]}],
                    ),
                },
            )
    a = assembler()
    assert a.add(decoded(recorder.spans())).interactions == []
    out = a.flush()
    assert out.interactions == [] and out.skipped == {"incomplete": 2}


def test_two_turns_in_one_trace_and_the_second_sees_the_first() -> None:
    """Two user turns under one root: one interaction per answer; the second call was given the
    first turn's tool result too (its input messages say so), and the earlier turns."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("conversation"):
        history = langgraph_turn(recorder, QUESTION, [("seine", SEINE)], ANSWER)
        langgraph_turn(recorder, FOLLOW_UP, [("oldest bridge", BRIDGES)], "The Pont Neuf.", history=history)
    first, second = assembler().add(decoded(recorder.spans())).interactions
    assert (first.query, contents(first)) == (QUESTION, SEINE)
    assert (second.query, contents(second)) == (FOLLOW_UP, SEINE + BRIDGES)
    assert second.sub_queries == ("seine", "oldest bridge")
    assert second.earlier_turns == (Turn("user", QUESTION), Turn("assistant", ANSWER))


def test_a_conversation_over_two_traces_carries_the_earlier_turns() -> None:
    recorder = Recorder()
    history = langgraph_turn(recorder, QUESTION, [("seine", SEINE)], ANSWER)
    first_trace = recorder.spans()
    langgraph_turn(recorder, FOLLOW_UP, [("oldest bridge", BRIDGES)], "The Pont Neuf.", history=history)
    second_trace = recorder.spans()[len(first_trace) :]
    a = assembler()
    (first,) = a.add(decoded(first_trace)).interactions
    (second,) = a.add(decoded(second_trace)).interactions
    assert first.earlier_turns == () and first.session_id == second.session_id == "thread-1"
    assert second.query == FOLLOW_UP
    assert second.earlier_turns == (Turn("user", QUESTION), Turn("assistant", ANSWER))
    # The first turn's tool result is in this call's input but its spans are in the other trace:
    # it is read from the message itself, one document per paragraph (as the retriever tool
    # joined them; issue 25's corpus: LangGraph create_agent).
    assert contents(second) == [*SEINE, *BRIDGES]
    assert second.sub_queries == ("oldest bridge",) and second.searches == 1
    judged = second.judged_query
    assert split_conversation(judged) == (FOLLOW_UP, second.earlier_turns)
    assert relevance_query(judged) == f"{QUESTION}\n{FOLLOW_UP}"
    assert first.judged_query == QUESTION


def test_earlier_turns_are_bounded() -> None:
    recorder = Recorder()
    history: list[dict] = []
    for n in range(8):
        history += [
            {"role": "user", "content": f"question {n} " + "x" * 3000},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    langgraph_turn(recorder, FOLLOW_UP, [("seine", SEINE)], ANSWER, history=history)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    turns = interaction.earlier_turns
    assert (
        len(turns) == 6
        and turns[0].content.startswith("question 5")
        and turns[-1] == Turn("assistant", "answer 7")
    )
    assert max(len(t.content) for t in turns) == 1000
    assert interaction.query == FOLLOW_UP


@pytest.mark.parametrize("seed", range(6))
def test_split_and_interleaved_delivery_gives_the_same_answers(seed: int) -> None:
    """One span per request, shuffled (the root may come first, the answer before its tools),
    interleaved with a second conversation: each trace waits for the spans its answer needs."""
    recorder = Recorder()
    langgraph_turn(recorder, QUESTION, [("seine", SEINE), ("paris bridges", BRIDGES)], ANSWER)
    spans = recorder.spans()
    whole = assembler().add(decoded(spans)).interactions
    other = Recorder(service="other-agent")
    langgraph_turn(other, FOLLOW_UP, [("oldest bridge", BRIDGES)], "The Pont Neuf.", session="t2")
    mixed = list(spans) + other.spans()
    random.Random(seed).shuffle(mixed)
    a = assembler()
    reports = [a.add(decoded([span])) for span in mixed]
    reports.append(a.flush())
    out = total(reports)
    by_trace = {i.trace_id: i for i in out.interactions}
    assert len(out.interactions) == 2
    got = by_trace[whole[0].trace_id]
    assert (got.query, got.chunks, got.response, got.sub_queries) == (
        whole[0].query,
        whole[0].chunks,
        whole[0].response,
        whole[0].sub_queries,
    )
    assert out.skipped.get("incomplete", 0) == 0


def test_a_react_step_is_not_an_answer_and_observations_are_tool_results() -> None:
    """ReAct (LlamaIndex's ReActAgent): every step returns text; the step whose text is followed
    by a tool run is not an answer, and the final one is read after its "Answer:"."""
    recorder = Recorder()
    tracer = recorder.tracer
    output = "\n\n".join(SEINE) + "\n\n"
    with tracer.start_as_current_span("ReActAgent.run") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        base = [{"role": "system", "content": "You are ..."}, {"role": "user", "content": QUESTION}]
        step = 'Thought: I need to search.\nAction: search\nAction Input: {"input": "seine"}'
        with tracer.start_as_current_span("llm.chat") as llm:
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    **_messages("llm.input_messages", base),
                    **_messages("llm.output_messages", [{"role": "assistant", "content": step}]),
                },
            )
        with tracer.start_as_current_span("RetrieverTool.acall") as tool:
            set_all(
                tool,
                {
                    "openinference.span.kind": "TOOL",
                    "input.value": json.dumps({"kwargs": {"input": "seine"}}),
                    "input.mime_type": "application/json",
                    "output.mime_type": "application/json",
                    "output.value": json.dumps({"blocks": [{"text": output}], "tool_name": "search"}),
                },
            )
            with tracer.start_as_current_span("retrieve") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(SEINE):
                    retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
                    retriever.set_attribute(f"retrieval.documents.{i}.document.id", f"s{i}")
        messages = [
            *base,
            {"role": "assistant", "content": step},
            {"role": "user", "content": "Observation: " + output},
        ]
        with tracer.start_as_current_span("llm.chat") as llm:
            set_all(
                llm,
                {
                    "openinference.span.kind": "LLM",
                    **_messages("llm.input_messages", messages),
                    **_messages(
                        "llm.output_messages",
                        [{"role": "assistant", "content": "Thought: I can answer.\nAnswer: " + ANSWER}],
                    ),
                },
            )
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert (interaction.query, contents(interaction), interaction.response) == (QUESTION, SEINE, ANSWER)
    assert [c.id for c in interaction.chunks] == ["s0", "s1"] and interaction.sub_queries == ("seine",)


def genai_agent(recorder: Recorder, *, fail_second: bool = False) -> None:
    """OTel GenAI agent spans: invoke_agent → chat (tool_call) → execute_tool → ... → chat."""
    tracer = recorder.tracer

    def text(role: str, content: str) -> dict:
        return {"role": role, "parts": [{"type": "text", "content": content}]}

    messages = [text("user", QUESTION)]
    with tracer.start_as_current_span("invoke_agent helper") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv-9"})
        for n, (query, docs) in enumerate([("seine", SEINE), ("bridges", BRIDGES)]):
            call = {"type": "tool_call", "id": f"c{n}", "name": "search", "arguments": {"query": query}}
            with tracer.start_as_current_span("chat m") as llm:
                set_all(
                    llm,
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": json.dumps(messages),
                        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
                    },
                )
            result = [{"id": f"{query}-{i}", "content": d} for i, d in enumerate(docs)]
            with tracer.start_as_current_span("execute_tool search") as tool:
                set_all(
                    tool,
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.call.id": f"c{n}",
                        "gen_ai.tool.call.arguments": json.dumps({"query": query}),
                    },
                )
                if fail_second and n == 1:
                    tool.set_attribute("error.type", "TimeoutError")
                    result_text = "Error: timed out"
                else:
                    tool.set_attribute("gen_ai.tool.call.result", json.dumps(result))
                    result_text = json.dumps(result)
            messages += [
                {"role": "assistant", "parts": [call]},
                {
                    "role": "tool",
                    "parts": [{"type": "tool_call_response", "id": f"c{n}", "response": result_text}],
                },
            ]
        with tracer.start_as_current_span("chat m") as llm:
            set_all(
                llm,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": json.dumps([text("assistant", ANSWER)]),
                },
            )


def test_genai_agent_spans() -> None:
    recorder = Recorder()
    genai_agent(recorder)
    (interaction,) = assembler().add(decoded(recorder.spans(), "json")).interactions
    assert (interaction.query, contents(interaction), interaction.response) == (
        QUESTION,
        SEINE + BRIDGES,
        ANSWER,
    )
    assert [c.id for c in interaction.chunks] == ["seine-0", "seine-1", "bridges-0", "bridges-1"]
    assert interaction.session_id == "conv-9" and interaction.sub_queries == ("seine", "bridges")


def test_a_failed_tool_is_counted_not_read_as_context() -> None:
    recorder = Recorder()
    genai_agent(recorder, fail_second=True)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert contents(interaction) == SEINE
    assert (interaction.searches, interaction.tool_errors, interaction.empty_searches) == (2, 1, 0)


def test_conversation_query_round_trip() -> None:
    turns = (Turn("user", "a"), Turn("assistant", "c"))
    assert split_conversation(conversation_query("q", turns)) == ("q", turns)
    # Separators inside span text cannot forge a turn.
    forged = (Turn("user", "a\x1equestion\x1fq2"),)
    assert split_conversation(conversation_query("q", forged)) == ("q", (Turn("user", "a question q2"),))
    assert conversation_query("q", ()) == "q" and split_conversation("q") == ("q", ())


# -- OpenLLMetry (Traceloop): the layouts its LangChain and OpenAI Agents instrumentors write -----


def _lc_tool_message(content: str, call_id: str, status: str = "success") -> dict:
    return {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "ToolMessage"],
        "kwargs": {
            "content": content,
            "type": "tool",
            "name": "search",
            "tool_call_id": call_id,
            "status": status,
        },
    }


def openllmetry_langgraph(recorder: Recorder, *, failure: str | None = None) -> None:
    """`create_agent` under opentelemetry-instrumentation-langchain 0.62: a LangGraph workflow
    whose input is the agent state; model tasks around GenAI `chat` spans; tools tasks around
    `traceloop.span.kind=tool` spans (LangChain's callback records, the ToolMessage as output)
    around `vector_db_retrieve` tasks. `failure`: "raised" (the second tool raised: error.type and
    an exception event) or "reported" (its ToolMessage has status "error")."""
    tracer = recorder.tracer

    def text(role: str, content: str) -> dict:
        return {"role": role, "parts": [{"type": "text", "content": content}]}

    state = {
        "inputs": {"messages": [{"role": "user", "content": QUESTION}]},
        "metadata": {"thread_id": "t-1"},
    }
    messages = [text("user", QUESTION)]
    with tracer.start_as_current_span("invoke_agent LangGraph") as root:
        set_all(root, {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "t-1"})
        with tracer.start_as_current_span("LangGraph.workflow") as workflow:
            set_all(
                workflow, {"traceloop.span.kind": "workflow", "traceloop.entity.input": json.dumps(state)}
            )
            for n, (query, docs) in enumerate([("seine", SEINE), ("bridges", BRIDGES)]):
                call = {"type": "tool_call", "id": f"c{n}", "name": "search", "arguments": {"query": query}}
                with tracer.start_as_current_span("execute_task model") as task:
                    task.set_attribute("traceloop.span.kind", "task")
                    with tracer.start_as_current_span("Fake.chat") as llm:
                        set_all(
                            llm,
                            {
                                "gen_ai.operation.name": "chat",
                                "gen_ai.input.messages": json.dumps(messages),
                                "gen_ai.output.messages": json.dumps(
                                    [{"role": "assistant", "parts": [call]}]
                                ),
                            },
                        )
                joined = "\n\n".join(docs)
                with tracer.start_as_current_span("execute_task tools") as task:
                    task.set_attribute("traceloop.span.kind", "task")
                    with tracer.start_as_current_span("execute_tool search") as tool:
                        arguments = json.dumps({
                            "input_str": str({"query": query}), "tags": [], "metadata": {},
                            "inputs": {"query": query}, "kwargs": {"tool_call_id": f"c{n}"},
                        })  # fmt: skip
                        set_all(
                            tool,
                            {
                                "traceloop.span.kind": "tool",
                                "gen_ai.operation.name": "execute_tool",
                                "traceloop.entity.input": arguments,
                                "gen_ai.tool.call.arguments": arguments,
                            },
                        )
                        with tracer.start_as_current_span("vector_db_retrieve Exact") as retriever:
                            found = {"documents": [{"page_content": d, "metadata": {}} for d in docs]}
                            set_all(
                                retriever,
                                {
                                    "traceloop.span.kind": "task",
                                    "gen_ai.operation.name": "vector_db_retrieve",
                                    "traceloop.entity.input": json.dumps({"query": query}),
                                    "traceloop.entity.output": json.dumps(found),
                                },
                            )
                        result = joined
                        if failure and n == 1:
                            result = "Error: the index is down"
                            if failure == "raised":
                                tool.set_attribute("error.type", "ConnectionError")
                                tool.record_exception(ConnectionError("the index is down"))
                        if failure != "raised" or n == 0:
                            status = "error" if failure and n == 1 else "success"
                            output = json.dumps(
                                {"output": _lc_tool_message(result, f"c{n}", status), "kwargs": {}}
                            )
                            tool.set_attribute("gen_ai.tool.call.result", output)
                            tool.set_attribute("traceloop.entity.output", output)
                messages += [
                    {"role": "assistant", "parts": [call]},
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": f"c{n}", "response": result}],
                    },
                ]
            with tracer.start_as_current_span("execute_task model") as task:
                task.set_attribute("traceloop.span.kind", "task")
                with tracer.start_as_current_span("Fake.chat") as llm:
                    set_all(
                        llm,
                        {
                            "gen_ai.operation.name": "chat",
                            "gen_ai.input.messages": json.dumps(messages),
                            "gen_ai.output.messages": json.dumps([text("assistant", ANSWER)]),
                        },
                    )


def test_openllmetry_langgraph_agent() -> None:
    recorder = Recorder()
    openllmetry_langgraph(recorder)
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert (interaction.query, contents(interaction), interaction.response) == (
        QUESTION,
        SEINE + BRIDGES,
        ANSWER,
    )
    assert interaction.sub_queries == ("seine", "bridges") and interaction.session_id == "t-1"
    assert (interaction.searches, interaction.tool_errors, interaction.empty_searches) == (2, 0, 0)


@pytest.mark.parametrize("failure", ["raised", "reported"])
def test_openllmetry_langgraph_failed_tool_is_counted(failure: str) -> None:
    recorder = Recorder()
    openllmetry_langgraph(recorder, failure=failure)
    a = assembler()
    (interaction,) = total([a.add(decoded(recorder.spans())), a.flush()]).interactions
    assert contents(interaction) == SEINE
    assert (interaction.searches, interaction.tool_errors, interaction.empty_searches) == (2, 1, 0)


def test_openllmetry_tool_spans_of_the_openai_agents_sdk_and_the_tool_decorator() -> None:
    """The OpenAI Agents instrumentor's `<name>.tool` spans carry the tool's own arguments and
    return value (no call id: matched by text); Traceloop's `@tool` decorator writes
    `{"args", "kwargs"}` in and the return value out."""
    recorder = Recorder()
    tracer = recorder.tracer

    def text(role: str, content: str) -> dict:
        return {"role": role, "parts": [{"type": "text", "content": content}]}

    messages = [text("user", QUESTION)]
    with tracer.start_as_current_span("Agent Workflow") as root:
        root.set_attribute("traceloop.span.kind", "workflow")
        with tracer.start_as_current_span("helper.agent") as agent_span:
            set_all(agent_span, {"traceloop.span.kind": "agent", "gen_ai.operation.name": "invoke_agent"})
            for n, (query, docs) in enumerate([("seine", SEINE), ("bridges", BRIDGES)]):
                call = {"type": "tool_call", "id": f"c{n}", "name": "search", "arguments": {"query": query}}
                with tracer.start_as_current_span("openai.response") as llm:
                    set_all(
                        llm,
                        {
                            "gen_ai.operation.name": "chat",
                            "gen_ai.input.messages": json.dumps(messages),
                            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
                        },
                    )
                result = json.dumps([{"id": f"{query}-{i}", "content": d} for i, d in enumerate(docs)])
                with tracer.start_as_current_span("search.tool") as tool:
                    if n == 0:
                        attributes = {
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.call.arguments": json.dumps({"query": query}),
                            "gen_ai.tool.call.result": result,
                        }
                    else:
                        attributes = {
                            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"query": query}}),
                            "traceloop.entity.output": result,
                        }
                    set_all(tool, {"traceloop.span.kind": "tool", **attributes})
                messages += [
                    {"role": "assistant", "parts": [call]},
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": f"c{n}", "response": result}],
                    },
                ]
            with tracer.start_as_current_span("openai.response") as llm:
                set_all(
                    llm,
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": json.dumps(messages),
                        "gen_ai.output.messages": json.dumps([text("assistant", ANSWER)]),
                    },
                )
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert (interaction.query, contents(interaction), interaction.response) == (
        QUESTION,
        SEINE + BRIDGES,
        ANSWER,
    )
    assert [c.id for c in interaction.chunks] == ["seine-0", "seine-1", "bridges-0", "bridges-1"]
    assert interaction.sub_queries == ("seine", "bridges") and interaction.searches == 2


# -- ragpulse-instrument: an answer given several searches, recorded by hand ----------------------

HISTORY = [("user", "Which city is on the Seine?"), ("assistant", "Paris.")]


def test_instrument_searches_in_one_call_make_one_interaction() -> None:
    recorder = Recorder()
    record_interaction(
        query=QUESTION,
        searches=[
            Search(query="seine", chunks=SEINE, chunk_ids=["s0", "s1"], chunk_scores=[0.9, 0.8]),
            Search(query="bridges", chunks=[*BRIDGES, SEINE[0]]),  # a passage found twice counts once
            Search(query="nothing", chunks=[]),
            Search(query="down", chunks=[], failed=True),
        ],
        response=ANSWER,
        session_id="conv-3",
        history=[HISTORY[0], {"role": "assistant", "content": HISTORY[1][1]}],
        tracer=recorder.tracer,
    )
    spans = recorder.spans()
    assert [s.name for s in spans] == ["rag.search"] * 4 + ["rag.interaction"]
    # Assembled as soon as the trace is in: nothing to wait for.
    (interaction,) = assembler().add(decoded(spans)).interactions
    assert (interaction.query, contents(interaction), interaction.response) == (
        QUESTION,
        SEINE + BRIDGES,
        ANSWER,
    )
    assert [(c.id, c.score) for c in interaction.chunks[:2]] == [("s0", 0.9), ("s1", 0.8)]
    assert interaction.sub_queries == ("seine", "bridges", "nothing", "down")
    assert (interaction.searches, interaction.empty_searches, interaction.tool_errors) == (4, 1, 1)
    assert interaction.session_id == "conv-3"
    assert interaction.earlier_turns == (Turn("user", HISTORY[0][1]), Turn("assistant", "Paris."))
    assert interaction.span_id == format(spans[-1].context.span_id, "016x")


@pytest.mark.parametrize("seed", range(3))
def test_instrument_record_search_inside_the_apps_span(seed: int) -> None:
    """`record_search` once per search inside the app's request span, then `record_interaction`
    on that span: the same interaction, whole or one span per request in any order."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("POST /ask") as request:
        request.set_attribute("http.route", "/ask")
        for query, docs in [("bridges", BRIDGES), ("seine", SEINE[:1])]:
            record_search(query=query, chunks=docs, tracer=recorder.tracer)
        record_interaction(query=QUESTION, response=ANSWER, session_id="conv-4")
    whole = assembler().add(decoded(recorder.spans())).interactions
    spans = decoded(recorder.spans())
    random.Random(seed).shuffle(spans)
    a = assembler()
    split = total([*(a.add([span]) for span in spans), a.flush()]).interactions
    for (interaction,) in (whole, split):
        assert (interaction.query, contents(interaction)) == (QUESTION, BRIDGES + SEINE[:1])
        assert interaction.sub_queries == ("bridges", "seine") and interaction.route == "/ask"
        assert interaction.session_id == "conv-4" and interaction.searches == 2


def test_instrument_keeps_the_single_retrieval_call_and_refuses_both_forms() -> None:
    recorder = Recorder()
    record_interaction(query=FOLLOW_UP, chunks=BRIDGES, response="The Pont Neuf.", history=HISTORY,
                       tracer=recorder.tracer)  # fmt: skip
    (interaction,) = assembler().add(decoded(recorder.spans())).interactions
    assert (interaction.query, contents(interaction)) == (FOLLOW_UP, BRIDGES)
    assert [t.role for t in interaction.earlier_turns] == ["user", "assistant"]
    with pytest.raises(ValueError, match="not both"):
        record_interaction(query=QUESTION, chunks=SEINE, searches=[Search("q", SEINE)], response=ANSWER)


def test_documents_differing_only_in_whitespace_count_once() -> None:
    # Every whitespace str.split() knows (ASCII and not), leading, trailing, doubled: one text.
    spaced = [f"a{w}b" for w in ("\n", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")]
    spaced += ["a\u00a0b", "a\u2028b", "a  b", " a b", "a b ", "a \n b"]
    chunks = [Chunk("a b"), *(Chunk(text) for text in spaced), Chunk("ab"), Chunk("a-b")]
    assert [c.content for c in dedupe(chunks)] == ["a b", "ab", "a-b"]
