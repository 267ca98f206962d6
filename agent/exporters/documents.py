"""The documents behind low scores: per service, which documents keep being retrieved and judged
useless (or irrelevant), and which are most often useful.

Per service and verdict a space-saving summary (agent/heavy_hitters.py) counts documents in
bounded memory whatever their number; the top `top_n` are exported as
`ragpulse_document_verdicts{service, verdict, document}` — at most services × 3 × top_n series,
never one per document ever seen — and rewritten at most every `refresh_seconds`. A document is
named by the value of the configured metadata key (`documents_key`, e.g. `source`: the counts of
all chunks of one file add up), else by its chunk's id; a chunk without either is named by a hash
of its text (`text:` + 12 hex digits). Names are cut to 200 characters.

verdict: `useless` (context precision: not useful for the answer), `useful`, `irrelevant`
(context relevancy: no statement relevant to the question).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Protocol

from agent.config import DocumentsSettings
from agent.heavy_hitters import HeavyHitter, SpaceSaving
from agent.model import Chunk, Evaluated, Outcome

VERDICTS = ("useless", "useful", "irrelevant")


class DocumentGauge(Protocol):
    """The exported family: set and clear (service, verdict, document) series."""

    def set(self, service: str, verdict: str, document: str, count: float) -> None: ...

    def remove(self, service: str, verdict: str, document: str) -> None: ...


# Counters kept per (service, verdict): more than top_n, so the top is right on skewed traffic.
CAPACITY_FACTOR = 10
REFRESH_SECONDS = 5.0


NAME_CHARS = 200


def document_key(content: str, document_id: str | None) -> str:
    if document_id:
        return document_id[:NAME_CHARS]
    return "text:" + hashlib.sha256(content.encode("utf-8", "replace")).hexdigest()[:12]


def document_name(chunk: Chunk, key: str | None) -> str:
    """What a chunk's document is counted as: its `key` metadata value, else its id, else a hash
    of its text."""
    if key is not None:
        value = chunk.meta(key)
        if value:
            return value[:NAME_CHARS]
    return document_key(chunk.content, chunk.id)


class DocumentSummary:
    """An in-process exporter: counts each scored interaction's documents by verdict."""

    def __init__(
        self,
        gauge: DocumentGauge,
        settings: DocumentsSettings,
        *,
        max_services: int = 500,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`settings.key`: the metadata key documents are named by (None: their id); the
        conventions must be told to read it (agent/build.py passes it to both)."""
        self._gauge = gauge
        self._top_n = settings.top_n
        self._key = settings.key
        self._max_services = max_services
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._summaries: dict[tuple[str, str], SpaceSaving] = {}
        self._shown: dict[tuple[str, str], set[str]] = {}
        self._refreshed = float("-inf")

    async def start(self) -> None:
        """Nothing to connect."""

    async def flush(self) -> None:
        self.refresh()

    async def shutdown(self, timeout: float) -> None:
        self.refresh()

    async def export(self, evaluated: Evaluated) -> None:
        interaction, results = evaluated.interaction, evaluated.results
        keys = [document_name(c, self._key) for c in interaction.chunks]
        for result in results:
            if result.outcome is not Outcome.OK or result.chunk_verdicts is None:
                continue
            if result.metric == "context_precision":
                names = ("useful", "useless")
            elif result.metric == "context_relevancy":
                names = ("", "irrelevant")  # relevant chunks are not counted: useful says more
            else:
                continue
            for key, verdict in zip(keys, result.chunk_verdicts, strict=False):
                if verdict is None:
                    continue
                name = names[0] if verdict else names[1]
                if name:
                    self._summary(interaction.service, name).add(key)
        if self._clock() - self._refreshed >= self._refresh_seconds:
            self.refresh()

    def _summary(self, service: str, verdict: str) -> SpaceSaving:
        summary = self._summaries.get((service, verdict))
        if summary is None:
            if len({s for s, _ in self._summaries}) >= self._max_services:
                service = "__other__"
                summary = self._summaries.get((service, verdict))
            if summary is None:
                capacity = self._top_n * CAPACITY_FACTOR
                summary = self._summaries[(service, verdict)] = SpaceSaving(capacity)
        return summary

    def summaries(self) -> list[SpaceSaving]:
        return list(self._summaries.values())

    def top(self, service: str, verdict: str) -> list[HeavyHitter]:
        summary = self._summaries.get((service, verdict))
        return summary.top(self._top_n) if summary is not None else []

    def refresh(self) -> None:
        """Rewrite the exported series: the current top of each summary, nothing else."""
        self._refreshed = self._clock()
        for (service, verdict), summary in self._summaries.items():
            top = summary.top(self._top_n)
            shown = {hitter.key for hitter in top}
            for stale in self._shown.get((service, verdict), set()) - shown:
                self._gauge.remove(service, verdict, stale)
            for hitter in top:
                self._gauge.set(service, verdict, hitter.key, hitter.count)
            self._shown[(service, verdict)] = shown


def build(section: DocumentsSettings, gauge: DocumentGauge, *, max_services: int) -> DocumentSummary:
    """The documents summary of `section`, for at most `max_services` services (series_max_label_pairs)."""
    return DocumentSummary(gauge, section, max_services=max_services)
