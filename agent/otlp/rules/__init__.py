"""Pure rule sets over one trace tree: which spans make an interaction, and what it holds.

`chain.py` reads RAG chains (a retriever before a model call), `agent.py` agents (tools, several
model calls, conversations). Both return `Finding`s; the assembler (agent/otlp/assemble.py) turns
them into interactions with their labels. Neither knows of buffering, probes or labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.model import Chunk, Turn, without_separators
from agent.otlp.conventions import TURN_CHARS, Message, SpanParts, final_text
from agent.otlp.trace_tree import Piece

MAX_TURNS = 6  # earlier turns kept on an interaction (a turn: one user or assistant message)


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an answer of an agent trace carries besides query, chunks and response."""

    sub_queries: tuple[str, ...] = ()
    earlier_turns: tuple[Turn, ...] = ()
    searches: int = 0
    empty_searches: int = 0
    tool_errors: int = 0
    # No model call records what the answer was given (it is anchored on the span that returned
    # it): its context is the turn's searches, and a session's earlier documents join it.
    inferred: bool = False


@dataclass(frozen=True, slots=True)
class Finding:
    """One interaction a rule set found: its anchor span and what it holds.

    `related`: the pieces whose captured attributes and session ids it carries (the anchor first,
    then the spans it was made of and its ancestors); `parts`: their parts, in the same spirit.
    """

    anchor: Piece
    ancestors: tuple[Piece, ...]
    query: str
    chunks: tuple[Chunk, ...]
    response: str | None
    parts: tuple[SpanParts, ...]
    related: tuple[Piece, ...]
    agent: AgentContext | None = None


def question_index(messages: Sequence[Message]) -> int:
    return max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)


def earlier_turns(messages: Sequence[Message], question: int) -> tuple[Turn, ...]:
    """The user and assistant texts before the question, the last MAX_TURNS, each cut short."""
    turns = [
        Turn(m.role, without_separators(final_text(m.content)[:TURN_CHARS]))
        for m in messages[: max(question, 0)]
        if m.role in ("user", "assistant")
    ]
    return tuple(turns[-MAX_TURNS:])


def history(messages: Sequence[Message] | None) -> tuple[Turn, ...]:
    """The earlier turns of a call's input conversation (before its question)."""
    return earlier_turns(messages, question_index(messages)) if messages else ()
