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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from agent.model import Chunk, without_separators
from agent.otlp.conventions import Message, Role, SpanParts, final_text, tool_documents
from agent.otlp.rules import AgentContext, Finding, earlier_turns, question_index
from agent.otlp.trace_tree import Piece, TraceTree


@dataclass(slots=True)
class Search:
    """One search the agent ran: a TOOL span, or a retriever / reranker outside any tool."""

    piece: Piece
    chunks: tuple[Chunk, ...]  # () when it returned nothing (or failed)
    query: str | None
    output: str | None  # the text the model got back, when the span records it
    failed: bool = False
    members: list[Piece] = field(default_factory=list)  # the spans it stands for
    # Its output's and documents' normalised texts, once computed (_Matcher).
    normal_output: str | None = None
    normal_chunks: tuple[str, ...] | None = None


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
        role = parts.role
        if role is Role.TOOL or (role is Role.LLM and parts.calls_tools):
            return True
        if parts.messages and role in (Role.LLM, Role.CHAIN) and _shows_tools(parts):
            return True
    return False


def _shows_tools(parts: SpanParts) -> bool:
    """Whether a span's messages hold a tool result: a model call given one, or an agent span
    whose output is the turn's transcript."""
    return any(m.role == "tool" for m in parts.messages or ())


# The ASCII whitespace that `str.split()` splits on besides single spaces (and two spaces).
_BREAKS = ("\n", "  ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")


def _normal(text: str) -> str:
    if text.isascii() and text[:1] != " " and text[-1:] != " ":
        for mark in _BREAKS:
            if mark in text:
                break
        else:
            return text  # already normal: most documents, and far cheaper to check than to rebuild
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


def _role(piece: Piece) -> Role | None:
    return piece.parts.role if piece.parts is not None else None


def _retrieved(retrievals: Sequence[Piece]) -> tuple[Chunk, ...]:
    """The documents of the retrievals inside one search: the last reranker's output when there
    is one (it replaces the list it reranked), else every retriever's, in the order they ended."""
    rerankers = [r for r in retrievals if _role(r) is Role.RERANKER and _parts(r).chunks]
    if rerankers:
        return tuple(_parts(max(rerankers, key=lambda r: r.end)).chunks or ())
    return dedupe(c for r in sorted(retrievals, key=lambda r: r.end) for c in _parts(r).chunks or ())


def searches(useful: Sequence[Piece], tree: TraceTree) -> list[Search]:
    """Every search of the trace, in the order they ended."""
    found: list[Search] = []
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
        found.append(Search(piece, chunks, query, parts.response, parts.failed, [piece, *inner]))
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
        found.append(Search(piece, parts.chunks or (), parts.query, None, members=[piece]))
    found.sort(key=lambda s: (s.piece.end, s.piece.span_id))
    return found


class AgentTrace:
    """An agent trace as the agent rules read it: its tree, and its searches, found once (when
    first asked) for both `settled` and `agent_findings`. One per assembly attempt of a trace."""

    def __init__(self, tree: TraceTree) -> None:
        self.tree = tree
        self._searches: list[Search] | None = None

    def searches(self) -> list[Search]:
        if self._searches is None:
            self._searches = searches(self.tree.useful, self.tree)
        return self._searches


class _Matcher:
    """Finds the search a tool result in a model call's input came from.

    Indexed so that matching a call's messages costs about one lookup each, however many
    searches the trace holds: by tool call id, by output text, and (for a tool that formats its
    documents into one text) by containment: the search whose first document is one of the
    result's paragraphs, else a scan of the open searches in the order they ended (where the
    result's search is nearly always the first). Each search's normalised document texts are
    computed once (kept on the search, which `settled` and `agent_findings` share)."""

    def __init__(self, found: Sequence[Search]) -> None:
        self._by_id: dict[str, list[Search]] = {}
        self._by_text: dict[str, list[Search]] = {}
        self._by_first: dict[str, list[Search]] = {}  # by the text of its first document
        for source in found:
            call_id = _parts(source.piece).call_id
            if call_id:
                self._by_id.setdefault(call_id, []).append(source)
            if source.output:
                if source.normal_output is None:
                    source.normal_output = _normal(source.output)
                self._by_text.setdefault(source.normal_output, []).append(source)
            if source.chunks:
                self._by_first.setdefault(self.normal_chunks(source)[0], []).append(source)

    def normal_chunks(self, source: Search) -> tuple[str, ...]:
        texts = source.normal_chunks
        if texts is None:
            texts = source.normal_chunks = tuple(_normal(c.content) for c in source.chunks)
        return texts

    def match(self, message: Message, open_: dict[str, Search]) -> Search | None:
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
                if span_id in open_ and all(t in text for t in self.normal_chunks(source)):
                    return open_.pop(span_id)
        for span_id, source in open_.items():
            if source.chunks and all(t in text for t in self.normal_chunks(source)):
                return open_.pop(span_id)
        # A failed search records no output: the result is its error, not documents.
        for span_id, source in open_.items():
            if source.failed and source.output is None:
                return open_.pop(span_id)
        return None


def _asks(piece: Piece) -> bool:
    return piece.parts is not None and piece.parts.role is Role.CHAIN and bool(piece.parts.query)


_FINAL_TOOLS = ("final_answer", "finalanswer", "final_result", "finalresult", "final answer")


def _is_final_tool(piece: Piece) -> bool:
    """A tool through which the agent gives its answer (smolagents' `final_answer`, PydanticAI's
    `final_result` output tool): its argument is the answer, not a search."""
    name = (_tool_name(piece) or piece.name).lower()
    return any(n in name for n in _FINAL_TOOLS)


def _tool_name(piece: Piece) -> str | None:
    return piece.parts.tool_name if piece.parts is not None else None


_CONTROL_TOOLS = ("finish", "handoff")


def _is_control_tool(piece: Piece) -> bool:
    """A tool that only steers the loop (DSPy ReAct's `finish`, a hand-off to another agent:
    LlamaIndex's `handoff`, the OpenAI Agents SDK's `transfer_to_<agent>`): neither a search nor
    the answer."""
    return _control_name(_tool_name(piece) or piece.name)


def _control_name(name: str) -> bool:
    name = name.lower()
    return name in _CONTROL_TOOLS or name.startswith(("finish.", "finish ", "transfer_to_"))


def _returned(call: Piece, ancestors: Sequence[Piece]) -> str | None:
    """The text the trace returned to the user around a call: the outermost chain ancestor's output."""
    for ancestor in reversed(ancestors):
        if ancestor.output:
            return ancestor.output
    return None


def _matches(response: str, returned: str | None) -> bool:
    if returned is None:
        return False
    text, whole = _normal(final_text(response)), _normal(returned)
    return bool(text) and (text in whole or whole in text)


def _turn_of(ancestors: Sequence[Piece]) -> str | None:
    """The span a turn hangs under: the outermost chain ancestor (None: the trace)."""
    return next((a.span_id for a in reversed(ancestors) if a.role is Role.CHAIN or a.returned), None)


def _question(piece: Piece, messages: Sequence[Message] | None) -> str | None:
    if messages:
        index = question_index(messages)
        if index >= 0:
            return messages[index].content
    return _parts(piece).query


def _inputs(call: Piece, messages: Sequence[Message] | None) -> list[tuple[str, Message | None]]:
    """What the call was given, in order: its instructions, then its messages (or its prompt)."""
    parts = _parts(call)
    found: list[tuple[str, Message | None]] = []
    if parts.instructions:
        found.append((parts.instructions, None))
    if messages:
        found.extend((m.content, m) for m in messages)
    elif parts.query:
        found.append((parts.query, None))
    return found


def _contained(text: str, open_: dict[str, Search], texts: _Matcher) -> list[tuple[int, Search, Chunk]]:
    """The documents of the open searches whose text the input contains, with their positions;
    the searches found are removed from `open_`."""
    whole = _normal(text)
    hits: list[tuple[int, Search, Chunk]] = []
    for span_id, search in list(open_.items()):
        found = False
        for chunk, normal in zip(search.chunks, texts.normal_chunks(search), strict=True):
            at = whole.find(normal) if normal else -1
            if at >= 0:
                hits.append((at, search, chunk))
                found = True
        if found:
            del open_[span_id]
    hits.sort(key=lambda hit: hit[0])
    return hits


@dataclass(slots=True)
class _Candidate:
    call: Piece
    response: str
    turn: str | None
    question: str | None
    final_tool: Piece | None = None


def agent_answers(trace: AgentTrace) -> list[Answer]:
    """The answers of an agent trace, in the order they started (see the module doc)."""
    tree = trace.tree
    useful = tree.useful
    llm = [p for p in useful if _role(p) is Role.LLM]
    llm_ids = {p.span_id for p in llm}
    wrappers = tree.wrapped_calls(llm)
    calls = sorted(
        (p for p in llm if p.span_id not in wrappers and not tree.inside(p, Role.TOOL)),
        key=lambda p: (p.start, p.span_id),
    )
    final_tools = [p for p in useful if _role(p) is Role.TOOL and _is_final_tool(p)]
    final_ids = {p.span_id for p in final_tools} | {
        p.span_id for p in useful if _role(p) is Role.TOOL and _is_control_tool(p)
    }
    every = trace.searches()
    found = [s for s in every if s.piece.span_id not in final_ids]
    steering = _Matcher([s for s in every if s.piece.span_id in final_ids])  # their results are no documents
    steers = {s.piece.span_id: s for s in every if s.piece.span_id in final_ids}
    tool_starts = sorted(s.piece.start for s in found if _role(s.piece) is Role.TOOL)
    matcher = _Matcher(found)
    messages_of = {c.span_id: tree.given(c) for c in calls}

    # The answer candidates: model calls returning text and calling no tool, not followed by a
    # tool run (a ReAct step), and the model calls whose reply called a final-answer tool.
    candidates: list[_Candidate] = []
    for index, call in enumerate(calls):
        parts = _parts(call)
        ancestors = tree.ancestors(call)
        following = next((c.start for c in calls[index + 1 :] if c.start >= call.end), None)
        final = next(
            (f for f in final_tools if f.start >= call.end and (following is None or f.start < following)),
            None,
        )
        if final is not None:
            response = _parts(final).query or _returned(call, ancestors) or _parts(final).response
            if response:
                candidates.append(
                    _Candidate(
                        call, response, _turn_of(ancestors), _question(call, messages_of[call.span_id]), final
                    )
                )
            continue
        if parts.response is None or parts.calls_tools:
            continue  # a turn that only calls tools
        if any(call.end <= t and (following is None or t < following) for t in tool_starts):
            continue  # a step whose text is followed by a tool run (ReAct)
        candidates.append(
            _Candidate(call, parts.response, _turn_of(ancestors), _question(call, messages_of[call.span_id]))
        )
    # A planning step: a text reply followed, in the same turn and for the same question, by
    # another model call (a separate generation step); the trace's returned text decides when known.
    # An agent span that returned text while no model call under it says what it returned (the
    # model calls recorded no content, or there are no model-call spans): the agent span is the
    # answer's anchor, given the searches under it or the transcript its output states.
    turns_answered = {c.turn for c in candidates}
    for outer in useful:
        outer_parts = _parts(outer)
        if (
            outer.role is Role.CHAIN
            and outer_parts.query
            and outer_parts.response
            and outer.span_id not in turns_answered
            and not tree.inside(outer, Role.CHAIN)
            and (
                _shows_tools(outer_parts)
                or any(s.piece.start >= outer.start and s.piece.end <= outer.end for s in found)
            )
        ):
            candidates.append(_Candidate(outer, outer_parts.response, outer.span_id, outer_parts.query))
            messages_of[outer.span_id] = outer_parts.messages
    candidates.sort(key=lambda c: (c.call.start, c.call.span_id))
    answering: list[_Candidate] = []
    for index, candidate in enumerate(candidates):
        later = [
            c
            for c in candidates[index + 1 :]
            if c.turn == candidate.turn and c.call.start >= candidate.call.end
        ]
        returned = _returned(candidate.call, tree.ancestors(candidate.call)) if later else None
        if returned is not None and any(_matches(c.response, returned) for c in later):
            if not _matches(candidate.response, returned):
                continue  # the trace returned a later call's text: this one was a step
        elif any(
            c.question is None or candidate.question is None or c.question == candidate.question
            for c in later
        ):
            continue  # the same question answered again later: this one was a step
        answering.append(candidate)

    answers: list[Answer] = []
    turn_start = -1  # the end of the previous answer: searches after it belong to the next
    first_question: dict[str | None, str] = {}
    for call in calls:
        question_text = _question(call, messages_of[call.span_id])
        turn = _turn_of(tree.ancestors(call))
        if question_text and turn not in first_question:
            first_question[turn] = question_text
    for candidate in answering:
        call = candidate.call
        parts = _parts(call)
        ancestors = tree.ancestors(call)
        call_wrappers = [a for a in ancestors if a.span_id in llm_ids]
        messages = messages_of.get(call.span_id)
        before = [s for s in found if s.piece.end <= call.start] or [
            s for s in found if s.piece.end <= call.end
        ]
        in_turn = [s for s in before if s.piece.end > turn_start]
        chunks: list[Chunk] = []
        taken: dict[str, Search] = {}  # by span id, in the order taken
        open_ = {s.piece.span_id: s for s in before}
        question = question_index(messages) if messages else -1
        # This turn's tool results that no span stands for, when they state their call's input
        # (a transcript): searches too, their inputs sub-queries.
        this_turn = {id(m) for m in messages[question + 1 :]} if messages else set()
        stated: list[tuple[str | None, bool]] = []  # (sub-query, whether it returned documents)
        for text, message in _inputs(call, messages):
            if message is not None and message.role == "tool":
                matched = matcher.match(message, open_)
                if matched is not None:
                    taken.setdefault(matched.piece.span_id, matched)
                    chunks.extend(matched.chunks)
                    continue
                if steers and steering.match(message, dict(steers)) is not None:
                    continue  # a hand-off's or a loop control's result
            hits = _contained(text, open_, matcher) if open_ else []
            for _, hit, chunk in hits:
                taken.setdefault(hit.piece.span_id, hit)
                chunks.append(chunk)
            if not hits and message is not None and message.role == "tool":
                if message.tool is not None and _control_name(message.tool):
                    continue  # a hand-off's result in an earlier turn: no search
                documents = tool_documents(message.content)
                chunks.extend(documents)
                if message.query is not None and id(message) in this_turn:
                    stated.append((message.query, bool(documents)))
        for unseen in in_turn:
            if unseen.piece.span_id not in taken:
                taken[unseen.piece.span_id] = unseen
                chunks.extend(unseen.chunks)
        context = dedupe(chunks)
        if not context:
            continue
        query_source = next((a for a in reversed(ancestors) if _asks(a)), None)
        query = query_source.parts.query if query_source and query_source.parts else None
        if not query and messages and question >= 0:
            query = messages[question].content
        # Server-side conversation state (the Responses API): later calls of a turn are sent
        # neither the earlier turns nor the question; the turn's first model call was.
        query = query or parts.query or first_question.get(candidate.turn)
        if not query:
            continue
        turn_start = call.end
        given = list(taken.values())
        used = [m for s in given for m in s.members] + call_wrappers
        if candidate.final_tool is not None:
            used.append(candidate.final_tool)
        answers.append(
            Answer(
                call=call,
                query=without_separators(query),
                query_source=query_source,
                chunks=context,
                response=final_text(candidate.response),
                context=AgentContext(
                    sub_queries=tuple(s.query for s in given if s.query) + tuple(q for q, _ in stated if q),
                    earlier_turns=earlier_turns(messages, question) if messages else (),
                    searches=len(given) + len(stated),
                    empty_searches=sum(1 for s in given if not s.chunks and not s.failed)
                    + sum(1 for _, documents in stated if not documents),
                    tool_errors=sum(1 for s in given if s.failed),
                    inferred=call.role is not Role.LLM and not messages,
                ),
                used=tuple(used),
            )
        )
    return answers


def _plain(parts: SpanParts) -> bool:
    """A tool output that is one text, not a list of documents (a search that states its
    documents, as the minimal layout's, has no output text)."""
    return not parts.failed and parts.response is not None and all(c.id is None for c in parts.chunks or ())


def settled(trace: AgentTrace) -> bool:
    """Whether an agent trace whose root has arrived can be assembled now: no span is missing
    between a piece and the root, every tool result the answering calls were given in their turn
    has its search span, and the trace holds as many searches as its answers say they were given.
    A trace that never settles is assembled when its wait runs out."""
    tree = trace.tree
    if not tree.complete():
        return False
    useful = tree.useful
    # The text the trace returned must have come from a call or final-answer tool that is in. (An
    # answer no model call records, anchored on an agent span, waits for the bounded wait: its
    # trace may still lack spans below it, which would then form a trace of their own.)
    for root in tree.pieces.values():
        returned = root.output if root.parent_id is None else None
        if returned and not any(
            (p.role is Role.LLM and _parts(p).response and _matches(_parts(p).response or "", returned))
            or (p.role is Role.TOOL and _is_final_tool(p) and _matches(_parts(p).query or "", returned))
            for p in useful
        ):
            return False
    found = trace.searches()
    if sum(_parts(p).searches or 0 for p in useful) > len(found):
        return False  # answers that say how many searches they were given wait for them all
    for source in found:
        parts = _parts(source.piece)
        if _is_final_tool(source.piece) or _is_control_tool(source.piece):
            continue
        if parts.role is Role.TOOL and len(source.members) == 1 and _plain(parts):
            # Its documents may be in a retriever span inside it that is still on its way (a
            # LangChain retriever tool joins them into one text): wait for the bounded wait.
            return False
    matcher = _Matcher(found)
    for piece in useful:
        parts = _parts(piece)
        if parts.role is not Role.LLM or not parts.messages:
            continue
        messages = parts.messages
        question = question_index(messages)
        open_ = {s.piece.span_id: s for s in found}
        for message in messages[question + 1 :]:
            if message.role == "tool" and matcher.match(message, open_) is None:
                return False
    return True


def awaited_response(trace: AgentTrace, assembled: Callable[[str], bool]) -> str | None:
    """The earlier response a turn of this conversation continues on the provider's side (the
    Responses API's `previous_response_id`), when it is neither in this trace nor among the
    responses `assembled` knows: the turn holding it is still on its way, and this one's earlier
    turns are read from it (sessions.py), so this trace waits for it (bounded by the wait). None:
    nothing to wait for (no session names the conversation, or no call continues another's state)."""
    useful = trace.tree.useful
    calls = [_parts(p) for p in useful if p.role is Role.LLM]
    if not any(parts.continues for parts in calls) or not any(_parts(p).session_id for p in useful):
        return None
    own = {parts.response_id for parts in calls}
    for parts in calls:
        if parts.continues and parts.continues not in own and not assembled(parts.continues):
            return parts.continues
    return None


def agent_findings(trace: AgentTrace) -> tuple[list[Finding], set[str]]:
    """One finding per answer of an agent trace, and the span ids they were made of."""
    findings: list[Finding] = []
    used: set[str] = set()
    for answer in agent_answers(trace):
        call = answer.call
        ancestors = trace.tree.ancestors(call)
        used.add(call.span_id)
        used.update(p.span_id for p in answer.used)
        if answer.query_source is not None:
            used.add(answer.query_source.span_id)
        findings.append(
            Finding(
                anchor=call,
                ancestors=tuple(ancestors),
                query=answer.query,
                chunks=answer.chunks,
                response=answer.response,
                parts=tuple(p.parts for p in (call, *answer.used, *ancestors) if p.parts is not None),
                related=(call, *ancestors),
                agent=answer.context,
            )
        )
    return findings, used
