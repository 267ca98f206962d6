"""The knowledge base and the scenarios every corpus stack runs, and the policy that plays them.

Stdlib only (it is imported in every stack's venv). A stack's app does, per scenario and turn:

    for scenario in SCENARIOS:                     # each scenario is its own trace
        for turn in scenario.turns:                # turn.question goes to the framework
            ... the framework calls the fake model; its search tool calls search(query) ...

- `search(query)` returns the 3 documents (texts) of a query, in rank order; `search_text(query)`
  the same joined by blank lines (for tools that return one string). Every query the policy asks
  for is a key of `KNOWLEDGE_BASE`.
- `ScenarioPolicy()` is the fake model (a `fake_llm.Policy`). It finds the current turn by the
  last message that holds one of the scenario questions, counts the tool results (or ReAct
  `Observation:` steps) after it, and answers with the next step: the next search (`parallel`:
  all of them in one reply, when `parallel_tool_calls` allows), then the turn's answer.
  `ScenarioPolicy(react=True)` writes ReAct text ("Thought/Action/Action Input" and
  "Thought/Answer") instead of tool calls. Override `search_reply` / `answer_reply` for other
  shapes (a final-answer tool, a planning call that does not answer).
- The search tool's argument name is read from the request's tool schema (first parameter of
  the tool named `SEARCH_TOOL`), so `query` (LangChain, OpenAI Agents) and `input` (LlamaIndex)
  both work.

Documents carry no quotes, backslashes or non-ASCII, so their text is found verbatim inside any
JSON request body. The useful document's words, and only its words, are repeated by the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from fake_llm import Call, Message, Reply, ToolCall

SEARCH_TOOL = "search"
SEARCH_DESCRIPTION = "Search the knowledge base for documents about a topic."

KNOWLEDGE_BASE: dict[str, list[str]] = {
    "eiffel tower height": [
        "The Eiffel Tower stands 330 metres tall including its broadcast antennas.",
        "The Louvre museum in Paris houses the Mona Lisa portrait.",
        "Montmartre hill offers wide views across northern Paris.",
    ],
    "golden gate bridge opening": [
        "Alcatraz island served as a federal prison until 1963.",
        "Cable cars climb the steep hills of San Francisco.",
        "The Golden Gate Bridge opened to traffic in May 1937 after four years of construction.",
    ],
    "statue of liberty copper": [
        "The Statue of Liberty is covered with thin copper sheets that weathered into a green patina.",
        "Ellis Island processed millions of immigrants arriving by ship.",
        "Central Park spans 843 acres in the middle of Manhattan.",
    ],
    "statue of liberty frame": [
        "Brooklyn Bridge was the first steel wire suspension bridge in the world.",
        "Gustave Eiffel engineered the wrought iron pylon and skeleton inside the Statue of Liberty.",
        "Times Square is lit by enormous digital billboards.",
    ],
    "capital of australia": [
        "Canberra became the capital city of Australia as a compromise between Sydney and Melbourne.",
        "The Great Barrier Reef stretches along the Queensland coast.",
        "Kangaroos carry their young in a pouch.",
    ],
    "capital of canada": [
        "Maple syrup is mostly produced in Quebec.",
        "Ottawa is the capital city of Canada, on the south bank of the Ottawa River.",
        "Hockey is the most popular winter sport across the country.",
    ],
    "starry night painter": [
        "Vincent van Gogh painted The Starry Night in June 1889 at the asylum in Saint Remy.",
        "Claude Monet painted water lilies in his garden at Giverny.",
        "Rembrandt finished The Night Watch in Amsterdam in 1642.",
    ],
    "starry night museum": [
        "The Museum of Modern Art in New York has held The Starry Night since 1941.",
        "The Rijksmuseum displays Dutch golden age masterpieces.",
        "The Prado in Madrid keeps many works by Velazquez and Goya.",
    ],
}


@dataclass(frozen=True)
class Turn:
    question: str
    queries: tuple[str, ...]  # the searches the model asks for, in order
    answer: str  # the model's final text for the turn
    parallel: bool = False  # all searches in one model reply


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[Turn, ...]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("one-search", (Turn(
        "How tall is the Eiffel Tower?", ("eiffel tower height",),
        "The Eiffel Tower stands 330 metres tall including its broadcast antennas."),)),
    Scenario("useful-at-rank-3", (Turn(
        "When did the Golden Gate Bridge open to traffic?", ("golden gate bridge opening",),
        "The Golden Gate Bridge opened to traffic in May 1937."),)),
    Scenario("two-sequential", (Turn(
        "What covers the Statue of Liberty, and who engineered the skeleton inside it?",
        ("statue of liberty copper", "statue of liberty frame"),
        "Thin copper sheets with a green patina cover it, and Gustave Eiffel engineered its "
        "wrought iron skeleton."),)),
    Scenario("two-parallel", (Turn(
        "What are the capital cities of Australia and of Canada?",
        ("capital of australia", "capital of canada"),
        "Canberra is the capital city of Australia and Ottawa is the capital city of Canada.",
        parallel=True),)),
    Scenario("conversation", (
        Turn("Who painted The Starry Night?", ("starry night painter",),
             "Vincent van Gogh painted The Starry Night in June 1889."),
        Turn("Which museum holds that painting today?", ("starry night museum",),
             "The Museum of Modern Art in New York has held it since 1941."),
    )),
)  # fmt: skip

ALL_DOCUMENTS: tuple[str, ...] = tuple(d for docs in KNOWLEDGE_BASE.values() for d in docs)


def search(query: str) -> list[str]:
    """The 3 documents of a query in rank order; an unknown query is the caller's bug."""
    key = query.strip().strip('"').lower()
    if key not in KNOWLEDGE_BASE:
        raise KeyError(f"search: unknown query {query!r}")
    return list(KNOWLEDGE_BASE[key])


def search_text(query: str) -> str:
    return "\n\n".join(search(query))


def turns_by_question() -> dict[str, Turn]:
    return {t.question: t for s in SCENARIOS for t in s.turns}


_OBSERVATION = re.compile(r"^\s*Observation:", re.MULTILINE)


class ScenarioPolicy:
    """Plays the scenarios (see the module docstring). Subclass and override the two replies."""

    def __init__(self, react: bool = False) -> None:
        self.react = react
        self.turns = turns_by_question()

    def current(self, call: Call) -> tuple[Turn, list[Message]]:
        """The turn being played and the messages after its question."""
        for index in range(len(call.messages) - 1, -1, -1):
            message = call.messages[index]
            if message.role in ("system", "tool"):
                continue
            for question, turn in self.turns.items():
                if question in message.text:
                    return turn, list(call.messages[index + 1 :])
        raise LookupError("no scenario question in the request: " + json.dumps(call.body)[:2000])

    def results_seen(self, after: list[Message]) -> int:
        """How many search results the model was given since the question."""
        # Only the search tool's results count (not a hand-off tool's reply, for instance).
        names = {c.id: c.name for m in after for c in m.tool_calls if c.id}
        tool_results = sum(
            1 for m in after if m.role == "tool" and names.get(m.tool_call_id, SEARCH_TOOL) == SEARCH_TOOL
        )
        observations = sum(len(_OBSERVATION.findall(m.text)) for m in after if m.role != "tool")
        return tool_results + observations

    def __call__(self, call: Call) -> Reply:
        turn, after = self.current(call)
        seen = self.results_seen(after)
        if seen >= len(turn.queries):
            return self.answer_reply(call, turn)
        parallel = turn.parallel and call.body.get("parallel_tool_calls", True) is not False
        if parallel and not self.react:
            return self.search_reply(call, turn, turn.queries[seen:])
        return self.search_reply(call, turn, turn.queries[seen : seen + 1])

    def argument(self, call: Call) -> str:
        params = call.tools.get(SEARCH_TOOL) or ["query"]
        return params[0] if params else "query"

    def search_reply(self, call: Call, turn: Turn, queries: tuple[str, ...]) -> Reply:
        if self.react:
            (query,) = queries
            action = f"Action: {SEARCH_TOOL}\nAction Input: {json.dumps({'input': query})}"
            return Reply(text=f"Thought: I need to search the knowledge base.\n{action}", queries=queries)
        name = self.argument(call)
        calls = tuple(ToolCall(SEARCH_TOOL, {name: q}) for q in queries)
        return Reply(tool_calls=calls, queries=queries)

    def answer_reply(self, call: Call, turn: Turn) -> Reply:
        if self.react:
            return Reply(text=f"Thought: I can answer without using any more tools.\nAnswer: {turn.answer}")
        return Reply(text=turn.answer)
