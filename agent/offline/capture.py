"""From production to a dataset: pick the lowest-scored results and merge labelled ones into a
golden set (`ragpulse capture`, docs/eval.md). Pure: the command reads and writes the files.

- A result is one `ragpulse.evaluation` span (agent/exporters/result_spans.py) from the results
  topic or the local results file; the same interaction read twice (a retried export, a rotated
  file) counts once, its latest result kept.
- Selection, per (service, route): with thresholds, the results with a defined score below the
  threshold of any named metric (an undefined or failed score never selects: it is not a low
  score); with `worst` N, the N lowest — by their lowest score among the metrics considered, then
  their mean — in each window of the records' time (windows aligned on the epoch, so two runs
  cut the same windows). Both: the worst N of those below the thresholds.
- A captured item is an eval item (agent/offline/records.py) with `reference` null for a person
  to write, and a label-queue line (`interaction_id`, `scores`, `labels` null by metric) at once.
- Merging: an item goes into the golden set only when labelled (a reference or relevant ids);
  its id is the interaction id `<trace id>:<span id>`, so capturing the same interaction again
  and merging it again changes nothing; an item already there is replaced only when its labelled
  content differs. The golden item keeps what a test needs (question, reference, relevant ids)
  and the production evidence under `captured` — not as `response`, which would make every
  `ragpulse eval` of the golden set score the old bad answer again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.trust.topic import result_documents, span_attributes

DEFAULT_FAIL_BELOW = 0.5  # a score below it is a failing verdict when no threshold names the metric
_SCORE = ("evaluations.", ".score")
_LABEL = ("evaluations.", ".label")
_EXPLANATION = ("evaluations.", ".explanation")
# Eval columns a golden item keeps (agent/offline/records.py); the rest goes under `captured`.
GOLDEN_COLUMNS = ("id", "question", "reference", "reference_contexts", "relevant_ids", "relevance")
_CAPTURED_KEYS = (
    "trace_id", "span_id", "service", "route", "time", "response", "scores", "failing",
    "explanations", "errors", "documents", "labels",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScoredResult:
    """One evaluated interaction as the results carry it."""

    trace_id: str
    span_id: str  # the evaluated span (the result span's parent)
    service: str
    route: str
    time: float  # seconds since the epoch: when the agent exported the result
    scores: Mapping[str, float] = field(hash=False)  # defined scores only
    errors: tuple[str, ...] = ()  # metrics whose judge failed (no score)
    explanations: Mapping[str, str] = field(default_factory=dict, hash=False)
    question: str | None = None  # only when the agent ran with results_include_text
    response: str | None = None
    documents: tuple[Mapping[str, Any], ...] = ()

    @property
    def interaction_id(self) -> str:
        return f"{self.trace_id}:{self.span_id}"


def _keyed(attributes: Mapping[str, Any], affix: tuple[str, str]) -> dict[str, Any]:
    prefix, suffix = affix
    return {
        key[len(prefix) : -len(suffix)]: value
        for key, value in sorted(attributes.items())
        if key.startswith(prefix) and key.endswith(suffix)
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def scored_results(request: Any) -> list[ScoredResult]:
    """The results in one ExportTraceServiceRequest of result spans (spans of other kinds skipped)."""
    found = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if span.name != "ragpulse.evaluation":
                    continue
                attributes = span_attributes(span)
                labels = _keyed(attributes, _LABEL)
                interaction = str(attributes.get("ragpulse.interaction.id") or "")
                span_id = interaction.partition(":")[2] or span.parent_span_id.hex()
                question, response = attributes.get("input.value"), attributes.get("output.value")
                found.append(
                    ScoredResult(
                        trace_id=span.trace_id.hex(),
                        span_id=span_id,
                        service=str(attributes.get("ragpulse.service", "")),
                        route=str(attributes.get("ragpulse.route", "")),
                        time=span.start_time_unix_nano / 1e9,
                        scores={m: float(v) for m, v in _keyed(attributes, _SCORE).items() if _number(v)},
                        errors=tuple(m for m, outcome in labels.items() if outcome == "error"),
                        explanations={m: str(v) for m, v in _keyed(attributes, _EXPLANATION).items()},
                        question=question if isinstance(question, str) and question.strip() else None,
                        response=response if isinstance(response, str) else None,
                        documents=tuple(result_documents(attributes)),
                    )
                )
    return found


@dataclass(frozen=True, slots=True)
class Selection:
    """What `capture` picks: `below` thresholds by metric, and/or the `worst` N per service, route
    and window of `window_seconds` (None: one window). `metrics` limits the scores that rank."""

    below: Mapping[str, float] = field(default_factory=dict, hash=False)
    worst: int | None = None
    window_seconds: float | None = None
    metrics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.below and self.worst is None:
            raise ValueError("give thresholds (--below METRIC=VALUE) or --worst N")
        if self.worst is not None and self.worst < 1:
            raise ValueError(f"--worst must be at least 1, got {self.worst}")
        if self.window_seconds is not None and (self.worst is None or self.window_seconds <= 0):
            raise ValueError("--window needs --worst N and a positive length (e.g. 1h)")

    def considered(self, result: ScoredResult) -> dict[str, float]:
        names = self.metrics or tuple(self.below) or tuple(result.scores)
        return {m: result.scores[m] for m in names if m in result.scores}

    def failing(self, result: ScoredResult) -> list[str]:
        """The metrics whose score is below their threshold (DEFAULT_FAIL_BELOW when unnamed)."""
        return [m for m, v in sorted(result.scores.items()) if v < self.below.get(m, DEFAULT_FAIL_BELOW)]


def latest(results: Iterable[ScoredResult]) -> list[ScoredResult]:
    """One result per interaction: the latest (a re-exported interaction is read twice)."""
    by_id: dict[str, ScoredResult] = {}
    for result in results:
        kept = by_id.get(result.interaction_id)
        if kept is None or result.time >= kept.time:
            by_id[result.interaction_id] = result
    return list(by_id.values())


def select(results: Iterable[ScoredResult], selection: Selection) -> list[ScoredResult]:
    """The lowest-scored results, by service, route, window, then rank (lowest first)."""
    candidates = []
    for result in latest(results):
        considered = selection.considered(result)
        if not considered:
            continue  # nothing defined to rank it by: not a low score
        if selection.below and not any(
            result.scores.get(m, math.inf) < threshold for m, threshold in selection.below.items()
        ):
            continue
        candidates.append(result)
    groups: dict[tuple[str, str, int], list[ScoredResult]] = {}
    for result in candidates:
        window = int(result.time // selection.window_seconds) if selection.window_seconds else 0
        groups.setdefault((result.service, result.route, window), []).append(result)

    def rank(result: ScoredResult) -> tuple[float, float, str]:
        values = list(selection.considered(result).values())
        return min(values), sum(values) / len(values), result.interaction_id

    picked = []
    for key in sorted(groups):
        ordered = sorted(groups[key], key=rank)
        picked.extend(ordered if selection.worst is None else ordered[: selection.worst])
    return picked


def item_row(result: ScoredResult, selection: Selection) -> dict[str, Any] | None:
    """The eval item (and label-queue line) of a captured result; None without its question text
    (the agent did not run with results_include_text)."""
    if result.question is None:
        return None
    failing = selection.failing(result)
    row: dict[str, Any] = {
        "id": result.interaction_id,
        "question": result.question,
        "response": result.response,
        "reference": None,  # for a person to write
        "relevant_ids": None,
        "interaction_id": result.interaction_id,
        "trace_id": result.trace_id,
        "span_id": result.span_id,
        "service": result.service,
        "route": result.route,
        "time": datetime.fromtimestamp(result.time, UTC).isoformat(timespec="seconds"),
        "scores": dict(sorted(result.scores.items())),
        "failing": failing,
        "labels": dict.fromkeys(sorted(result.scores)),
    }
    explanations = {m: result.explanations[m] for m in failing if m in result.explanations}
    if explanations:
        row["explanations"] = explanations
    if result.errors:
        row["errors"] = list(result.errors)
    ids = [d.get("id") for d in result.documents]
    if ids and all(isinstance(i, str) and i for i in ids):
        row["retrieved_ids"] = ids
    if result.documents:
        row["documents"] = [dict(d) for d in result.documents]
    return row


def item_id(row: Mapping[str, Any]) -> str | None:
    """A captured or golden item's stable id: its `id`, else its interaction id, else trace:span."""
    for key in ("id", "interaction_id"):
        value = row.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    trace, span = row.get("trace_id"), row.get("span_id")
    if isinstance(trace, str) and trace and isinstance(span, str) and span:
        return f"{trace}:{span}"
    return None


def labelled(row: Mapping[str, Any]) -> bool:
    """Labelled for a golden set: a person wrote a reference or named the relevant ids."""
    reference = row.get("reference", row.get("ground_truth"))
    relevant = row.get("relevant_ids")
    has_reference = isinstance(reference, str) and bool(reference.strip())
    return has_reference or (isinstance(relevant, list) and bool(relevant))


def golden_row(row: Mapping[str, Any], identifier: str) -> dict[str, Any]:
    """What a labelled item becomes in the golden set: the test, and the evidence under `captured`."""
    golden: dict[str, Any] = {"id": identifier}
    for column in GOLDEN_COLUMNS[1:]:
        if row.get(column) is not None:
            golden[column] = row[column]
    if "reference" not in golden and isinstance(row.get("ground_truth"), str):
        golden["reference"] = row["ground_truth"]
    captured = {key: row[key] for key in _CAPTURED_KEYS if row.get(key) is not None}
    if isinstance(row.get("captured"), Mapping):  # an item taken from a golden set again
        captured = {**row["captured"], **captured}
    if captured:
        golden["captured"] = captured
    return golden


@dataclass(frozen=True, slots=True)
class Merge:
    """The golden set after a merge, and what the merge did."""

    rows: tuple[dict[str, Any], ...]
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: int = 0
    unlabelled: int = 0
    problems: tuple[str, ...] = ()  # "line N: reason" of the labelled file

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated)


def merge(golden: Sequence[Mapping[str, Any]], incoming: Sequence[tuple[int, Any]]) -> Merge:
    """Merge labelled items (line number, parsed row) into `golden` (its rows, in order).

    Golden rows keep their order and content; a labelled item with a new id is appended, one
    whose id is there replaces it only when its golden form differs; unlabelled items are
    counted and skipped; a line that is not an object with an id or has no question is a problem.
    """
    rows = [dict(r) for r in golden]
    where = {identifier: n for n, r in enumerate(rows) if (identifier := item_id(r)) is not None}
    added: list[str] = []
    updated: list[str] = []
    unchanged = unlabelled = 0
    problems: list[str] = []
    for line, row in incoming:
        if not isinstance(row, Mapping):
            problems.append(f"line {line}: not a JSON object")
            continue
        identifier = item_id(row)
        if identifier is None:
            problems.append(f"line {line}: no id (id, interaction_id or trace_id and span_id)")
            continue
        if not labelled(row):
            unlabelled += 1
            continue
        question = row.get("question", row.get("query", row.get("user_input")))
        if not isinstance(question, str) or not question.strip():
            problems.append(f"line {line}: {identifier} has no question")
            continue
        new = golden_row({**row, "question": question}, identifier)
        if identifier not in where:
            where[identifier] = len(rows)
            rows.append(new)
            added.append(identifier)
        elif rows[where[identifier]] != new:
            rows[where[identifier]] = new
            if identifier not in added:
                updated.append(identifier)
        else:
            unchanged += 1
    return Merge(tuple(rows), tuple(added), tuple(updated), unchanged, unlabelled, tuple(problems))


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def window_seconds(text: str) -> float:
    """`90s`, `30m`, `1h`, `1d` (or plain seconds) as seconds; ValueError otherwise."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise ValueError(f"--window expects a length such as 90s, 30m, 1h or 1d, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--window must be positive, got {text!r}")
    return value


def thresholds(items: Iterable[str]) -> dict[str, float]:
    """`METRIC=VALUE` pairs; ValueError naming the bad one."""
    found = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip() or not math.isfinite(number):
            raise ValueError(f"--below expects METRIC=NUMBER, got {item!r}")
        found[name.strip()] = number
    return found
