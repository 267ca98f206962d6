"""Signals on every assembled interaction, before sampling, without a judge (docs/signals.md).

A changed embedding model, a broken index or a chunking change shows first, and for free, in what
the spans already carry: the retriever's scores, how many chunks came back and how much text, the
answers that say they do not know, and how much of an answer its context contains. Every
interaction is measured here, also the ones the sampler leaves unjudged, so these series react at
full traffic while judged scores wait for their share.

`SignalRecorder.record` runs on the intake's hot path (the pipeline calls it for every assembled
interaction), so it costs a few microseconds: lockless instruments held per label set, integer
and float arithmetic only, the refusal rule on the response's opening, and the word overlap (the
one signal that reads whole texts, ~30 µs) only up to a rate per second. Drift detectors (agent/
drift.py, the judged scores' detector) watch four signals through means of `drift_batch`
interactions, so one detector update is shared by a batch; with Redis their state is kept in the
judged scores' drift store (agent/drift_store.py) across restarts.

The refusal rule (tested on 217 real answers) and the overlap are pure functions
(tests/unit/test_signals.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.config import DriftSettings, SignalsSettings
from agent.drift import DriftDetector, DriftState
from agent.drift_store import DriftStore, RedisDriftStore, SeriesKey, StateSaver
from agent.infra.lockless_metrics import CounterChild, ExemplarIds, HistogramChild
from agent.model import Chunk, Evaluated, RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.telemetry import DriftTelemetry, SignalsTelemetry

log = logging.getLogger(__name__)

# -- The refusal rule -----------------------------------------------------------------------------

REFUSAL_HEAD = 200
"""Characters of a response the refusal rule reads: answers say they cannot answer up front."""

REFUSAL_PHRASES = (
    "i don't know",
    "i do not know",
    "i'm not sure",
    "i am not sure",
    "unable to answer",
    "unable to find",
    "unable to provide",
    "unable to determine",
    "cannot answer",
    "can't answer",
    "cannot find",
    "can't find",
    "could not find",
    "couldn't find",
    "no information",
    "not enough information",
    "insufficient information",
    "do not contain",
    "does not contain",
    "doesn't contain",
    "don't contain",
    "do not mention",
    "does not mention",
    "doesn't mention",
    "do not provide",
    "does not provide",
    "doesn't provide",
    "is not mentioned",
    "are not mentioned",
    "not provided in",
    "not specified in",
    "not stated in",
    "no mention of",
    "cannot be determined",
    "can't be determined",
)
"""A response refuses when its first `REFUSAL_HEAD` characters, lowercased with typographic
apostrophes made plain, contain one of these phrases (docs/signals.md)."""

# Every phrase contains one of these; most answers contain none, so the phrases are searched
# only after one is found (the search of 35 phrases costs 9 µs, these checks well under 1 µs).
_ANCHORS = ("know", "sure", "unable", "cannot", "can't", "find", "information", "contain", "mention",
            "provide", "specified", "stated", "determine")  # fmt: skip
_REFUSAL = re.compile("|".join(re.escape(phrase) for phrase in REFUSAL_PHRASES))


def refuses(response: str) -> bool:
    """Whether the response says it does not know or cannot answer from its context."""
    head = response[:REFUSAL_HEAD].lower()
    if "\u2019" in head:
        head = head.replace("\u2019", "'")
    for anchor in _ANCHORS:
        if anchor in head:
            return _REFUSAL.search(head) is not None
    return False


# -- Response-to-context overlap --------------------------------------------------------------------

# Punctuation becomes space and the text is split on whitespace: three times faster than a word
# regex over the same text (a Unicode `\w{4,}` scan of 4 kB takes ~80 µs, this ~30 µs).
_PUNCTUATION = str.maketrans(dict.fromkeys(string.punctuation + "\u2018\u2019\u201c\u201d\u2013\u2014", " "))
MIN_WORD = 4  # shorter words are mostly function words ("the", "and", "was")


def words(text: str) -> list[str]:
    return text.lower().translate(_PUNCTUATION).split()


def overlap(response: str, chunks: Sequence[Chunk]) -> float | None:
    """Share of the response's distinct content words (4+ characters, case folded, punctuation
    removed) that occur in the chunks; None when the response has no such word or there is no
    context."""
    if not chunks:
        return None
    content = {word for word in words(response) if len(word) >= MIN_WORD}
    if not content:
        return None
    context: set[str] = set()
    for chunk in chunks:
        context.update(words(chunk.content))
    return len(content & context) / len(content)


# -- The recorder -----------------------------------------------------------------------------------

DRIFT_SIGNALS = ("retrieval_top_score", "retrieval_hit", "answered", "overlap")
_TOP = 0
_RISE = len(DRIFT_SIGNALS)  # the retriever's top score watched upward too: its scale may have changed


class _Series:
    """Everything recorded for one (service, route): its instruments' children, and its drift
    detectors with the instruments' totals at their last observation."""

    __slots__ = (
        "alarmed",
        "chunks",
        "context_characters",
        "detectors",
        "drift_gauges",
        "empty_retrievals",
        "empty_searches",
        "labels",
        "last",
        "mean_score",
        "overlap",
        "published",
        "refusals",
        "response_characters",
        "searches",
        "since",
        "tool_errors",
        "top_score",
    )

    def __init__(self, telemetry: SignalsTelemetry, labels: tuple[str, str]) -> None:
        self.labels = labels
        self.searches: HistogramChild = telemetry.searches.labels(*labels)
        self.chunks: HistogramChild = telemetry.chunks.labels(*labels)
        self.top_score: HistogramChild = telemetry.top_score.labels(*labels)
        self.mean_score: HistogramChild = telemetry.mean_score.labels(*labels)
        self.context_characters: HistogramChild = telemetry.context_characters.labels(*labels)
        self.response_characters: HistogramChild = telemetry.response_characters.labels(*labels)
        self.overlap: HistogramChild = telemetry.overlap.labels(*labels)
        # Counters exist (at 0) from the first interaction: rate() then reads "none", not "no data".
        self.empty_searches: CounterChild = telemetry.empty_searches.labels(*labels)
        self.tool_errors: CounterChild = telemetry.tool_errors.labels(*labels)
        self.empty_retrievals: CounterChild = telemetry.empty_retrievals.labels(*labels)
        self.refusals: CounterChild = telemetry.refusals.labels(*labels)
        self.since = 0  # interactions since the detectors' last observation
        self.last = _Totals()
        self.detectors: list[DriftDetector | None] = [None] * (len(DRIFT_SIGNALS) + 1)
        self.alarmed = [False] * len(DRIFT_SIGNALS)
        # Each drift signal's (score, detected) gauge children, and the score they show: a gauge is
        # set only when what it shows changes (the CUSUM sits at 0 most of the time).
        self.drift_gauges = [
            (telemetry.drift_score.labels(*labels, name), telemetry.drift_detected.labels(*labels, name))
            for name in DRIFT_SIGNALS
        ]
        self.published = [0.0] * len(DRIFT_SIGNALS)

    def totals(self) -> _Totals:
        top, overlap = self.top_score, self.overlap
        return _Totals(
            top_count=sum(top.counts),
            top_sum=top.sum,
            with_chunks=sum(self.context_characters.counts),
            empty=self.empty_retrievals.value,
            responses=sum(self.response_characters.counts),
            refusals=self.refusals.value,
            overlap_count=sum(overlap.counts),
            overlap_sum=overlap.sum,
        )


@dataclass(frozen=True, slots=True)
class _Totals:
    """A series' instrument totals at one moment; the drift signals are read as their differences."""

    top_count: int = 0
    top_sum: float = 0.0
    with_chunks: int = 0
    empty: float = 0.0
    responses: int = 0
    refusals: float = 0.0
    overlap_count: int = 0
    overlap_sum: float = 0.0

    def means_since(self, last: _Totals) -> list[float | None]:
        """Each drift signal's mean over the interactions between `last` and these totals (None
        where none of them carried the signal), in `DRIFT_SIGNALS` order."""
        tops = self.top_count - last.top_count
        searched = (self.with_chunks - last.with_chunks) + (self.empty - last.empty)
        responses = self.responses - last.responses
        overlaps = self.overlap_count - last.overlap_count
        return [
            (self.top_sum - last.top_sum) / tops if tops else None,
            (self.with_chunks - last.with_chunks) / searched if searched else None,
            1.0 - (self.refusals - last.refusals) / responses if responses else None,
            (self.overlap_sum - last.overlap_sum) / overlaps if overlaps else None,
        ]


class SignalRecorder:
    """Measures every assembled interaction (the pipeline calls `record` before sampling).

    Series are per (service, route) as the assembler's labeller bounds them (the series budget), so
    the recorder's memory is bounded by the same limit. Every `drift_batch` interactions of a
    series, each drift signal's mean over them is one observation of its detector, read from the
    instruments' totals: the hot path only counts.
    """

    def __init__(
        self,
        telemetry: SignalsTelemetry,
        settings: SignalsSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        drift: DriftSettings | None = None,
        store: DriftStore | None = None,
        on_store_error: Callable[[str], None] | None = None,
    ) -> None:
        """`drift`: the drift section, whose baseline and window count interactions here too."""
        settings = settings or SignalsSettings()
        drift = drift or DriftSettings()
        self._telemetry = telemetry
        self._batch = settings.drift_batch
        self._drift = drift
        self._overlap_rate = settings.overlap_per_second
        self._clock = clock
        self._overlap_second = -1
        self._overlap_left = 0.0
        self._series: dict[tuple[str, str], _Series] = {}
        # Detector state in the judged scores' store (Redis when configured): loaded when a series
        # opens, saved every `save_interval` seconds while it changes and at shutdown, so that a
        # restarted replica does not learn its baselines again.
        self._saver = (
            StateSaver(
                store,
                drift.save_interval_seconds,
                on_store_error or (lambda operation: None),
                "signal drift state",
            )
            if store is not None
            else None
        )
        self._loads: set[asyncio.Task[None]] = set()

    def on_spans(self, spans: Sequence[Span], source: str = "") -> None:
        """Not observed: signals read assembled interactions."""

    def on_assembly(self, assembly: Assembly) -> None:
        """Not observed."""

    def on_evaluated(self, evaluated: Evaluated) -> None:
        """Not observed: signals need no judge."""

    def record(self, interaction: RagInteraction) -> None:
        labels = (interaction.service, interaction.route)
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = self._open(labels)
        exemplar: ExemplarIds = (interaction.trace_id, interaction.span_id)
        series.searches.observe(interaction.searches, exemplar)
        if interaction.empty_searches:
            series.empty_searches.value += interaction.empty_searches
        if interaction.tool_errors:
            series.tool_errors.value += interaction.tool_errors

        chunks = interaction.chunks
        series.chunks.observe(len(chunks), exemplar)
        if chunks:
            characters = 0
            scored = 0
            total = 0.0
            for chunk in chunks:
                characters += len(chunk.content)
                if chunk.score is not None:
                    scored += 1
                    total += chunk.score
            series.context_characters.observe(characters, exemplar)
            if scored and math.isfinite(total):  # a hostile span may carry NaN or infinity
                series.mean_score.observe(total / scored, exemplar)
                top = chunks[0].score
                if top is not None:
                    series.top_score.observe(top, exemplar)
        elif interaction.searches:
            series.empty_retrievals.value += 1

        response = interaction.response
        if response:
            series.response_characters.observe(len(response), exemplar)
            if refuses(response):
                series.refusals.value += 1
            if chunks and self._overlap_allowed():
                share = overlap(response, chunks)
                if share is not None:
                    series.overlap.observe(share, exemplar)

        series.since += 1
        if series.since >= self._batch:
            self._observe_drift(series)

    # Observer: every interaction of the production route, before sampling. `record` itself, so
    # the intake's hot path pays one call per interaction, not two.
    on_interaction = record

    def _open(self, labels: tuple[str, str]) -> _Series:
        series = _Series(self._telemetry, labels)
        # The drift gauges read 0 while the baselines are learnt: a panel or rule shows "no
        # drift" rather than "no data" from the first interaction on.
        for score, detected in series.drift_gauges:
            score.set(0.0)
            detected.set(0.0)
        if self._saver is not None:
            with contextlib.suppress(RuntimeError):  # no running loop (benchmarks): nothing to load
                load = asyncio.get_running_loop().create_task(self._load(series))
                self._loads.add(load)
                load.add_done_callback(self._loads.discard)
        return series

    def _key(self, labels: tuple[str, str], slot: int) -> SeriesKey:
        # The batch is in the key: means of another batch size are another stream.
        name = DRIFT_SIGNALS[slot] if slot < _RISE else f"{DRIFT_SIGNALS[_TOP]}:rise"
        return (labels[0], labels[1], f"signal:{name}:b{self._batch}")

    async def _load(self, series: _Series) -> None:
        """Resume the series' detectors from the store; a detector that has completed its
        baseline meanwhile is kept, the few means observed before the load are forgotten."""
        assert self._saver is not None
        for slot in range(len(series.detectors)):
            key = self._key(series.labels, slot)
            try:
                state = await self._saver.store.load(key)
                if state is None:
                    continue
                restored = DriftDetector.restore(self._drift, state, batch=self._batch)
            except Exception as exc:  # a store outage or a bad value: learn afresh
                self._saver.error(
                    "load", f"cannot load signal drift state of {key}, learning afresh: {exc!r}"
                )
                continue
            current = series.detectors[slot]
            if current is None or not current.baseline_ready:
                series.detectors[slot] = restored

    async def save(self) -> None:
        """Save every detector changed since the last save (a no-op without a store)."""
        if self._saver is not None:
            await self._saver.save()

    async def start(self) -> None:
        if self._saver is not None:
            await self._saver.start()

    async def flush(self) -> None:
        await self.save()

    async def shutdown(self, timeout: float) -> None:
        """Save what changed since the last periodic save."""
        for load in list(self._loads):
            load.cancel()
        if self._saver is not None:
            await self._saver.shutdown(timeout)

    def _overlap_allowed(self) -> bool:
        """A budget refilled each second: the overlap's CPU stays bounded at any traffic."""
        if self._overlap_rate <= 0:
            return False
        second = int(self._clock())
        if second != self._overlap_second:
            self._overlap_second = second
            self._overlap_left = self._overlap_rate
        if self._overlap_left < 1:
            return False
        self._overlap_left -= 1
        return True

    def _observe_drift(self, series: _Series) -> None:
        totals = series.totals()
        means = totals.means_since(series.last)
        series.last = totals
        series.since = 0
        for signal, mean in enumerate(means):
            if mean is not None:
                self._update(series, signal, mean)

    def _update(self, series: _Series, signal: int, mean: float) -> None:
        detector = self._detector(series, signal)
        state = detector.update(mean)
        self._changed(series, signal, detector)
        moved = "dropped"
        if signal == _TOP:
            rising = self._detector(series, _RISE)
            rise = rising.update(-mean)
            self._changed(series, _RISE, rising)
            if rise.ready and (rise.detected or (rise.score > state.score and not state.detected)):
                state, moved = rise, "rose"
        if not state.ready:
            return
        name = DRIFT_SIGNALS[signal]
        score_gauge, detected_gauge = series.drift_gauges[signal]
        score = round(state.score, 4)
        if score != series.published[signal]:
            series.published[signal] = score
            score_gauge.set(score)
        if state.detected and not series.alarmed[signal]:
            series.alarmed[signal] = True
            detected_gauge.set(1.0)
            self._log_alarm(series.labels, name, state, moved)
        elif not state.detected and series.alarmed[signal]:
            series.alarmed[signal] = False
            detected_gauge.set(0.0)
            log.info("signal drift cleared: %s (service=%s route=%s)", name, *series.labels)

    def _changed(self, series: _Series, slot: int, detector: DriftDetector) -> None:
        if self._saver is not None:
            self._saver.changed(self._key(series.labels, slot), detector)

    def _detector(self, series: _Series, slot: int) -> DriftDetector:
        detector = series.detectors[slot]
        if detector is None:
            detector = series.detectors[slot] = DriftDetector(self._drift, batch=self._batch)
        return detector

    @staticmethod
    def _log_alarm(labels: tuple[str, str], name: str, state: DriftState, moved: str) -> None:
        baseline, window = state.baseline_mean or 0.0, state.window_mean or 0.0
        if moved == "rose":  # the mirrored detector watches the negated score
            baseline, window = -baseline, -window
        log.warning(
            "signal drift: %s %s from %.3f to %.3f (service=%s route=%s, p=%.1e); see the "
            "RagpulseSignalDrift runbook",
            name,
            moved,
            baseline,
            window,
            labels[0],
            labels[1],
            state.p_value or 0.0,
        )


def build(
    section: SignalsSettings,
    telemetry: SignalsTelemetry,
    *,
    drift: DriftSettings,
    drift_telemetry: DriftTelemetry,
    redis: Any = None,
) -> SignalRecorder:
    """The signals of every interaction; their drift state in Redis beside the judged scores'."""
    return SignalRecorder(
        telemetry,
        section,
        drift=drift,
        store=RedisDriftStore(redis, drift.state_ttl_seconds) if redis is not None else None,
        on_store_error=lambda operation: drift_telemetry.state_errors.labels(operation).inc(),
    )
