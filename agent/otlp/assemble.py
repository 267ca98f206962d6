"""Assemble decoded spans into RagInteractions.

A RAG request usually leaves several spans in one trace (a CHAIN root, a RETRIEVER, maybe a
RERANKER, one or more LLM calls, an agent's tools), exported in different requests or Kafka
messages and in any order. `TraceAssembler` wires three parts (docs/intake.md, "Assembly" and
"Agents"):
- `buffer.TraceBuffer` keeps what each span contributed (a `trace_tree.Piece`, never the span) by
  trace id, within its bounds, until the trace's root has arrived and the trace is complete, or
  the bounded wait runs out;
- `trace_tree.TraceTree` is one finished trace as a tree;
- the pure rule sets `rules.chain` (a retriever before a model call) and `rules.agent` (answers,
  what each was given, conversations) find the interactions in it.
Then two steps over the finished assembly: probe marking (`probes.mark_probe`: a trace started by
`ragpulse probe` carries its golden item; one whose request failed is never scored, one that
forms no interaction is a missed probe) and conversations across traces (`sessions.Sessions`).

Every span is accounted for exactly once: assembled, skipped with a reason, or still buffered.
A trace is closed once (assembled, given up on or evicted): its id is remembered
(`buffer.ClosedTraces`, bounded), and a span of it arriving afterwards is counted `late`, never
the start of a second, partial trace; only its root's request delivered again is assembled again
(docs/intake.md, "Late spans").
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.config import AssemblySettings
from agent.model import AttributeValue, Probe, RagInteraction, Span
from agent.otlp import SELF_RESOURCE_ATTRIBUTE
from agent.otlp.buffer import (
    MAX_CHUNK_BYTES,
    MAX_SPANS_PER_TRACE,
    MAX_TRACES,
    Added,
    BufferedTrace,
    ClosedTraces,
    EarlyLinks,
    Eviction,
    TraceBuffer,
)
from agent.otlp.conventions import KNOWN_PREFIXES, Convention, Role, SpanParts
from agent.otlp.logs import LogEvent, WaitingEvents
from agent.otlp.probes import TRACE_MISSING, mark_probe, probe_of
from agent.otlp.rules import Finding, history
from agent.otlp.rules.agent import AgentTrace, agent_findings, awaited_response, is_agent_trace, settled
from agent.otlp.rules.chain import chain_findings, singles
from agent.otlp.sessions import Sessions
from agent.otlp.trace_tree import Piece, TraceTree

# Reasons a span yields no interaction; they label ragpulse_spans_skipped_total.
NOT_RAG = "not_rag"  # carries nothing an interaction uses (or nothing its trace's interactions used)
INCOMPLETE = "incomplete"  # its trace ended (root seen, or wait over) without forming an interaction
EVICTED = "evicted"  # dropped to keep the buffer within its bounds
SELF = "self"  # emitted by ragpulse itself (resource attribute ragpulse.agent)
DUPLICATE = "duplicate"  # the same span id was already buffered (a redelivered message)
LATE = "late"  # its trace was already closed (assembled, given up on or evicted) when it arrived

__all__ = [
    "DUPLICATE", "EVICTED", "INCOMPLETE", "LATE", "MAX_CHUNK_BYTES", "MAX_SPANS_PER_TRACE", "MAX_TRACES",
    "NOT_RAG", "PIECE_OVERHEAD_BYTES", "SELF", "TRACE_MISSING", "Assembler", "Assembly", "Labeller",
    "TraceAssembler", "build",
]  # fmt: skip


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

    def add_logs(self, events: Iterable[LogEvent]) -> None:
        """Take log events (otlp/logs.py): each becomes an event of its span when that arrives."""
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
    if parts.instructions:
        size += _text_size(parts.instructions)
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
        sessions: Sessions | None = None,
        closed: ClosedTraces | None = None,
    ) -> None:
        """`capture`: span attributes carried onto interactions (for sampling keep rules).
        `sessions`: the earlier turns of conversations whose turns arrive as separate traces
        (default: a `Sessions` with its default bounds). `closed`: the ids of the traces
        recently closed, whose later spans are counted late (default: `ClosedTraces` with its
        default bound)."""
        self._capture = tuple(capture)
        self._conventions = tuple(conventions)
        self._labeller = labeller
        self._clock = clock
        self._buffer: TraceBuffer[Piece] = TraceBuffer(
            max_traces=max_traces,
            max_pending_per_trace=max_spans_per_trace,
            max_bytes=max_chunk_bytes,
            wait_seconds=wait_seconds,
        )
        self._probes: dict[str, Probe] = {}  # the golden item of each buffered probe trace
        self._sessions = sessions if sessions is not None else Sessions()
        self._waiting = WaitingEvents()  # log events whose span has not arrived yet
        self._closed = closed if closed is not None else ClosedTraces()
        self._early: EarlyLinks[Piece] = EarlyLinks()  # links of traces not open yet
        # Follow-ups waiting for the turn holding the response they continue: by its id.
        self._awaiting: dict[str, str] = {}

    # -- the Assembler protocol -------------------------------------------------------------------

    def add(self, spans: Iterable[Span], sequence: int = 0) -> Assembly:
        out = Assembly()
        # Group first, so that a trace whose spans share one request keeps all its links even
        # when the linking spans come before the first useful one.
        batch: dict[str, list[tuple[Span, SpanParts | None]]] = {}
        probes: dict[str, Probe] = {}
        resource, is_self = None, False
        waiting = len(self._waiting) > 0  # read once: no log event is added while spans are read
        for span in spans:
            if span.resource is not resource:  # spans of one request share a few resources
                resource, is_self = span.resource, _is_self(span)
            if is_self:
                out.skipped[SELF] += 1
                continue
            if waiting and (logged := self._waiting.take(span.trace_id, span.span_id)):
                span = dataclasses.replace(span, events=span.events + logged)
            probe = probe_of(span)
            if probe is not None:
                probes[span.trace_id] = probe
            parts = self._extract(span)
            if parts is not None and not parts.is_useful:
                # Only a link; an agent root may still name the conversation.
                # An agent's outer span may say only what it returned: the answer's evidence.
                returned = parts.response if parts.role is Role.CHAIN else None
                parts = (
                    SpanParts(_LINK, session_id=parts.session_id, response=returned)
                    if parts.session_id or returned
                    else None
                )
            batch.setdefault(span.trace_id, []).append((span, parts))
        now = self._clock()
        touched = []
        for trace_id, members in batch.items():
            trace = self._buffer.get(trace_id)
            probe = probes.get(trace_id)
            if trace is None and trace_id in self._closed and not self._redelivered(trace_id, members):
                # Its trace was closed: counted, never a second (partial) trace of the same id.
                out.skipped[LATE] += len(members)
                if probe is not None:  # its app's interaction was emitted unmarked, or never formed
                    out.probe_failures[(probe.probe_set, probe.failure or TRACE_MISSING)] += 1
                continue
            if trace is None:
                if probe is None:
                    if len(members) == 1 and self._single(members[0], sequence, now, out):
                        continue
                    if all(parts is None or parts.role is _LINK for _, parts in members):
                        # Accounted now, and kept (bounded) as links in case the trace opens:
                        # the root or a step may arrive before the spans that carry the RAG.
                        out.skipped[NOT_RAG] += len(members)
                        for span, parts in members:
                            piece, size = self._piece(span, parts)
                            self._early.add(trace_id, span.span_id, piece, size)
                        continue
                # A probe's span opens its trace even alone: the app's spans are on their way.
                trace, evicted = self._buffer.open(trace_id, now, sequence)
                self._evicted(evicted, out)
                for key, piece, size in self._early.take(trace_id):
                    root = piece.parent_id is None
                    if (
                        self._buffer.add(trace, key, piece, size, pending=False, is_root=root)
                        is Added.OVER_QUOTA
                    ):
                        out.evictions[MAX_SPANS_PER_TRACE] += 1
            if probe is not None and trace_id not in self._probes:
                self._probes[trace_id] = probe
                if probe.failure is not None:
                    out.probe_failures[(probe.probe_set, probe.failure)] += 1
            trace.last_seen = now
            self._take(trace, members, out)
            touched.append(trace_id)
        for trace_id in touched:
            trace = self._buffer.get(trace_id)  # gone if evicted by a later trace of this batch
            if trace is not None and trace.root is not None:
                self._finish(trace_id, trace, out, give_up=False)
        self._evicted(self._buffer.over_bytes(), out)
        return self._report(out)

    def expire(self, now: float) -> Assembly:
        out = Assembly()
        for trace_id, trace in self._buffer.expired(now):
            if self._buffer.get(trace_id) is trace:  # not assembled meanwhile (a follow-up woken)
                self._finish(trace_id, trace, out, give_up=True)
        return self._report(out)

    def flush(self) -> Assembly:
        out = Assembly()
        # In the order they ended, whatever order they arrived in: a session's turns are then
        # followed in order (sessions.py).
        for trace_id, trace in sorted(
            self._buffer.traces(), key=lambda t: max((p.end for p in t[1].items.values()), default=0)
        ):
            if self._buffer.get(trace_id) is trace:  # not assembled meanwhile (a follow-up woken)
                self._finish(trace_id, trace, out, give_up=True)
        return self._report(out)

    def oldest_pending(self) -> int | None:
        return self._buffer.oldest_sequence()

    def add_logs(self, events: Iterable[LogEvent]) -> None:
        # Held until the span arrives (a record is written while its span is open, and the two
        # are exported by separate processors). A record for a span already assembled is not
        # read: its span's parts were taken on arrival (docs/intake.md, "Logs").
        self._waiting.add(events)

    def _redelivered(self, trace_id: str, members: list[tuple[Span, SpanParts | None]]) -> bool:
        """Whether spans of a closed trace are its root's request delivered again (Kafka delivers
        at least once): it is assembled again, and the idempotency keys keep it from being scored
        twice. Any other span of a closed trace is late."""
        root = self._closed.root(trace_id)
        return root is not None and any(span.span_id == root for span, _ in members)

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

    def _single(
        self, member: tuple[Span, SpanParts | None], sequence: int, now: float, out: Assembly
    ) -> bool:
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
        self._closed.add(span.trace_id, span.span_id)
        if self._early.items:
            self._early.take(span.trace_id)  # its links, if any, have nothing left to join
        interaction = RagInteraction(
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
        # Only an interaction of a conversation has earlier turns to follow.
        out.interactions.append(self._sessions.follow(interaction, now) if parts.session_id else interaction)
        return True

    def _captured(self, span: Span) -> dict[str, AttributeValue] | None:
        if not self._capture:
            return None
        found = {name: span.attributes.get(name) for name in self._capture}
        return {name: value for name, value in found.items() if value is not None} or None

    def _take(
        self, trace: BufferedTrace[Piece], members: list[tuple[Span, SpanParts | None]], out: Assembly
    ) -> None:
        for span, parts in members:
            if span.span_id in trace.items:
                out.skipped[DUPLICATE] += 1
                continue
            piece, size = self._piece(span, parts)
            if piece.parts is None:
                out.skipped[NOT_RAG] += 1  # accounted now; kept (if room) only as a link
            # Links have a quota of their own, so they never crowd out the spans that carry an
            # interaction; the root is always kept (its route label, its arrival ends the wait).
            added = self._buffer.add(
                trace,
                span.span_id,
                piece,
                size,
                pending=piece.parts is not None,
                is_root=span.parent_span_id is None,
            )
            if added is Added.OVER_QUOTA:
                if piece.parts is not None:
                    out.skipped[EVICTED] += 1
                out.evictions[MAX_SPANS_PER_TRACE] += 1

    def _piece(self, span: Span, parts: SpanParts | None) -> tuple[Piece, int]:
        """What the trace keeps of a span, and its estimated size in bytes."""
        session_id = returned = None
        if parts is not None and parts.role is _LINK:
            session_id, returned, parts = parts.session_id, parts.response, None
        size = PIECE_OVERHEAD_BYTES + _text_size(span.name)
        if returned:
            size += _text_size(returned)
        if parts is not None:
            size += _parts_size(parts)
        piece = Piece(
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
            returned=returned,
        )
        if piece.route:
            size += _text_size(piece.route)
        if piece.captured:
            size += PIECE_OVERHEAD_BYTES  # a small dict of a few attributes the keep rules read
        return piece, size

    def _evicted(self, evicted: Sequence[Eviction[Piece]], out: Assembly) -> None:
        for eviction in evicted:
            self._closed.add(eviction.trace_id, eviction.trace.root)
            self._probes.pop(eviction.trace_id, None)
            out.skipped[EVICTED] += eviction.trace.pending
            out.evictions[eviction.reason] += 1

    def _report(self, out: Assembly) -> Assembly:
        out.buffered_spans = self._buffer.pending
        out.buffered_traces = len(self._buffer)
        out.buffered_bytes = self._buffer.bytes
        return out

    # -- assembly ---------------------------------------------------------------------------------

    def _finish(self, trace_id: str, trace: BufferedTrace[Piece], out: Assembly, *, give_up: bool) -> None:
        """Emit the trace's interactions; keep waiting if it has none and time remains."""
        tree = TraceTree(trace.items)
        # The trace's kind, read once; an agent trace's searches are found once for both steps.
        agent = AgentTrace(tree) if is_agent_trace(tree.useful) else None
        if not give_up and not _settled(tree, agent):
            return  # an agent trace with spans still on their way: wait for them
        if not give_up and agent is not None:
            awaited = awaited_response(agent, self._sessions.knows)
            if awaited is not None:  # a follow-up whose earlier turn is still on its way
                self._await(awaited, trace_id)
                return
        findings, used = findings_of(tree, agent)
        if not findings and not give_up:
            return
        self._buffer.remove(trace_id)
        self._closed.add(trace_id, trace.root)
        interactions = [self._interaction(trace_id, f) for f in findings]
        probe = self._probes.pop(trace_id, None)
        if probe is not None:  # a step over the finished assembly
            interactions, failure = mark_probe(interactions, probe)
            if failure is not None:
                out.probe_failures[(probe.probe_set, failure)] += 1
            if not interactions:
                used = set()
        now = self._clock()
        inferred = {f.anchor.span_id for f in findings if f.agent is not None and f.agent.inferred}
        interactions = [self._sessions.follow(i, now, inferred=i.span_id in inferred) for i in interactions]
        out.interactions.extend(interactions)
        out.origins.extend([trace.sequence] * len(interactions))
        out.assembled_spans += len(used)
        unused = trace.pending - len(used)
        if unused:
            out.skipped[NOT_RAG if interactions else INCOMPLETE] += unused
        if agent is not None:
            self._follow_ups(tree, out)

    def _await(self, response_id: str, trace_id: str) -> None:
        self._awaiting[response_id] = trace_id
        if len(self._awaiting) > len(self._buffer) + 1:  # bounded by the traces buffered
            self._awaiting = {r: t for r, t in self._awaiting.items() if self._buffer.get(t) is not None}

    def _follow_ups(self, tree: TraceTree, out: Assembly) -> None:
        """Remember the responses of an assembled agent trace, and assemble the follow-ups that
        were waiting for one of them."""
        responses = [p.parts.response_id for p in tree.useful if p.parts is not None and p.parts.response_id]
        if not responses:
            return
        self._sessions.assembled(responses)
        for response_id in responses:
            waiting = self._awaiting.pop(response_id, None)
            trace = self._buffer.get(waiting) if waiting is not None else None
            if waiting is not None and trace is not None and trace.root is not None:
                self._finish(waiting, trace, out, give_up=False)

    def _interaction(self, trace_id: str, finding: Finding) -> RagInteraction:
        anchor, agent = finding.anchor, finding.agent
        attributes: dict[str, AttributeValue] = {}
        for piece in reversed(finding.related):  # the anchor's own values win over its ancestors'
            if piece.captured:
                attributes.update(piece.captured)
        service, route = self._labeller.labels(anchor.service, _route(anchor, finding.ancestors))
        return RagInteraction(
            trace_id=trace_id,
            span_id=anchor.span_id,
            query=finding.query,
            chunks=finding.chunks,
            response=finding.response,
            service=service,
            route=route,
            end_time_unix_nano=anchor.end,
            session_id=_session_id(finding),
            user_id=_user_id(finding),
            attributes=attributes,
            sub_queries=agent.sub_queries if agent else (),
            earlier_turns=agent.earlier_turns if agent else (),
            searches=agent.searches if agent else 1,
            empty_searches=agent.empty_searches if agent else (0 if finding.chunks else 1),
            tool_errors=agent.tool_errors if agent else 0,
        )


# Loops rather than next() over a generator: each interaction runs them, and a generator costs
# more to make than the few parts it walks.
def _session_id(finding: Finding) -> str | None:
    """The first session id its parts carry, else the first its related pieces carry."""
    for parts in finding.parts:
        if parts.session_id:
            return parts.session_id
    for piece in finding.related:
        if piece.session_id:
            return piece.session_id
    return None


def _user_id(finding: Finding) -> str | None:
    for parts in finding.parts:
        if parts.user_id:
            return parts.user_id
    return None


def _settled(tree: TraceTree, agent: AgentTrace | None) -> bool:
    """Chain traces (`agent` None) are assembled as soon as their root is in; agent traces also
    wait for the spans their answers need (rules.agent.settled)."""
    if agent is not None:
        return settled(agent)
    # A span missing between a piece and the root may be a tool still on its way (an agent
    # whose steps so far look like a chain, e.g. ReAct text steps): wait for it.
    return tree.complete()


def findings_of(tree: TraceTree, agent: AgentTrace | None) -> tuple[list[Finding], set[str]]:
    """The interactions of one trace (agent rules for an agent trace, `agent`, else chain rules),
    the single spans that carry one alone, and the span ids they were made of."""
    if agent is not None:
        findings, used = agent_findings(agent)
    else:
        findings, used = chain_findings(tree)
    findings.extend(singles(tree, used))
    return findings, used


def _route(piece: Piece, ancestors: Sequence[Piece]) -> str:
    """The outermost configured route attribute on the way to the root, else the top span's name."""
    chain = [piece, *ancestors]
    for candidate in reversed(chain):
        if candidate.route:
            return candidate.route
    return chain[-1].name


def build(
    section: AssemblySettings,
    conventions: Sequence[Convention],
    budget: Callable[[str, str], tuple[str, str]],
    *,
    capture: Sequence[str] = (),
) -> TraceAssembler:
    """The assembler of `section` (its route attributes, wait and buffer bounds), reading spans
    through `conventions`, labelling through the series `budget` and carrying the span
    attributes named in `capture` (the sampling keep rules') onto interactions."""
    return TraceAssembler(
        conventions,
        Labeller(section.route_attributes, budget),
        wait_seconds=section.wait_seconds,
        max_traces=section.max_traces,
        max_spans_per_trace=section.max_spans_per_trace,
        max_chunk_bytes=section.max_chunk_bytes,
        capture=capture,
    )
