"""Human labels: from a JSONL file, or from annotation spans in the stream.

A label says what a person judged one interaction to be on one metric: 1 (faithful, relevant, ...),
0 (the problem), or a graded value in [0, 1]. Bad input is reported with where it came from and
skipped; it never stops the rest.

File lines (JSONL): `{"interaction_id": "<trace>:<span>" | "id": "<eval input id>", "metric":
"faithfulness", "label": 1}`, or one line per interaction with `"labels": {"faithfulness": 1, ...}`
and `"scores": {...}` by metric (what `ragpulse label-queue` writes). `label` may be a number in
[0, 1], true/false, or one of the words in `POSITIVE_WORDS` / `NEGATIVE_WORDS`; `null` means "not
labelled yet" (a label-queue line nobody has filled in). Optional: `weight` (the sampling weight
1/π written by `ragpulse label-queue`) and `score` (the judge's score, so a filled-in queue can be
calibrated without a results file).

Stream (OpenInference annotations, spec/annotations.md of Arize-ai/openinference): a span
attribute group `annotations.<i>.annotation.*` or `evaluations.<i>.evaluation.*` (span scope), or
the same under `trace.` (trace scope: the label joins the trace's interaction when the trace has
exactly one awaiting labels; session scope is not read), with `name` (a
ragpulse metric name), `score` (number in [0, 1]) or `label` (a word as above), and
`annotator_kind` = `HUMAN` (LLM and CODE results are other judges, not labels; they are ignored).
The label belongs to the span that carries it, unless that span is an annotation-only span
(no `openinference.span.kind`, or kind `EVALUATOR`) with a parent, in which case it belongs to the
parent: a labelling tool that reports after the fact emits a child span of the span it labels.
`ragpulse.interaction.id` on the span overrides both.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.model import AttributeValue, Span

POSITIVE_WORDS = frozenset(
    {"1", "true", "yes", "pass", "good", "correct", "relevant", "faithful", "supported", "thumbs_up", "up"}
)
NEGATIVE_WORDS = frozenset(
    {"0", "false", "no", "fail", "bad", "incorrect", "irrelevant", "unfaithful", "hallucinated",
     "unsupported", "thumbs_down", "down"}
)  # fmt: skip

HUMAN = "HUMAN"
INTERACTION_ID_ATTRIBUTE = "ragpulse.interaction.id"
_ANNOTATION_KEY = re.compile(r"^(trace\.)?(annotations|evaluations)\.(\d+)\.(annotation|evaluation)\.(\w+)$")
LABEL_PREFIXES = ("annotations.", "evaluations.", "trace.annotations.", "trace.evaluations.")


@dataclass(frozen=True, slots=True)
class Label:
    """One human judgement of one interaction on one metric."""

    interaction_id: str  # "<trace id>:<span id>" in the stream, the eval input's id offline
    metric: str
    value: float  # in [0, 1]; 1 = good (faithful, relevant), 0 = the problem
    source: str  # "file:<path>:<line>" or "span:<trace id>:<span id>"
    weight: float = 1.0  # sampling weight 1/π when the interaction was drawn with probability π
    score: float | None = None  # the judge's score, when the label line carries it

    @property
    def trace_id(self) -> str:
        return self.interaction_id.partition(":")[0]


@dataclass(frozen=True, slots=True)
class LineProblem:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class LabelFile:
    labels: tuple[Label, ...]
    problems: tuple[LineProblem, ...]
    unlabelled: int  # lines with label null (queued, not labelled yet)


def label_value(raw: AttributeValue) -> float:
    """A label as a number in [0, 1]; ValueError naming what was wrong."""
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, int | float):
        value = float(raw)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"label {raw!r} is outside [0, 1]")
        return value
    if isinstance(raw, str):
        word = raw.strip().lower().replace("-", "_").replace(" ", "_")
        if word in POSITIVE_WORDS:
            return 1.0
        if word in NEGATIVE_WORDS:
            return 0.0
        raise ValueError(f"label {raw!r} is not a number in [0, 1] nor a known word (yes/no, pass/fail, ...)")
    raise ValueError(f"label {raw!r} has an unsupported type {type(raw).__name__}")


def _optional_number(row: Mapping[str, object], key: str, *, positive: bool = False) -> float | None:
    raw = row.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError(f"{key} {raw!r} is not a number")
    if positive and raw <= 0:
        raise ValueError(f"{key} {raw!r} must be positive")
    return float(raw)


def parse_label_line(text: str, source: str) -> Label | None:
    """One JSONL line; None for a line not labelled yet; ValueError when the line is bad."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    interaction_id = row.get("interaction_id", row.get("id"))
    if isinstance(interaction_id, int) and not isinstance(interaction_id, bool):
        interaction_id = str(interaction_id)
    if not isinstance(interaction_id, str) or not interaction_id:
        raise ValueError("no interaction_id (or id)")
    metric = row.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ValueError("no metric")
    if "label" not in row:
        raise ValueError("no label")
    if row["label"] is None:
        return None
    return Label(
        interaction_id=interaction_id,
        metric=metric,
        value=label_value(row["label"]),
        source=source,
        weight=_optional_number(row, "weight", positive=True) or 1.0,
        score=_optional_number(row, "score"),
    )


def parse_label_lines(text: str, source: str) -> tuple[list[Label], int]:
    """One JSONL line of either shape: one metric (`metric`, `label`, `score`), or one interaction
    (`labels` and `scores` by metric, as `ragpulse label-queue` writes); (labels, metrics not
    labelled yet). ValueError when the line is bad."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(row, dict) or not isinstance(row.get("labels"), dict):
        label = parse_label_line(text, source)
        return ([], 1) if label is None else ([label], 0)
    found = row.get("scores")
    scores: dict[str, object] = found if isinstance(found, dict) else {}
    labels: list[Label] = []
    unlabelled = 0
    for metric, raw in row["labels"].items():
        single = {k: v for k, v in row.items() if k not in ("labels", "scores")}
        single.update(metric=metric, label=raw, score=scores.get(metric))
        label = parse_label_line(json.dumps(single), source)
        if label is None:
            unlabelled += 1
        else:
            labels.append(label)
    return labels, unlabelled


def read_label_file(path: Path) -> LabelFile:
    """Every label of a JSONL file; bad lines are reported by number and skipped."""
    labels: list[Label] = []
    problems: list[LineProblem] = []
    unlabelled = 0
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                found, waiting = parse_label_lines(text, f"file:{path.name}:{number}")
            except ValueError as exc:
                problems.append(LineProblem(number, str(exc)))
                continue
            labels.extend(found)
            unlabelled += waiting
    return LabelFile(tuple(labels), tuple(problems), unlabelled)


# -- Stream ---------------------------------------------------------------------------------------


_FIRST_LETTERS = frozenset(prefix[0] for prefix in LABEL_PREFIXES)


def carries_labels(span: Span) -> bool:
    """Cheap test on the hot path: does the span have any annotation/evaluation attribute?"""
    # The decoder keeps these keys in `convention_attributes` (KNOWN_PREFIXES), so the span's
    # other attributes are never converted; the first-letter test skips most keys cheaply.
    for key in span.convention_attributes:
        if key and key[0] in _FIRST_LETTERS and key.startswith(LABEL_PREFIXES):
            return True
    return False


def _annotation_groups(
    attributes: Mapping[str, AttributeValue],
) -> Iterator[tuple[bool, dict[str, AttributeValue]]]:
    """(trace-scoped?, fields) per annotation object flattened into the attributes."""
    groups: dict[tuple[str, str, str], dict[str, AttributeValue]] = {}
    for key, value in attributes.items():
        match = _ANNOTATION_KEY.match(key)
        if match:
            groups.setdefault((match[1] or "", match[2], match[3]), {})[match[5]] = value
    for (scope, _, _), fields in groups.items():
        yield bool(scope), fields


def label_target(span: Span) -> str:
    """The interaction id a label span speaks about (see the module docstring)."""
    attributes = span.convention_attributes
    explicit = attributes.get(INTERACTION_ID_ATTRIBUTE)
    if isinstance(explicit, str) and ":" in explicit:
        return explicit
    kind = attributes.get("openinference.span.kind")
    annotation_only = kind is None or kind == "EVALUATOR"
    if annotation_only and span.parent_span_id:
        return f"{span.trace_id}:{span.parent_span_id}"
    return f"{span.trace_id}:{span.span_id}"


@dataclass(frozen=True, slots=True)
class SpanLabels:
    labels: tuple[Label, ...]
    invalid: tuple[str, ...]  # one reason per unusable human annotation
    ignored: int  # annotations by other judges (LLM, CODE), not labels


def labels_from_span(span: Span, metrics: Iterable[str] | None = None) -> SpanLabels:
    """The human labels an annotated span carries; `metrics` limits the names accepted."""
    known = None if metrics is None else set(metrics)
    labels: list[Label] = []
    invalid: list[str] = []
    ignored = 0
    target = label_target(span)
    for trace_scoped, group in _annotation_groups(span.convention_attributes):
        if group.get("annotator_kind") != HUMAN:
            ignored += 1
            continue
        name = group.get("name")
        if not isinstance(name, str) or (known is not None and name not in known):
            invalid.append(f"annotation name {name!r} is not a scored metric")
            continue
        raw = group.get("score", group.get("label"))
        try:
            value = label_value(raw)
        except ValueError as exc:
            invalid.append(str(exc))
            continue
        # A trace-scoped label names no span: it joins the trace's one interaction, if unique.
        interaction_id = f"{span.trace_id}:" if trace_scoped else target
        labels.append(Label(interaction_id, name, value, f"span:{span.trace_id}:{span.span_id}"))
    return SpanLabels(tuple(labels), tuple(invalid), ignored)
