"""One trace as a tree of pieces: the primitives every rule set shares.

A `Piece` is what assembly keeps of one span (links, labels, the `SpanParts` a convention read);
a `TraceTree` indexes a trace's pieces once (children, ancestors) and answers the questions the
rules ask: a piece's ancestors, its descendants, the model calls that are not wrapped by another,
and what a model call was given (its input messages, from itself or the model call wrapping it).
Building the tree costs O(pieces); every question is then about O(depth) or O(subtree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.model import AttributeValue
from agent.otlp.conventions import Message, Role, SpanParts


@dataclass(slots=True)
class Piece:
    """What assembly keeps of one span: links, labels and the extracted parts."""

    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int
    service: str
    route: str | None
    parts: SpanParts | None  # None: a span kept only to link its children to their ancestors
    captured: Mapping[str, AttributeValue] | None = None  # attributes sampling rules look at
    session_id: str | None = None  # a link's conversation id (an agent root that says nothing else)
    returned: str | None = None  # a link's output: what an outer step returned (no input of its own)

    @property
    def output(self) -> str | None:
        """What an outer step (a chain or agent span) returned, whether it is a piece or a link."""
        if self.parts is not None:
            return self.parts.response if self.parts.role is Role.CHAIN else None
        return self.returned

    @property
    def role(self) -> Role | None:
        return self.parts.role if self.parts is not None else None


def parts_of(piece: Piece) -> SpanParts:
    assert piece.parts is not None
    return piece.parts


class TraceTree:
    """Parent and child links of a trace's pieces, built once per assembly."""

    def __init__(self, pieces: Mapping[str, Piece]) -> None:
        self.pieces = pieces
        self.useful: list[Piece] = [p for p in pieces.values() if p.parts is not None]
        self.children: dict[str, list[Piece]] = {}
        for piece in pieces.values():
            if piece.parent_id is not None:
                self.children.setdefault(piece.parent_id, []).append(piece)
        self._ancestors: dict[str, list[Piece]] = {}

    def of_role(self, *roles: Role) -> list[Piece]:
        return [p for p in self.useful if p.role in roles]

    def ancestors(self, piece: Piece) -> list[Piece]:
        """The known ancestors of a piece, nearest first (a cycle or a gap ends the walk)."""
        cached = self._ancestors.get(piece.span_id)
        if cached is not None:
            return cached
        chain: list[Piece] = []
        seen = {piece.span_id}
        parent = piece.parent_id
        while parent is not None and parent not in seen:
            ancestor = self.pieces.get(parent)
            if ancestor is None:
                break
            seen.add(parent)
            chain.append(ancestor)
            parent = ancestor.parent_id
        self._ancestors[piece.span_id] = chain
        return chain

    def descendants(self, piece: Piece) -> list[Piece]:
        out: list[Piece] = []
        stack = list(self.children.get(piece.span_id, ()))
        seen = {piece.span_id}
        while stack:
            child = stack.pop()
            if child.span_id in seen:
                continue
            seen.add(child.span_id)
            out.append(child)
            stack.extend(self.children.get(child.span_id, ()))
        return out

    def complete(self) -> bool:
        """Whether no span is missing between a piece and the root."""
        pieces = self.pieces
        for piece in pieces.values():
            if piece.parent_id is not None and piece.parent_id not in pieces:
                return False
        return True

    def inside(self, piece: Piece, role: Role) -> bool:
        """Whether an ancestor of the piece has `role`."""
        return any(a.role is role for a in self.ancestors(piece))

    def wrapped_calls(self, calls: Sequence[Piece]) -> set[str]:
        """The span ids of model calls that wrap another model call (the innermost is the call)."""
        ids = {p.span_id for p in calls}
        return {a.span_id for call in calls for a in self.ancestors(call) if a.span_id in ids}

    def wrappers(self, call: Piece) -> list[Piece]:
        """The model calls wrapping a call, nearest first."""
        return [a for a in self.ancestors(call) if a.role is Role.LLM]

    def given(self, call: Piece) -> tuple[Message, ...] | None:
        """What a model call was given: its input conversation, from the call or the nearest
        model call wrapping it (the innermost span of LlamaIndex's chat → complete records only
        a prompt)."""
        for piece in (call, *self.wrappers(call)):
            messages = parts_of(piece).messages
            if messages is not None:
                return messages
        return None

    def outermost(self, piece: Piece, role: Role) -> Piece | None:
        """The outermost ancestor with `role` (or the piece itself when it has none)."""
        found = next((a for a in reversed(self.ancestors(piece)) if a.role is role), None)
        return found
