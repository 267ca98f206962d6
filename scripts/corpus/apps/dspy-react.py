"""DSPy `dspy.ReAct` with a retrieval tool, `dspy.LM` (LiteLLM) on the fake server, OpenInference DSPy.

DSPy's ChatAdapter speaks in `[[ ## field ## ]]` sections, so the fake model answers in them:
each ReAct step is one model call returning `next_thought` / `next_tool_name` /
`next_tool_args` (the observations come back inside the `trajectory` input field of the next
call), `finish` ends the loop, and a separate extract call (ChainOfThought over the question and
the trajectory) writes `reasoning` and `answer`: that extract call is the answering call.
ReAct picks ONE tool per step, so "two-parallel" runs as two successive steps (no parallel calls).
A conversation: the signature has a `history: dspy.History` input and the second turn passes the
first turn's question and answer in it (DSPy's way to carry a conversation); each call is its own
trace, both inside OpenInference's `using_session(...)` (DSPy has no session id of its own).

Run through scripts/corpus/record.sh (it sets PYTHONPATH=scripts/corpus): app.py OUT_DIR
"""

import json
import os
import re
import sys
from pathlib import Path

from fake_llm import Call, FakeLLM, Reply
from recording import Recorder, offline_env, version
from scenarios import SCENARIOS, ScenarioPolicy, Turn, search

STACK = "dspy-react"
_OBSERVATION = re.compile(r"\[\[ ## observation_\d+ ## \]\]")


def sections(**fields: str) -> str:
    """A reply in ChatAdapter's format."""
    body = "\n\n".join(f"[[ ## {name} ## ]]\n{value}" for name, value in fields.items())
    return body + "\n\n[[ ## completed ## ]]\n"


class DSPyReActPolicy(ScenarioPolicy):
    """ReAct steps until every query of the turn has an observation, then `finish`, then the answer."""

    def __call__(self, call: Call) -> Reply:
        turn, _ = self.current(call)
        system = next((m.text for m in call.messages if m.role == "system"), "")
        if "next_tool_name" not in system:  # the extract call
            return self.answer_reply(call, turn)
        seen = len(_OBSERVATION.findall(call.messages[-1].text))
        if seen < len(turn.queries):
            return self.search_reply(call, turn, turn.queries[seen : seen + 1])
        text = sections(
            next_thought="The observations answer the question.", next_tool_name="finish", next_tool_args="{}"
        )
        return Reply(text=text)

    def search_reply(self, call: Call, turn: Turn, queries: tuple[str, ...]) -> Reply:
        (query,) = queries
        args = json.dumps({"query": query})
        text = sections(
            next_thought="I need to search the knowledge base.", next_tool_name="search", next_tool_args=args
        )
        return Reply(text=text, queries=queries)

    def answer_reply(self, call: Call, turn: Turn) -> Reply:
        return Reply(
            text=sections(reasoning="The retrieved documents answer the question.", answer=turn.answer)
        )


def main(out_dir: Path) -> None:
    offline_env()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download
    recorder = Recorder(STACK, out_dir)

    from openinference.instrumentation import using_session
    from openinference.instrumentation.dspy import DSPyInstrumentor

    DSPyInstrumentor().instrument(tracer_provider=recorder.provider)

    import dspy

    def search_documents(query: str) -> list[str]:
        """Search the knowledge base for documents about a topic."""
        return search(query)

    server = FakeLLM(DSPyReActPolicy()).start()
    lm = dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-fake", cache=False)
    dspy.configure(lm=lm)
    tool = dspy.Tool(search_documents, name="search")
    for scenario in SCENARIOS:
        agent = dspy.ReAct("question: str, history: dspy.History -> answer: str", tools=[tool])
        history: list[dict[str, str]] = []
        earlier: list[list[str]] = []
        with using_session(f"session-{scenario.name}"):
            for number, turn in enumerate(scenario.turns):
                mark = server.mark()
                prediction = agent(question=turn.question, history=dspy.History(messages=list(history)))
                response = prediction.answer
                recorder.answer(scenario, number, turn.question, response, server.since(mark), earlier)
                earlier += [["user", turn.question], ["assistant", response]]
                history.append({"question": turn.question, "answer": response})
        recorder.flush()
    server.stop()
    recorder.write(
        framework=version("dspy", "litellm"),
        instrumentation=version("openinference-instrumentation-dspy"),
        layout="openinference attributes",
        notes="dspy.ReAct with the ChatAdapter: tool choice and arguments are text fields of the model "
        "reply, observations reach the next call inside the 'trajectory' input field, the answer comes from "
        "a separate extract call (ChainOfThought: reasoning + answer); two-parallel ran as two successive "
        "ReAct steps (ReAct takes one tool per step); conversation = dspy.History input with the earlier "
        "question and answer, each turn its own trace, session.id from openinference using_session",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
