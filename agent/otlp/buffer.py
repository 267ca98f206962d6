"""A bounded buffer of traces: items grouped by trace id until their trace is complete.

It knows nothing of RAG, probes or spans' meaning: the assembler hands it an item per span with
its size and whether it is `pending` (still to be accounted for) or only a link, and asks it for
the traces to finish. Bounds, all enforced here:
- `max_traces` open traces: opening one more evicts the oldest;
- `max_pending_per_trace` pending items per trace, and as many links (links never crowd out
  pending items; a root is always kept);
- `max_bytes` estimated bytes over all traces: the oldest traces are evicted until under it;
- `wait_seconds`: a trace none of whose spans arrived for this long is handed back by `expired`
  to be finished as it is; one whose spans keep arriving (a long run exported in batches) waits
  on, up to `MAX_WAIT_FACTOR` times the wait after its first span.
Traces are kept in the order they were opened, so the first is the oldest (eviction and
`oldest_sequence` cost O(1) per trace; expiry looks at the traces opened more than a wait ago).

`EarlyLinks` holds, within a bound of its own, the links of traces not yet open (a span that
carries nothing RAG opens no trace, but it may be the root or the step joining a model call to its
question, arriving first when spans come one by one in any order). `ClosedTraces` remembers the
ids of the traces recently closed (assembled, given up on or evicted), so that a span arriving
after its trace was closed is told apart from the first span of a new trace (docs/intake.md,
"Late spans").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

Item = TypeVar("Item")

# Why traces were evicted (they label ragpulse_assembler_evictions_total).
MAX_TRACES = "max_traces"
MAX_SPANS_PER_TRACE = "max_spans_per_trace"
MAX_CHUNK_BYTES = "max_chunk_bytes"

# A trace whose spans keep arriving waits at most this many waits after its first span.
MAX_WAIT_FACTOR = 10


class Added(Enum):
    ADDED = "added"
    DUPLICATE = "duplicate"  # an item with this key is already held (a redelivered message)
    OVER_QUOTA = "over_quota"  # the trace holds its bound of items of this kind: not kept


@dataclass(slots=True)
class BufferedTrace(Generic[Item]):
    first_seen: float
    last_seen: float  # when a span of it last arrived: the wait runs from here
    sequence: int  # of the request that opened it: the oldest, as sequence numbers only grow
    items: dict[str, Item] = field(default_factory=dict)
    pending: int = 0  # items still to be accounted for (the others are links)
    size: int = 0  # estimated bytes held
    root: str | None = None  # the key of its first root item, once one is held


@dataclass(frozen=True, slots=True)
class Eviction(Generic[Item]):
    trace_id: str
    trace: BufferedTrace[Item]
    reason: str


class TraceBuffer(Generic[Item]):
    """Items by trace id, within bounds (see the module doc)."""

    def __init__(
        self, *, max_traces: int, max_pending_per_trace: int, max_bytes: int, wait_seconds: float
    ) -> None:
        self._max_traces = max_traces
        self._max_pending = max_pending_per_trace
        self._max_bytes = max_bytes
        self._wait = wait_seconds
        self._traces: OrderedDict[str, BufferedTrace[Item]] = OrderedDict()  # oldest first
        self.pending = 0  # over all traces
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._traces)

    def get(self, trace_id: str) -> BufferedTrace[Item] | None:
        return self._traces.get(trace_id)

    def open(
        self, trace_id: str, now: float, sequence: int
    ) -> tuple[BufferedTrace[Item], list[Eviction[Item]]]:
        """A new trace, and the oldest ones evicted to make room for it."""
        evicted = []
        while len(self._traces) >= self._max_traces:
            evicted.append(self._evict_oldest(MAX_TRACES))
        trace: BufferedTrace[Item] = BufferedTrace(first_seen=now, last_seen=now, sequence=sequence)
        self._traces[trace_id] = trace
        return trace, evicted

    def add(
        self, trace: BufferedTrace[Item], key: str, item: Item, size: int, *, pending: bool, is_root: bool
    ) -> Added:
        if key in trace.items:
            return Added.DUPLICATE
        if pending:
            if trace.pending >= self._max_pending:
                return Added.OVER_QUOTA
            trace.pending += 1
            self.pending += 1
        elif len(trace.items) - trace.pending >= self._max_pending and not is_root:
            return Added.OVER_QUOTA
        trace.items[key] = item
        trace.size += size
        self.bytes += size
        if is_root and trace.root is None:
            trace.root = key
        return Added.ADDED

    def over_bytes(self) -> list[Eviction[Item]]:
        """Evict the oldest traces until the held bytes are within the bound."""
        evicted = []
        while self.bytes > self._max_bytes and self._traces:
            evicted.append(self._evict_oldest(MAX_CHUNK_BYTES))
        return evicted

    def remove(self, trace_id: str) -> BufferedTrace[Item]:
        trace = self._traces.pop(trace_id)
        self._release(trace)
        return trace

    def expired(self, now: float) -> Iterator[tuple[str, BufferedTrace[Item]]]:
        """The traces whose wait is over, oldest first (the caller removes each it is given): no
        span for `wait_seconds`, or `MAX_WAIT_FACTOR` waits since the first."""
        due = []
        for trace_id, trace in self._traces.items():
            if trace.first_seen + self._wait > now:
                break  # opened later: none of the rest can be due
            if trace.last_seen + self._wait <= now or trace.first_seen + self._wait * MAX_WAIT_FACTOR <= now:
                due.append((trace_id, trace))
        for trace_id, trace in due:
            if self._traces.get(trace_id) is not trace:
                continue  # removed meanwhile
            yield trace_id, trace
            if self._traces.get(trace_id) is trace:
                self.remove(trace_id)  # the caller kept it: never hand the same trace back twice

    def traces(self) -> list[tuple[str, BufferedTrace[Item]]]:
        return list(self._traces.items())

    def oldest_sequence(self) -> int | None:
        for trace in self._traces.values():
            return trace.sequence
        return None

    def _evict_oldest(self, reason: str) -> Eviction[Item]:
        trace_id, trace = self._traces.popitem(last=False)
        self._release(trace)
        return Eviction(trace_id, trace, reason)

    def _release(self, trace: BufferedTrace[Item]) -> None:
        self.pending -= trace.pending
        self.bytes -= trace.size


# Trace ids remembered after their trace was closed (docs/limits.md, "Assembler memory").
MAX_CLOSED_TRACES = 100_000
# Memory one remembered trace costs: its 32-character id, its root's 16-character span id and
# the OrderedDict entry (measured with tracemalloc in tests/unit/otlp/test_late_spans.py at ~240,
# rounded up).
CLOSED_TRACE_BYTES = 250


class ClosedTraces:
    """The ids of the last `max_traces` traces closed, each with its root span's id (None when
    its root never arrived), oldest forgotten first.

    The root tells a redelivery from a late span: a request delivered again (Kafka's at-least-once
    delivery) holds spans the trace already had, the root among them when it was the root's
    request; a late span is one the trace never had. Bounded by count: at the default 100,000
    traces, at most 25 MB (`CLOSED_TRACE_BYTES` each). A trace is remembered for as long as it
    takes `max_traces` more traces to close (100 s at 1,000 traces a second); a span of it
    arriving later than that opens a new trace, as before. Adding and looking up cost O(1).
    """

    def __init__(self, max_traces: int = MAX_CLOSED_TRACES) -> None:
        if max_traces < 1:
            raise ValueError("ClosedTraces needs room for at least one trace id")
        self._max = max_traces
        self._roots: OrderedDict[str, str | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._roots)

    def __contains__(self, trace_id: str) -> bool:
        return trace_id in self._roots

    def root(self, trace_id: str) -> str | None:
        """The span id of the closed trace's root, if it had arrived."""
        return self._roots.get(trace_id)

    def add(self, trace_id: str, root: str | None) -> None:
        if trace_id in self._roots:
            self._roots.move_to_end(trace_id)
        elif len(self._roots) >= self._max:
            self._roots.popitem(last=False)
        self._roots[trace_id] = root


# Links of traces not yet open (docs/limits.md, "Assembler memory").
MAX_EARLY_LINKS = 10_000


class EarlyLinks(Generic[Item]):
    """Links (items with their estimated size) of traces that are not open yet, by trace id.

    Bounded by count: at most `max_items` items over all traces, the oldest trace's dropped first
    (at the default 10,000, about 5 MB: a link is ~400 bytes plus its name). They are accounted on
    arrival (not_rag) by the caller; the trace that opens takes its own with `take`.
    """

    def __init__(self, max_items: int = MAX_EARLY_LINKS) -> None:
        self._max = max_items
        self._traces: OrderedDict[str, dict[str, tuple[Item, int]]] = OrderedDict()
        self.items = 0

    def __len__(self) -> int:
        return len(self._traces)

    def add(self, trace_id: str, key: str, item: Item, size: int) -> None:
        held = self._traces.get(trace_id)
        if held is None:
            held = self._traces[trace_id] = {}
        if key in held or self._max < 1:
            return
        held[key] = (item, size)
        self.items += 1
        while self.items > self._max:
            oldest = next(iter(self._traces.values()))
            oldest.pop(next(iter(oldest)))  # the oldest trace's first link
            self.items -= 1
            if not oldest:
                self._traces.popitem(last=False)
        if not held and trace_id in self._traces:
            del self._traces[trace_id]

    def take(self, trace_id: str) -> list[tuple[str, Item, int]]:
        held = self._traces.pop(trace_id, None)
        if not held:
            return []
        self.items -= len(held)
        return [(key, item, size) for key, (item, size) in held.items()]
