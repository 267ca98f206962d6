"""Agent traces: which model calls answer the user, and what each answer was given.

An agent calls tools (a search, once or several times, in one turn or over several) and then
answers from everything they returned, often inside a conversation. docs/intake.md ("Agents")
has the rules in full; in short:

- A trace is an agent trace when it holds a TOOL span, a model call that calls tools, or a model
  call given tool results. Other traces keep the chain rules of assemble.py unchanged.
- An *answer* is a model call (the innermost, not inside a tool) that returns text, calls no
  tool, and after which no tool runs before the next model call starts (a ReAct step returns
  text and then runs its action: it is a step, not an answer). Every answer with context is an
  interaction; a turn that only calls tools never is.
- Its *context* is what the call was given: its input messages' tool results in order, each read
  as the documents of the search span that produced it (matched by tool call id, then by text,
  then by containing every document of it), else as the documents in the message itself; then
  the searches of its turn (since the previous answer) the messages did not show, in the order
  they ended. A search is a TOOL span (its documents are those of the retriever or reranker
  inside it, the reranker winning; else its output) or a retriever / reranker outside any tool
  (a reranker replaces the retriever it follows under the same parent). Chunks are
  de-duplicated by id, else by text.
- Its *query* is the user's question: the outermost chain ancestor's input (a framework's agent
  state included), else the last user message of the call, never a tool's input. The tools'
  inputs are its `sub_queries`.
- Its *earlier turns* are the user and assistant texts before that question in the call's input
  messages, the last `MAX_TURNS`, each cut to `TURN_CHARS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.model import Chunk, Turn, without_separators
from agent.otlp.conventions import TURN_CHARS, Message, Role, SpanParts, final_text, tool_documents

MAX_TURNS = 6  # earlier turns kept on an interaction (a turn: one user or assistant message)


class Piece(Protocol):
    span_id: str
    parent_id: str | None
    start: int
    end: int
    parts: SpanParts | None


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an answer of an agent trace carries besides query, chunks and response."""

    sub_queries: tuple[str, ...] = ()
    earlier_turns: tuple[Turn, ...] = ()
    searches: int = 0
    empty_searches: int = 0
    tool_errors: int = 0


@dataclass(slots=True)
class Source:
    """One search the agent ran: a TOOL span, or a retriever / reranker outside any tool."""

    piece: Piece
    chunks: tuple[Chunk, ...]  # () when it returned nothing (or failed)
    query: str | None
    output: str | None  # the text the model got back, when the span records it
    failed: bool = False
    members: list[Piece] = field(default_factory=list)  # the spans it stands for


@dataclass(frozen=True, slots=True)
class Answer:
    call: Piece
    query: str
    query_source: Piece | None
    chunks: tuple[Chunk, ...]
    response: str
    context: AgentContext
    used: tuple[Piece, ...]  # the spans it is made of, besides the call and its ancestors


def _parts(piece: Piece) -> SpanParts:
    assert piece.parts is not None
    return piece.parts


def is_agent_trace(useful: Iterable[Piece]) -> bool:
    for piece in useful:
        parts = _parts(piece)
        if parts.role is Role.TOOL:
            return True
        if parts.role is Role.LLM and (
            parts.calls_tools or any(m.role == "tool" for m in parts.messages or ())
        ):
            return True
    return False


def _normal(text: str) -> str:
    return " ".join(text.split())


def dedupe(chunks: Iterable[Chunk]) -> tuple[Chunk, ...]:
    """Chunks in order, each once: by id when it has one, else by its text."""
    seen_ids: set[str] = set()
    seen_texts: set[str] = set()
    out = []
    for chunk in chunks:
        text = _normal(chunk.content)
        if (chunk.id is not None and chunk.id in seen_ids) or text in seen_texts:
            continue
        if chunk.id is not None:
            seen_ids.add(chunk.id)
        seen_texts.add(text)
        out.append(chunk)
    return tuple(out)


class _Tree:
    """Parent and child links of a trace's pieces, built once per assembly."""

    def __init__(self, pieces: dict[str, Piece]) -> None:
        self.pieces = pieces
        self.children: dict[str, list[Piece]] = {}
        for piece in pieces.values():
            if piece.parent_id is not None:
                self.children.setdefault(piece.parent_id, []).append(piece)

    def ancestors(self, piece: Piece) -> list[Piece]:
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


def _role(piece: Piece) -> Role | None:
    return piece.parts.role if piece.parts is not None else None


def _retrieved(retrievals: Sequence[Piece]) -> tuple[Chunk, ...]:
    """The documents of the retrievals inside one search: the last reranker's output when there
    is one (it replaces the list it reranked), else every retriever's, in the order they ended."""
    rerankers = [r for r in retrievals if _role(r) is Role.RERANKER and _parts(r).chunks]
    if rerankers:
        return tuple(_parts(max(rerankers, key=lambda r: r.end)).chunks or ())
    return dedupe(c for r in sorted(retrievals, key=lambda r: r.end) for c in _parts(r).chunks or ())


def sources(useful: Sequence[Piece], tree: _Tree) -> list[Source]:
    """Every search of the trace, in the order they ended."""
    found: list[Source] = []
    inside_tools: set[str] = set()
    for piece in useful:
        parts = _parts(piece)
        if parts.role is not Role.TOOL:
            continue
        if any(_role(a) is Role.TOOL for a in tree.ancestors(piece)):
            continue  # a tool inside a tool: the outer one is what the model saw
        inner = [d for d in tree.descendants(piece) if _role(d) in (Role.RETRIEVER, Role.RERANKER, Role.TOOL)]
        inside_tools.update(d.span_id for d in inner)
        retrievals = [d for d in inner if _role(d) in (Role.RETRIEVER, Role.RERANKER) and _parts(d).chunks]
        chunks = _retrieved(retrievals) if retrievals and not parts.failed else (parts.chunks or ())
        query = parts.query or next((_parts(r).query for r in retrievals if _parts(r).query), None)
        found.append(Source(piece, chunks, query, parts.response, parts.failed, [piece, *inner]))
    bare = [
        p
        for p in useful
        if _role(p) in (Role.RETRIEVER, Role.RERANKER)
        and p.span_id not in inside_tools
        and not any(_role(a) is Role.TOOL for a in tree.ancestors(p))
    ]
    for piece in bare:
        parts = _parts(piece)
        if parts.role is Role.RETRIEVER and any(
            _role(r) is Role.RERANKER and r.parent_id == piece.parent_id and r.end >= piece.end for r in bare
        ):
            continue  # reranked: the reranker's output is what went on
        found.append(Source(piece, parts.chunks or (), parts.query, None, members=[piece]))
    found.sort(key=lambda s: (s.piece.end, s.piece.span_id))
    return found


class _Matcher:
    """Finds the search a tool result in a model call's input came from.

    Indexed so that matching a call's messages costs about one lookup each, however many
    searches the trace holds: by tool call id, by output text, and (for a tool that formats its
    documents into one text) by containment: the search whose first document is one of the
    result's paragraphs, else a scan of the open searches in the order they ended (where the
    result's search is nearly always the first). Each search's normalised document texts are
    computed once."""

    def __init__(self, found: Sequence[Source]) -> None:
        self._by_id: dict[str, list[Source]] = {}
        self._by_text: dict[str, list[Source]] = {}
        self._by_first: dict[str, list[Source]] = {}  # by the text of its first document
        self._texts: dict[str, tuple[str, ...]] = {}
        for source in found:
            call_id = _parts(source.piece).call_id
            if call_id:
                self._by_id.setdefault(call_id, []).append(source)
            if source.output:
                self._by_text.setdefault(_normal(source.output), []).append(source)
            if source.chunks:
                self._by_first.setdefault(self._normal_chunks(source)[0], []).append(source)

    def _normal_chunks(self, source: Source) -> tuple[str, ...]:
        texts = self._texts.get(source.piece.span_id)
        if texts is None:
            texts = self._texts[source.piece.span_id] = tuple(_normal(c.content) for c in source.chunks)
        return texts

    def match(self, message: Message, open_: dict[str, Source]) -> Source | None:
        """The first search of `open_` (searches not matched yet, keyed by span id, in the order
        they ended) that produced `message`, removed from `open_`; None when none did."""
        text = _normal(message.content)
        for found in (
            self._by_id.get(message.call_id, ()) if message.call_id else (),
            self._by_text.get(text, ()),
        ):
            for source in found:
                if source.piece.span_id in open_:
                    return open_.pop(source.piece.span_id)
        # A tool that formats its documents into one text (LangChain's retriever tool joins
        # them): the search all of whose documents the message contains. Its paragraphs find
        # the search whose first document one of them is; else the open searches are scanned.
        for paragraph in message.content.split("\n\n"):
            for source in self._by_first.get(_normal(paragraph), ()):
                span_id = source.piece.span_id
                if span_id in open_ and all(t in text for t in self._normal_chunks(source)):
                    return open_.pop(span_id)
        for span_id, source in open_.items():
            if source.chunks and all(t in text for t in self._normal_chunks(source)):
                return open_.pop(span_id)
        return None


def _call_messages(call: Piece, wrappers: Sequence[Piece]) -> tuple[Message, ...] | None:
    """The call's input conversation, from the call or the nearest model call wrapping it (the
    innermost span of LlamaIndex's chat → complete records only a prompt)."""
    for piece in (call, *wrappers):
        messages = _parts(piece).messages
        if messages is not None:
            return messages
    return None


def _question_index(messages: Sequence[Message]) -> int:
    return max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)


def earlier_turns(messages: Sequence[Message], question: int) -> tuple[Turn, ...]:
    turns = [
        Turn(m.role, without_separators(final_text(m.content)[:TURN_CHARS]))
        for m in messages[: max(question, 0)]
        if m.role in ("user", "assistant")
    ]
    return tuple(turns[-MAX_TURNS:])


def history(messages: Sequence[Message] | None) -> tuple[Turn, ...]:
    """The earlier turns of a call's input conversation (before its question)."""
    return earlier_turns(messages, _question_index(messages)) if messages else ()


def _asks(piece: Piece) -> bool:
    return piece.parts is not None and piece.parts.role is Role.CHAIN and bool(piece.parts.query)


def agent_answers(pieces: dict[str, Piece], useful: Sequence[Piece]) -> list[Answer]:
    """The answers of an agent trace, in the order they started (see the module doc)."""
    tree = _Tree(pieces)
    llm = [p for p in useful if _role(p) is Role.LLM]
    llm_ids = {p.span_id for p in llm}
    lineage = {p.span_id: tree.ancestors(p) for p in llm}
    wrappers = {a.span_id for chain in lineage.values() for a in chain if a.span_id in llm_ids}
    calls = sorted(
        (
            p
            for p in llm
            if p.span_id not in wrappers and not any(_role(a) is Role.TOOL for a in lineage[p.span_id])
        ),
        key=lambda p: (p.start, p.span_id),
    )
    found = sources(useful, tree)
    tool_starts = sorted(s.piece.start for s in found if _role(s.piece) is Role.TOOL)
    matcher = _Matcher(found)
    answers: list[Answer] = []
    turn_start = -1  # the end of the previous answer: searches after it belong to the next
    for index, call in enumerate(calls):
        parts = _parts(call)
        if parts.response is None or parts.calls_tools:
            continue  # a turn that only calls tools
        following = next((c.start for c in calls[index + 1 :] if c.start >= call.end), None)
        if any(call.end <= t and (following is None or t < following) for t in tool_starts):
            continue  # a step whose text is followed by a tool run (ReAct)
        ancestors = lineage[call.span_id]
        call_wrappers = [a for a in ancestors if a.span_id in llm_ids]
        messages = _call_messages(call, call_wrappers)
        before = [s for s in found if s.piece.end <= call.start] or [
            s for s in found if s.piece.end <= call.end
        ]
        turn = [s for s in before if s.piece.end > turn_start]
        chunks: list[Chunk] = []
        taken: list[Source] = []
        taken_ids: set[str] = set()
        question = -1
        if messages:
            question = _question_index(messages)
            open_ = {s.piece.span_id: s for s in before}
            for message in messages:
                if message.role != "tool":
                    continue
                source = matcher.match(message, open_)
                if source is None:
                    chunks.extend(tool_documents(message.content))
                    continue
                taken.append(source)
                taken_ids.add(source.piece.span_id)
                chunks.extend(source.chunks)
        for source in turn:
            if source.piece.span_id not in taken_ids:
                taken.append(source)
                taken_ids.add(source.piece.span_id)
                chunks.extend(source.chunks)
        context = dedupe(chunks)
        if not context:
            continue
        query_source = next((a for a in reversed(ancestors) if _asks(a)), None)
        query = query_source.parts.query if query_source and query_source.parts else None
        if not query and messages and question >= 0:
            query = messages[question].content
        query = query or parts.query
        if not query:
            continue
        turn_start = call.end
        answers.append(
            Answer(
                call=call,
                query=without_separators(query),
                query_source=query_source,
                chunks=context,
                response=final_text(parts.response),
                context=AgentContext(
                    sub_queries=tuple(s.query for s in taken if s.query),
                    earlier_turns=earlier_turns(messages, question) if messages else (),
                    searches=len(taken),
                    empty_searches=sum(1 for s in taken if not s.chunks and not s.failed),
                    tool_errors=sum(1 for s in taken if s.failed),
                ),
                used=tuple(m for s in taken for m in s.members) + tuple(call_wrappers),
            )
        )
    return answers


def _plain(parts: SpanParts) -> bool:
    """A tool output that is one text, not a list of documents (a search that states its
    documents, as the minimal layout's, has no output text)."""
    return (
        not parts.failed
        and parts.response is not None
        and len(parts.chunks or ()) == 1
        and parts.chunks[0].id is None  # type: ignore[index]
    )


def settled(pieces: dict[str, Piece], useful: Sequence[Piece]) -> bool:
    """Whether an agent trace whose root has arrived can be assembled now: no span is missing
    between a piece and the root, every tool result the answering calls were given in their turn
    has its search span, and the trace holds as many searches as its answers say they were given.
    A trace that never settles is assembled when its wait runs out."""
    for piece in pieces.values():
        if piece.parent_id is not None and piece.parent_id not in pieces:
            return False
    tree = _Tree(pieces)
    found = sources(useful, tree)
    if sum(_parts(p).searches or 0 for p in useful) > len(found):
        return False  # answers that say how many searches they were given wait for them all
    for source in found:
        parts = _parts(source.piece)
        if parts.role is Role.TOOL and len(source.members) == 1 and _plain(parts):
            # Its documents may be in a retriever span inside it that is still on its way (a
            # LangChain retriever tool joins them into one text): wait for the bounded wait.
            return False
    matcher = _Matcher(found)
    for piece in useful:
        parts = _parts(piece)
        if parts.role is not Role.LLM or not parts.messages or parts.calls_tools:
            continue
        messages = parts.messages
        question = _question_index(messages)
        open_ = {s.piece.span_id: s for s in found}
        for message in messages[question + 1 :]:
            if message.role == "tool" and matcher.match(message, open_) is None:
                return False
    return True
