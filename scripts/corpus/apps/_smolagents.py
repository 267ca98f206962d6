"""The smolagents app shared by the ToolCallingAgent and CodeAgent stacks (OpenInference instrumentor).

An `OpenAIServerModel` on the fake server, a `search` tool (the 3 documents joined by blank lines),
the agent with its default prompts and memory. smolagents writes its memory back to the model as
text, not as chat tool messages: a step's tool calls become an assistant message
"Calling tools: [...]" and their results one user message "Observation: ...", the results of
parallel calls joined in that one message. So the policy counts the searches done by the queries
already written in the assistant messages of the turn, not by tool messages.

- ToolCallingAgent: the model answers by calling the built-in `final_answer` tool with the text;
  parallel tool calls are run by the agent in a thread pool.
- CodeAgent: the model writes Python between `<code>` tags, calling `search(...)` and
  `print`-ing the result, then `final_answer("...")`; "two-parallel" is both searches in one code
  block (one model call), which is how a code agent asks for two at once.

A conversation: the second turn is `agent.run(question, reset=False)` on the same agent (its memory
keeps the first turn); each run is its own trace. smolagents has no session id; both turns run
inside OpenInference's `using_session(...)`, which stamps `session.id` on their spans.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fake_llm import Call, Message, Reply, ToolCall
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, SEARCH_TOOL, ScenarioPolicy, Turn, search_text

FINAL_ANSWER = "final_answer"


class SmolagentsPolicy(ScenarioPolicy):
    def __init__(self, code: bool) -> None:
        super().__init__()
        self.code = code

    def results_seen(self, after: list[Message]) -> int:
        raise NotImplementedError("smolagents: counted from the turn's queries in __call__")

    def __call__(self, call: Call) -> Reply:
        turn, after = self.current(call)
        written = "\n".join(m.text for m in after if m.role == "assistant")
        seen = sum(1 for q in turn.queries if q in written)
        if seen >= len(turn.queries):
            return self.answer_reply(call, turn)
        pending = turn.queries[seen:] if turn.parallel else turn.queries[seen : seen + 1]
        return self.search_reply(call, turn, pending)

    def search_reply(self, call: Call, turn: Turn, queries: tuple[str, ...]) -> Reply:
        if not self.code:
            return super().search_reply(call, turn, queries)
        names = [f"result_{n}" for n in range(len(queries))]
        lines = [f'{name} = {SEARCH_TOOL}(query="{q}")' for name, q in zip(names, queries, strict=True)]
        lines += [f"print({name})" for name in names]
        code = "\n".join(lines)
        return Reply(
            text=f"Thought: I will search the knowledge base.\n<code>\n{code}\n</code>", queries=queries
        )

    def answer_reply(self, call: Call, turn: Turn) -> Reply:
        if self.code:
            code = f"final_answer({json.dumps(turn.answer)})"
            return Reply(text=f"Thought: The documents answer the question.\n<code>\n{code}\n</code>")
        param = (call.tools.get(FINAL_ANSWER) or ["answer"])[0]
        return Reply(tool_calls=(ToolCall(FINAL_ANSWER, {param: turn.answer}),))


def answered(code: bool) -> Any:
    """Which logged model call produced the answer: the one that called `final_answer`."""
    if code:
        return lambda entry: f"{FINAL_ANSWER}(" in (entry["reply"]["text"] or "")
    return lambda entry: any(c["name"] == FINAL_ANSWER for c in entry["reply"]["tool_calls"])


def run(stack: str, out_dir: Path, code: bool, notes: str) -> None:
    offline_env()
    recorder = Recorder(stack, out_dir)

    from openinference.instrumentation import using_session
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=recorder.provider)

    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def search(query: str) -> str:
        """Search the knowledge base for documents about a topic.

        Args:
            query: What to search for.
        """
        return search_text(query)

    from fake_llm import FakeLLM

    server = FakeLLM(SmolagentsPolicy(code)).start()
    model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.base_url, api_key="sk-fake")
    kind = CodeAgent if code else ToolCallingAgent
    for scenario in SCENARIOS:
        agent = kind(tools=[search], model=model, verbosity_level=0)
        earlier: list[list[str]] = []
        with using_session(f"session-{scenario.name}"):
            for number, turn in enumerate(scenario.turns):
                mark = server.mark()
                response = str(agent.run(turn.question, reset=number == 0))
                recorder.answer(
                    scenario, number, turn.question, response, server.since(mark), earlier, answered(code)
                )
                earlier += [["user", turn.question], ["assistant", response]]
        recorder.flush()
    server.stop()
    recorder.write(
        framework=version("smolagents"),
        instrumentation=version("openinference-instrumentation-smolagents"),
        layout="openinference attributes",
        notes=notes,
    )
