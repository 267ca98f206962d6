"""The agent conformance corpus (tests/fixtures/agents/): its recorded requests, replayed in any
arrangement into a real TraceAssembler."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.model import RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.otlp.decode import decode_request
from agent.otlp.logs import LogEvent, decode_logs
from tests.support.otlp import Clock, assembler

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
STACKS = (
    sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file()) if CORPUS.is_dir() else []
)


@dataclass(frozen=True)
class Recording:
    """One stack's export requests as recorded, and the log records exported with each."""

    requests: list[list[Span]]
    logs: list[list[LogEvent]]

    def spans(self) -> list[Span]:
        return [span for request in self.requests for span in request]


def load(stack: str) -> Recording:
    logs = {body.name: body for body in (CORPUS / stack / "otlp-logs").glob("*.pb")}
    requests, events = [], []
    for body in sorted((CORPUS / stack / "otlp").glob("*.pb")):
        decoded = decode_request(body.read_bytes(), "protobuf")
        assert decoded.rejected == []
        requests.append(decoded.spans)
        events.append(
            decode_logs(logs[body.name].read_bytes(), "protobuf").events if body.name in logs else []
        )
    return Recording(requests, events)


def expected(stack: str) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = json.loads((CORPUS / stack / "expected.json").read_text())["answers"]
    return answers


def in_end_order(recording: Recording, per_request: int) -> list[list[Span]]:
    """The stack's spans as a BatchSpanProcessor exports them: in the order they ended (children
    before their parents), `per_request` at a time."""
    spans = sorted(recording.spans(), key=lambda s: s.end_time_unix_nano)
    return [spans[i : i + per_request] for i in range(0, len(spans), per_request)]


def over_time(
    recording: Recording, wait: float, *, interval: float = 5.0, max_batch: int = 512
) -> list[tuple[float, list[Span]]]:
    """The stack's spans as a BatchSpanProcessor exports a slow run: its recorded times stretched
    until its traces last longer than `wait` (up to 4 waits) while no two consecutive spans of a
    trace end more than 0.8 waits apart, then exported every `interval` seconds (or `max_batch`
    spans), each request with the time it arrives."""
    spans = sorted(recording.spans(), key=lambda s: s.end_time_unix_nano)
    ends: dict[str, list[int]] = {}
    for span in spans:
        ends.setdefault(span.trace_id, []).append(span.end_time_unix_nano)
    gap = max((b - a for times in ends.values() for a, b in itertools.pairwise(times)), default=1)
    length = max(times[-1] - times[0] for times in ends.values())
    scale = min(0.8 * wait / max(gap, 1), 4 * wait / max(length, 1))  # seconds per nanosecond
    start = spans[0].end_time_unix_nano
    out: list[tuple[float, list[Span]]] = []
    for span in spans:
        due = ((span.end_time_unix_nano - start) * scale // interval + 1) * interval
        if not out or out[-1][0] != due or len(out[-1][1]) >= max_batch:
            out.append((due, []))
        out[-1][1].append(span)
    return out


def longest_trace_seconds(batches: Sequence[tuple[float, Sequence[Span]]]) -> float:
    """How long the longest trace's spans take to arrive."""
    seen: dict[str, tuple[float, float]] = {}
    for due, spans in batches:
        for span in spans:
            first, _ = seen.get(span.trace_id, (due, due))
            seen[span.trace_id] = (first, due)
    return max(last - first for first, last in seen.values())


def shuffled(recording: Recording, seed: int, *, most_per_request: int = 1) -> list[list[Span]]:
    """The spans in a random order, split into requests of 1 to `most_per_request` spans (random
    sizes; 1: every span in a request of its own)."""
    rng = random.Random(seed)
    spans = recording.spans()
    rng.shuffle(spans)
    requests, start = [], 0
    while start < len(spans):
        size = rng.randint(1, most_per_request)
        requests.append(spans[start : start + size])
        start += size
    return requests


@dataclass
class Replay:
    """What the assembler made of one arrangement: interactions (in end order), each with the
    number of the report that emitted it, and every span's outcome."""

    interactions: list[RagInteraction] = field(default_factory=list)
    report_of: dict[str, set[int]] = field(default_factory=dict)  # trace id -> reports emitting it
    received: int = 0
    assembled: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    buffered: int = 0

    def take(self, number: int, assembly: Assembly) -> None:
        self.interactions.extend(assembly.interactions)
        for interaction in assembly.interactions:
            self.report_of.setdefault(interaction.trace_id, set()).add(number)
        self.assembled += assembly.assembled_spans
        self.skipped.update(assembly.skipped)
        self.buffered = assembly.buffered_spans


def replay(recording: Recording, requests: Sequence[Sequence[Span]] | None = None) -> Replay:
    """Replay `requests` (default: as recorded), then flush. Log records are handed over first:
    the SDK writes a record while its span is open, so it is exported no later than the span."""
    intake = assembler(clock=Clock())
    out = Replay()
    if requests is None:
        requests = recording.requests
        logs: list[list[LogEvent]] = recording.logs
    else:
        logs = [[event for events in recording.logs for event in events]]
    for sequence, spans in enumerate(requests):
        if sequence < len(logs):
            intake.add_logs(logs[sequence])
        out.received += len(spans)
        out.take(sequence, intake.add(spans, sequence))
    out.take(len(requests), intake.flush())
    out.interactions.sort(key=lambda i: i.end_time_unix_nano)
    return out


def replay_over_time(
    recording: Recording, batches: Sequence[tuple[float, Sequence[Span]]], wait: float
) -> Replay:
    """Replay requests at the times they arrive, with the bounded wait run between them (as the
    pipeline's expiry ticks do), then flush."""
    clock = Clock()
    intake = assembler(clock=clock, wait=wait)
    intake.add_logs([event for events in recording.logs for event in events])
    out = Replay()
    for sequence, (due, spans) in enumerate(batches):
        clock.now = due
        out.take(sequence, intake.expire(due))
        out.received += len(spans)
        out.take(sequence, intake.add(spans, sequence))
    out.take(len(batches), intake.flush())
    out.interactions.sort(key=lambda i: i.end_time_unix_nano)
    return out


def answers(interactions: Sequence[RagInteraction]) -> list[tuple[Any, ...]]:
    """What the corpus asserts of each answer: question, response, documents, searches, turns."""
    return [
        (
            i.query,
            i.response,
            [c.content for c in i.chunks],
            list(i.sub_queries),
            [[t.role, t.content] for t in i.earlier_turns],
        )
        for i in interactions
    ]
