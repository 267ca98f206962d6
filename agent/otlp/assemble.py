"""Assemble decoded spans into RagInteractions.

A RAG request usually leaves several spans in one trace (a CHAIN root, a RETRIEVER, maybe a
RERANKER, one or more LLM calls), exported in different requests or Kafka messages and in any
order. `TraceAssembler` buffers what each span contributes (its `SpanParts`, never the span) by
trace id and emits interactions when the trace's root has arrived and the trace is complete, or
when the bounded wait runs out. Rules (docs/intake.md has the full text):

- One interaction per model call (the innermost LLM span, if LLM spans nest), with the documents
  of the retriever or reranker that ended last before the call started (ties: the reranker);
  `span_id` is the LLM span's. A model call with no such documents makes no interaction.
- The query is the input of the outermost CHAIN ancestor of the call that has one, else the
  retriever's query, else the call's last user message.
- A span carrying query, chunks and response alone is an interaction by itself (single span),
  unless it wraps a model call that already made one.
- A trace whose root is a prober's span (agent/otlp/probes.py) is a probe: its interactions carry
  the golden item (reference included); one that forms none before the wait runs out is counted
  as a missed probe, and one whose request failed (the prober says so) is never scored.

Every span is accounted for exactly once: assembled, skipped with a reason, or still buffered.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.model import AttributeValue, Chunk, Probe, RagInteraction, Span
from agent.otlp import SELF_RESOURCE_ATTRIBUTE
from agent.otlp.agents import AgentContext, agent_answers, history, is_agent_trace, settled
from agent.otlp.conventions import KNOWN_PREFIXES, Convention, Role, SpanParts
from agent.otlp.probes import probe_of

# Reasons a span yields no interaction; they label ragpulse_spans_skipped_total.
NOT_RAG = "not_rag"  # carries nothing an interaction uses (or nothing its trace's interactions used)
INCOMPLETE = "incomplete"  # its trace ended (root seen, or wait over) without forming an interaction
EVICTED = "evicted"  # dropped to keep the buffer within its bounds
SELF = "self"  # emitted by ragpulse itself (resource attribute ragpulse.agent)
DUPLICATE = "duplicate"  # the same span id was already buffered (a redelivered message)

# Why a probe trace was not scored, beside the prober's own reasons (labels
# ragpulse_probe_failures_total): the app's spans did not arrive within the assembly wait.
TRACE_MISSING = "trace_missing"

# Why buffered spans were evicted; they label ragpulse_assembler_evictions_total.
MAX_TRACES = "max_traces"
MAX_SPANS_PER_TRACE = "max_spans_per_trace"
MAX_CHUNK_BYTES = "max_chunk_bytes"


@dataclass(slots=True)
class Assembly:
    """What one call to the assembler produced, and where each span it consumed went."""

    interactions: list[RagInteraction] = field(default_factory=list)
    # Parallel to `interactions`: the sequence number of the oldest request that contributed
    # spans to each one's trace, so the pipeline knows which input an interaction finishes.
    origins: list[int] = field(default_factory=list)
    assembled_spans: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    evictions: Counter[str] = field(default_factory=Counter)
    # Spans, traces and bytes held after the call (gauges, not increments). `buffered_spans` counts
    # the spans still to be accounted for; the link-only spans of a trace were accounted on arrival
    # (skipped, not_rag) but are held, and counted in `buffered_bytes`.
    buffered_spans: int = 0
    buffered_traces: int = 0
    buffered_bytes: int = 0
    # Probe traces that will not be scored, by (probe set, reason): the prober's failure reason as
    # its span arrives, or TRACE_MISSING when the app's interaction never formed.
    probe_failures: Counter[tuple[str, str]] = field(default_factory=Counter)


class Assembler(Protocol):
    """Turns spans (in any order, any batching) into interactions."""

    def add(self, spans: Iterable[Span], sequence: int = 0) -> Assembly:
        """Take the spans of request number `sequence`; return the interactions they complete."""
        ...

    def oldest_pending(self) -> int | None:
        """Sequence number of the oldest request with spans still buffered, if any."""
        ...

    def expire(self, now: float) -> Assembly:
        """Give up waiting on traces older than the bounded wait (`now`: time.monotonic())."""
        ...

    def flush(self) -> Assembly:
        """Emit or account for everything still buffered (called at shutdown)."""
        ...


class Labeller:
    """Derives the bounded `service` and `route` labels of an interaction.

    `budget` maps a (service, route) pair to the labels to use (agent.series_budget.SeriesBudget: one
    limit on the pair bounds every series labelled by both).
    """

    def __init__(
        self, route_attributes: Sequence[str], budget: Callable[[str, str], tuple[str, str]]
    ) -> None:
        self._route_attributes = tuple(route_attributes)
        self._known = {name for name in self._route_attributes if name.startswith(KNOWN_PREFIXES)}
        self._budget = budget

    def route_hint(self, span: Span) -> str | None:
        """The first configured route attribute the span carries, unbounded."""
        for name in self._route_attributes:
            # Known keys were converted at decode time; others are read from the message.
            value = (span.convention_attributes if name in self._known else span.attributes).get(name)
            if isinstance(value, str) and value:
                return value
        return None

    def labels(self, service_name: str, route: str) -> tuple[str, str]:
        return self._budget(service_name, route or "unknown")


@dataclass(slots=True)
class _Piece:
    """What assembly keeps of one span: links, labels and the extracted parts."""

    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int
    service: str
    route: str | None
    parts: SpanParts | None  # None: a span kept only to link its children to their ancestors
    captured: dict[str, AttributeValue] | None = None  # attributes sampling rules look at
    session_id: str | None = None  # a link's conversation id (an agent root that says nothing else)


@dataclass(slots=True)
class _Trace:
    first_seen: float
    sequence: int  # of the request that opened it: the oldest, as sequence numbers only grow
    pieces: dict[str, _Piece] = field(default_factory=dict)
    useful: int = 0  # pieces with parts: the spans this trace still has to account for
    size: int = 0  # estimated bytes held: every piece (links too) and its text
    has_root: bool = False
    probe: Probe | None = None  # the golden item, once the prober's span is in


# Memory one buffered span costs besides its text: the _Piece, its ids and its slot in the trace
# (measured with tracemalloc in tests/unit/test_assemble.py, rounded up).
PIECE_OVERHEAD_BYTES = 400


def _text_size(value: str | None) -> int:
    if not value:
        return 0
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def _parts_size(parts: SpanParts) -> int:
    size = _text_size(parts.query) + _text_size(parts.response)
    for chunk in parts.chunks or ():
        size += _text_size(chunk.content)
        if chunk.metadata:  # only the configured keys, values cut short (conventions)
            size += sum(_text_size(key) + _text_size(value) + 64 for key, value in chunk.metadata)
    for message in parts.messages or ():
        size += _text_size(message.content) + 64
    return size


# Parts of a span kept only as a link that names the conversation (an agent root saying nothing
# else): it opens no trace and is accounted not_rag, like any link.
_LINK = Role.OTHER


def _is_self(span: Span) -> bool:
    value = span.resource.attributes.get(SELF_RESOURCE_ATTRIBUTE)
    return value is True or (isinstance(value, str) and value.lower() == "true")


class TraceAssembler:
    """Buffers spans by trace id and assembles each trace into interactions (see module doc)."""

    def __init__(
        self,
        conventions: Sequence[Convention],
        labeller: Labeller,
        *,
        wait_seconds: float,
        max_traces: int,
        max_spans_per_trace: int,
        max_chunk_bytes: int,
        capture: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`capture`: span attributes carried onto interactions (for sampling keep rules)."""
        self._capture = tuple(capture)
        self._conventions = tuple(conventions)
        self._labeller = labeller
        self._wait = wait_seconds
        self._max_traces = max_traces
        self._max_spans = max_spans_per_trace
        self._max_bytes = max_chunk_bytes
        self._clock = clock
        self._traces: OrderedDict[str, _Trace] = OrderedDict()  # oldest first
        self._buffered = 0
        self._bytes = 0

    # -- the Assembler protocol -------------------------------------------------------------------

    def add(self, spans: Iterable[Span], sequence: int = 0) -> Assembly:
        out = Assembly()
        # Group first, so that a trace whose spans share one request keeps all its links even
        # when the linking spans come before the first useful one.
        batch: dict[str, list[tuple[Span, SpanParts | None]]] = {}
        probes: dict[str, Probe] = {}
        resource, is_self = None, False
        for span in spans:
            if span.resource is not resource:  # spans of one request share a few resources
                resource, is_self = span.resource, _is_self(span)
            if is_self:
                out.skipped[SELF] += 1
                continue
            probe = probe_of(span)
            if probe is not None:
                probes[span.trace_id] = probe
            parts = self._extract(span)
            if parts is not None and not parts.is_useful:
                # Only a link; an agent root may still name the conversation.
                parts = SpanParts(_LINK, session_id=parts.session_id) if parts.session_id else None
            batch.setdefault(span.trace_id, []).append((span, parts))
        now = self._clock()
        touched = []
        for trace_id, members in batch.items():
            trace = self._traces.get(trace_id)
            probe = probes.get(trace_id)
            if trace is None:
                if probe is None:
                    if len(members) == 1 and self._single(members[0], sequence, out):
                        continue
                    if all(parts is None or parts.role is _LINK for _, parts in members):
                        out.skipped[NOT_RAG] += len(members)
                        continue
                # A probe's span opens its trace even alone: the app's spans are on their way.
                trace = self._open(trace_id, now, sequence, out)
            if probe is not None and trace.probe is None:
                trace.probe = probe
                if probe.failure is not None:
                    out.probe_failures[(probe.probe_set, probe.failure)] += 1
            self._take(trace_id, trace, members, out)
            touched.append(trace_id)
        for trace_id in touched:
            trace = self._traces.get(trace_id)  # gone if evicted by a later trace of this batch
            if trace is not None and trace.has_root:
                self._finish(trace_id, trace, out, give_up=False)
        self._enforce_bytes(out)
        return self._report(out)

    def expire(self, now: float) -> Assembly:
        out = Assembly()
        while self._traces:
            trace_id, trace = next(iter(self._traces.items()))
            if trace.first_seen + self._wait > now:
                break
            self._finish(trace_id, trace, out, give_up=True)
        return self._report(out)

    def flush(self) -> Assembly:
        out = Assembly()
        for trace_id, trace in list(self._traces.items()):
            self._finish(trace_id, trace, out, give_up=True)
        return self._report(out)

    # -- buffering --------------------------------------------------------------------------------

    def _extract(self, span: Span) -> SpanParts | None:
        for convention in self._conventions:
            try:
                parts = convention.extract(span)
            except Exception:  # an adapter bug must not lose the batch; the span is counted
                parts = None
            if parts is not None:
                return parts
        return None

    def oldest_pending(self) -> int | None:
        # Traces are kept in the order they were opened, so the first is the oldest.
        for trace in self._traces.values():
            return trace.sequence
        return None

    def _single(self, member: tuple[Span, SpanParts | None], sequence: int, out: Assembly) -> bool:
        """The single-span layout as a whole trace: emit at once, without buffering."""
        span, parts = member
        if parts is None or span.parent_span_id is not None or not parts.is_complete:
            return False
        assert parts.query is not None and parts.chunks is not None
        service, route = self._labeller.labels(
            span.resource.service_name, self._labeller.route_hint(span) or span.name
        )
        out.assembled_spans += 1
        out.origins.append(sequence)
        out.interactions.append(
            RagInteraction(
                trace_id=span.trace_id,
                span_id=span.span_id,
                query=parts.query,
                chunks=parts.chunks,
                response=parts.response,
                service=service,
                route=route,
                end_time_unix_nano=span.end_time_unix_nano,
                session_id=parts.session_id,
                user_id=parts.user_id,
                attributes=self._captured(span) or {},
                earlier_turns=history(parts.messages),
            )
        )
        return True

    def _captured(self, span: Span) -> dict[str, AttributeValue] | None:
        if not self._capture:
            return None
        found = {name: span.attributes.get(name) for name in self._capture}
        return {name: value for name, value in found.items() if value is not None} or None

    def _open(self, trace_id: str, now: float, sequence: int, out: Assembly) -> _Trace:
        while len(self._traces) >= self._max_traces:
            self._evict_oldest(MAX_TRACES, out)
        trace = self._traces[trace_id] = _Trace(first_seen=now, sequence=sequence)
        return trace

    def _take(
        self, trace_id: str, trace: _Trace, members: list[tuple[Span, SpanParts | None]], out: Assembly
    ) -> None:
        for span, parts in members:
            if span.span_id in trace.pieces:
                out.skipped[DUPLICATE] += 1
                continue
            is_root = span.parent_span_id is None
            session_id = None
            if parts is not None and parts.role is _LINK:
                session_id, parts = parts.session_id, None
            if parts is None:
                out.skipped[NOT_RAG] += 1  # accounted now; kept (if room) only as a link
                # Links have a quota of their own, so they never crowd out the spans that carry
                # an interaction; the root is always kept (its route label, its arrival ends the wait).
                if len(trace.pieces) - trace.useful >= self._max_spans and not is_root:
                    out.evictions[MAX_SPANS_PER_TRACE] += 1
                    continue
                size = PIECE_OVERHEAD_BYTES + _text_size(span.name)
            elif trace.useful >= self._max_spans:
                out.skipped[EVICTED] += 1
                out.evictions[MAX_SPANS_PER_TRACE] += 1
                continue
            else:
                size = PIECE_OVERHEAD_BYTES + _text_size(span.name) + _parts_size(parts)
                trace.useful += 1
                self._buffered += 1
            piece = trace.pieces[span.span_id] = _Piece(
                span_id=span.span_id,
                parent_id=span.parent_span_id,
                name=span.name,
                start=span.start_time_unix_nano,
                end=span.end_time_unix_nano,
                service=span.resource.service_name,
                route=self._labeller.route_hint(span),
                parts=parts,
                captured=self._captured(span),
                session_id=session_id,
            )
            if piece.route:
                size += _text_size(piece.route)
            if piece.captured:
                size += PIECE_OVERHEAD_BYTES  # a small dict of a few attributes the keep rules read
            trace.size += size
            self._bytes += size
            if is_root:
                trace.has_root = True

    def _enforce_bytes(self, out: Assembly) -> None:
        while self._bytes > self._max_bytes and self._traces:
            self._evict_oldest(MAX_CHUNK_BYTES, out)

    def _evict_oldest(self, reason: str, out: Assembly) -> None:
        _, trace = self._traces.popitem(last=False)
        self._release(trace)
        out.skipped[EVICTED] += trace.useful
        out.evictions[reason] += 1

    def _release(self, trace: _Trace) -> None:
        self._buffered -= trace.useful
        self._bytes -= trace.size

    def _report(self, out: Assembly) -> Assembly:
        out.buffered_spans = self._buffered
        out.buffered_traces = len(self._traces)
        out.buffered_bytes = self._bytes
        return out

    # -- assembly ---------------------------------------------------------------------------------

    def _finish(self, trace_id: str, trace: _Trace, out: Assembly, *, give_up: bool) -> None:
        """Emit the trace's interactions; keep waiting if it has none and time remains."""
        if not give_up and not _settled(trace):
            return  # an agent trace with spans still on their way: wait for them
        interactions, used = _assemble(trace_id, trace, self._labeller)
        if not interactions and not give_up:
            return
        probe = trace.probe
        if probe is not None:
            if probe.failure is not None:
                interactions, used = [], set()  # counted by its reason on arrival; never scored
            elif not interactions:
                out.probe_failures[(probe.probe_set, TRACE_MISSING)] += 1
            else:
                interactions = [
                    dataclasses.replace(i, probe=probe, reference=probe.reference) for i in interactions
                ]
        del self._traces[trace_id]
        self._release(trace)
        out.interactions.extend(interactions)
        out.origins.extend([trace.sequence] * len(interactions))
        out.assembled_spans += len(used)
        unused = trace.useful - len(used)
        if unused:
            out.skipped[NOT_RAG if interactions else INCOMPLETE] += unused


def _settled(trace: _Trace) -> bool:
    """Chain traces are assembled as soon as their root is in; agent traces also wait for the
    spans their answers need (agents.settled)."""
    useful = [p for p in trace.pieces.values() if p.parts is not None]
    if is_agent_trace(useful):
        return settled(trace.pieces, useful)  # type: ignore[arg-type]
    # A span missing between a piece and the root may be a tool still on its way (an agent
    # whose steps so far look like a chain, e.g. ReAct text steps): wait for it.
    return all(p.parent_id is None or p.parent_id in trace.pieces for p in trace.pieces.values())


def agent_interactions(
    trace_id: str, pieces: dict[str, _Piece], useful: list[_Piece], labeller: Labeller
) -> tuple[list[RagInteraction], set[str]]:
    """One interaction per answer of an agent trace (agent/otlp/agents.py has the rules)."""
    interactions: list[RagInteraction] = []
    used: set[str] = set()
    for answer in agent_answers(pieces, useful):  # type: ignore[arg-type]
        call: _Piece = answer.call  # type: ignore[assignment]
        ancestors = _ancestors(call, pieces)
        used.add(call.span_id)
        used.update(p.span_id for p in answer.used)
        if answer.query_source is not None:
            used.add(answer.query_source.span_id)
        parts = [p.parts for p in (call, *answer.used, *ancestors) if p.parts is not None]
        interactions.append(
            _interaction(
                trace_id,
                call,
                query=answer.query,
                parts=tuple(parts),
                chunks=answer.chunks,
                response=answer.response,
                route=_route(call, ancestors),
                labeller=labeller,
                related=(call, *ancestors),
                agent=answer.context,
            )
        )
    return interactions, used


def _ancestors(piece: _Piece, pieces: dict[str, _Piece]) -> list[_Piece]:
    """The known ancestors of a piece, nearest first (a cycle or a gap ends the walk)."""
    chain: list[_Piece] = []
    seen = {piece.span_id}
    parent = piece.parent_id
    while parent is not None and parent not in seen:
        ancestor = pieces.get(parent)
        if ancestor is None:
            break
        seen.add(parent)
        chain.append(ancestor)
        parent = ancestor.parent_id
    return chain


def _asks(piece: _Piece) -> bool:
    return piece.parts is not None and piece.parts.role is Role.CHAIN and bool(piece.parts.query)


def _context(call: _Piece, contexts: list[_Piece]) -> _Piece | None:
    """The retriever / reranker output the model call saw: the last to end before it started."""
    before = [c for c in contexts if c.end <= call.start] or [c for c in contexts if c.end <= call.end]
    if not before:
        return None
    return max(before, key=lambda c: (c.end, c.parts.role is Role.RERANKER))  # type: ignore[union-attr]


def _assemble(trace_id: str, trace: _Trace, labeller: Labeller) -> tuple[list[RagInteraction], set[str]]:
    pieces = trace.pieces
    useful = [p for p in pieces.values() if p.parts is not None]
    if is_agent_trace(useful):
        answers, answered = agent_interactions(trace_id, pieces, useful, labeller)
        return _singles(trace_id, pieces, useful, labeller, answers, answered, _llm_lineage(useful, pieces))
    calls = [p for p in useful if p.parts.role is Role.LLM]  # type: ignore[union-attr]
    contexts = [p for p in useful if p.parts.role in (Role.RETRIEVER, Role.RERANKER)]  # type: ignore[union-attr]
    call_ids = {p.span_id for p in calls}
    lineage = {p.span_id: _ancestors(p, pieces) for p in calls}
    wrappers = {a.span_id for chain in lineage.values() for a in chain if a.span_id in call_ids}

    interactions: list[RagInteraction] = []
    used: set[str] = set()
    for call in sorted(calls, key=lambda p: (p.start, p.span_id)):
        if call.span_id in wrappers:
            continue
        context = _context(call, contexts)
        if context is None or not (context.parts.chunks or context.parts.empty):  # type: ignore[union-attr]
            continue  # no retrieval before it, or one whose text the spans do not carry
        ancestors = lineage[call.span_id]
        query_source = next((a for a in reversed(ancestors) if _asks(a)), None)
        assert call.parts is not None and context.parts is not None and context.parts.chunks is not None
        query = (query_source.parts.query if query_source and query_source.parts else None) or (
            context.parts.query or call.parts.query
        )
        if not query:
            continue
        used.add(call.span_id)
        used.add(context.span_id)
        used.update(a.span_id for a in ancestors if a.span_id in call_ids)  # the wrapped calls
        if query_source is not None:
            used.add(query_source.span_id)
        interactions.append(
            _interaction(
                trace_id,
                call,
                query=query,
                parts=(call.parts, context.parts, *(a.parts for a in ancestors if a.parts)),
                chunks=context.parts.chunks,
                response=call.parts.response,
                route=_route(call, ancestors),
                labeller=labeller,
                related=(call, context, *ancestors),
            )
        )

    return _singles(trace_id, pieces, useful, labeller, interactions, used, lineage)


def _llm_lineage(useful: list[_Piece], pieces: dict[str, _Piece]) -> dict[str, list[_Piece]]:
    return {p.span_id: _ancestors(p, pieces) for p in useful if p.parts.role is Role.LLM}  # type: ignore[union-attr]


def _singles(
    trace_id: str,
    pieces: dict[str, _Piece],
    useful: list[_Piece],
    labeller: Labeller,
    interactions: list[RagInteraction],
    used: set[str],
    lineage: dict[str, list[_Piece]],
) -> tuple[list[RagInteraction], set[str]]:
    """Add the spans that carry a whole interaction alone (the single-span layout)."""
    claimed = {a.span_id for span_id in used if span_id in lineage for a in lineage[span_id]}
    for piece in sorted(useful, key=lambda p: (p.end, p.span_id)):
        parts = piece.parts
        assert parts is not None
        if not parts.is_complete or piece.span_id in used or piece.span_id in claimed:
            continue
        assert parts.query is not None and parts.chunks is not None
        used.add(piece.span_id)
        ancestors = _ancestors(piece, pieces)
        interactions.append(
            _interaction(
                trace_id,
                piece,
                query=parts.query,
                parts=(parts, *(a.parts for a in ancestors if a.parts)),
                chunks=parts.chunks,
                response=parts.response,
                route=_route(piece, ancestors),
                labeller=labeller,
                related=(piece, *ancestors),
                agent=AgentContext(earlier_turns=history(parts.messages), searches=1)
                if parts.messages
                else None,
            )
        )
    return interactions, used


def _route(piece: _Piece, ancestors: list[_Piece]) -> str:
    """The outermost configured route attribute on the way to the root, else the top span's name."""
    chain = [piece, *ancestors]
    for candidate in reversed(chain):
        if candidate.route:
            return candidate.route
    return chain[-1].name


def _interaction(
    trace_id: str,
    anchor: _Piece,
    *,
    query: str,
    parts: tuple[SpanParts, ...],
    chunks: tuple[Chunk, ...],
    response: str | None,
    route: str,
    labeller: Labeller,
    related: Sequence[_Piece],
    agent: AgentContext | None = None,
) -> RagInteraction:
    attributes: dict[str, AttributeValue] = {}
    for piece in reversed(related):  # the anchor's own values win over its ancestors'
        if piece.captured:
            attributes.update(piece.captured)
    service, route = labeller.labels(anchor.service, route)
    return RagInteraction(
        trace_id=trace_id,
        span_id=anchor.span_id,
        query=query,
        chunks=chunks,
        response=response,
        service=service,
        route=route,
        end_time_unix_nano=anchor.end,
        session_id=next((p.session_id for p in parts if p.session_id), None)
        or next((p.session_id for p in related if p.session_id), None),
        user_id=next((p.user_id for p in parts if p.user_id), None),
        attributes=attributes,
        sub_queries=agent.sub_queries if agent else (),
        earlier_turns=agent.earlier_turns if agent else (),
        searches=agent.searches if agent else 1,
        empty_searches=agent.empty_searches if agent else (0 if chunks else 1),
        tool_errors=agent.tool_errors if agent else 0,
    )
