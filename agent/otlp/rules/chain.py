"""The chain rules: a retriever (or reranker) before a model call makes an interaction.

- One interaction per model call (the innermost, if model calls nest), with the documents of the
  retriever or reranker that ended last before the call started (ties: the reranker). A model
  call with no such documents makes no interaction.
- The query is the input of the outermost CHAIN ancestor of the call that has one, else the
  retriever's query, else the call's last user message.
- A span carrying query, chunks and response alone is an interaction by itself (single span),
  unless it wraps a model call that already made one (`singles`, shared with the agent rules).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.otlp.conventions import Role
from agent.otlp.rules import AgentContext, Finding, history
from agent.otlp.trace_tree import Piece, TraceTree, parts_of


def asks(piece: Piece) -> bool:
    return piece.parts is not None and piece.parts.role is Role.CHAIN and bool(piece.parts.query)


def _context(call: Piece, contexts: Sequence[Piece]) -> Piece | None:
    """The retriever / reranker output the model call saw: the last to end before it started."""
    before = [c for c in contexts if c.end <= call.start] or [c for c in contexts if c.end <= call.end]
    if not before:
        return None
    return max(before, key=lambda c: (c.end, c.role is Role.RERANKER))


def chain_findings(tree: TraceTree) -> tuple[list[Finding], set[str]]:
    """The interactions of a chain trace, and the span ids they were made of."""
    calls = tree.of_role(Role.LLM)
    contexts = tree.of_role(Role.RETRIEVER, Role.RERANKER)
    wrappers = tree.wrapped_calls(calls)
    call_ids = {p.span_id for p in calls}
    findings: list[Finding] = []
    used: set[str] = set()
    for call in sorted(calls, key=lambda p: (p.start, p.span_id)):
        if call.span_id in wrappers:
            continue
        context = _context(call, contexts)
        if context is None:
            continue
        context_parts, call_parts = parts_of(context), parts_of(call)
        if not (context_parts.chunks or context_parts.empty) or context_parts.chunks is None:
            continue  # a retrieval whose text the spans do not carry
        ancestors = tree.ancestors(call)
        query_source = next((a for a in reversed(ancestors) if asks(a)), None)
        query = (parts_of(query_source).query if query_source else None) or (
            context_parts.query or call_parts.query
        )
        if not query:
            continue
        used.add(call.span_id)
        used.add(context.span_id)
        used.update(a.span_id for a in ancestors if a.span_id in call_ids)  # the wrapped calls
        if query_source is not None:
            used.add(query_source.span_id)
        findings.append(
            Finding(
                anchor=call,
                ancestors=tuple(ancestors),
                query=query,
                chunks=context_parts.chunks,
                response=call_parts.response,
                parts=(call_parts, context_parts, *(a.parts for a in ancestors if a.parts)),
                related=(call, context, *ancestors),
            )
        )
    return findings, used


def singles(tree: TraceTree, used: set[str]) -> list[Finding]:
    """The spans that carry a whole interaction alone (the single-span layout), unless a model
    call inside them already made one. Adds what it takes to `used`."""
    candidates = [p for p in tree.useful if p.span_id not in used and parts_of(p).is_complete]
    if not candidates:
        return []  # most traces: no span carries a whole interaction
    claimed = {a.span_id for p in tree.of_role(Role.LLM) if p.span_id in used for a in tree.ancestors(p)}
    found: list[Finding] = []
    for piece in sorted(candidates, key=lambda p: (p.end, p.span_id)):
        parts = parts_of(piece)
        if piece.span_id in used or piece.span_id in claimed:
            continue
        assert parts.query is not None and parts.chunks is not None
        used.add(piece.span_id)
        ancestors = tree.ancestors(piece)
        found.append(
            Finding(
                anchor=piece,
                ancestors=tuple(ancestors),
                query=parts.query,
                chunks=parts.chunks,
                response=parts.response,
                parts=(parts, *(a.parts for a in ancestors if a.parts)),
                related=(piece, *ancestors),
                agent=AgentContext(earlier_turns=history(parts.messages), searches=1)
                if parts.messages
                else None,
            )
        )
    return found
