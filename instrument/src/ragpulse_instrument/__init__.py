"""Instrument a RAG app by hand: record its interactions with the OpenTelemetry API.

For apps that no instrumentor covers::

    from ragpulse_instrument import Search, record_interaction, record_search

    # one retrieval, one answer
    answer = generate(question, docs)
    record_interaction(query=question, chunks=[d.text for d in docs], response=answer)

    # with each chunk's metadata (ragpulse can name documents by a key of it: documents_key)
    record_interaction(
        query=question,
        chunks=[d.text for d in docs],
        chunk_metadata=[{"source": d.path, "page": d.page} for d in docs],
        response=answer,
    )

    # an agent answer given several searches (in the order the model got their results)
    record_interaction(
        query=question,
        searches=[Search(query=q, chunks=[d.text for d in found]) for q, found in results],
        response=answer,
        session_id=conversation_id,
        history=[("user", earlier_question), ("assistant", earlier_answer)],
    )

    # or record each search where it runs, inside one span, then the answer
    with tracer.start_as_current_span("answer"):
        for q in sub_queries:
            found = search(q)
            record_search(query=q, chunks=[d.text for d in found])
        record_interaction(query=question, response=generate(question, context))

The parts are written in ragpulse's minimal layout on the current span when there is one (e.g.
the request span of a web framework), else on a new span named `rag.interaction`; each search is
a `rag.search` span inside it. Only the `opentelemetry-api` package is used; the app's own SDK
set-up decides where spans go.

| attribute | type | meaning |
|---|---|---|
| `ragpulse.query` | string | the user's question |
| `ragpulse.chunks` | string[] | retrieved passages, in the rank order the app used them |
| `ragpulse.chunk_ids` | string[] | optional, same order |
| `ragpulse.chunk_scores` | double[] | optional, same order |
| `ragpulse.chunk_metadata` | string[] | optional, same order: each chunk's metadata as a JSON object |
| `ragpulse.response` | string | the answer |
| `ragpulse.search.query` | string | on a search span: the query it searched with ("" if none) |
| `ragpulse.search.failed` | boolean | on a search span: the search failed (its chunks are not read) |
| `ragpulse.searches` | int | on an answer: how many searches it was given (ragpulse waits for them) |
| `ragpulse.history.roles` | string[] | earlier turns of the conversation: "user" or "assistant" |
| `ragpulse.history.contents` | string[] | their texts, same order |
| `session.id` | string | the conversation id |
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from opentelemetry import trace

__all__ = [
    "CHUNKS",
    "CHUNK_IDS",
    "CHUNK_METADATA",
    "CHUNK_SCORES",
    "HISTORY_CONTENTS",
    "HISTORY_ROLES",
    "QUERY",
    "RESPONSE",
    "SEARCHES",
    "SEARCH_FAILED",
    "SEARCH_QUERY",
    "SEARCH_SPAN_NAME",
    "SESSION_ID",
    "SPAN_NAME",
    "Search",
    "record_interaction",
    "record_search",
]
__version__ = "0.3.0"

QUERY = "ragpulse.query"
CHUNKS = "ragpulse.chunks"
CHUNK_IDS = "ragpulse.chunk_ids"
CHUNK_SCORES = "ragpulse.chunk_scores"
CHUNK_METADATA = "ragpulse.chunk_metadata"
RESPONSE = "ragpulse.response"
SEARCH_QUERY = "ragpulse.search.query"
SEARCH_FAILED = "ragpulse.search.failed"
SEARCHES = "ragpulse.searches"
HISTORY_ROLES = "ragpulse.history.roles"
HISTORY_CONTENTS = "ragpulse.history.contents"
SESSION_ID = "session.id"
SPAN_NAME = "rag.interaction"
SEARCH_SPAN_NAME = "rag.search"

# Aliases are evaluated at run time, where `X | Y` needs Python 3.10; this package supports 3.9.
_Attributes = dict[str, Union[str, bool, int, list[str], list[float]]]  # noqa: UP007
# An earlier turn: ("user" | "assistant", text), or a chat message {"role": ..., "content": ...}.
Turn = Union[tuple[str, str], Mapping[str, str]]  # noqa: UP007
# A chunk's metadata: its source, file name, URL, page... (strings and numbers are read).
Metadata = Mapping[str, object]


class _Pending:
    """Searches recorded with `record_search` per trace since its last answer, so the answer can
    say how many it was given (ragpulse then waits for all of them, whatever order they arrive
    in). Bounded: traces whose answer is never recorded are forgotten oldest first."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._counts: OrderedDict[int, int] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, trace_id: int) -> None:
        if not trace_id:
            return  # no SDK: nothing is recorded
        with self._lock:
            self._counts[trace_id] = self._counts.pop(trace_id, 0) + 1
            while len(self._counts) > self.LIMIT:
                self._counts.popitem(last=False)

    def take(self, trace_id: int) -> int:
        with self._lock:
            return self._counts.pop(trace_id, 0)


_pending = _Pending()


@dataclass(frozen=True)
class Search:
    """One search an answer was given the results of: its query and what it returned, ranked."""

    query: str | None
    chunks: Sequence[str]
    chunk_ids: Sequence[str] | None = None
    chunk_scores: Sequence[float] | None = None
    failed: bool = False  # it raised or timed out: counted, its chunks are not read
    chunk_metadata: Sequence[Metadata] | None = None


def _chunk_attributes(
    attributes: _Attributes,
    chunks: Sequence[str],
    chunk_ids: Sequence[str] | None,
    chunk_scores: Sequence[float] | None,
    chunk_metadata: Sequence[Metadata] | None = None,
) -> None:
    attributes[CHUNKS] = [str(c) for c in chunks]
    if chunk_ids is not None:
        attributes[CHUNK_IDS] = [str(i) for i in chunk_ids]
    if chunk_scores is not None:
        attributes[CHUNK_SCORES] = [float(s) for s in chunk_scores]
    if chunk_metadata is not None:
        attributes[CHUNK_METADATA] = [json.dumps(dict(m), default=str) for m in chunk_metadata]


def _search_attributes(search: Search) -> _Attributes:
    attributes: _Attributes = {SEARCH_QUERY: search.query or ""}
    if search.failed:
        attributes[SEARCH_FAILED] = True
    else:
        _chunk_attributes(
            attributes, search.chunks, search.chunk_ids, search.chunk_scores, search.chunk_metadata
        )
    return attributes


def _history_attributes(attributes: _Attributes, history: Sequence[Turn]) -> None:
    roles: list[str] = []
    contents: list[str] = []
    for turn in history:
        if isinstance(turn, Mapping):
            role, content = turn.get("role"), turn.get("content")
        else:
            role, content = turn
        if isinstance(role, str) and isinstance(content, str):
            roles.append(role)
            contents.append(content)
    attributes[HISTORY_ROLES] = roles
    attributes[HISTORY_CONTENTS] = contents


def record_search(
    *,
    query: str | None,
    chunks: Sequence[str],
    chunk_ids: Sequence[str] | None = None,
    chunk_scores: Sequence[float] | None = None,
    failed: bool = False,
    chunk_metadata: Sequence[Metadata] | None = None,
    span: trace.Span | None = None,
    tracer: trace.Tracer | None = None,
) -> None:
    """Record one search of an answer: call it once per search, inside the span the answer is
    recorded on (or a span around both), then `record_interaction` without `chunks`.

    Args:
        span: the app's own span for this search, to annotate; default: a new `rag.search` span
            inside the current span, started and ended here. Outside any span the search is a
            trace of its own and joins no answer: pass `searches=` to `record_interaction` then.
        tracer: the tracer for that new span; default: the global tracer provider's.
    """
    attributes = _search_attributes(Search(query, chunks, chunk_ids, chunk_scores, failed, chunk_metadata))
    if span is not None and span.is_recording():
        span.set_attributes(attributes)
        _pending.add(span.get_span_context().trace_id)
        return
    tracer = tracer or trace.get_tracer("ragpulse.instrument")
    with tracer.start_as_current_span(SEARCH_SPAN_NAME, attributes=attributes) as new:
        _pending.add(new.get_span_context().trace_id)


def record_interaction(
    *,
    query: str,
    chunks: Sequence[str] | None = None,
    response: str | None,
    chunk_ids: Sequence[str] | None = None,
    chunk_scores: Sequence[float] | None = None,
    chunk_metadata: Sequence[Metadata] | None = None,
    searches: Sequence[Search] | None = None,
    session_id: str | None = None,
    history: Sequence[Turn] | None = None,
    span: trace.Span | None = None,
    tracer: trace.Tracer | None = None,
) -> None:
    """Write one answer's query, context and response onto a span.

    Args:
        chunks: the ranked passages of a single retrieval. Leave it out when the answer was given
            several searches: pass them as `searches` (in the order the model got their results),
            or record each with `record_search` inside the same span beforehand.
        chunk_metadata: each chunk's metadata (same order as `chunks`), e.g. `{"source": path}`:
            ragpulse can name documents by one of its keys (its `documents_key` setting).
        searches: every search the answer was given, each written as a `rag.search` span inside
            the answer's span; ragpulse reads them as one interaction with all their chunks in
            order (de-duplicated) and their queries as its sub-queries.
        session_id: the conversation id (`session.id`).
        history: the conversation's earlier turns, oldest first: ("user" | "assistant", text)
            pairs or {"role", "content"} messages; the judge reads them to judge a follow-up.
        span: the span to annotate; default: the current span, or a new `rag.interaction` span
            (started and ended here) when no span is recording.
        tracer: the tracer for new spans; default: the global tracer provider's.

    Raises:
        ValueError: both `chunks` and `searches` given, or `chunk_metadata` without `chunks`.
    """
    if chunks is not None and searches is not None:
        raise ValueError("pass either chunks (one retrieval) or searches (several), not both")
    if chunk_metadata is not None and chunks is None:
        raise ValueError("chunk_metadata goes with chunks (a search's goes on its Search)")
    attributes: _Attributes = {QUERY: query}
    if chunks is not None:
        _chunk_attributes(attributes, chunks, chunk_ids, chunk_scores, chunk_metadata)
    if response is not None:
        attributes[RESPONSE] = response
    if session_id is not None:
        attributes[SESSION_ID] = str(session_id)
    if history:
        _history_attributes(attributes, history)
    tracer = tracer or trace.get_tracer("ragpulse.instrument")
    target = span if span is not None else trace.get_current_span()
    if target.is_recording():
        _set_answer(target, attributes, searches)
        _write_searches(tracer, target, searches or ())
        return
    start = time.time_ns()
    new = tracer.start_span(SPAN_NAME, start_time=start)
    _set_answer(new, attributes, searches)
    end = _write_searches(tracer, new, searches or (), start)
    new.end(end_time=end + 1 if end is not None else None)


def _set_answer(span: trace.Span, attributes: _Attributes, searches: Sequence[Search] | None) -> None:
    count = len(searches or ()) + _pending.take(span.get_span_context().trace_id)
    if count:
        attributes[SEARCHES] = count
    span.set_attributes(attributes)


def _write_searches(
    tracer: trace.Tracer, parent: trace.Span, searches: Sequence[Search], start: int | None = None
) -> int | None:
    """The searches as child spans of `parent`, on consecutive nanoseconds so that their order
    survives any clock resolution; returns the last end time (None when there are none)."""
    if not searches:
        return None
    context = trace.set_span_in_context(parent)
    at = max(time.time_ns(), (start or 0) + 1)
    for search in searches:
        child = tracer.start_span(
            SEARCH_SPAN_NAME, context=context, attributes=_search_attributes(search), start_time=at
        )
        child.end(end_time=at + 1)
        at += 2
    return at
