"""The streaming PPI estimate: per service, route, metric and window, judged scores + human labels.

An Exporter like the drift aggregator: every evaluated interaction adds its scores (calibrated
when a calibration is loaded) to the running sums of its series and time window, and the
interactions drawn for labelling are remembered (bounded) so that a human label arriving later
in an annotation span joins the score it judges. After each change the series' gauges
`ragpulse_quality_estimate{service,route,metric,bound="mean|low|high"}` show the estimate of the
newest window holding at least `min_labels` labels.

Memory is bounded: a few dozen floats per series and kept window (series beyond `max_series` are
dropped, least recently updated first) and one small record per interaction awaiting a label
(beyond `max_pending` the oldest is forgotten; its label then counts as `unmatched`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.config import TrustSettings
from agent.model import Evaluated, Mark, MetricResult, Outcome, RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.telemetry import TrustTelemetry
from agent.trust.calibration import CalibrationSet, load_calibrations
from agent.trust.label_sampling import LABEL_MARK, LabelSampler, label_fraction
from agent.trust.labels import Label, carries_labels, labels_from_span
from agent.trust.ppi import Estimate, JudgedMoments, LabelledMoments, Tuning, ppi_mean

log = logging.getLogger(__name__)

SeriesKey = tuple[str, str, str]  # service, route, metric
_LOG_INTERVAL = 60.0  # seconds between log lines about unusable labels; the counter sees each one


_ALPHA = 0.05  # the estimates' intervals are 95% intervals
_TUNING: Tuning = "ppi++"


class _Window:
    __slots__ = ("index", "judged", "labelled")

    def __init__(self, index: int) -> None:
        self.index = index
        self.judged = JudgedMoments()
        self.labelled = LabelledMoments()


@dataclass(slots=True)
class _Awaiting:
    """An interaction drawn for labelling, waiting for its labels."""

    service: str
    route: str
    window: int
    scores: dict[str, float]
    weight: float
    labelled: set[str] = field(default_factory=set)


class PpiAggregator:
    """Trust in the stream, one component in three roles: the marker that draws interactions for
    human labels (decided once, before export, so published results carry the same draw); the
    exporter that adds judged scores to the estimates; the observer that reads human labels from
    annotation spans as they arrive."""

    def __init__(
        self,
        telemetry: TrustTelemetry,
        settings: TrustSettings,
        *,
        max_series: int = 2000,
        calibrations: CalibrationSet | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._telemetry = telemetry
        self._settings = settings
        self._max_series = max_series
        self._sampler = LabelSampler(
            settings.label_sample_rate,
            settings.label_oversample,
            (settings.label_uncertain_low, settings.label_uncertain_high),
        )
        self._calibrations = calibrations or CalibrationSet()
        self._clock = clock
        self._series: OrderedDict[SeriesKey, deque[_Window]] = OrderedDict()
        self._awaiting: OrderedDict[str, _Awaiting] = OrderedDict()
        self._by_trace: dict[str, set[str]] = {}
        self._published: set[SeriesKey] = set()  # series whose gauges are set
        self._last_log = float("-inf")

    @property
    def sampler(self) -> LabelSampler:
        return self._sampler

    # -- Marker: drawn for labelling ------------------------------------------------------------

    def mark(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> Mark | None:
        """The label draw of one evaluated interaction; None when it is not drawn."""
        request = self._sampler.decide(interaction.interaction_id, results)
        if not request.requested:
            return None
        return Mark(LABEL_MARK, request.attributes(), request.weight)

    # -- Judged interactions (Exporter) ---------------------------------------------------------

    async def export(self, evaluated: Evaluated) -> None:
        if not evaluated.decision.uniform:
            # Kept by a rule (e.g. negative feedback), not by the random rate: not a uniform
            # sample of traffic, so it would bias the estimate.
            return
        interaction, results = evaluated.interaction, evaluated.results
        window = int(self._clock() // self._settings.ppi_window_seconds)
        scores: dict[str, float] = {}
        for result in results:
            if result.outcome is not Outcome.OK or result.value is None:
                continue
            score = self._calibrated(result.metric, result.value)
            scores[result.metric] = score
            key = (interaction.service, interaction.route, result.metric)
            self._window(key, window).judged.add(score)
            self._publish(key)
        drawn = evaluated.mark(LABEL_MARK)
        if drawn is not None and scores:
            self._telemetry.label_requests.labels(interaction.service, interaction.route).inc()
            self._remember(
                interaction.interaction_id,
                _Awaiting(interaction.service, interaction.route, window, scores, drawn.weight),
            )

    def _calibrated(self, metric: str, value: float) -> float:
        calibration = self._calibrations.get(metric)
        return calibration.probability(value) if calibration is not None else value

    def _window(self, key: SeriesKey, index: int) -> _Window:
        windows = self._series.get(key)
        if windows is None:
            windows = self._series[key] = deque(maxlen=self._settings.ppi_windows_kept)
            if len(self._series) > self._max_series:
                old, _ = self._series.popitem(last=False)
                self._forget_gauges(old)
        else:
            self._series.move_to_end(key)
        if not windows or windows[-1].index < index:
            windows.append(_Window(index))
        for window in reversed(windows):
            if window.index == index:
                return window
        # A clock that went backwards past the kept windows: count it in the oldest kept one.
        return windows[0]

    def _remember(self, interaction_id: str, awaiting: _Awaiting) -> None:
        self._awaiting[interaction_id] = awaiting
        self._awaiting.move_to_end(interaction_id)
        trace_id = interaction_id.partition(":")[0]
        self._by_trace.setdefault(trace_id, set()).add(interaction_id)
        while len(self._awaiting) > self._settings.label_max_pending:
            old, _ = self._awaiting.popitem(last=False)
            self._unindex(old)

    def _unindex(self, interaction_id: str) -> None:
        trace_id = interaction_id.partition(":")[0]
        ids = self._by_trace.get(trace_id)
        if ids is not None:
            ids.discard(interaction_id)
            if not ids:
                del self._by_trace[trace_id]

    # -- Labels -----------------------------------------------------------------------------------

    def on_spans(self, spans: Sequence[Span], source: str = "") -> None:
        """Observer: read human labels from annotation spans as they arrive."""
        for span in spans:
            if not carries_labels(span):
                continue
            try:
                found = labels_from_span(span)
                for reason in found.invalid:
                    self._count("invalid", f"annotation on span {span.span_id}: {reason}")
                for label in found.labels:
                    self.add_label(label)
            except Exception:  # stage boundary: a bad label must never stop intake
                log.exception("reading labels from span %s:%s failed", span.trace_id, span.span_id)

    def add_label(self, label: Label) -> str:
        """Join one label to the score it judges; returns the outcome (also counted)."""
        interaction_id = self._resolve(label.interaction_id)
        awaiting = self._awaiting.get(interaction_id) if interaction_id else None
        if interaction_id is None or awaiting is None:
            highest = min(1.0, self._sampler.fraction * self._sampler.oversample)
            if label_fraction(label.interaction_id) >= highest and ":" in label.interaction_id:
                return self._count("not_requested")  # valid for calibration, not for PPI
            return self._count(
                "unmatched", f"label for {label.interaction_id} matches no interaction awaiting labels"
            )
        score = awaiting.scores.get(label.metric)
        if score is None:
            return self._count("no_score", f"{label.interaction_id} has no {label.metric} score")
        if label.metric in awaiting.labelled:
            return self._count("duplicate")  # one label per interaction and metric: the first
        key = (awaiting.service, awaiting.route, label.metric)
        windows = self._series.get(key)
        window = next((w for w in windows or () if w.index == awaiting.window), None)
        if window is None:
            return self._count("expired", f"label for {label.interaction_id} arrived after its window")
        window.labelled.add(label.value, score, awaiting.weight)
        awaiting.labelled.add(label.metric)
        self._publish(key)
        return self._count("joined")

    def _resolve(self, target: str) -> str | None:
        if target in self._awaiting:
            return target
        # A label on another span of the trace (often the root): unambiguous if the trace holds
        # one interaction awaiting labels.
        ids = self._by_trace.get(target.partition(":")[0])
        if ids and len(ids) == 1:
            return next(iter(ids))
        return None

    def _count(self, outcome: str, detail: str = "") -> str:
        self._telemetry.labels_received.labels(outcome).inc()
        now = time.monotonic()
        if detail and now - self._last_log >= _LOG_INTERVAL:
            self._last_log = now
            log.warning(
                "label not used (%s): %s; see docs/trust.md, 'Labels from the stream'", outcome, detail
            )
        return outcome

    # -- Gauges -----------------------------------------------------------------------------------

    def estimate(self, key: SeriesKey) -> Estimate | None:
        """The newest kept window's estimate with enough labels, or None."""
        for window in reversed(self._series.get(key, ())):
            if window.labelled.count >= max(self._settings.ppi_min_labels, 2):
                return ppi_mean(window.judged, window.labelled, alpha=_ALPHA, tuning=_TUNING)
        return None

    def _publish(self, key: SeriesKey) -> None:
        estimate = self.estimate(key)
        if estimate is None:
            if key in self._published:  # its labelled window was dropped: no stale estimate
                self._forget_gauges(key)
            return
        self._published.add(key)
        gauge = self._telemetry.quality_estimate
        gauge.labels(*key, "mean").set(round(estimate.mean, 6))
        gauge.labels(*key, "low").set(round(estimate.low, 6))
        gauge.labels(*key, "high").set(round(estimate.high, 6))
        self._telemetry.quality_estimate_labels.labels(*key).set(estimate.labelled)

    def _forget_gauges(self, key: SeriesKey) -> None:
        self._published.discard(key)
        for bound in ("mean", "low", "high"):
            with contextlib.suppress(KeyError):
                self._telemetry.quality_estimate.remove(*key, bound)
        with contextlib.suppress(KeyError):
            self._telemetry.quality_estimate_labels.remove(*key)

    def on_assembly(self, assembly: Assembly) -> None:
        """Not observed."""

    def on_interaction(self, interaction: RagInteraction) -> None:
        """Not observed: only judged interactions (`export`) enter the estimates."""

    def on_evaluated(self, evaluated: Evaluated) -> None:
        """Not observed: `export` receives every evaluated interaction."""

    async def start(self) -> None:
        """Nothing to connect."""

    async def flush(self) -> None:
        """Nothing to flush: gauges are scraped."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing to flush: gauges are scraped."""


def check(section: TrustSettings) -> None:
    """Raise CalibrationError when `calibration_file` is set and does not load: a start-up check."""
    if section.calibration_file is not None:
        load_calibrations(Path(section.calibration_file))


def build(
    section: TrustSettings, telemetry: TrustTelemetry, *, max_series: int, judge_model: str
) -> PpiAggregator | None:
    """The streaming prediction-powered estimate of `section`; None when label sampling is off.
    `judge_model`: the configured judge, checked against the one a calibration was fitted on."""
    if section.label_sample_rate <= 0:
        if section.calibration_file:
            log.warning("calibration_file is set but label_sample_rate is 0: no estimate uses it")
        return None
    calibrations = load_calibrations(Path(section.calibration_file)) if section.calibration_file else None
    for calibration in calibrations.calibrations.values() if calibrations else ():
        judge = calibration.fitted_on.get("judge")
        if judge and judge != judge_model:
            log.warning(
                "calibration of %s was fitted on judge %s, but the judge is %s: re-run ragpulse calibrate",
                calibration.metric, judge, judge_model,
            )  # fmt: skip
        thresholds = ", ".join(
            f"{t.target}>={t.goal:g} below {t.threshold:g}"
            for t in calibration.thresholds
            if t.threshold is not None
        )
        log.info(
            "calibration of %s loaded (%s, %s labels)%s",
            calibration.metric, calibration.method, calibration.fitted_on.get("items", "?"),
            f"; problem thresholds: {thresholds}" if thresholds else "",
        )  # fmt: skip
    return PpiAggregator(telemetry, section, max_series=max_series, calibrations=calibrations)
