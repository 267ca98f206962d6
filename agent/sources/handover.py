"""Handing input to the pipeline without holding the event loop.

Intake shares one event loop with `/healthz`, `/readyz`, `/metrics` and judge I/O, and a large
input costs more CPU than a liveness probe can wait: 31 MiB of RAG spans takes 0.1–0.25 s to decode
(protobuf to Span values, in Python) and ~0.1 s to assemble and sample. Every source hands its
input over the same way:

- inputs larger than `DECODE_INLINE_BYTES` are decoded in a worker thread (one per source:
  decoding holds the interpreter lock, more threads would not go faster); smaller ones decode on
  the loop, where a thread hop would cost more than the decode (~50 µs for a 2 KB message);
- a decoded request reaches the pipeline in `slices` of whole traces, at most `ACCEPT_SLICE_SPANS`
  spans each, with the loop free in between (assembly and sampling are synchronous and not thread
  safe, so they stay on the loop, cut into turns instead);
- a source that takes many inputs in one go (a Kafka poll of up to `max_poll_records` messages)
  gives the loop a turn whenever `LoopTurns.budget_seconds` of work has passed since the last one.

A receiver's `flush()` waits, through `InFlight`, until every request it has read is handed over.

A thread that decodes still competes with the loop for the interpreter lock (the loop gets it back
every `sys.getswitchinterval()`, 5 ms); what the loop no longer does is wait for the whole decode.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from agent.model import Span
from agent.otlp.decode import DecodedRequest

# Inputs up to this size decode on the event loop (well under a millisecond); larger ones in a thread.
DECODE_INLINE_BYTES = 64 * 1024
# Spans handed to the pipeline per event-loop turn (whole traces are never split).
ACCEPT_SLICE_SPANS = 100
# Intake work done between two turns of the loop when a source takes many inputs at once.
TURN_BUDGET_SECONDS = 0.005


def slices(request: DecodedRequest, size: int = ACCEPT_SLICE_SPANS) -> Iterator[DecodedRequest]:
    """The request in parts of about `size` spans, each trace's spans in one part.

    The first part carries the request's rejected spans; a request of `size` spans or fewer is
    yielded as it is.
    """
    if len(request.spans) <= size:
        yield request
        return
    by_trace: dict[str, list[Span]] = {}
    for span in request.spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    part = DecodedRequest(rejected=request.rejected)
    for spans in by_trace.values():
        if part.spans and len(part.spans) + len(spans) > size:
            yield part
            part = DecodedRequest()
        part.spans.extend(spans)
    yield part


class LoopTurns:
    """Gives the event loop a turn once `budget_seconds` of work has run since the last one.

    Cheaper than yielding after every small input (a turn costs ~20 µs), and bounded by time
    rather than by count, so a run of medium inputs cannot add up to a long stall.
    """

    def __init__(self, budget_seconds: float = TURN_BUDGET_SECONDS) -> None:
        self._budget = budget_seconds
        self._since = time.perf_counter()

    def reset(self) -> None:
        """The loop just had a turn (e.g. the caller awaited a thread)."""
        self._since = time.perf_counter()

    async def turn(self) -> None:
        """Yield to the loop if the budget is spent."""
        if time.perf_counter() - self._since >= self._budget:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


class InFlight:
    """Requests a receiver has read and not yet handed to the pipeline (being decoded or sliced).

    `drained()` returns once every request taken before it was called is handed over (a later
    request does not hold it up): what a receiver's `flush()` waits for. A request's handling is
    bounded (a decode, then slices), so this wait is too.
    """

    def __init__(self) -> None:
        self._open: set[asyncio.Event] = set()

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Around one request's decode and hand-over (however it ends)."""
        done = asyncio.Event()
        self._open.add(done)
        try:
            yield
        finally:
            self._open.discard(done)
            done.set()

    async def drained(self) -> None:
        pending = list(self._open)
        if pending:
            await asyncio.gather(*(done.wait() for done in pending))
